"""The degradation ladder fills the token budget in every row format (issue 15): rows are counted as
they are sent (a CSV line, not a JSON object), so a CSV answer is not cut to what the same rows would
weigh as JSON, and an answer ends within about one row of its budget."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from app.core.embeddings.tokens import count_tokens
from tests.support.datasets import callers, root_of
from tests.support.server import RunningServer

pytestmark = pytest.mark.asyncio(loop_scope="session")

COLUMNS = 12


@pytest.fixture
def wide(server: RunningServer) -> Path:
    """fill_wide.csv: 1,000 rows of 12 mixed columns."""
    rng = random.Random(7)
    root = root_of(server)
    lines = [",".join(f"c{i}" for i in range(COLUMNS))]
    for n in range(1000):
        cells = [str(n), f"item-{rng.randint(0, 99999)}", f"{rng.uniform(0, 1000):.2f}", rng.choice("abcdef")]
        cells += [f"w{rng.randint(0, 9999)}" for _ in range(COLUMNS - len(cells))]
        lines.append(",".join(cells))
    (root / "fill_wide.csv").write_text("\n".join(lines) + "\n")
    return root


def every_row(fmt: str, limit: int) -> dict[str, Any]:
    """execute_query arguments asking for all 1,000 rows of fill_wide.csv in `fmt` within `limit` tokens."""
    return {
        "query": "SELECT * FROM fill_wide",
        "files": ["fill_wide.csv"],
        "return_format": fmt,
        "return_limit": 1000,
        "max_tokens": limit,
    }


@pytest.mark.parametrize("fmt", ["csv", "json"])
@pytest.mark.parametrize("limit", [20_000, 6_000])
async def test_rows_fill_the_budget(server: RunningServer, wide: Path, fmt: str, limit: int) -> None:
    async with callers(server) as (admin, _):
        out = await admin.ok("execute_query", every_row(fmt, limit))
    used, shown = out["context_tokens_used"], out["rows_returned"]
    assert out["degradation"] in ("fewer_rows", "rows_and_summary") and 0 < shown < 1000
    assert used <= limit
    if fmt == "csv":
        assert len(out["data"]) == shown + 1  # the header line, then one line per row
        row_tokens = max(count_tokens(f'"{line}",') for line in out["data"][1:])
    else:
        row_tokens = max(count_tokens(str(row)) for row in out["data"])
    # Within about one row of the budget: the next row (and its comma) would not have fitted.
    assert limit - used <= row_tokens + 2, (fmt, limit, used, shown, row_tokens)


async def test_csv_shows_more_rows_than_json_in_one_budget(server: RunningServer, wide: Path) -> None:
    """A CSV line repeats no column names: the same budget holds more rows than as JSON objects."""
    shown = {}
    async with callers(server) as (admin, _):
        for fmt in ("csv", "json"):
            out = await admin.ok("execute_query", every_row(fmt, 20_000))
            shown[fmt] = out["rows_returned"]
    assert shown["csv"] > 1.3 * shown["json"], shown
