"""Vega-Lite specs drawn to PNG for the console, outside the server's process.

vl-convert embeds a JavaScript engine (tens of MB once loaded), so the server never imports it: a
chart is drawn by a short-lived child interpreter (`python -I`), at most `CONCURRENT` at a time, each
bounded by `CHART_SECONDS`. The spec's data is inline and no URL may be fetched
(`allowed_base_urls=[]`). The last `KEPT` drawings are kept, keyed by the spec, so a page opened
again draws nothing. The datasets family draws its own charts in its DuckDB workers.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import sys
from typing import Any

from cachetools import LRUCache

log = logging.getLogger("cairn.charts")

CHART_SECONDS = 20.0
CONCURRENT = 2
KEPT = 64
_DRAW = (
    "import base64, sys, vl_convert\n"
    "spec = sys.stdin.read()\n"
    "png = vl_convert.vegalite_to_png(spec, scale=1, allowed_base_urls=[])\n"
    "sys.stdout.write(base64.b64encode(png).decode())\n"
)
_drawn: LRUCache[str, str] = LRUCache(maxsize=KEPT)
_slots = asyncio.Semaphore(CONCURRENT)


async def vega_lite_png(spec: dict[str, Any]) -> str | None:
    """`spec` drawn as a base64 PNG, or None when it could not be drawn in time (the caller then shows
    its numbers alone; the reason is logged)."""
    text = json.dumps(spec, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()
    kept = _drawn.get(digest)
    if kept is not None:
        return kept
    async with _slots:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-c",
            _DRAW,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(text.encode()), CHART_SECONDS)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            log.warning("a chart took longer than %s s to draw", CHART_SECONDS)
            return None
    png = out.decode("ascii", "replace").strip()
    if proc.returncode != 0 or not png.startswith("iVBOR"):  # base64 of the PNG signature
        log.warning("a chart could not be drawn: %s", err.decode("utf-8", "replace")[-300:])
        return None
    _drawn[digest] = png
    return png
