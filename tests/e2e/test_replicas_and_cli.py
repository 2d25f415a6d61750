"""Real processes: two replicas on one database, the embedded database surviving a restart, the CLI."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support.hosts import Fleet
from tests.support.server import ADMIN_KEY, STATIC_KEYS, PgCluster, RunningServer, free_port, mcp_client, run_async

pytestmark = pytest.mark.slow  # subprocesses, restarts or generated inputs: seconds per test

ROOT = Path(__file__).resolve().parents[2]


def _spawn(port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    full = {**os.environ, "CAIRN_LOG_LEVEL": "WARNING", **env}
    return subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port)],
        cwd=ROOT,
        env=full,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError("server did not become ready")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_two_replicas_serve_consistent_data(pg: PgCluster) -> None:
    db = pg.new_database()
    env = {"CAIRN_DATABASE_URL": pg.handle.url(db), "CAIRN_API_KEYS": ",".join(STATIC_KEYS)}
    with Fleet() as fleet:
        a, b = (fleet.start(env).api for _ in range(2))
        auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
        for i in range(5):
            writer, reader = (a, b) if i % 2 == 0 else (b, a)
            r = httpx.post(f"{writer}/projects", json={"name": f"replica-{i}"}, headers=auth, timeout=30)
            assert r.status_code == 200, r.text
            names = [p["name"] for p in httpx.get(f"{reader}/projects", headers=auth, timeout=30).json()["projects"]]
            assert f"replica-{i}" in names
        assert httpx.get(f"{a}/projects", headers=auth).json() == httpx.get(f"{b}/projects", headers=auth).json()


def test_embedded_database_keeps_data_across_restarts() -> None:
    data_dir = tempfile.mkdtemp(prefix="cairn-embedded-")
    env = {"CAIRN_DATA_DIR": data_dir, "CAIRN_DATABASE_URL": "", "CAIRN_API_KEYS": ""}
    port = free_port()
    proc = _spawn(port, env)
    try:
        _wait_ready(port, proc)
        r = httpx.post(f"http://127.0.0.1:{port}/api/v1/projects", json={"name": "persisted"}, timeout=30)
        assert r.status_code == 200, r.text
    finally:
        _stop(proc)
    assert proc.returncode in (0, -signal.SIGTERM)  # uvicorn re-raises SIGTERM after a clean shutdown
    pid_file = Path(data_dir) / "pgdata" / "postmaster.pid"
    assert not pid_file.exists(), "the embedded PostgreSQL was not stopped on shutdown"
    proc = _spawn(port, env)
    try:
        _wait_ready(port, proc)
        names = [
            p["name"] for p in httpx.get(f"http://127.0.0.1:{port}/api/v1/projects", timeout=30).json()["projects"]
        ]
        assert names == ["persisted"]
    finally:
        _stop(proc)


def _postgres_of(pgdata: Path) -> list[psutil.Process]:
    """The postmasters running on `pgdata` (its other processes have no `-D` in their command line)."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if (proc.info["name"] or "").startswith("postgres") and "-D" in cmdline and str(pgdata) in cmdline:
            found.append(proc)
    return found


