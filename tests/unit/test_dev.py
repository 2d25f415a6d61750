"""dev.py's choice of parallel test workers (`dev.py test`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _dev() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cairn_dev_script", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_suite_runs_on_the_cpus_up_to_four_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    dev = _dev()
    monkeypatch.delenv("CAIRN_TEST_WORKERS", raising=False)
    monkeypatch.setattr(dev.os, "cpu_count", lambda: 2)
    assert dev.test_workers(["-q"]) == ["-n", "2"]
    monkeypatch.setattr(dev.os, "cpu_count", lambda: 64)
    assert dev.test_workers([]) == ["-n", "4"]
    monkeypatch.setattr(dev.os, "cpu_count", lambda: None)
    assert dev.test_workers([]) == ["-n", "1"]
    monkeypatch.setenv("CAIRN_TEST_WORKERS", "1")
    assert dev.test_workers([]) == ["-n", "1"]
    # The caller's own -n wins.
    assert dev.test_workers(["-n", "3"]) == [] and dev.test_workers(["-n0"]) == []
    assert dev.test_workers(["--numprocesses=2"]) == []
