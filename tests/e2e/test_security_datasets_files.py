"""A caller's file never gives a 5xx or shows a server path (issue 41, finding 10).

Hand-made broken Parquet files (a footer length past the file, a footer read from the wrong place,
damaged footer metadata) and a CSV of 50,000 columns are uploaded through the real upload route, then
profiled, sampled and queried over REST: each answer is a 4xx with the shared error body that names the
dataset, and no answer holds a path of the server.
"""

from __future__ import annotations

import gc
import io
import logging
import os
from pathlib import Path

import duckdb
import httpx
import pytest

from tests.support.server import RunningServer

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="session")]


def _parquet(tmp: Path) -> bytes:
    path = tmp / "ok.parquet"
    duckdb.sql(f"COPY (SELECT range AS id, 'x' || range AS s FROM range(2000)) TO '{path}' (FORMAT parquet)")
    return path.read_bytes()


def broken_parquets(tmp: Path) -> dict[str, bytes]:
    """Three hand-made broken Parquet files of 5 to 20 KB, each valid at both ends ("PAR1")."""
    good = _parquet(tmp)
    footer = int.from_bytes(good[-8:-4], "little")
    damaged = bytearray(good)
    for i in range(len(good) - 8 - footer, len(good) - 8):
        damaged[i] ^= 0xFF
    return {
        "pq_footer_past_end": good[:-8] + (10**7).to_bytes(4, "little") + b"PAR1",
        "pq_footer_shifted": good[:-8] + (footer + 37).to_bytes(4, "little") + b"PAR1",
        "pq_footer_damaged": bytes(damaged),
        "pq_noise": b"PAR1" + os.urandom(5000) + b"PAR1",
    }


def wide_csv(columns: int) -> bytes:
    header = ",".join(f"c{i}" for i in range(columns))
    return (header + "\n" + ",".join("1" for _ in range(columns)) + "\n").encode()


async def _upload(rest: httpx.AsyncClient, name: str, filename: str, content: bytes) -> None:
    r = await rest.post(
        "/api/v1/datasets/upload",
        data={"name": name, "replace": "true"},
        files={"file": (filename, io.BytesIO(content), "application/octet-stream")},
    )
    assert r.status_code == 200, r.text


async def _calls(rest: httpx.AsyncClient, name: str) -> list[httpx.Response]:
    return [
        await rest.post("/api/v1/datasets/profile", json={"file_path": name}),
        await rest.post("/api/v1/datasets/sample", json={"file_path": name}),
        await rest.post(
            "/api/v1/datasets/query", json={"query_type": "sql", "files": [name], "query": f"SELECT * FROM {name}"}
        ),
    ]


def _assert_clean(r: httpx.Response, name: str, code: int, server: RunningServer) -> str:
    assert r.status_code == 400, (name, r.status_code, r.text)
    error = r.json()["error"]
    assert error["code"] == code, (name, error)
    text = r.text
    assert f"'{name}'" in error["message"], (name, error["message"])
    assert str(server.settings.data_dir) not in text and "/uploads/" not in text and "/tmp" not in text, text
    return str(error["message"])


async def test_broken_parquet_files_are_4004_naming_the_dataset_without_a_path(
    server: RunningServer, rest: httpx.AsyncClient, tmp_path: Path
) -> None:
    for name, content in broken_parquets(tmp_path).items():
        await _upload(rest, name, f"{name}.parquet", content)
        for r in await _calls(rest, name):
            message = _assert_clean(r, name, 4004, server)
            assert "cannot be read" in message, message


async def test_a_csv_of_50000_columns_is_refused_at_the_column_limit(
    server: RunningServer, rest: httpx.AsyncClient
) -> None:
    content = wide_csv(50_000)
    assert 400_000 < len(content) < 500_000
    await _upload(rest, "wide50k", "wide50k.csv", content)
    for r in await _calls(rest, "wide50k"):
        message = _assert_clean(r, "wide50k", 4003, server)
        assert "50000 columns" in message and "CAIRN_DATASETS_MAX_COLUMNS" in message, message
    await _upload(rest, "wide_ok", "wide_ok.csv", wide_csv(300))  # a wide file within the limit still reads
    r = await rest.post("/api/v1/datasets/profile", json={"file_path": "wide_ok"})
    assert r.status_code == 200, r.text


async def test_a_duckdb_call_that_times_out_leaves_no_unretrieved_future(
    rest: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    slow = "SELECT count(*) FROM range(100000000) a, range(1000) b WHERE (a.range * b.range) % 7 = 3"
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        for body in (
            {"query_type": "sql", "query": slow, "timeout_ms": 300},
            {"query_type": "sql", "query": slow, "timeout_ms": 300, "generate_chart": True},
            {"query_type": "sql", "query": slow, "timeout_ms": 300, "return_format": "csv"},
        ):
            r = await rest.post("/api/v1/datasets/query", json=body)
            assert r.status_code == 504 and r.json()["error"]["code"] == 5003, r.text
        gc.collect()  # an unretrieved future's exception is logged when it is collected
    assert not [rec.getMessage() for rec in caplog.records if "never retrieved" in rec.getMessage()]
