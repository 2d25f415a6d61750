"""An OpenAI-compatible embeddings server on 127.0.0.1 for the model-switch tests: it serves the real
local ONNX model under another model name, and answers 500 to any batch holding the text FAIL-EMBED."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from app.core.embeddings.local import LocalOnnxEmbedder
from tests.support.server import free_port


class FakeEmbeddingServer:
    """Serve `POST /v1/embeddings` from a thread."""

    def __init__(self, model: str = "minilm-http", port: int | None = None) -> None:
        self.model = model
        self.port = port or free_port()
        self.calls = 0
        self.prompts: list[str] = []
        embedder = LocalOnnxEmbedder()
        app = FastAPI()

        @app.post("/v1/embeddings")
        async def embeddings(request: Request) -> JSONResponse:
            body: dict[str, Any] = await request.json()
            self.calls += 1
            texts = body["input"]
            if any("FAIL-EMBED" in t for t in texts):
                return JSONResponse({"error": {"message": "refused"}}, status_code=500)
            vectors = await embedder.embed(texts)
            return JSONResponse(
                {
                    "object": "list",
                    "model": body["model"],
                    "data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)],
                }
            )

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> JSONResponse:
            body: dict[str, Any] = await request.json()
            self.calls += 1
            self.prompts.append(body["messages"][-1]["content"])
            return JSONResponse(
                {
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": f"Abstract summary by {body['model']}."},
                        }
                    ]
                }
            )

        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_config=None, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeEmbeddingServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake embedding server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
