#!/usr/bin/env python3
"""One entry point from a fresh clone (needs only Python 3.11+):

    python3 dev.py serve        # venv + install + migrate + serve on 127.0.0.1:8000 (embedded PostgreSQL)
    python3 dev.py test         # venv + install + the whole test suite (parallel: CAIRN_TEST_WORKERS)
    python3 dev.py lint         # ruff format --check, ruff check, mypy --strict (as .ci/run)
    python3 dev.py bench        # benchmarks -> docs/benchmarks.md
    python3 dev.py conformance  # MCP conformance scenarios against a local server (needs npm)
    python3 dev.py lock         # re-resolve the dependencies and rewrite requirements.lock

The virtual environment lives in .venv; it is reinstalled only when pyproject.toml changes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".cairn-install-stamp"
LOCK = ROOT / "requirements.lock"
# palmerpenguins (a real public dataset used by the datasets tests; only its CSV is read) is installed
# without its dependencies; pandas, which it declares, comes with the dev extras at the locked version.
TEST_NO_DEPS = ["palmerpenguins==0.1.6"]


def _fingerprint(dev: bool) -> str:
    data = (ROOT / "pyproject.toml").read_bytes() + LOCK.read_bytes() + "\n".join(TEST_NO_DEPS).encode()
    return hashlib.sha256(data).hexdigest() + (":dev" if dev else ":runtime")


def run(cmd: list[str], **kw: object) -> None:
    """Run a command, stopping on failure."""
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, **kw)  # type: ignore[call-overload]


def ensure_env(dev: bool = True) -> None:
    """Create .venv and install the project if needed: runtime dependencies (and the `ml` extra) only
    for `serve`, the dev extras and test data for everything else (a dev install also serves)."""
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py may be started by an older python3
        sys.exit("Python 3.11 or newer is required")
    if not PY.exists():
        print(f"creating virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    done = STAMP.read_text() if STAMP.exists() else ""
    if done == _fingerprint(True) or (not dev and done == _fingerprint(False)):
        return
    pip = [str(PY), "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "install", "-q", "--upgrade", "pip"])
    # setuptools' build of the editable wheel warns "Editable installation." in a block of stars on every
    # install; that one message is filtered (in the build subprocess, which inherits the environment).
    # Every other warning and error still shows.
    quiet = ",".join(filter(None, (os.environ.get("PYTHONWARNINGS"), "ignore:Editable installation")))
    env = {**os.environ, "PYTHONWARNINGS": quiet}
    # The lock pins every dependency to the versions the suite last passed with.
    if dev:
        run([*pip, "install", "-q", "-c", str(LOCK), "-e", ".[dev]"], env=env)
        run([*pip, "install", "-q", "--no-deps", *TEST_NO_DEPS])
    else:
        # The runtime with the `ml` extra: the datasets python engine, once enabled, runs the seed's
        # scikit-learn example as written (pandas is a runtime dependency).
        run([*pip, "install", "-q", "-c", str(LOCK), "-e", ".[ml]"], env=env)
    STAMP.write_text(_fingerprint(dev))


def write_lock() -> int:
    """Resolve the project with its dev extras (`pip lock`) and write the versions, one
    `name==version` per line, to requirements.lock (a pip constraints file)."""
    import tomllib

    out = ROOT / "pylock.toml"  # pip writes it next to the project only
    try:
        run([str(PY), "-m", "pip", "lock", "-q", ".[dev]", "-o", out.name])
        packages = tomllib.loads(out.read_text())["packages"]
    finally:
        out.unlink(missing_ok=True)
    pins = sorted(f"{p['name']}=={p['version']}" for p in packages if "version" in p and p["name"] != "cairn-server")
    header = (
        "# Pinned versions of every dependency (runtime and dev), a pip constraints file used by dev.py,\n"
        "# CI and the Dockerfile: pip install -c requirements.lock .   Regenerate: python3 dev.py lock\n"
    )
    LOCK.write_text(header + "\n".join(pins) + "\n")
    print(f"{LOCK.name}: {len(pins)} packages")
    return 0


def ensure_browser() -> None:
    """The console's browser tests drive a real headless Chromium: Debian's `chromium` package (the
    browser Playwright downloads itself cannot be fetched on every machine); `CAIRN_TEST_CHROMIUM` names
    another binary."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    ensure_package("chromium", "The browser tests need Chromium", "CAIRN_TEST_CHROMIUM", bool(found))


def ensure_pgbouncer() -> None:
    """The pooler tests run a real PgBouncer in transaction mode: Debian's `pgbouncer` package;
    `CAIRN_TEST_PGBOUNCER` names another binary."""
    found = shutil.which("pgbouncer") or Path("/usr/sbin/pgbouncer").exists()
    ensure_package(
        "pgbouncer", "The pooler tests need PgBouncer", "CAIRN_TEST_PGBOUNCER", bool(found), "--no-install-recommends"
    )


def ensure_package(package: str, need: str, variable: str, found: bool, *options: str) -> None:
    """Install the system package `package` with apt-get when it is not `found`, `variable` does not name
    another binary, and this user may; else stop with what to do."""
    if os.environ.get(variable) or found:
        return
    apt = shutil.which("apt-get")
    if apt is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        sys.exit(
            f"{need}: install your system's {package} package "
            f"(Debian/Ubuntu: sudo apt-get install {package}) or set {variable} to its path"
        )
    quiet = {"DEBIAN_FRONTEND": "noninteractive", **os.environ}
    run([apt, "-q", "update"], env=quiet)
    run([apt, "install", "-y", "-q", *options, package], env=quiet)


def test_workers(args: list[str]) -> list[str]:
    """pytest-xdist's `-n` for the suite: `CAIRN_TEST_WORKERS`, else the CPUs up to 4 (each worker
    starts its own embedded PostgreSQL, test server and browser); none when the arguments name it."""
    if any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in args):
        return []
    workers = os.environ.get("CAIRN_TEST_WORKERS") or str(min(4, max(1, os.cpu_count() or 1)))
    return ["-n", workers]


def main(argv: list[str]) -> int:
    """Dispatch the sub-command."""
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    cmd, rest = argv[0], argv[1:]
    ensure_env(dev=cmd != "serve")
    env = dict(os.environ)
    if cmd == "serve":
        if os.name == "posix":  # become the server, so a signal sent to dev.py reaches it
            os.chdir(ROOT)
            os.execv(str(BIN / "cairn"), [str(BIN / "cairn"), "serve", *rest])
        return subprocess.call([str(BIN / "cairn"), "serve", *rest], cwd=ROOT, env=env)
    if cmd == "test":
        ensure_browser()
        ensure_pgbouncer()
        code = subprocess.call([str(PY), "-m", "pytest", *test_workers(rest), *rest], cwd=ROOT, env=env)
        return 0 if code == 0 else code
    if cmd == "lint":
        for check in (["ruff", "format", "--check", "."], ["ruff", "check", "."], ["mypy"]):
            code = subprocess.call([str(PY), "-m", *check], cwd=ROOT)
            if code:
                return code
        return 0
    if cmd == "bench":
        return subprocess.call([str(PY), "scripts/bench.py", *rest], cwd=ROOT, env=env)
    if cmd == "conformance":
        return subprocess.call(["bash", "scripts/conformance.sh", *rest], cwd=ROOT, env=env)
    if cmd == "install":
        return 0
    if cmd == "lock":
        return write_lock()
    print(f"unknown command {cmd!r}\n{__doc__}")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
