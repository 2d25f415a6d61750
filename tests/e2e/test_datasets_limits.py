"""Hard limits of the datasets tools against a read-scope attacker, through the real server: a query's
time limit holds even inside one scalar function (its DuckDB worker process is killed) while another
key's query answers at once; huge cells come back cut, within a memory bound of the server; a killed
worker is replaced; a worker dying mid-call gives a clean error and leaves nothing half-written; and
the server stops its workers when it stops (one process or `--workers 2`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil
import pytest

from app.datasets import service_results
from app.datasets.config import DatasetSettings, get_dataset_settings
from app.datasets.engine.pool import GRACE_S, SPARE, WorkerPool, existing_pool, memory_bytes
from tests.support.datasets import root_of
from tests.support.server import ADMIN_KEY, READ_KEY, WRITE_KEY, PgCluster, RunningServer, free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow  # subprocesses, killed processes, seconds per test

ROOT = Path(__file__).resolve().parents[2]
# The attack: ~27 s of CPU in one call of a scalar function, which DuckDB cannot interrupt.
QUADRATIC = "SELECT levenshtein(repeat('a', 130000), repeat('b', 130000)) AS d"
# Rows written to the stored result for as long as the call lasts.
ENDLESS = "SELECT i, md5(i::VARCHAR) AS h FROM range(1000000000) t(i)"
CELL_MB = 40
MB = 1024 * 1024


@asynccontextmanager
async def client(server: RunningServer, key: str) -> AsyncIterator[httpx.AsyncClient]:
    """A REST client of the server with `key`."""
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=server.url, timeout=120, headers=headers) as c:
        yield c


async def query(c: httpx.AsyncClient, sql: str, files: list[str] | None = None, **extra: Any) -> httpx.Response:
    body = {"query_type": "sql", "query": sql, "files": files or [], **extra}
    return await c.post("/api/v1/datasets/query", json=body)


def pool() -> WorkerPool:
    found = existing_pool()
    assert found is not None
    return found


def results_dirs(server: RunningServer) -> list[Path]:
    """Every result store of the server (one per project)."""
    work = Path(server.settings.data_dir) / "datasets-work"
    return [p for p in work.rglob("results") if p.is_dir()]


async def leftovers(server: RunningServer) -> list[Path]:
    """Unfinished result files and worker spill folders, once no worker is busy and no result answered
    early is still being written (a small result is answered before its file and cache entry are)."""
    await eventually(
        lambda: not pool().busy_pids() and not service_results._WRITING,
        what="no worker busy and no result still being written",
    )
    work = Path(server.settings.data_dir) / "datasets-work"
    return [*work.rglob("*.tmp"), *(p for p in work.rglob("w[0-9]*") if p.is_dir())]


async def timed(call: Any) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await call
    return response, time.monotonic() - started


async def test_a_quadratic_scalar_function_stops_at_its_time_limit_while_another_key_answers(
    server: RunningServer,
) -> None:
    async with client(server, READ_KEY) as hostile, client(server, WRITE_KEY) as other:
        assert (await query(other, "SELECT 1 AS warm")).status_code == 200
        before = set(pool().pids())
        started = time.monotonic()
        attack = [asyncio.create_task(timed(query(hostile, f"{QUADRATIC} -- {i}", timeout_ms=2000))) for i in range(2)]
        await eventually(
            lambda: len(pool().busy_pids()) == 1 and pool().slots.waiting() == 1,
            what="one attack running, the other waiting for this key's share",
        )
        answer, took = await timed(query(other, "SELECT 43 AS n"))
        assert answer.status_code == 200 and answer.json()["data"] == [{"n": 43}]
        # Not behind the attack (25.7 s before the worker processes): it was answered while the first
        # attack still ran, its key's second call still waiting for its share.
        assert pool().slots.waiting() == 1 and not any(task.done() for task in attack), took
        for task in attack:
            response, _ = await task
            assert response.status_code == 504, response.text
            assert response.json()["error"]["code"] == 5003
        # Each attack ran at most its time limit and the grace (the second one waited for the first).
        assert time.monotonic() - started < 2 * (2.0 + GRACE_S) + 2.0
        assert before - set(pool().pids()), "the workers that outran their limit were killed"
        again = await query(hostile, "SELECT 44 AS n")
        assert again.status_code == 200 and again.json()["data"] == [{"n": 44}]
    assert await leftovers(server) == []


@contextmanager
def peak_rss(pids: Any) -> Iterator[dict[str, int]]:
    """Sample every 5 ms: the peak RSS of this process (it runs the server) and of the processes
    `pids()` gives (the DuckDB workers), in bytes."""
    me = psutil.Process()
    peaks = {"server": me.memory_info().rss, "base": me.memory_info().rss, "worker": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peaks["server"] = max(peaks["server"], me.memory_info().rss)
            for pid in pids():
                try:
                    peaks["worker"] = max(peaks["worker"], psutil.Process(pid).memory_info().rss)
                except psutil.Error:
                    continue
            stop.wait(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield peaks
    finally:
        stop.set()
        sampler.join()


async def test_huge_cells_come_back_cut_within_a_memory_bound(server: RunningServer) -> None:
    """4 rows of two 40 MB cells (a text and a blob), read back by three keys at once in every way a
    read key can: pages, a summary, a chart, a sample of a file of such cells."""
    cell = CELL_MB * MB
    huge = f"SELECT i, repeat('x', {cell}) || i AS big, repeat('y', {cell})::BLOB AS raw FROM range(4) t(i)"
    async with client(server, READ_KEY) as r, client(server, WRITE_KEY) as w, client(server, ADMIN_KEY) as a:
        made = await query(r, huge, return_limit=4, timeout_ms=60_000)
        assert made.status_code == 200, made.text
        first = made.json()
        assert [len(row["big"]) for row in first["data"]] == [301] * 4 and first["data"][0]["big"][-1] == "…"
        qid = first["query_id"]
        # A file of such cells in the data root, for stream_sample (written by another process, so that
        # this one's memory is measured from a clean start).
        sample_file = root_of(server) / "huge_cells.parquet"
        write = f"import duckdb; duckdb.execute(\"COPY ({huge}) TO '{sample_file}'\")"
        await asyncio.to_thread(subprocess.run, [sys.executable, "-c", write], check=True)
        calls = [c.get(f"/api/v1/datasets/results/{qid}", params={"limit": 4}) for c in (r, w, a)]
        calls.append(query(r, f"SELECT * FROM {qid} -- summary", [qid], return_format="summary"))
        calls.append(query(w, f"SELECT * FROM {qid} -- chart", [qid], return_format="chart", chart_type="bar"))
        calls.append(a.post("/api/v1/datasets/sample", json={"file_path": sample_file.name, "sample_size": 4}))
        with peak_rss(pool().pids) as peaks:
            answers = await asyncio.gather(*calls)
    for answer in answers[:3]:
        assert answer.status_code == 200, answer.text
        rows = answer.json()["rows"]
        assert rows and all(row["big"].startswith("x" * 300) and row["big"].endswith("…") for row in rows)
        assert all(len(row["big"]) == 301 and row["raw"].startswith("base64:") for row in rows)
    summary = answers[3].json()
    assert answers[3].status_code == 200 and summary["rest_summary"]["columns"]["big"]["max"].endswith("…")
    assert answers[4].status_code == 200, answers[4].text
    assert answers[5].status_code == 200, answers[5].text
    assert [len(row["big"]) for row in answers[5].json()["sample"]] == [301] * 4
    grown = (peaks["server"] - peaks["base"]) / MB
    cap = memory_bytes(get_dataset_settings().datasets_worker_memory_mb, "2GB") / MB
    print(f"server RSS +{grown:.0f} MB (peak {peaks['server'] / MB:.0f} MB), worker peak {peaks['worker'] / MB:.0f} MB")
    assert grown < 100, grown  # three pages of 4 rows of 80 MB read whole cost >1 GB before cells were cut
    assert peaks["worker"] / MB < cap


def wait_zombie(proc: psutil.Process, timeout: float = 10) -> None:
    """Wait until `proc` has died (it stays a zombie until its parent reaps it)."""
    deadline = time.monotonic() + timeout
    with contextlib.suppress(psutil.NoSuchProcess):
        while proc.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            time.sleep(0.01)


async def test_a_killed_worker_is_replaced_and_the_next_call_works(server: RunningServer) -> None:
    async with client(server, READ_KEY) as r, client(server, WRITE_KEY) as w:
        assert (await query(r, "SELECT 1 AS n")).status_code == 200
        victims = pool().pids()
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        # Dead (a zombie until the server reaps it) before the next calls: none of them ever reached it.
        for pid in victims:
            with contextlib.suppress(psutil.NoSuchProcess):
                await asyncio.to_thread(wait_zombie, psutil.Process(pid))
        # Two keys at once: both workers are needed, and both are new.
        answers = await asyncio.gather(query(r, "SELECT 2 AS n"), query(w, "SELECT 3 AS n"))
        assert [a.json().get("data") for a in answers] == [[{"n": 2}], [{"n": 3}]], [a.text for a in answers]
        assert not set(victims) & set(pool().pids())


async def test_a_worker_dying_mid_call_gives_a_clean_error_and_leaves_nothing_half_written(
    server: RunningServer, pg: PgCluster
) -> None:
    async def stored_results() -> int:
        conn = await asyncpg.connect(pg.handle.libpq_uri(pg.database))
        try:
            return int(await conn.fetchval("SELECT count(*) FROM dataset_queries"))
        finally:
            await conn.close()

    async with client(server, READ_KEY) as c:
        assert (await query(c, "SELECT 1 AS n")).status_code == 200
        assert await leftovers(server) == []  # the answer's file is in place
        files_before = {p for d in results_dirs(server) for p in d.iterdir()}
        rows_before = await stored_results()
        call = asyncio.create_task(query(c, ENDLESS, timeout_ms=30_000))
        deadline = time.monotonic() + 20
        while not [t for d in results_dirs(server) for t in d.glob("*.tmp")]:  # the result is being written
            assert time.monotonic() < deadline and not call.done()
            await asyncio.sleep(0.02)
        [busy] = pool().busy_pids()
        os.kill(busy, signal.SIGKILL)
        response = await asyncio.wait_for(call, 10)
        assert response.status_code == 503 and response.headers["Retry-After"] == "1"
        error = response.json()["error"]
        assert error["code"] == 5030 and error["category"] == "Unavailable" and error["suggestions"]
        assert "SIGKILL" in error["message"]
        assert {p for d in results_dirs(server) for p in d.iterdir()} == files_before
        assert await leftovers(server) == [] and await stored_results() == rows_before
        again = await query(c, "SELECT 5 AS n")
        assert again.status_code == 200 and again.json()["data"] == [{"n": 5}]


def _duckdb_workers(pid: int) -> list[psutil.Process]:
    """The DuckDB worker processes under the server process `pid`."""
    found = []
    for proc in psutil.Process(pid).children(recursive=True):
        try:
            if any("app.datasets.engine.worker" in part for part in proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.mark.parametrize("workers", [1, 2])
def test_the_server_stops_its_workers_on_sigterm(workers: int) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="cairn-limits-"))
    port = free_port()
    env = {**os.environ, "CAIRN_DATA_DIR": str(data_dir), "CAIRN_DATABASE_URL": "", "CAIRN_API_KEYS": ""}
    env["CAIRN_LOG_LEVEL"] = "WARNING"
    argv = [sys.executable, "-m", "app", "serve", "--port", str(port), *(["--workers", "2"] if workers > 1 else [])]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        # Each server process starts its own pool: two slots, as many burst slots and a spare. A query on
        # a new connection each time (the kernel spreads them over the processes) until every pool is up.
        burst = min(2, DatasetSettings.model_fields["datasets_burst_slots"].default)
        expected, i = (2 + burst + SPARE) * workers, 0
        while True:
            answer = httpx.post(
                f"{base}/api/v1/datasets/query",
                json={"query_type": "sql", "query": f"SELECT {i} AS n", "files": []},
                timeout=60,
            )
            assert answer.status_code == 200 and answer.json()["data"] == [{"n": i}], answer.text
            found = _duckdb_workers(proc.pid)
            if len(found) >= expected or time.monotonic() > deadline:
                break
            i += 1
            time.sleep(0.1)
        assert len(found) == expected
        proc.send_signal(signal.SIGTERM)
        # uvicorn raises the signal again once it has shut down gracefully (lifespan hooks included).
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM)
        _, alive = psutil.wait_procs(found, timeout=10)
        assert alive == [], alive
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
