"""Fleet load test: the load test's 64 MCP clients (plus REST traffic) against two `cairn serve` hosts on
one PostgreSQL, side by side in one run with the same load against one host on the same PostgreSQL
(pairs of rounds, alternating; medians).

    python scripts/bench.py --only fleet          # (or: python scripts/bench_fleet.py [--duration S])

Both rounds use one standalone PostgreSQL (the embedded binaries, started for the run, each round on a
fresh database) and the same shared datasets root, so the only difference is the number of hosts. The
clients split evenly over the hosts. Limits are on (one key, a rate far above the offered load), so the
figures include what coordinating them across hosts costs. Server CPU per call is the CPU of every host's
own processes (not PostgreSQL's, not the load generator's) divided by the calls answered. On a 2-core
machine the hosts share the cores: two hosts cannot add throughput here; the ratio of CPU per call is
what coordination costs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtest import KEY, Stats, _drain, _free_port, _write_dataset, mcp_worker, rest_worker, seed
from loadtest import server_cpu_seconds as _own_cpu

ROOT = Path(__file__).resolve().parents[1]
# Off (`--no-limits`): what the hosts cost without the shared limits, to tell coordination from the rest.
LIMITS = "--no-limits" not in sys.argv


def _start_host(db_url: str, shared_root: Path) -> tuple[subprocess.Popen[bytes], str]:
    """One `cairn serve` host with a data dir of its own on the shared database."""
    port = _free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")},
        "CAIRN_DATA_DIR": tempfile.mkdtemp(prefix="cairn-fleet-host-"),
        "CAIRN_DATABASE_URL": db_url,
        "CAIRN_DATA_ROOTS": str(shared_root / "datasets"),
        "CAIRN_API_KEYS": f"{KEY}:admin",
        "CAIRN_PORT": str(port),
        "CAIRN_LOG_LEVEL": "WARNING",
        "CAIRN_RATE_LIMIT_PER_SECOND": "5000",
        "CAIRN_RATE_LIMIT_BURST": "10000",
        "CAIRN_DB_POOL_SIZE": "10",
        "CAIRN_MAX_LONG_JOBS_PER_KEY": "64",
        **({} if LIMITS else {"CAIRN_RATE_LIMIT_PER_SECOND": "0", "CAIRN_MAX_LONG_JOBS_PER_KEY": "0"}),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("a host exited during start-up")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise TimeoutError("a host did not become ready")


async def one_round(cluster: Any, hosts: int, clients: int, duration: float, shared_root: Path) -> dict[str, Any]:
    """Start `hosts` hosts on a fresh database of `cluster`, load them for `duration` s, measure, stop."""
    database = f"cairn_fleet_{uuid.uuid4().hex[:8]}"
    cluster.ensure_database(database)
    started_hosts = []
    try:
        for _ in range(hosts):
            started_hosts.append(_start_host(cluster.url(database), shared_root))
        urls = [url for _, url in started_hosts]
        scenarios = await seed(urls[0])
        stats = Stats()
        pids = [proc.pid for proc, _ in started_hosts]
        cpu_before = sum(_own_cpu(pid) for pid in pids)
        until = time.monotonic() + duration
        started = time.monotonic()
        await asyncio.gather(
            *[mcp_worker(urls[w % hosts], w, until, scenarios, stats) for w in range(clients)],
            *[rest_worker(urls[w % hosts], w, until, stats) for w in range(4)],
        )
        elapsed = time.monotonic() - started
        cpu = sum(_own_cpu(pid) for pid in pids) - cpu_before
        for url in urls:
            await _drain(url)
    finally:
        for proc, _ in started_hosts:
            proc.terminate()
        for proc, _ in started_hosts:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    calls = sum(len(v) for v in stats.latency.values())
    return {
        "hosts": hosts,
        "calls": calls,
        "elapsed": elapsed,
        "throughput": calls / elapsed,
        "cpu_ms_per_call": cpu * 1000 / max(calls, 1),
        "errors": sum(stats.errors.values()),
        "samples": dict(stats.samples),
    }


def measure(duration: float = 20.0, clients: int = 64, pairs: int = 3) -> dict[str, Any]:
    """`pairs` pairs of rounds, one host then two hosts, on one standalone PostgreSQL started for the run
    (alternating, so a drift of the machine touches both sides alike)."""
    from app.core.pgembedded import start_embedded

    cluster = start_embedded(Path(tempfile.mkdtemp(prefix="cairn-fleet-pg-")))
    shared_root = Path(tempfile.mkdtemp(prefix="cairn-fleet-data-"))
    _write_dataset(str(shared_root), rows=20_000)
    rounds: list[tuple[dict[str, Any], dict[str, Any]]] = []
    try:
        for _ in range(pairs):
            one = asyncio.run(one_round(cluster, 1, clients, duration, shared_root))
            two = asyncio.run(one_round(cluster, 2, clients, duration, shared_root))
            rounds.append((one, two))
    finally:
        cluster.stop()
    return {"clients": clients, "duration": duration, "rounds": rounds, "limits": LIMITS}


def _median(rounds: list[tuple[dict[str, Any], dict[str, Any]]], side: int, field: str) -> float:
    return float(statistics.median(pair[side][field] for pair in rounds))


def markdown(result: dict[str, Any]) -> str:
    """The section of docs/benchmarks.md."""
    rounds = result["rounds"]
    limits = "limits on (one key, rate far above the load)" if result["limits"] else "limits off"
    lines = [
        f"{result['clients']} MCP clients + 4 REST clients for {result['duration']:.0f} s per round, split evenly "
        f"over the hosts; {len(rounds)} pairs of rounds (one host, then two), alternating; one standalone "
        f"PostgreSQL (embedded binaries), a fresh database per round; {limits}. Server CPU: every host's own "
        "processes (embedding work done during the round included).",
        "",
        "| pair | hosts | calls | calls/s | server CPU ms per call | errors |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n, pair in enumerate(rounds, 1):
        for run in pair:
            lines.append(
                f"| {n} | {run['hosts']} | {run['calls']} | {run['throughput']:.1f} | {run['cpu_ms_per_call']:.2f} | "
                f"{run['errors']} |"
            )
    cpu = [_median(rounds, side, "cpu_ms_per_call") for side in (0, 1)]
    rate = [_median(rounds, side, "throughput") for side in (0, 1)]
    ratios = ", ".join(f"{two['cpu_ms_per_call'] / one['cpu_ms_per_call']:.2f}" for one, two in rounds)
    lines += [
        "",
        f"Medians: one host {cpu[0]:.2f} ms per call at {rate[0]:.1f} calls/s, two hosts {cpu[1]:.2f} ms per call "
        f"at {rate[1]:.1f} calls/s. Two hosts / one host: server CPU per call {cpu[1] / cpu[0]:.2f}x (per pair: "
        f"{ratios}), throughput {rate[1] / rate[0]:.2f}x (both hosts share this machine's cores).",
    ]
    for pair in rounds:
        for run in pair:
            if run["samples"]:
                samples = "; ".join(f"{k}: {v[:160]}" for k, v in run["samples"].items())
                lines += ["", f"Error samples ({run['hosts']} host(s)): {samples}"]
    return "\n".join(lines) + "\n"


def run(quick: bool = False) -> str:
    """The benchmark section (`quick`: 8 s rounds with 16 clients)."""
    return markdown(measure(8.0, 16, 1) if quick else measure())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--no-limits", action="store_true", help="turn the per-key limits off on every host")
    args = parser.parse_args()
    print(markdown(measure(args.duration, args.clients, args.pairs)))
