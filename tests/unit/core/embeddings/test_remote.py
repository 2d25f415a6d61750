"""app/core/embeddings/remote.py: the OpenAI-compatible and Ollama providers against a real HTTP server
on 127.0.0.1 started here."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from app.core.embeddings.provider import EmbeddingUnavailable
from app.core.embeddings.remote import OllamaEmbedder, OpenAIEmbedder

DIM = 4


class _Handler(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if self.path.startswith("/fail"):
            self._reply(500, {"error": "model crashed"})
            return
        # Vector i is (3, 4, 0, i): not normalised, and tells which input it belongs to.
        vectors = [[3.0, 4.0, 0.0, float(i)] for i in range(len(body["input"]))]
        if self.path == "/v1/embeddings":  # reversed, to check that "index" decides the order
            data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
            self._reply(200, {"object": "list", "data": data[::-1], "model": body["model"]})
        elif self.path == "/api/embed":
            self._reply(200, {"model": body["model"], "embeddings": vectors})
        else:
            self._reply(404, {"error": "not found"})


@pytest.fixture(scope="module")
def fake_api() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def refused_url() -> str:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def expected(i: int) -> list[float]:
    v = np.array([3.0, 4.0, 0.0, float(i)])
    return list(v / np.linalg.norm(v))


@pytest.mark.asyncio
async def test_openai_provider(fake_api: str) -> None:
    _Handler.requests.clear()
    embedder = OpenAIEmbedder(base_url=fake_api + "/v1", api_key="sk-test", model="m", dimension=DIM)
    await embedder.start()
    try:
        assert not embedder.loaded()
        vectors = await embedder.embed([f"t{i}" for i in range(130)])
        assert len(vectors) == 130 and embedder.loaded()
        np.testing.assert_allclose(vectors[5], expected(5), atol=1e-6)
        np.testing.assert_allclose(vectors[129], expected(1), atol=1e-6)  # second request: index 1
        assert [len(r["body"]["input"]) for r in _Handler.requests] == [128, 2]
        assert _Handler.requests[0]["auth"] == "Bearer sk-test"
        assert _Handler.requests[0]["body"]["model"] == "m"
        assert await embedder.embed([]) == []
        await embedder.check()
    finally:
        await embedder.close()


@pytest.mark.asyncio
async def test_ollama_provider(fake_api: str) -> None:
    _Handler.requests.clear()
    embedder = OllamaEmbedder(base_url=fake_api, model="all-minilm", dimension=DIM)
    try:
        one = await embedder.embed_one("hello")
        np.testing.assert_allclose(one, expected(0), atol=1e-6)
        assert _Handler.requests[-1]["body"] == {"model": "all-minilm", "input": ["hello"]}
        await embedder.check()
    finally:
        await embedder.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["openai", "ollama"])
async def test_http_errors_raise_unavailable(fake_api: str, refused_url: str, kind: str) -> None:
    def make(base: str, dimension: int = DIM) -> OpenAIEmbedder | OllamaEmbedder:
        if kind == "openai":
            return OpenAIEmbedder(base_url=base + "/v1", model="m", dimension=dimension, timeout=5)
        return OllamaEmbedder(base_url=base, model="m", dimension=dimension, timeout=5)

    cases = [
        (make(fake_api + "/fail"), "HTTP 500"),
        (make(refused_url), "ConnectError"),
        (make(fake_api, dimension=8), r"expected \(1, 8\)"),
    ]
    for embedder, message in cases:
        try:
            with pytest.raises(EmbeddingUnavailable, match=message):
                await embedder.embed(["x"])
            with pytest.raises(EmbeddingUnavailable):
                await embedder.check()
            assert not embedder.loaded()
        finally:
            await embedder.close()
