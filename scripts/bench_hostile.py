"""One key's hostile load against another key's latency, and the server's memory meanwhile.

Two keys on one `cairn serve` (embedded PostgreSQL, see `bench_mcp.Server`), each bound to its own
project. The *victim* makes sequential pairs of calls over REST: a memory `search` in its project and
an `execute_query` (a count over a 1,000-row CSV). Its latencies are measured first on an idle server,
then while the *attacker* runs, all at once and in loops:

- two quadratic queries, `levenshtein(repeat('a', N), repeat('b', N))`, with `timeout_ms` 1000 (a
  scalar function the time limit cannot interrupt from inside);
- two pushes of 200,000 distinct characters that wait for their own vectors (`wait_for_embedding`);
- three `get_result` calls on a stored result of 4 rows of very large cells;
- (a phase of its own) ten `analysis_ingest` calls, two for each of five keys of the attacker's
  project, from an upstream on 127.0.0.1 that trickles one byte every 3 s (`timeout_seconds` 5): the
  ingests must hold no database connection while they wait;
- (a phase of its own, `duckdb_slots`, issue 41 finding 6) two keys of two other projects, each with
  three loops of a cross join DuckDB runs until its `timeout_ms` (5 s); meanwhile the victim times
  `SELECT 42` (a query of its own each time, no cached result): median, p95 and max, against the same
  on the idle server.

The whole attack at once is run `REPEATS` times, each run right after an idle phase of its own, and
each run is compared with that idle phase: on a shared virtual machine the same idle calls can take
half as long again from one minute to the next, and a ratio to an idle phase measured minutes earlier
would mostly measure that drift. The median over the runs is the figure quoted.

Last, the victim's calls are timed once more on the idle server, after the attacks: a lasting effect
of the attack (e.g. the attacker's rows in indexes the victim's searches share) shows there.

The attacker and the memory sampler run in processes of their own, and the victim's process keeps its
garbage collector off while it times calls (as `timeit` does): only the server's work is timed.

Reported: the victim's p50/p95 per operation idle and under attack (the goal: p95 within 2x of idle),
the server's peak resident memory (its own processes, children included, not PostgreSQL) and how the
attacker's calls ended (error codes).

Usage::

    python scripts/bench_hostile.py [--quick] [--seconds 30] [--cell-mb 100] [--repeats 3] [--attack NAME ...]

`--attack queue_flood` (also run by default, last, on a server of its own): two keys' pushes flood the
embedding queue for `--seconds` (default 40) while a third key's notes are timed from acknowledgement
to vector (scripts/hostile_queue_flood.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psutil

SELF = Path(__file__).resolve()
ROOT = SELF.parent.parent
for p in (ROOT, ROOT / "scripts"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import hostile_queue_flood  # noqa: E402
from bench_mcp import Server, on_embedded_postgres, server_processes  # noqa: E402

VICTIM = "bench-victim-key-0123456789"
ATTACKER = "bench-attacker-key-012345678"
ADMIN = "bench-operator-key-0123456789"
SLOW_KEYS = [f"bench-slow-{i}-key-0123456789" for i in range(5)]  # two long jobs per key
DUCK_KEYS = {f"bench-duck-{i}-key-0123456789": f"heavy{i}" for i in range(2)}  # two projects: two callers
KEYS = (
    f"{VICTIM}:read+write:good,{ATTACKER}:read+write:evil,{ADMIN}:admin,"
    + ",".join(f"{key}:read+write:evil" for key in SLOW_KEYS)
    + "".join(f",{key}:read:{project}" for key, project in DUCK_KEYS.items())
)
# A cross join DuckDB interrupts between vectors: it runs until its time limit.
HEAVY_SQL = "SELECT count(*) AS n FROM range(100000) a, range(100000) b WHERE hash(a.range + b.range + {i}) = 0"
HEAVY_MS = 5000
QUADRATIC_LENGTH = 130_000
PUSH_CHARS = 200_000
WORDS = [f"{a}{b}{c}" for a in "bcdfghklmnprstvz" for b in "aeiou" for c in "nrstlm"]
# Runs of the whole attack at once, each after an idle phase of its own.
REPEATS = 3


def _distinct_text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS) + str(rng.randint(0, 99_999))
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:chars]


def _write_csv(root: Path, rows: int = 1000) -> None:
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(3)
    lines = ["id,word,score"] + [f"{i},{rng.choice(WORDS)},{rng.uniform(0, 100):.2f}" for i in range(rows)]
    (root / "small.csv").write_text("\n".join(lines) + "\n")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


async def _call(c: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    answer = await (c.get(path, params=body) if method == "GET" else c.post(path, json=body))
    data: dict[str, Any] = answer.json()
    return data


async def _victim(c: httpx.AsyncClient, seconds: float, rng: random.Random) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"search": [], "execute_query": []}
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        t0 = time.perf_counter()
        found = await _call(c, "POST", "/api/v1/memory/search", {"query_text": " ".join(rng.sample(WORDS, 4))})
        times["search"].append(time.perf_counter() - t0)
        assert "error" not in found, found
        t0 = time.perf_counter()
        counted = await _call(
            c,
            "POST",
            "/api/v1/datasets/query",
            {"query_type": "sql", "query": "SELECT count(*) AS n FROM data", "files": ["small.csv"]},
        )
        times["execute_query"].append(time.perf_counter() - t0)
        assert "error" not in counted, counted
    return times


async def _victim_select(c: httpx.AsyncClient, seconds: float, rng: random.Random) -> dict[str, list[float]]:
    """The victim of `duckdb_slots`: sequential `SELECT 42`, each a query of its own (no cached result)."""
    times: list[float] = []
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        t0 = time.perf_counter()
        n = rng.randrange(1 << 40)
        answer = await _call(c, "POST", "/api/v1/datasets/query", {"query_type": "sql", "query": f"SELECT 42, {n}"})
        times.append(time.perf_counter() - t0)
        assert "error" not in answer, answer
    return {"select_42": times}


async def _attack_loop(
    c: httpx.AsyncClient,
    stop: asyncio.Event,
    outcomes: Counter[str],
    name: str,
    method: str,
    path: str,
    body: Any,
    seed: str = "",
    pause_when_refused: float = 0.0,
) -> None:
    rng = random.Random(f"{name}/{seed}")
    while not stop.is_set():
        args = body(rng) if callable(body) else body
        try:
            data = await _call(c, method, path, args)
            code = data["error"]["code"] if "error" in data else "ok"
            outcomes[f"{name}: {code}"] += 1
            if code == 4290 and pause_when_refused:  # the key's long operations are all taken: retry soon
                await asyncio.sleep(pause_when_refused)
        except httpx.HTTPError as exc:
            outcomes[f"{name}: {type(exc).__name__}"] += 1


def _halt_on_stdin_close() -> threading.Event:
    """An event set when this process's stdin closes (the parent's signal to stop)."""
    halt = threading.Event()

    def watch() -> None:
        sys.stdin.read()
        halt.set()

    threading.Thread(target=watch, daemon=True).start()
    return halt


def _attacker(url: str, query_id: str, attacks: tuple[str, ...]) -> None:
    """The attacker's process (`--attacker`): its loops run until its stdin closes, then it prints how
    its calls ended (JSON)."""
    halt = _halt_on_stdin_close()
    print(json.dumps(asyncio.run(_attack(url, query_id, attacks, halt))), flush=True)


async def _attack(url: str, query_id: str, attacks: tuple[str, ...], halt: threading.Event) -> dict[str, int]:
    stop, outcomes = asyncio.Event(), Counter[str]()
    quadratic = {
        "query_type": "sql",
        "files": ["small.csv"],
        "timeout_ms": 1000,
        "query": f"SELECT levenshtein(repeat('a', {QUADRATIC_LENGTH}), repeat('b', {QUADRATIC_LENGTH})) AS d",
    }
    headers = {"Authorization": f"Bearer {ATTACKER}"}
    async with contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(
            httpx.AsyncClient(base_url=url, headers=headers, timeout=httpx.Timeout(600.0))
        )
        slow = [
            await stack.enter_async_context(
                httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600.0)
            )
            for key in (SLOW_KEYS if SLOW in attacks else [])
        ]
        heavy = [
            await stack.enter_async_context(
                httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600.0)
            )
            for key in (DUCK_KEYS if DUCK in attacks else {})
        ]
        loops = [
            *[
                _attack_loop(a, stop, outcomes, "quadratic query", "POST", "/api/v1/datasets/query", quadratic)
                for _ in range(2 if "quadratic" in attacks else 0)
            ],
            *[
                _attack_loop(
                    a,
                    stop,
                    outcomes,
                    "200k-character push",
                    "POST",
                    "/api/v1/memory/push",
                    lambda r: {"text": _distinct_text(r, PUSH_CHARS), "wait_for_embedding": True},
                    # Texts of their own for each loop and each attacker process: a text pushed before
                    # would find its chunks stored already and cost the server next to nothing.
                    f"{index}/{os.getpid()}",
                )
                for index in range(2 if "push" in attacks else 0)
            ],
            *[
                _attack_loop(
                    a, stop, outcomes, "large get_result", "GET", f"/api/v1/datasets/results/{query_id}", {"limit": 4}
                )
                for _ in range(3 if "get_result" in attacks else 0)
            ],
            *[
                _attack_loop(c, stop, outcomes, "slow-upstream ingest", "POST", "/api/v1/analysis/ingest", SLOW_INGEST)
                for c in slow
                for _ in range(2)
            ],
            *[
                _attack_loop(
                    c,
                    stop,
                    outcomes,
                    "heavy query",
                    "POST",
                    "/api/v1/datasets/query",
                    lambda r: {
                        "query_type": "sql",
                        "query": HEAVY_SQL.format(i=r.randrange(1 << 40)),
                        "timeout_ms": HEAVY_MS,
                    },
                    f"{index}/{thread}",
                    pause_when_refused=0.1,
                )
                for index, c in enumerate(heavy)
                for thread in range(3)
            ],
        ]
        tasks = [asyncio.create_task(loop) for loop in loops]
        await asyncio.to_thread(halt.wait)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    return dict(outcomes)


def _rss_mb(pid: int) -> dict[str, float]:
    """Resident memory in MiB: the server process, its DuckDB workers, and all of it."""
    out = {"server": 0.0, "workers": 0.0, "total": 0.0}
    for proc in server_processes(pid):
        with contextlib.suppress(psutil.Error):
            rss = proc.memory_info().rss / 2**20
            out["server" if proc.pid == pid else "workers"] += rss
            out["total"] += rss
    return out


def _sampler(pid: int) -> None:
    """The memory sampler's process (`--sampler PID`): every 50 ms it reads the resident memory of the
    server's processes, until its stdin closes; then it prints the peaks (JSON)."""
    halt = _halt_on_stdin_close()
    peak: dict[str, float] = {}
    while not halt.is_set():
        for name, mb in _rss_mb(pid).items():
            peak[name] = max(peak.get(name, 0.0), mb)
        halt.wait(0.05)
    print(json.dumps(peak), flush=True)


