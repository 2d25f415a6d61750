"""profile_dataset over MCP and REST on the real server (issue 15, item 4): recommendations for messy
text columns, a compact default reply and the full one on request, categories that stay categories
whatever max_categories is, a sample_size that changes what is inspected, and max_tokens kept."""

from __future__ import annotations

import datetime as dt
import json
import random
from typing import Any

import pytest

from app.core.embeddings.tokens import count_tokens
from tests.support.datasets import Both, callers, root_of
from tests.support.server import RunningServer

pytestmark = pytest.mark.asyncio(loop_scope="session")

REGIONS = [
    ("north", 76),
    ("south", 64),
    ("east", 52),
    ("west", 44),
    ("central", 40),
    ("coast", 36),
    ("lake", 32),
    ("hills", 24),
    ("plains", 20),
    ("islands", 12),
]
MESSY_ROWS = 400
COLUMNS = "id,region,amount,score,active,customer,signup,price,qty,created_at,comment,version".split(",")
SUMMARY_HEADER = "name,type,null_pct,unique_count,sample_values,stats"
MESSY_ADVICE = [
    "'amount' holds numbers as text: strip currency signs, commas, spaces, then CAST AS DOUBLE",
    "'score' is numbers with 4% text (e.g. 'see note'): TRY_CAST nulls those",
    "'active' spells booleans 8 ways: map them to true/false",
    "'customer' is space-padded in 50% of values: trim() it",
    "'signup' mixes 2 date formats (%Y-%m-%d 50%, %Y/%m/%d 50%): try_strptime(signup, ['%Y-%m-%d', '%Y/%m/%d'])",
    "'comment' is 75% empty: filter or impute it",
    "'version' holds one value: drop it",
]


@pytest.fixture
def messy(server: RunningServer) -> str:
    """profile_messy.csv: 12 columns, 400 rows, a clean column of each type and each kind of messy text
    column (numbers with '$', thousands commas and padding; numbers with 4% 'see note'; booleans spelt
    8 ways; padded names; dates in two formats; a mostly empty column; a constant)."""
    rng = random.Random(15)
    regions = [name for name, n in REGIONS for _ in range(n)]
    rng.shuffle(regions)
    start = dt.datetime(2024, 1, 1)
    lines = [",".join(COLUMNS)]
    for i in range(MESSY_ROWS):
        amount = [f'"{1000 + i:,}.50"', f"${i % 97}", f" {i % 50} "][i % 3]
        day = start + dt.timedelta(days=i)
        cells = [
            str(i + 1),
            regions[i],
            amount,
            "see note" if i % 25 == 7 else str(i % 300),
            ["Y", "N", "yes", "no", "1", "0", "true", "false"][i % 8],
            f"  cust {i}" if i % 2 == 0 else f"cust {i}",
            day.strftime("%Y-%m-%d" if i % 2 == 0 else "%Y/%m/%d"),
            f"{rng.uniform(1, 999):.2f}",
            str(1 + i % 9),
            (start + dt.timedelta(minutes=i)).strftime("%Y-%m-%d %H:%M:%S"),
            f"called back after {i} days" if i % 4 == 0 else "",
            "v1",
        ]
        lines.append(",".join(cells))
    (root_of(server) / "profile_messy.csv").write_text("\n".join(lines) + "\n")
    return "profile_messy.csv"


@pytest.fixture
def late(server: RunningServer) -> str:
    """profile_late.csv: 5000 rows whose `code` holds numbers except one 'see note' (row 3001)."""
    lines = ["id,code"] + [f"{i},{'see note' if i == 3001 else (i * 7) % 1000}" for i in range(1, 5001)]
    (root_of(server) / "profile_late.csv").write_text("\n".join(lines) + "\n")
    return "profile_late.csv"


async def answers(caller: Both, args: dict[str, Any]) -> list[dict[str, Any]]:
    """profile_dataset's answer over MCP and over REST (each must succeed and count its own tokens)."""
    out = []
    for code, body in await caller.both("profile_dataset", args):
        assert code == 0, (args, body)
        sent = count_tokens(json.dumps(body, ensure_ascii=False, separators=(",", ":")))
        assert sent - 1 <= body["context_tokens_used"] <= sent, (sent, body["context_tokens_used"])
        out.append(body)
    return out


def lines_of(body: dict[str, Any]) -> dict[str, str]:
    """The summary's CSV lines by column name (the header under its own first entry, 'name')."""
    return {line.split(",", 1)[0]: line for line in body["schema"]["columns"]}


