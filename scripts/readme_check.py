#!/usr/bin/env python3
"""Run the README's shell commands top to bottom, as a new user would, and fail on the first one that
does not work.

Every ```bash block of README.md is read (continuation lines joined, trailing comments dropped) and each
command must match one of the kinds below, so a command added to the README without being covered here
fails the check:

* `python3 dev.py serve` and `…/bin/cairn serve` start in the background and must reach `/readyz` 200;
  a server stays up until the next one starts (the previous one is stopped first) or the end;
* `python3 dev.py test` runs the whole suite (`--skip-suite`: CI runs the suite itself);
* `python3 -m venv … && …/bin/pip install .` installs into a temporary directory instead of `~`
  (needs the package index: skipped with `--offline`, and so is the server it installs);
* `KEY=$(.venv/bin/cairn keys create …)` must assign a key, which later commands get as `$KEY`;
* `curl …` must succeed and print JSON that is not an error body;
* `uvx --from . cairn serve` starts a server too; it needs uv and the package index (skipped with
  `--offline` or when no `uvx` is on the PATH);
* `npx …` needs the npm registry (skipped with `--offline`).

Commands run in this checkout with their own data directory (`CAIRN_DATA_DIR`) and a free port instead
of 8000. Usage::

    python3 scripts/readme_check.py [--offline] [--skip-suite]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"```bash\n(.*?)```", re.S)


@dataclass
class Step:
    """One README command and what the check does with it."""

    command: str
    kind: str


KINDS = [
    (re.compile(r"^python3 dev\.py serve$"), "serve"),
    (re.compile(r"^python3 dev\.py test$"), "suite"),
    (re.compile(r"^python3 -m venv (\S+) && \1/bin/pip install \.$"), "install"),
    (re.compile(r"^\S+/bin/cairn serve$"), "serve-installed"),
    (re.compile(r"^uvx --from \. cairn serve$"), "serve-uvx"),
    (re.compile(r"^KEY=\$\(\.venv/bin/cairn keys create( [^)]*)?\)$"), "key"),
    (re.compile(r"^curl .*$"), "curl"),
    (re.compile(r"^npx .*$"), "npx"),
]


def commands(readme: str) -> list[Step]:
    """The README's commands in order, each with its kind (ValueError for one no kind covers)."""
    steps = []
    for block in BLOCK.findall(readme):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if not command or command.startswith("#"):
                continue
            kind = next((k for pattern, k in KINDS if pattern.match(command)), None)
            if kind is None:
                raise ValueError(f"README command not covered by {Path(__file__).name}: {command}")
            steps.append(Step(command, kind))
    return steps


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the server was not ready after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run(offline: bool, skip_suite: bool) -> int:
    """Run every README command; returns the exit status (0: all ran or were skipped as asked)."""
    steps = commands((ROOT / "README.md").read_text(encoding="utf-8"))
    work = Path(tempfile.mkdtemp(prefix="cairn-readme-"))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update({"CAIRN_DATA_DIR": str(work / "data"), "CAIRN_PORT": str(port)})
    server: subprocess.Popen[bytes] | None = None
    installed = False
    try:
        for step in steps:
            command = step.command.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
            command = command.replace("~/.venvs/cairn", str(work / "venv"))
            skip = (
                (step.kind in ("install", "npx") and offline)
                or (step.kind == "suite" and skip_suite)
                or (step.kind == "serve-installed" and not installed)
                or (step.kind == "serve-uvx" and (offline or shutil.which("uvx") is None))
            )
            print(f"{'skip' if skip else 'run '} {step.kind:<16} {step.command}", flush=True)
            if skip:
                continue
            if step.kind in ("serve", "serve-installed", "serve-uvx"):
                _stop(server)
                log = work / f"{step.kind}.log"
                with log.open("wb") as out:
                    server = subprocess.Popen(
                        command,
                        shell=True,
                        cwd=ROOT,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                _wait_ready(port, server, log)
                continue
            if step.kind == "key":  # as written, then what the shell assigned
                command += '\nprintf "%s" "$KEY"'
            done = subprocess.run(command, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
            if done.returncode != 0:
                print(f"failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}", file=sys.stderr)
                return 1
            if step.kind == "install":
                installed = True
            elif step.kind == "key":
                if not re.fullmatch(r"\S+", done.stdout):
                    print(f"failed: KEY is not one key: {done.stdout[:200]!r}", file=sys.stderr)
                    return 1
                env["KEY"] = done.stdout
                time.sleep(2.5)  # a running open server locks within two seconds of a key's creation
            elif step.kind == "curl":
                answer = json.loads(done.stdout)  # JSON, and not the error body (curl exits 0 on a 401)
                if isinstance(answer, dict) and "error" in answer:
                    print(f"failed: {done.stdout[:500]}", file=sys.stderr)
                    return 1
            elif step.kind == "npx" and "tools/list" in command and '"tools"' not in done.stdout:
                print(f"failed: no tools listed:\n{done.stdout[-2000:]}", file=sys.stderr)
                return 1
        return 0
    finally:
        _stop(server)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offline", action="store_true", help="skip the commands that need a package registry")
    parser.add_argument("--skip-suite", action="store_true", help="skip `python3 dev.py test` (CI runs it itself)")
    ns = parser.parse_args()
    sys.exit(run(ns.offline, ns.skip_suite))