def test_workers_share_one_port_and_one_embedded_database() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="cairn-workers-"))
    pgdata = (data_dir / "pgdata").resolve()
    port = free_port()
    env = {"CAIRN_DATA_DIR": str(data_dir), "CAIRN_DATABASE_URL": "", "CAIRN_API_KEYS": ",".join(STATIC_KEYS)}
    # DEBUG: each worker logs the queue jobs it embedded (to a file: a pipe nobody reads would fill up).
    full = {**os.environ, "CAIRN_LOG_LEVEL": "DEBUG", "CAIRN_EMBEDDING_WRITE_MODE": "async", **env}
    log_path = data_dir / "server.log"
    log_file = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port), "--workers", "2"],
        cwd=ROOT,
        env=full,
        stdout=subprocess.DEVNULL,
        stderr=log_file,
    )
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    try:
        _wait_ready(port, proc)
        # Both workers answer on the one port (each request on a new connection; the kernel hands it to
        # whichever worker accepts first).
        pids: set[int] = set()
        deadline = time.monotonic() + 60
        while len(pids) < 2 and time.monotonic() < deadline:
            pids.add(httpx.get(f"{base}/healthz", timeout=10).json()["pid"])
        workers = {p.pid: p for p in psutil.Process(proc.pid).children() if p.pid in pids}
        assert len(workers) == 2 and proc.pid not in pids, pids
        # One embedded PostgreSQL, started by the parent; the workers were told its URL and did not migrate.
        assert len(_postgres_of(pgdata)) == 1
        for worker in workers.values():
            environ = worker.environ()
            assert environ["CAIRN_DATABASE_URL"].startswith(f"postgresql+asyncpg://postgres@/cairn?host={pgdata}&port=")
            assert environ["CAIRN_MIGRATE_ON_START"] == "false"
        # Every worker serves real calls on the same data.
        assert httpx.post(f"{base}/api/v1/projects", json={"name": "shared"}, headers=auth).status_code == 200
        seen: dict[int, list[str]] = {}
        for _ in range(40):
            with httpx.Client(base_url=base, headers=auth, timeout=30) as c:
                names = [p["name"] for p in c.get("/api/v1/projects").json()["projects"]]
                seen.setdefault(c.get("/healthz").json()["pid"], []).extend(names)
        assert all(set(names) == {"shared"} for names in seen.values()), seen
        # Sequential calls on one keep-alive connection are not held back by Nagle's algorithm (it cost
        # ~40 ms per call before the shared socket got TCP_NODELAY).
        with httpx.Client(base_url=base, timeout=30) as c:
            took = []
            for _ in range(15):
                started = time.perf_counter()
                c.get("/healthz")
                took.append(time.perf_counter() - started)
        assert sorted(took)[len(took) // 2] < 0.025, took

        async def mcp_projects() -> list[str]:
            async with mcp_client(base, path="/mcp/all") as mcp:
                result = await mcp.call_tool("list_projects", {})
                assert not result.is_error and result.structured_content is not None, result
                return [p["name"] for p in result.structured_content["projects"]]

        assert run_async(mcp_projects()) == ["shared"]

        # Both workers run queue workers on the one queue: writes spread over both (a connection each)
        # queue 40 vectors, every one is embedded by exactly one process, and the queue drains.
        for i in range(40):
            r = httpx.post(
                f"{base}/api/v1/memory/push",
                json={"text": f"note {i} about the shared queue of worker processes", "project_id": "shared"},
                headers=auth,
                timeout=30,
            )
            assert r.status_code == 200, r.text
        drained = httpx.post(f"{base}/api/v1/embeddings/wait", json={"timeout_seconds": 60}, headers=auth, timeout=90)
        assert drained.status_code == 200 and drained.json()["drained"], drained.text
        embedded: dict[int, list[int]] = {}
        for line in log_path.read_text().splitlines():
            if '"embedded a batch"' in line:
                entry = json.loads(line)
                embedded.setdefault(entry["worker_pid"], []).extend(entry["jobs"])
        jobs = [job for batch in embedded.values() for job in batch]
        assert len(jobs) == len(set(jobs)) >= 40, embedded
        assert set(embedded) <= set(pids), (embedded.keys(), pids)
    finally:
        _stop(proc)
        log_file.close()
    # SIGTERM stopped the workers, then the embedded PostgreSQL.
    assert proc.returncode == 0, log_path.read_text()[-2000:]
    assert not any(psutil.pid_exists(pid) for pid in pids)
    assert not (pgdata / "postmaster.pid").exists() and not _postgres_of(pgdata)


def test_a_worker_that_cannot_start_stops_the_server(tmp_path: Path) -> None:
    """uvicorn restarts a worker that dies, but one whose app cannot be built would fail the same way
    forever: it exits with the start-up failure code, the parent stops the others and the embedded
    PostgreSQL, and `cairn serve` exits 3."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import os\n"
        "if os.environ.get('CAIRN_MIGRATE_ON_START') == 'false':  # set by the parent for its workers only\n"
        "    import app.main\n"
        "    def broken(*args, **kwargs):\n"
        "        raise RuntimeError('this worker cannot build its app')\n"
        "    app.main.create_app = broken\n"
    )
    data_dir = tmp_path / "data"
    env = {
        **os.environ,
        "PYTHONPATH": str(hooks),
        "CAIRN_DATA_DIR": str(data_dir),
        "CAIRN_DATABASE_URL": "",
        "CAIRN_API_KEYS": "",
        "CAIRN_LOG_LEVEL": "WARNING",
    }
    out = subprocess.run(
        [sys.executable, "-m", "app", "serve", "--port", str(free_port()), "--workers", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 3, out.stderr[-2000:]
    assert "this worker could not start" in out.stderr
    assert not (data_dir / "pgdata" / "postmaster.pid").exists() and not _postgres_of((data_dir / "pgdata").resolve())


def test_refuses_non_loopback_without_keys(pg: PgCluster) -> None:
    # A database that never had a key (the session's own has: it is locked, and keys are required there).
    db_url = pg.handle.url(pg.new_database())
    env = {**os.environ, "CAIRN_DATABASE_URL": db_url, "CAIRN_API_KEYS": "", "CAIRN_HOST": "0.0.0.0"}
    out = subprocess.run(
        [sys.executable, "-m", "app", "serve", "--port", str(free_port())],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "without API keys" in out.stderr


def test_cli_keys_create_list_revoke(server: RunningServer, pg: PgCluster) -> None:
    env = {**os.environ, "CAIRN_DATABASE_URL": pg.url}
    cli = [sys.executable, "-m", "app", "keys"]
    out = subprocess.run(
        [*cli, "create", "--scopes", "read", "--name", "ci", "--toolsets", "graph"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    key = out.stdout.strip().splitlines()[-1]
    assert key.startswith("cairn_")
    url = f"{server.url}/api/v1/projects"
    assert httpx.get(url, headers={"Authorization": f"Bearer {key}"}).status_code == 200
    assert httpx.post(url, json={"name": "nope"}, headers={"Authorization": f"Bearer {key}"}).status_code == 403

    async def plain_mcp_tools() -> set[str]:
        async with mcp_client(server.url, key=key) as mcp:
            return {t.name for t in (await mcp.list_tools()).tools}

    # the key's own default toolsets decide what plain /mcp lists; its read scope hides write tools
    tools = run_async(plain_mcp_tools())
    assert {"read_graph", "search_semantic"} <= tools and "create_entities" not in tools and "push" not in tools
    listed = subprocess.run([*cli, "list"], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert key[:12] in listed.stdout and key not in listed.stdout and '"toolsets": ["graph"]' in listed.stdout
    subprocess.run([*cli, "revoke", key[:12]], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert httpx.get(url, headers={"Authorization": f"Bearer {key}"}).status_code == 401


def _cairn(*argv: str, data_dir: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    return subprocess.run(
        [sys.executable, "-m", "app", *argv],
        env={**env, "CAIRN_DATA_DIR": data_dir, "CAIRN_LOG_LEVEL": "WARNING"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("graph", "import", "/nope.jsonl"), "no such file: /nope.jsonl"),
        (("restore", "/nope.dump"), "no such file: /nope.dump"),
        (("eval", "beir", "/nope"), "no such directory: /nope"),
    ],
)
def test_cli_reports_a_missing_input_before_starting_anything(argv: tuple[str, ...], message: str) -> None:
    data_dir = tempfile.mkdtemp(prefix="cairn-cli-")
    done = _cairn(*argv, data_dir=data_dir)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (Path(data_dir) / "pgdata").exists()  # no database was started for nothing


def test_serve_refusals_are_messages_and_leave_nothing_running() -> None:
    data_dir = tempfile.mkdtemp(prefix="cairn-cli-")
    # A busy port is reported before the database starts.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        started = time.monotonic()
        done = _cairn("serve", "--port", str(port), data_dir=data_dir)
        assert time.monotonic() - started < 30
    assert done.returncode == 1, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (Path(data_dir) / "pgdata").exists()
    # Keys are required off loopback: refused with a message, and the embedded PostgreSQL is stopped.
    done = _cairn("serve", "--host", "0.0.0.0", "--port", str(free_port()), data_dir=data_dir)
    assert done.returncode == 1, done.stderr
    assert "Refusing to serve on 0.0.0.0 without API keys" in done.stderr and "Traceback" not in done.stderr
    assert not (Path(data_dir) / "pgdata" / "postmaster.pid").exists()
