"""Containers: the entrypoint script run for real against the embedded PostgreSQL, plus static checks of
the Dockerfile and compose.yaml (Docker itself is not available to the suite)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.server import PgCluster, free_port

pytestmark = pytest.mark.slow  # subprocesses, restarts or generated inputs: seconds per test

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
KEY = "container-test-key-0123456789"


def entrypoint_env(db_url: str, **extra: str) -> dict[str, str]:
    """Environment for the entrypoint: the venv's bin first on PATH, a database, a key, a free port."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "CAIRN_DATABASE_URL": db_url,
            "CAIRN_API_KEYS": f"{KEY}:admin",
            "CAIRN_PORT": str(free_port()),
            "CAIRN_DATA_DIR": tempfile.mkdtemp(prefix="cairn-entry-"),
            "CAIRN_LOG_LEVEL": "WARNING",
            "CAIRN_DB_WAIT_TIMEOUT": "30",
        }
    )
    env.update(extra)
    return env


def alembic_versions(pg: PgCluster, database: str) -> list[str]:
    """Revisions recorded in `database` (empty when it was never migrated)."""
    if pg.handle.psql(database, "SELECT to_regclass('public.alembic_version') IS NOT NULL").strip() != "t":
        return []
    return sorted(pg.handle.psql(database, "SELECT version_num FROM alembic_version").split())


def test_entrypoint_script_is_posix_sh() -> None:
    assert ENTRYPOINT.read_text().startswith("#!/bin/sh\n")
    assert os.access(ENTRYPOINT, os.X_OK), "entrypoint must be executable"
    subprocess.run(["sh", "-n", str(ENTRYPOINT)], check=True)
    assert "[[" not in ENTRYPOINT.read_text(), "bash-only syntax in a POSIX script"


def test_entrypoint_waits_migrates_and_serves(pg: PgCluster) -> None:
    database = pg.new_database()
    assert alembic_versions(pg, database) == []
    env = entrypoint_env(pg.handle.url(database), CAIRN_LOG_LEVEL="INFO")
    base = f"http://127.0.0.1:{env['CAIRN_PORT']}"
    out_path = Path(env["CAIRN_DATA_DIR"]) / "out.log"
    with out_path.open("w+") as out:
        proc = subprocess.Popen(
            ["sh", str(ENTRYPOINT)], env=env, cwd=tempfile.gettempdir(), stdout=out, stderr=subprocess.STDOUT
        )
        try:
            status = None
            with httpx.Client(base_url=base, timeout=5) as client:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and proc.poll() is None:
                    try:
                        status = client.get("/readyz").status_code
                    except httpx.TransportError:
                        status = None
                    if status == 200:
                        break
                    time.sleep(0.3)
                assert status == 200, f"not ready (exit={proc.poll()}):\n{out_path.read_text()[-3000:]}"
                # Bound to 0.0.0.0 with a key: requests need it.
                assert client.get("/api/v1/projects").status_code == 401, out_path.read_text()[-3000:]
                answer = client.get("/api/v1/projects", headers={"Authorization": f"Bearer {KEY}"})
                assert answer.status_code == 200, answer.text
            assert alembic_versions(pg, database), "the entrypoint did not migrate"
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=40)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log = out_path.read_text()
    assert "database is up" in log, log[-3000:]
    assert "migrated: core" in log, log[-3000:]
    # uvicorn shuts down gracefully, then re-raises the signal it caught (exit status -SIGTERM).
    assert code in (0, -signal.SIGTERM), log[-3000:]
    assert "cairn stopped" in log, log[-3000:]
    # The ready line names where to connect (the banner of a start on a terminal).
    assert re.search(r"cairn ready at (http://\S+): MCP \1/mcp, REST \1/api/v1, docs \1/docs", log), log[-3000:]


def test_entrypoint_runs_a_command_after_migrating(pg: PgCluster) -> None:
    database = pg.new_database()
    env = entrypoint_env(pg.handle.url(database))
    done = subprocess.run(
        ["sh", str(ENTRYPOINT), "cairn", "version"], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", done.stdout.strip().splitlines()[-1])
    assert "migrating" in done.stderr
    assert alembic_versions(pg, database), "the command ran before the schema was migrated"


def test_entrypoint_fails_clearly_when_the_database_is_unreachable() -> None:
    dead = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/nowhere"
    env = entrypoint_env(dead, CAIRN_DB_WAIT_TIMEOUT="2")
    started = time.monotonic()
    done = subprocess.run(["sh", str(ENTRYPOINT)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "database not reachable after 2s" in done.stderr
    assert "giving up" in done.stderr
    assert "migrating" not in done.stderr
    assert time.monotonic() - started < 30


def _dockerfile() -> list[str]:
    """Dockerfile instructions, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_dockerfile_is_multi_stage_non_root_with_healthcheck() -> None:
    lines = _dockerfile()
    stages = [line for line in lines if line.upper().startswith("FROM ")]
    assert len(stages) >= 2 and " AS builder" in stages[0]
    assert any("--from=builder" in line for line in lines if line.startswith("COPY"))
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    health = [line for line in lines if line.startswith("HEALTHCHECK")]
    assert health and "/healthz" in health[0] and "python" in health[0]
    # The image installs the wheel with every dependency pinned by the lock file.
    assert any(line.startswith("RUN") and "pip install -c requirements.lock ." in line for line in lines)
    assert not any("--no-deps" in line for line in lines), "the wheel alone must be the product"
    assert 'ENTRYPOINT ["/app/docker/entrypoint.sh"]' in lines
    copied = " ".join(line for line in lines[lines.index(stages[-1]) :] if line.startswith("COPY"))
    for needed in ("/opt/venv", "docker/entrypoint.sh"):
        assert needed in copied, needed
    assert "COPY app" not in copied, "the runtime stage runs the installed package, not a second copy"
    # Every path the Dockerfile copies from the build context exists and is not excluded by .dockerignore.
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for line in lines:
        if line.startswith("COPY") and "--from=" not in line:
            for src in line.split()[1:-1]:
                assert src not in ignored, src
                assert (ROOT / src).exists(), src


def test_compose_has_app_and_db_with_healthchecks_and_volume() -> None:
    compose: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"app", "db"}
    db, app = services["db"], services["app"]
    assert db["image"] == "pgvector/pgvector:pg17"
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    volume = db["volumes"][0].split(":")[0]
    assert volume in compose["volumes"], "the database must live in a named volume"
    assert app["depends_on"]["db"]["condition"] == "service_healthy"
    assert app["build"] == "."
    assert "/healthz" in " ".join(app["healthcheck"]["test"])
    env = app["environment"]
    assert env["CAIRN_DATABASE_URL"].startswith("postgresql+asyncpg://") and "@db:5432/" in env["CAIRN_DATABASE_URL"]
    assert env["CAIRN_API_KEYS"].startswith("${CAIRN_API_KEYS")
    assert db["environment"]["POSTGRES_DB"] == env["CAIRN_DATABASE_URL"].rsplit("/", 1)[1]
    # The app's data directory (datasets, stored results, exports) is a named volume too.
    mounts = {m.split(":")[1]: m.split(":")[0] for m in app["volumes"]}
    assert "/var/lib/cairn" in mounts and mounts["/var/lib/cairn"] in compose["volumes"], mounts
    assert "CAIRN_DATA_DIR=/var/lib/cairn" in (ROOT / "Dockerfile").read_text()
