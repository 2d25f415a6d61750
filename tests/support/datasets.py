"""Helpers of the datasets end-to-end tests: the server's data root and a real public dataset."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from app.datasets.engine import EngineConfig
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


def project_folder(server: RunningServer, project: str = "default") -> Path:
    """A project's private datasets folder on the test server (uploads, exports)."""
    return Path(server.settings.data_dir) / "datasets-projects" / project


def tree(*folders: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under `folders` (not following links): kind, size and, for small files, content."""
    out: dict[str, tuple[str, int, bytes]] = {}
    for folder in folders:
        if not folder.exists():
            continue
        for path in sorted(folder.rglob("*")):
            st = path.lstat()
            kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
            body = path.read_bytes() if kind == "file" and st.st_size < 100_000 else b""
            out[str(path)] = (kind, st.st_size if kind == "file" else 0, body)
    return out


def small_engine_config(tmp_path: Path, *, memory_limit: str, timeout_s: float) -> EngineConfig:
    """An engine configuration of its own (so its own pool key) with one small CSV, `a.csv`, in its root."""
    root, work = tmp_path / "root", tmp_path / "work"
    for folder in (root, work / "results", work / "tmp"):
        folder.mkdir(parents=True)
    (root / "a.csv").write_text("x,y\n1,one\n2,two\n3,three\n")
    return EngineConfig(
        roots=[root], work=work, memory_limit=memory_limit, threads=1, timeout_s=timeout_s, concurrency=2
    )
