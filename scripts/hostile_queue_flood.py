"""The `queue_flood` attack of `scripts/bench_hostile.py` (issue 41, finding 5), on a server of its own.

Two write keys push documents of about 9 new chunks each (three pushes in flight per key, no wait for
the vectors) for `seconds`; meanwhile a third key pushes a short note every `NOTE_EVERY` seconds and
times each from its acknowledgement until a semantic search of its project finds it with its vector
made. Reported: the seconds from acknowledgement to vector (median, max; a note not made within
`DEADLINE` counts as longer), the chunks the flood queued and how its pushes ended (4290: the key's
cap of waiting rows). The server keeps its default settings (the cap included).

Usage (through bench_hostile)::

    python scripts/bench_hostile.py --attack queue_flood [--seconds 40]
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from typing import Any

import httpx

from tests.support.memory import flood_document

FLOOD_KEYS = [f"bench-flood-{i}-key-0123456789" for i in range(2)]
NOTE_KEY = "bench-notes-key-0123456789"
KEYS = ",".join([*(f"{k}:read+write:flood" for k in FLOOD_KEYS), f"{NOTE_KEY}:read+write:notes"])
LOOPS_PER_KEY = 3
DOCUMENT_CHARS = 3_000  # about 9 chunks of 200 tokens
NOTE_EVERY = 2.0
DEADLINE = 300.0  # a note still without its vector then is reported as such


async def _flood(c: httpx.AsyncClient, stop: asyncio.Event, seed: str, outcomes: Counter[str]) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        try:
            r = await c.post("/api/v1/memory/push", json={"text": flood_document(rng, DOCUMENT_CHARS)})
            body = r.json()
            outcomes[str(body["error"]["code"]) if "error" in body else "ok"] += 1
            outcomes["chunks queued"] += int(body.get("chunksIndexed") or 0) if "error" not in body else 0
            if r.status_code == 429:
                await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
        except httpx.HTTPError as exc:
            outcomes[type(exc).__name__] += 1


async def _note(c: httpx.AsyncClient, n: int) -> float | None:
    """Push note `n`; seconds from its acknowledgement until it is found with its vector (None: not
    within `DEADLINE`)."""
    text = f"Note {n}: the harbour crane {n} was inspected on a rainy morning."
    r = await c.post("/api/v1/memory/push", json={"text": text})
    r.raise_for_status()
    acked = time.monotonic()
    query = {"query_text": f"harbour crane {n} inspected", "mode": "semantic", "limit": 5}
    while time.monotonic() - acked < DEADLINE:
        found = (await c.post("/api/v1/memory/search", json=query)).json()
        if any(t == text and "embedding" not in hit for t, hit in _hits(found)):
            return time.monotonic() - acked
        await asyncio.sleep(0.25)
    return None


def _seconds(values: list[float | None], q: float) -> str:
    """The `q` quantile of `values` in seconds; a note never made (None) counts as longer than all."""
    ordered = sorted(values, key=lambda v: float("inf") if v is None else v)
    if not ordered:
        return "-"
    value = ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return f"> {DEADLINE:.0f}" if value is None else f"{value:.2f}"


def _hits(found: dict[str, Any]) -> list[tuple[str | None, dict[str, Any]]]:
    """Each result of a memory search with its text (its line `[n] text` of `context`)."""
    lines: dict[int, str] = {}
    for line in (found.get("context") or "").splitlines():
        number, _, text = line.partition("] ")
        if number.startswith("[") and number[1:].isdigit():
            lines[int(number[1:])] = text
    return [(lines.get(n), hit) for n, hit in enumerate(found.get("results") or [], 1)]


async def measure(url: str, seconds: float) -> dict[str, Any]:
    """The attack against the server at `url` (started with `KEYS`); its figures."""
    stop, outcomes = asyncio.Event(), Counter[str]()
    async with contextlib.AsyncExitStack() as stack:

        def client(key: str) -> httpx.AsyncClient:
            return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600)

        flooders = [await stack.enter_async_context(client(k)) for k in FLOOD_KEYS]
        notes = await stack.enter_async_context(client(NOTE_KEY))
        loops = [
            asyncio.create_task(_flood(c, stop, f"{k}/{i}", outcomes))
            for k, c in enumerate(flooders)
            for i in range(LOOPS_PER_KEY)
        ]
        started = time.monotonic()
        waits: list[asyncio.Task[float | None]] = []
        try:
            await asyncio.sleep(NOTE_EVERY)  # the flood is under way first
            n = 0
            while time.monotonic() - started < seconds:
                waits.append(asyncio.create_task(_note(notes, n)))
                n += 1
                await asyncio.sleep(NOTE_EVERY)
        finally:
            stop.set()
            await asyncio.gather(*loops, return_exceptions=True)
        latencies = list(await asyncio.gather(*waits))
    chunks = outcomes.pop("chunks queued", 0)
    return {
        "seconds": seconds,
        "notes": len(latencies),
        "missed": sum(1 for x in latencies if x is None),
        "median": _seconds(latencies, 0.5),
        "max": _seconds(latencies, 1.0),
        "chunks": chunks,
        "outcomes": dict(outcomes),
    }


def markdown(r: dict[str, Any]) -> str:
    """The figures as a markdown section."""
    outcomes = ", ".join(f"{k}: {n}" for k, n in sorted(r["outcomes"].items()))
    return "\n".join(
        [
            "### A queue flood against another key's writes (`queue_flood`)",
            "",
            f"Two write keys push documents of about 9 new chunks each ({LOOPS_PER_KEY} pushes in flight per key, "
            f"no wait for vectors) for {r['seconds']:.0f} s, on a server of its own with default settings; a third "
            f"key pushes a short note every {NOTE_EVERY:g} s and times each from its acknowledgement until a "
            "semantic search finds it with its vector (the issue's bound: 30 s).",
            "",
            "| notes | from acknowledgement to vector, median s | max s | notes not made within "
            f"{DEADLINE:.0f} s | chunks the flood queued | the flood's pushes |",
            "| ---: | ---: | ---: | ---: | ---: | --- |",
            f"| {r['notes']} | {r['median']} | {r['max']} | {r['missed']} | {r['chunks']:,} | {outcomes} |",
        ]
    )
