"""The README's commands work as written: scripts/readme_check.py runs them top to bottom in this
checkout; here without the steps that need a package registry, and without the suite (this is it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_readme_commands_run_top_to_bottom() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "readme_check.py"), "--offline", "--skip-suite"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    ran = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("run ")]
    assert ran == ["serve", "key", "curl"], done.stdout