def objects_of(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in body["schema"]["columns"]}


async def test_messy_columns_get_their_recommendations(server: RunningServer, messy: str) -> None:
    async with callers(server) as (admin, _):
        for body in await answers(admin, {"file_path": messy, "max_tokens": 2000}):
            assert body["recommendations"] == MESSY_ADVICE
            assert body["statistics"]["row_count"] == MESSY_ROWS and body["statistics"]["column_count"] == 12
            assert body["truncated"] is False and "columns_omitted" not in body["schema"]
            rows = lines_of(body)
            assert list(rows) == ["name", *COLUMNS]
            assert rows["name"] == SUMMARY_HEADER
            # Clean columns keep their types, text is a category when it has few values. Distinct counts
            # other than a category's are approximate: not compared.
            between = {n: line.split(",", 4)[4] for n, line in rows.items() if n != "name"}
            assert rows["id"].startswith("id,int64,0,") and between["id"] == ",1..400"
            assert rows["qty"] == "qty,int64,0,9,,1..9"
            assert between["created_at"] == ",2024-01-01..2024-01-01T06:39"
            assert rows["price"].startswith("price,float64,0,") and between["price"].startswith(",")
            assert rows["amount"].startswith("amount,string,0,") and between["amount"] == '"1,000.50 | $1",'
            assert rows["customer"].startswith("customer,string,0,") and between["customer"] == "  cust 0 | cust 1,"
            assert between["signup"] == "2024-01-01 | 2024/01/02,"
            assert rows["comment"].startswith("comment,string,75,")
            assert rows["version"] == "version,category,0,1,,v1 400"
            assert rows["active"] == "active,category,0,8,,0 50; 1 50; N 50 (+5 more: 250 rows)"
            assert rows["region"] == "region,category,0,10,,north 76; south 64; east 52 (+7 more: 208 rows)"
        # Clean columns get no advice; the same rules hold in full detail.
        full = (await answers(admin, {"file_path": messy, "detail": "full"}))[1]
        assert full["recommendations"] == MESSY_ADVICE
        cols = objects_of(full)
        assert {n: c["type"] for n, c in cols.items()} == {
            "id": "int64",
            "region": "category",
            "amount": "string",
            "score": "string",
            "active": "category",
            "customer": "string",
            "signup": "string",
            "price": "float64",
            "qty": "int64",
            "created_at": "datetime",
            "comment": "string",
            "version": "category",
        }
        assert cols["amount"]["sample_values"] == ["1,000.50", "$1", " 2 "]
        assert cols["price"]["duckdb_type"] == "DOUBLE" and set(cols["price"]["stats"]) == {
            "min",
            "max",
            "mean",
            "std",
            "q25",
            "q50",
            "q75",
        }


async def test_summary_is_compact_and_full_detail_is_on_request(server: RunningServer, messy: str) -> None:
    async with callers(server) as (admin, _):
        summary = await answers(admin, {"file_path": messy})
        full = await answers(admin, {"file_path": messy, "detail": "full", "max_tokens": 20000})
        for short, long in zip(summary, full, strict=True):
            # The seed's budget of a profile (about 200-400 tokens): a cut that says what it left out.
            assert short["context_tokens_used"] <= 400, short["context_tokens_used"]
            assert short["cut"]["reason"] == "max_tokens 400 (default)" and short["truncated"] is True
            assert short["cut"]["next_call"]["args"]["max_tokens"] > 400
            assert long["context_tokens_used"] > 2 * short["context_tokens_used"]
            assert long["truncated"] is False
            # The same profile in both shapes: the cached one (detail only shapes the reply).
            assert long["cache_hit"] is True and long["statistics"] == short["statistics"]
            assert all(isinstance(c, dict) and "duckdb_type" in c for c in long["schema"]["columns"])
            assert all(isinstance(line, str) for line in short["schema"]["columns"])
            assert "stats" not in objects_of(long)["customer"]  # nothing to say: left out, not null