def _start(*args: str) -> subprocess.Popen[str]:
    """This script in another process (`--attacker` or `--sampler`), fed through stdin and read from stdout."""
    proc = subprocess.Popen(
        [sys.executable, str(SELF), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    return proc


async def _finish(proc: subprocess.Popen[str]) -> Any:
    """Close `proc`'s stdin (its signal to stop) and return the JSON of the last line it printed."""
    assert proc.stdin is not None and proc.stdout is not None
    if not proc.stdin.closed:
        proc.stdin.close()
    report = await asyncio.to_thread(proc.stdout.read)
    await asyncio.to_thread(proc.wait, 60)
    return json.loads(report.strip().splitlines()[-1])


ATTACKS = ("quadratic", "push", "get_result")
SLOW = "slow_upstream"  # a phase of its own, not part of the whole attack at once
DUCK = "duckdb_slots"  # a phase of its own too, with a victim of its own (`_victim_select`)
SLOW_INGEST = {"analysis_id": "slow", "model": "slow"}
# A phase on a server of its own (the backlog it leaves would slow the phases after it): two keys'
# pushes flood the embedding queue while a third key's notes are timed to their vectors
# (scripts/hostile_queue_flood.py).
FLOOD = "queue_flood"


SCENARIOS: tuple[tuple[str, ...], ...] = (("quadratic",), ("push",), ("get_result",), (SLOW,), (DUCK,), ATTACKS)
LABELS = {
    "quadratic": "two quadratic queries",
    "push": "two 200k-character pushes",
    "get_result": "three large get_result",
    SLOW: "ten ingests from a trickling upstream",
    DUCK: "two keys, three long DuckDB queries each",
}


@contextlib.contextmanager
def _trickling_upstream(place: Path) -> Any:
    """An upstream on 127.0.0.1 whose answers come one byte every 3 s, and its registry file (yielded)."""
    import socket

    import uvicorn
    import yaml
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def slow(_request: Any) -> StreamingResponse:
        async def body() -> Any:
            yield b'{"data": ['
            for _ in range(200):
                await asyncio.sleep(3.0)
                yield b" "
            yield b"]}"

        return StreamingResponse(body(), media_type="application/json")

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    registry = place / "upstreams.yaml"
    model = {"list_path": "slow", "items_path": "data", "pagination": {"style": "none"}}
    upstream = {"base_url": f"http://127.0.0.1:{port}/api", "timeout_seconds": 5, "max_retries": 0}
    registry.write_text(yaml.safe_dump({"upstreams": {"trickle": {**upstream, "models": {"slow": model}}}}))
    config = uvicorn.Config(
        Starlette(routes=[Route("/api/slow", slow)]), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        yield registry
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _label(attacks: tuple[str, ...]) -> str:
    return "all at once" if attacks == ATTACKS else " + ".join(LABELS[a] for a in attacks)


async def _under_attack(
    srv: Server,
    v: httpx.AsyncClient,
    rng: random.Random,
    query_id: str,
    attacks: tuple[str, ...],
    seconds: float,
    victim: Any = _victim,
) -> dict[str, Any]:
    assert srv.proc is not None
    before = _rss_mb(srv.proc.pid)
    # The attacker and the memory sampler run in processes of their own, so that their work (making
    # 200,000-character texts, reading replies, walking /proc) never delays the victim's calls in this
    # event loop.
    attacker = _start("--attacker", srv.url, query_id, ",".join(attacks))
    sampler = _start("--sampler", str(srv.proc.pid))
    try:
        await asyncio.sleep(3.0)  # the attack is under way before the victim starts
        if attacker.poll() is not None:
            raise RuntimeError(f"the attacker's process ended at once (exit status {attacker.returncode})")
        hostile = await victim(v, seconds, rng)
    finally:
        assert attacker.stdin is not None and sampler.stdin is not None
        attacker.stdin.close()
        sampler.stdin.close()
    outcomes: dict[str, int] = await _finish(attacker)
    peak: dict[str, float] = await _finish(sampler)
    # Vectors a push stopped waiting for are still being made: the next phase starts once they are.
    async with httpx.AsyncClient(base_url=srv.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=900) as op:
        (await op.post("/api/v1/embeddings/wait", json={"timeout_seconds": 600})).raise_for_status()
    return {"attacks": attacks, "hostile": hostile, "before": before, "peak": peak, "outcomes": outcomes}


async def _measure(
    srv: Server, seconds: float, cell_mb: int, scenarios: tuple[tuple[str, ...], ...] = SCENARIOS, repeats: int = 1
) -> dict[str, Any]:
    """Every scenario but the whole attack once, against the first idle phase; the whole attack
    `repeats` times, each run after an idle phase of its own; the idle server last."""
    rng = random.Random(11)
    timeout = httpx.Timeout(600.0)
    async with (
        httpx.AsyncClient(base_url=srv.url, headers={"Authorization": f"Bearer {VICTIM}"}, timeout=timeout) as v,
        httpx.AsyncClient(base_url=srv.url, headers={"Authorization": f"Bearer {ATTACKER}"}, timeout=timeout) as a,
    ):
        for _ in range(30):
            await _call(
                v, "POST", "/api/v1/memory/push", {"text": _distinct_text(rng, 400), "wait_for_embedding": True}
            )
        big = await _call(
            a,
            "POST",
            "/api/v1/datasets/query",
            {
                "query_type": "sql",
                "files": ["small.csv"],
                "return_limit": 1,
                "query": (
                    f"SELECT i, repeat(chr(CAST(97 + i AS INTEGER)), {cell_mb * 2**20}) AS cell FROM range(4) t(i)"
                ),
            },
        )
        if "error" in big:
            raise RuntimeError(f"could not store the large result: {big['error']}")
        query_id = big["query_id"]
        await _victim(v, 1.0, rng)  # warm-up
        # As `timeit` does, the client's garbage collector stays off while it times calls: a full
        # collection in this process (40-80 ms under load) would be counted as the server's latency.
        gc.collect()
        gc.freeze()
        gc.disable()
        try:
            idle = await _victim(v, seconds, rng)
            phases = [
                await _under_attack(srv, v, rng, query_id, attacks, seconds)
                for attacks in scenarios
                if attacks not in (ATTACKS, (DUCK,))
            ]
            duck = None
            if (DUCK,) in scenarios:
                duck = {
                    "idle": await _victim_select(v, seconds, rng),
                    **await _under_attack(srv, v, rng, query_id, (DUCK,), seconds, _victim_select),
                }
            runs = []
            for _ in range(repeats if ATTACKS in scenarios else 0):
                own_idle = await _victim(v, seconds, rng)
                runs.append({"idle": own_idle, **await _under_attack(srv, v, rng, query_id, ATTACKS, seconds)})
            # The same idle server once the attacks are over: what they left behind (e.g. the attacker's
            # rows in indexes the victim's searches share) shows here.
            after = await _victim(v, seconds, rng)
        finally:
            gc.enable()
    return {"idle": idle, "phases": phases, "runs": runs, "after": after, "duck": duck}


def markdown(r: dict[str, Any], seconds: float, cell_mb: int, quick: bool) -> str:
    """The figures as a markdown section."""
    lines = [
        "## One key's hostile load against another key",
        "",
        "Two project-bound keys on one `cairn serve` (embedded PostgreSQL), over REST. For "
        f"{seconds:.0f} s at a time the victim makes sequential pairs of calls, a memory `search` in its project "
        "and an `execute_query` (a count over a 1,000-row CSV): first on an idle server, then while the attacker "
        "(a process of its own) runs loops of each part of the attack alone, then of all of them at once "
        f"({len(r['runs'])} run(s), each compared with an idle phase measured just before it, since this virtual "
        "machine's speed drifts from minute to minute), and last on the idle server again (what the attacks left "
        "behind): two "
        f"quadratic queries (`levenshtein` of two {QUADRATIC_LENGTH:,}-character strings, `timeout_ms` 1000), two "
        f"pushes of {PUSH_CHARS:,} distinct characters waiting for their vectors, and three `get_result` calls on a "
        f"stored result of 4 rows of {cell_mb} MiB cells.",
        "",
        "| attack | victim's call | calls | p50 ms | p95 ms | p50 ratio | p95 ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for op in ("search", "execute_query"):
        times = r["idle"][op]
        lines.append(
            f"| none (idle) | {op} | {len(times)} | {statistics.median(times) * 1000:.1f} | {_pct(times, 0.95):.1f} "
            "| | |"
        )
    rows = [(_label(phase["attacks"]), phase["hostile"], r["idle"]) for phase in r["phases"]]
    for number, run in enumerate(r["runs"], 1):
        rows.append((f"none (idle, before run {number} of all at once)", run["idle"], None))
        rows.append((f"all at once, run {number}", run["hostile"], run["idle"]))
    rows.append(("none (idle again, after the attacks)", r["after"], r["idle"]))
    ratios: dict[str, list[float]] = {"search": [], "execute_query": []}
    for label, hostile, reference in rows:
        for op in ("search", "execute_query"):
            times = hostile[op]
            p50, p95 = statistics.median(times) * 1000, _pct(times, 0.95)
            cells = "| | |"
            if reference is not None:
                ratio = p95 / _pct(reference[op], 0.95)
                cells = f"| {p50 / (statistics.median(reference[op]) * 1000):.2f}x | {ratio:.2f}x |"
                if label.startswith("all at once"):
                    ratios[op].append(ratio)
            lines.append(f"| {label} | {op} | {len(times)} | {p50:.1f} | {p95:.1f} {cells}")
    if r["runs"]:
        lines += [
            "",
            "**All at once, p95 against the idle phase just before each run, median of "
            f"{len(r['runs'])} run(s): search {statistics.median(ratios['search']):.2f}x, execute_query "
            f"{statistics.median(ratios['execute_query']):.2f}x** (runs: search "
            + ", ".join(f"{x:.2f}x" for x in ratios["search"])
            + "; execute_query "
            + ", ".join(f"{x:.2f}x" for x in ratios["execute_query"])
            + ").",
        ]
    lines += ["", "| attack | server process MiB | DuckDB workers MiB | all MiB | the attacker's calls ended |"]
    lines += ["| --- | ---: | ---: | ---: | --- |"]
    memory = [(_label(phase["attacks"]), phase) for phase in r["phases"]]
    memory += [(f"all at once, run {number}", run) for number, run in enumerate(r["runs"], 1)]
    for label, phase in memory:
        b, pk = phase["before"], phase["peak"]
        outcomes = ", ".join(f"{k}: {n}" for k, n in sorted(phase["outcomes"].items()))
        lines.append(
            f"| {label} | {b['server']:.0f} → {pk['server']:.0f} "
            f"| {b['workers']:.0f} → {pk['workers']:.0f} | {b['total']:.0f} → {pk['total']:.0f} | {outcomes} |"
        )
    peak = max(phase["peak"]["total"] for _, phase in memory) if memory else 0.0
    lines += [
        "",
        "Memory: resident, of the server's processes (not PostgreSQL), before each phase → its peak; "
        f"highest of all: {peak:.0f} MiB.",
    ]
    if r.get("duck"):
        lines += _duck_markdown(r["duck"], seconds)
    if quick:
        lines += ["", "_Quick run: small sizes._"]
    return "\n".join(lines) + "\n"


def _duck_markdown(duck: dict[str, Any], seconds: float) -> list[str]:
    """The `duckdb_slots` phase: the victim's `SELECT 42` idle and while two keys keep DuckDB busy."""
    lines = [
        "",
        f"**DuckDB slots** (issue 41, finding 6): for {seconds:.0f} s the victim runs `SELECT 42` (a query of its "
        "own each time), on the idle server and then while two keys of two other projects each run three loops "
        f"of a cross join DuckDB stops at its `timeout_ms` ({HEAVY_MS} ms). The aim: under 1 s.",
        "",
        "| phase | calls | median ms | p95 ms | max ms |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, times in (("idle", duck["idle"]["select_42"]), ("under the attack", duck["hostile"]["select_42"])):
        median = statistics.median(times) * 1000 if times else float("nan")
        top = max(times) * 1000 if times else float("nan")
        lines.append(f"| {label} | {len(times)} | {median:.1f} | {_pct(times, 0.95):.1f} | {top:.1f} |")
    outcomes = ", ".join(f"{k}: {n}" for k, n in sorted(duck["outcomes"].items()))
    b, pk = duck["before"], duck["peak"]
    return [
        *lines,
        "",
        f"The attackers' calls ended: {outcomes}. Resident memory of the server's processes: "
        f"{b['total']:.0f} → {pk['total']:.0f} MiB (DuckDB workers {b['workers']:.0f} → {pk['workers']:.0f} MiB).",
    ]


def run(
    quick: bool = False,
    seconds: float | None = None,
    cell_mb: int | None = None,
    scenarios: tuple[tuple[str, ...], ...] = (*SCENARIOS, (FLOOD,)),
    repeats: int | None = None,
) -> str:
    """Run the benchmark and return its markdown section."""
    n, mb = seconds or (4.0 if quick else 30.0), cell_mb or (16 if quick else 100)
    times = repeats or (1 if quick else REPEATS)
    text = ""
    others = tuple(s for s in scenarios if s != (FLOOD,))
    if others:
        place = Path(tempfile.mkdtemp(prefix="cairn-bench-upstream-"))
        with (
            _trickling_upstream(place) as registry,
            on_embedded_postgres(
                {"CAIRN_API_KEYS": KEYS, "CAIRN_ANALYSIS_UPSTREAMS": str(registry)}, prefix="cairn-bench-hostile-"
            ) as (srv, _dsn),
        ):
            _write_csv(srv.data / "datasets")
            results = asyncio.run(_measure(srv, n, mb, others, times))
        text = markdown(results, n, mb, quick)
    if (FLOOD,) in scenarios:
        flood_seconds = seconds or (10.0 if quick else 40.0)  # the flood lasted 42 s
        env = {"CAIRN_API_KEYS": hostile_queue_flood.KEYS}
        with on_embedded_postgres(env, prefix="cairn-bench-flood-") as (srv, _dsn):
            flood = asyncio.run(hostile_queue_flood.measure(srv.url, flood_seconds))
        text = (text or "## One key's hostile load against another key\n") + "\n" + hostile_queue_flood.markdown(flood)
    return text


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--cell-mb", type=int)
    parser.add_argument("--repeats", type=int, help=f"runs of the whole attack at once (default {REPEATS})")
    parser.add_argument(
        "--attack",
        action="append",
        choices=(*ATTACKS, SLOW, DUCK, FLOOD),
        help="only this part of the attack (repeatable)",
    )
    parser.add_argument("--attacker", nargs=3, metavar=("URL", "QUERY_ID", "ATTACKS"), help=argparse.SUPPRESS)
    parser.add_argument("--sampler", type=int, metavar="PID", help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.sampler:
        _sampler(ns.sampler)
        sys.exit(0)
    if ns.attacker:
        url, query_id, names = ns.attacker
        _attacker(url, query_id, tuple(names.split(",")))
        sys.exit(0)
    chosen = tuple(a for a in (*ATTACKS, SLOW, DUCK) if a in ns.attack) if ns.attack else None
    # The DuckDB slots phase has a victim of its own: it runs apart from the others chosen.
    rest = tuple(a for a in chosen or () if a != DUCK)
    picked = (*((rest,) if rest else ()), *(((DUCK,),) if chosen and DUCK in chosen else ()))
    flood = ((FLOOD,),) if not ns.attack or FLOOD in ns.attack else ()
    scenarios = (picked if chosen else () if ns.attack else SCENARIOS) + flood
    print(run(ns.quick, ns.seconds, ns.cell_mb, scenarios, ns.repeats))
