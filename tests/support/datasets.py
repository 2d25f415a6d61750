"""Helpers of the datasets end-to-end tests: the server's data root and a real public dataset."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.support.server import RunningServer


def root_of(server: RunningServer) -> Path:
    """The first data root of the test server (created if missing)."""
    root = Path(server.settings.data_dir) / "datasets"
    root.mkdir(parents=True, exist_ok=True)
    return root


def penguins_csv() -> Path:
    """The palmerpenguins CSV shipped by its package."""
    spec = importlib.util.find_spec("palmerpenguins")
    assert spec is not None and spec.submodule_search_locations, (
        "palmerpenguins (dev dependency, installed with --no-deps) provides the public test dataset"
    )
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "penguins.csv"
    assert path.is_file()
    return path
