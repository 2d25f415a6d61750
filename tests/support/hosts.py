"""Hosts of a fleet, as an operator runs them: each a separate `cairn serve` process with a data dir of
its own and a port of its own, on a database (and object store) shared by all of them.

`Host.start` spawns one and waits (with a deadline) until it answers `/healthz`; `stop` sends SIGTERM
and waits, `kill` sends SIGKILL. The host's stderr goes to a file in its data dir, so a failure can
show what the host logged (`Host.log`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.server import free_port

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Host:
    """One `cairn serve` process of the fleet."""

    port: int
    data_dir: Path
    env: dict[str, str]
    args: list[str] = field(default_factory=list)
    cwd: Path = ROOT
    # The module run as `python -m MODULE serve --port N` (`tests.support.instrumentation`: with the test operations)
    module: str = "app"
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL of the host (no trailing slash)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def api(self) -> str:
        """Base URL of the host's REST API."""
        return f"{self.url}/api/v1"

    @property
    def log_path(self) -> Path:
        """Where the host's stderr goes."""
        return self.data_dir / "host.log"

    def log(self, tail: int = 4000) -> str:
        """The end of what the host wrote to stderr."""
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except FileNotFoundError:
            return ""

    @classmethod
    def start(
        cls,
        env: dict[str, str],
        *,
        args: list[str] | None = None,
        cwd: Path = ROOT,
        timeout: float = 120.0,
        wait: bool = True,
        module: str = "app",
    ) -> Host:
        """Spawn a host with `env` over a clean `CAIRN_*` environment (a data dir of its own unless `env`
        names one) and, unless `wait` is false, wait until it answers `/healthz`."""
        data_dir = Path(env.get("CAIRN_DATA_DIR") or tempfile.mkdtemp(prefix="cairn-host-"))
        host = cls(port=free_port(), data_dir=data_dir, env=dict(env), args=list(args or []), cwd=cwd, module=module)
        host.launch()
        if wait:
            host.wait_ready(timeout)
        return host

    def launch(self) -> None:
        """Spawn the process (again, after `stop` or `kill`) on the same port and data dir."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
        full = {
            **base,
            "CAIRN_DATA_DIR": str(self.data_dir),
            "CAIRN_LOG_LEVEL": "WARNING",
            "CAIRN_LOG_FORMAT": "text",
            **self.env,
        }
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", self.module, "serve", "--port", str(self.port), *self.args],
                cwd=self.cwd,
                env=full,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def wait_ready(self, timeout: float = 120.0, path: str = "/healthz") -> None:
        """Wait until the host answers 200 on `path`; raise with its log if it exits or the deadline passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"host on port {self.port} exited ({self.proc.returncode}):\n{self.log()}")
            try:
                if httpx.get(f"{self.url}{path}", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"host on port {self.port} did not answer {path} within {timeout:g} s:\n{self.log()}")

    def exited(self, timeout: float = 60.0) -> int:
        """Wait for the process to exit on its own (e.g. a refused start) and return its exit code."""
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL (the host's children too: a `--workers` host's workers)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            import psutil

            children = psutil.Process(self.proc.pid).children(recursive=True)
        except Exception:
            children = []
        self.proc.kill()
        for child in children:
            try:
                child.kill()
            except Exception:
                pass
        self.proc.wait()


class Fleet:
    """Hosts started together and stopped together (a context manager)."""

    def __init__(self) -> None:
        self.hosts: list[Host] = []

    def start(self, env: dict[str, str], **kwargs: object) -> Host:
        """Start one more host (see `Host.start`)."""
        host = Host.start(env, **kwargs)  # type: ignore[arg-type]
        self.hosts.append(host)
        return host

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *_exc: object) -> None:
        for host in self.hosts:
            host.stop()