async def test_categories_keep_their_type_below_max_categories(server: RunningServer, messy: str) -> None:
    async with callers(server) as (admin, _):
        for body in await answers(admin, {"file_path": messy, "detail": "full"}):
            region = objects_of(body)["region"]
            assert region["type"] == "category" and region["unique_count"] == 10
            assert region["stats"]["top_values"] == [[n, c] for n, c in REGIONS]
            assert region["stats"]["other_values"] == 0 and region["stats"]["other_rows"] == 0
        for body in await answers(admin, {"file_path": messy, "detail": "full", "max_categories": 3}):
            region = objects_of(body)["region"]
            assert region["type"] == "category" and region["unique_count"] == 10
            assert region["stats"] == {
                "top_values": [["north", 76], ["south", 64], ["east", 52]],
                "other_values": 7,
                "other_rows": 208,
            }
        for body in await answers(admin, {"file_path": messy, "max_categories": 3, "max_tokens": 2000}):
            assert lines_of(body)["region"] == "region,category,0,10,,north 76; south 64; east 52 (+7 more: 208 rows)"
        for body in await answers(admin, {"file_path": messy, "max_categories": 2, "max_tokens": 2000}):
            assert lines_of(body)["region"] == "region,category,0,10,,north 76; south 64 (+8 more: 260 rows)"
        # Without statistics there are no counts: the category shows sample values instead.
        for body in await answers(
            admin, {"file_path": messy, "compute_stats": False, "max_categories": 1, "max_tokens": 2000}
        ):
            line = lines_of(body)["region"]
            assert line.startswith("region,category,0,10,") and line.count(" | ") == 1


async def test_sample_size_decides_which_rows_are_inspected(server: RunningServer, late: str) -> None:
    async with callers(server) as (admin, _):
        # 100 rows spread over the file miss the one 'see note'; 10000 rows are the whole file.
        for body in await answers(admin, {"file_path": late, "sample_size": 100}):
            assert body["recommendations"] == ["'code' holds numbers as text: CAST it AS DOUBLE"]
            assert body["statistics"]["row_count"] == 5000
        for body in await answers(admin, {"file_path": late, "sample_size": 10000}):
            assert body["recommendations"] == [
                "'code' is numbers with <0.1% text (e.g. 'see note'): TRY_CAST nulls those"
            ]
        # The sample is spread over the file, not its first rows: 1000 of 5000 rows reach past row 1000.
        full = await answers(admin, {"file_path": late, "detail": "full", "sample_size": 1000})
        ids = objects_of(full[0])["id"]["sample_values"]
        assert len(ids) == 3 and max(ids) > 1000, ids


async def test_max_tokens_is_kept_by_both_details(server: RunningServer, messy: str) -> None:
    async with callers(server) as (admin, _):
        for detail in ("summary", "full"):
            for limit in (300, 450):
                for body in await answers(admin, {"file_path": messy, "detail": detail, "max_tokens": limit}):
                    assert body["context_tokens_used"] <= limit, (detail, limit, body["context_tokens_used"])
                    assert body["truncated"] is True and body["statistics"]["row_count"] == MESSY_ROWS
                    assert body["cut"]["reason"] == f"max_tokens {limit}" and body["cut"]["next_call"]
        whole = (await answers(admin, {"file_path": messy, "max_tokens": 2000}))[0]
        # The ladder: recommendations go first (from the last), then whole columns (from the last) unless
        # bare lines show more of them. The cut says what went and the budget the whole profile takes.
        for body in await answers(admin, {"file_path": messy, "max_tokens": whole["context_tokens_used"] - 60}):
            assert lines_of(body) == lines_of(whole) and "columns_omitted" not in body["schema"]
            kept = len(body["recommendations"])
            assert kept < len(MESSY_ADVICE) and body["recommendations"] == MESSY_ADVICE[:kept]
            assert body["cut"]["left_out"] == f"{len(MESSY_ADVICE) - kept} recommendations"
            assert body["cut"]["next_call"] == {
                "tool": "profile_dataset",
                "args": {"max_tokens": whole["context_tokens_used"]},
            }
        for body in await answers(admin, {"file_path": messy, "max_tokens": 300}):
            omitted = body["schema"]["columns_omitted"]
            assert 0 < omitted < 12 and len(lines_of(body)) == 13 - omitted and body["recommendations"] == []
            assert f"columns {', '.join(COLUMNS[12 - omitted :][:8])}" in body["cut"]["left_out"], body["cut"]
        # Below what the statistics alone take, the call is refused and says what would fit.
        err = await admin.refused("profile_dataset", {"file_path": messy, "max_tokens": 60}, 4001, "max_tokens")
        least = int(err["suggestions"][0].rsplit(" ", 1)[1])
        assert 60 < least < 300
        for body in await answers(admin, {"file_path": messy, "max_tokens": least}):
            assert body["context_tokens_used"] <= least and body["recommendations"] == []
            assert body["schema"] == {"columns": [], "columns_omitted": 12}
            assert body["cut"]["left_out"].startswith(f"columns {', '.join(COLUMNS[:8])} (+4 more)")
