"""The per-call cost of the rate-limit check: the in-memory moving window (`app.core.ratelimit`, what a
server used before the limits were shared) against the fleet's leased token bucket
(`app.core.fleet_limits`), side by side in one run on one embedded PostgreSQL.

- **check alone**: the check in a tight loop over many keys at the default limit (50/s, burst 200;
  each key stays under it), then the fleet's for one key whose calls outrun its leases of 10 tokens
  (they wait for the database: the worst case). "loop µs/call" is the loop's wall time per call, so it
  includes the background leases' share of the event loop.
- **REST calls**: `GET /api/v1/projects` in a loop against one in-process server whose limiter is
  swapped between the two in alternating rounds: paced at 40 calls/s under the default limit (50/s,
  burst 200), and as fast as one client goes under a 1,000/s limit.

    python scripts/bench_limits.py [--quick]
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _figures(samples: list[float]) -> dict[str, float]:
    """Mean, median and 99th percentile of `samples` (seconds), in microseconds."""
    ordered = sorted(samples)
    return {
        "mean_us": statistics.fmean(ordered) * 1e6,
        "p50_us": ordered[len(ordered) // 2] * 1e6,
        "p99_us": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e6,
    }


def _count_runs(limiter: Any) -> list[int]:
    runs: list[int] = []
    original = limiter.shared.run

    async def counted(work: Any) -> Any:
        runs.append(1)
        return await original(work)

    limiter.shared.run = counted
    return runs


async def _check_alone(url: str, calls: int, keys: int) -> list[dict[str, Any]]:
    from app.core.config import Settings
    from app.core.db import Database
    from app.core.errors import RateLimited
    from app.core.fleet_limits import FleetRateLimiter
    from app.core.ratelimit import RateLimiter

    db = Database(url, Settings())
    rows: list[dict[str, Any]] = []
    many = [f"key-{i}" for i in range(keys)]
    try:
        variants: list[tuple[str, Any, list[str]]] = [
            (f"in-memory moving window, 50/s burst 200, {keys} keys (before)", RateLimiter(50, 200), many),
            (f"fleet bucket, 50/s burst 200 (batch 10), {keys} keys (after)", FleetRateLimiter(50, 200, db), many),
            (
                "fleet bucket, one key, batch 10, calls outrun leases (after)",
                FleetRateLimiter(1e9, 10**9, db, batch=10),
                ["one"],
            ),
        ]
        for name, limiter, names in variants:
            runs = _count_runs(limiter) if isinstance(limiter, FleetRateLimiter) else []
            for key in names:  # each key's first lease (or first window entry)
                await limiter.admit(key)
            await asyncio.sleep(0.1)
            runs.clear()
            samples = []
            refused = 0
            began = time.perf_counter()
            for i in range(calls):
                start = time.perf_counter()
                try:
                    await limiter.admit(names[i % len(names)])
                except RateLimited:
                    refused += 1
                samples.append(time.perf_counter() - start)
            wall = (time.perf_counter() - began) / calls * 1e6
            rows.append(
                {
                    "variant": name,
                    "calls": calls,
                    "leases": len(runs),
                    "refused": refused,
                    "wall_us": wall,
                    **_figures(samples),
                }
            )
    finally:
        await db.dispose()
    return rows


def _rest(url: str, calls: int, paced: bool) -> list[dict[str, Any]]:
    from app.core.fleet_limits import FleetRateLimiter
    from app.core.ratelimit import RateLimiter
    from tests.support.server import ADMIN_KEY, server_settings, start_server, stop_server

    rate, burst = (50.0, 200) if paced else (1000.0, 4000)
    settings = server_settings(url, features=[], rate_limit_per_second=rate, rate_limit_burst=burst)
    srv, thread, app = start_server(settings)
    state = app.state.cairn
    fleet = state.limiter
    assert isinstance(fleet, FleetRateLimiter)
    memory = RateLimiter(rate, burst)
    samples: dict[str, list[float]] = {"in-memory (before)": [], "fleet (after)": []}
    refused = {name: 0 for name in samples}
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{settings.port}", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        ) as c:
            for _ in range(20):
                c.get("/api/v1/projects")  # warm up
            for round_ in range(6):
                name, limiter = ("in-memory (before)", memory) if round_ % 2 == 0 else ("fleet (after)", fleet)
                state.limiter = limiter
                for _ in range(calls // 2):
                    start = time.perf_counter()
                    status = c.get("/api/v1/projects").status_code
                    samples[name].append(time.perf_counter() - start)
                    refused[name] += status == 429
                    if paced:
                        time.sleep(max(0.0, 0.025 - (time.perf_counter() - start)))
                time.sleep(burst / rate if paced else 0.0)  # the next round starts with a full bucket
    finally:
        state.limiter = fleet
        stop_server(srv, thread)
    label = "paced 40/s, limit 50/s burst 200" if paced else "unpaced, limit 1000/s burst 4000"
    return [
        {"loop": label, "variant": name, "calls": len(s), "refused": refused[name], **_figures(s)}
        for name, s in samples.items()
    ]


def run(quick: bool = False) -> str:
    """Both measurements as a markdown section."""
    from app.core import migrations
    from app.core.pgembedded import start_embedded

    root = Path(tempfile.mkdtemp(prefix="cairn-bench-limits-"))
    pg = start_embedded(root / "pg")
    try:
        pg.ensure_database("bench")
        url = pg.url("bench")
        migrations.upgrade(url, [])
        alone = asyncio.run(_check_alone(url, 20_000 if quick else 200_000, 200 if quick else 2000))
        rest = _rest(url, 100 if quick else 400, paced=True) + _rest(url, 400 if quick else 2000, paced=False)
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)
    lines = [
        "| check alone | calls | refused | leases | loop µs/call | mean µs | p50 µs | p99 µs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in alone:
        figures = " | ".join(f"{r[k]:.2f}" for k in ("wall_us", "mean_us", "p50_us", "p99_us"))
        lines.append(f"| {r['variant']} | {r['calls']} | {r['refused']} | {r['leases']} | {figures} |")
    lines += [
        "",
        "| REST loop | limiter | calls | refused | mean µs | p50 µs | p99 µs |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rest:
        figures = " | ".join(f"{r[k]:.0f}" for k in ("mean_us", "p50_us", "p99_us"))
        lines.append(f"| {r['loop']} | {r['variant']} | {r['calls']} | {r['refused']} | {figures} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
