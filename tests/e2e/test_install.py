"""A plain `pip install` of the checkout is the product: in a fresh virtual environment (no editable
install, no extra packages, started outside the checkout) `cairn serve` migrates the embedded
PostgreSQL from the migrations inside the wheel and reaches `/readyz` 200 with the local embedder."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import venv
from pathlib import Path

import httpx
import pytest

from app.core.embeddings.tokens import count_tokens
from tests.support.server import free_port

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_plain_pip_install_serves_and_is_ready(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CAIRN_", "PYTHON", "VIRTUAL_ENV"))}
    installed = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-q", str(ROOT)],
        env=clean,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    shown = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "show", "-f", "cairn-server"],
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    files = shown.stdout
    assert "Editable project location" not in files
    for packaged in (
        "app/core/alembic/env.py",
        "app/memory/migrations/",
        "all-MiniLM-L6-v2.tokenizer.json",
        "app/core/templates/console/base.html",
        "app/graph/templates/graph/entity.html",
        "app/core/static/cytoscape.min.js",
    ):
        assert packaged in files, packaged
    assert not any(line.strip().startswith("alembic/") for line in files.splitlines()), "the wheel shadows alembic"

    port = free_port()
    log = tmp_path / "serve.log"
    env = {
        **clean,
        "CAIRN_DATA_DIR": str(tmp_path / "data"),
        "CAIRN_PORT": str(port),
        "CAIRN_DATASETS_PYTHON_ENABLED": "true",
    }
    (tmp_path / "data" / "datasets").mkdir(parents=True)
    (tmp_path / "data" / "datasets" / "data.csv").write_text("value\n1\n2\n6\n")
    with log.open("w+") as out:
        proc = subprocess.Popen(
            [str(bin_dir / "cairn"), "serve"], env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            status, body = None, ""
            deadline = time.monotonic() + 240
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
                while time.monotonic() < deadline and proc.poll() is None:
                    try:
                        answer = client.get("/readyz")
                        status, body = answer.status_code, answer.text
                    except httpx.TransportError:
                        status = None
                    if status == 200:
                        break
                    time.sleep(0.5)
                assert status == 200, f"not ready (exit={proc.poll()}, {body}):\n{log.read_text()[-3000:]}"
                assert answer.json()["checks"]["embedder"] is True, body
                text = "a plain install embeds and counts"  # the packaged tokenizer counts it
                embedded = client.post("/api/v1/embed", json={"text": text})
                assert embedded.status_code == 200, embedded.text
                assert embedded.json()["dimension"] == 384 and embedded.json()["tokens"] == count_tokens(text), (
                    embedded.text
                )
                # The console's templates and assets are in the wheel: an open server serves its pages.
                for page in ("/ui/", "/ui/memory", "/ui/graph", "/ui/analysis", "/ui/datasets", "/ui/admin"):
                    shown_page = client.get(page)
                    assert shown_page.status_code == 200 and "Cairn console" in shown_page.text, page
                for asset in ("console.css", "console.js", "cytoscape.min.js", "favicon.svg"):
                    assert client.get(f"/ui/static/{asset}").status_code == 200, asset
                # pandas comes with the install: the python engine, once enabled, has its `pd`.
                code = "import pandas as pd\nresult = pd.read_csv('data.csv').describe()"
                ran = client.post("/api/v1/datasets/query", json={"engine": "pandas", "query": code}, timeout=60)
                assert ran.status_code == 200, ran.text
                assert {"index": "mean", "value": 3.0} in ran.json()["data"], ran.text
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    where = subprocess.run(
        [str(bin_dir / "python"), "-c", "import app; print(app.__file__)"],
        env=clean,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # The code that answered is the installed copy, not the checkout.
    assert where.stdout.strip().startswith(str(env_dir)), where.stdout
