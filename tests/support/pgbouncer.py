"""A real PgBouncer (Debian's `pgbouncer` package; `dev.py test` installs it) in front of the session's
embedded PostgreSQL, as production runs one: `pool_mode = transaction`, a small server pool so client
connections really share server connections, and no `ignore_startup_parameters` (it refuses what a
transaction pooler cannot carry).

`PgBouncer.start(cluster, database)` writes a pgbouncer.ini in a temp dir, listens on 127.0.0.1 on a
free port and waits (with a deadline) until it accepts a connection; `stop` ends it. PgBouncer refuses
to run as root, so as root it runs as the embedded cluster's system user."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.server import PgCluster, free_port

# The user the embedded cluster runs as when the tests run as root (app/core/pgembedded.py).
SYSTEM_USER = "embedded_postgres"


def pgbouncer_binary() -> str | None:
    """The pgbouncer executable (`CAIRN_TEST_PGBOUNCER`, PATH, or Debian's /usr/sbin), or None."""
    named = os.environ.get("CAIRN_TEST_PGBOUNCER")
    if named:
        return named
    found = shutil.which("pgbouncer")
    if found:
        return found
    return "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None


@dataclass
class PgBouncer:
    """A running PgBouncer in transaction mode."""

    port: int
    database: str
    workdir: Path
    proc: subprocess.Popen[bytes]

    def url(self) -> str:
        """SQLAlchemy URL of the pooled database."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{self.database}"

    def libpq_uri(self) -> str:
        """libpq URI of the pooled database (asyncpg.connect)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{self.database}"

    def log(self) -> str:
        """What PgBouncer logged."""
        try:
            return (self.workdir / "pgbouncer.log").read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""

    @classmethod
    def start(cls, cluster: PgCluster, *, pool_size: int = 3, extra: str = "", timeout: float = 30.0) -> PgBouncer:
        """Start PgBouncer for `cluster`'s database and wait until it accepts connections (`extra`: more
        lines of its [pgbouncer] section).

        Raises:
            RuntimeError: no pgbouncer binary, or it exited.
            TimeoutError: it did not listen within `timeout` seconds.
        """
        binary = pgbouncer_binary()
        if binary is None:
            raise RuntimeError("pgbouncer is not installed (Debian: apt-get install pgbouncer; dev.py test does)")
        workdir = Path(tempfile.mkdtemp(prefix="cairn-pgbouncer-"))
        port = free_port()
        handle = cluster.handle
        ini = workdir / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"{cluster.database} = host={handle.socket_dir} port={handle.port} dbname={cluster.database} "
            "user=postgres\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {port}\n"
            "unix_socket_dir =\n"
            "auth_type = any\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            "min_pool_size = 0\n"
            "reserve_pool_size = 0\n"
            "max_client_conn = 500\n"
            f"logfile = {workdir / 'pgbouncer.log'}\n"
            "log_connections = 0\n"
            "log_disconnections = 0\n" + extra
        )
        user = None
        if os.geteuid() == 0:
            user = SYSTEM_USER
            owner = pwd.getpwnam(SYSTEM_USER)
            os.chown(workdir, owner.pw_uid, owner.pw_gid)
            os.chown(ini, owner.pw_uid, owner.pw_gid)
        proc = subprocess.Popen(
            [binary, str(ini)], user=user, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=workdir
        )
        bouncer = cls(port=port, database=cluster.database, workdir=workdir, proc=proc)
        bouncer._wait(timeout)
        return bouncer

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RuntimeError(f"pgbouncer exited ({self.proc.returncode}): {err}\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"pgbouncer did not listen on {self.port} within {timeout:g} s:\n{self.log()}")

    def stop(self) -> None:
        """End PgBouncer and remove its directory."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
