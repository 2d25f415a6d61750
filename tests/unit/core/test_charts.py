"""app/core/charts.py: a Vega-Lite spec drawn to PNG by a child interpreter, kept by its spec, and a
spec that cannot be drawn answered with None (the page then shows its numbers alone)."""

from __future__ import annotations

import asyncio
import base64
import http.server
import json
import logging
import threading
import urllib.request

import pytest

from app.core import charts

SPEC = {
    "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
    "data": {"values": [{"x": "a", "y": 1}, {"x": "b", "y": 3}]},
    "mark": "bar",
    "encoding": {"x": {"field": "x", "type": "nominal"}, "y": {"field": "y", "type": "quantitative"}},
}


async def test_a_spec_is_drawn_once_and_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    charts._drawn.clear()
    png = await charts.vega_lite_png(SPEC)
    assert png is not None and base64.b64decode(png).startswith(b"\x89PNG\r\n\x1a\n")
    spawned: list[object] = []

    async def no_process(*args: object, **kwargs: object) -> None:
        spawned.append(args)
        raise AssertionError("a kept drawing needs no process")

    monkeypatch.setattr(asyncio, "create_subprocess_exec", no_process)
    same_spec_other_order = dict(reversed(list(SPEC.items())))
    assert await charts.vega_lite_png(same_spec_other_order) == png and spawned == []


async def test_a_spec_that_cannot_be_drawn_is_none_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    charts._drawn.clear()
    caplog.set_level(logging.WARNING, logger="cairn.charts")
    broken = {**SPEC, "mark": "no-such-mark"}
    assert await charts.vega_lite_png(broken) is None
    assert any("could not be drawn" in r.getMessage() for r in caplog.records)
    assert not charts._drawn  # a failure is not kept


async def test_no_url_is_fetched() -> None:
    """A spec naming its data by URL is not drawn, and the URL is never asked for (it is served here)."""
    asked: list[str] = []

    class Data(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = json.dumps(SPEC["data"]["values"]).encode()  # type: ignore[index]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return None

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Data) as served:
        thread = threading.Thread(target=served.serve_forever, daemon=True)
        thread.start()
        try:
            url = f"http://127.0.0.1:{served.server_address[1]}/data.json"
            answer = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())
            assert json.loads(answer)  # it does answer
            asked.clear()
            charts._drawn.clear()
            assert await charts.vega_lite_png({**SPEC, "data": {"url": url}}) is None
        finally:
            served.shutdown()
    assert asked == []
