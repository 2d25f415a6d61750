"""A generator of messy dataset files (issue 39), written here from a seeded random source: a CSV with
quoted commas, a date column in three formats, timestamps with mixed UTC offsets, CJK and emoji text,
integer quantities 1-20 and amounts whose sums carry float noise; its Parquet copy; a nested NDJSON
file (objects, lists of objects, lists of text, a field of mixed kinds); and two damaged Parquet files."""

from __future__ import annotations

import csv
import datetime as dt
import json
import random
from dataclasses import dataclass
from pathlib import Path

import duckdb

# The three ways the `order_date` column writes a date, and how many rows in ten use each (the
# share `messy_csv` gives them, in this order).
DATE_FORMATS = (("%Y-%m-%d", 5), ("%d/%m/%Y", 3), ("%b %d, %Y", 2))
OFFSETS = ("+00:00", "+02:00", "-05:00", "+09:00", "Z")
CITIES = ("東京", "大阪", "서울", "北京", "Zürich", "São Paulo", "Lagos 🌍", "Montréal")
CUSTOMERS = ("Smith, John", "O'Brien, Ann", 'Doe, Jane "JD"', "李, 明", "Müller, Jörg", "Nguyễn, Văn 🎉")
REGIONS = ("north", "south", "east", "west")
# An amount in whole cents plus 0.1: sums and averages of such doubles carry float noise.
AMOUNTS = (0.1, 0.2, 0.3, 1.1, 2.675, 19.99)


@dataclass(frozen=True)
class MessyFiles:
    """The files `write_messy` made, and what they hold."""

    csv: Path
    parquet: Path
    ndjson: Path
    corrupt: Path
    truncated: Path
    rows: int


def _date_format(i: int) -> str:
    """The format of row `i`'s order_date: the first 5 of every 10 rows ISO, 3 day-first, 2 month name."""
    slot = i % 10
    for fmt, share in DATE_FORMATS:
        if slot < share:
            return fmt
        slot -= share
    return DATE_FORMATS[0][0]


def messy_rows(rows: int, seed: int = 39) -> list[dict[str, object]]:
    """`rows` rows of the messy table (the same rows for the same seed)."""
    rnd = random.Random(seed)
    start = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    out: list[dict[str, object]] = []
    for i in range(rows):
        day = start + dt.timedelta(days=rnd.randrange(365), minutes=rnd.randrange(24 * 60))
        offset = OFFSETS[i % len(OFFSETS)]
        hours = 0 if offset == "Z" else int(offset[:3])
        local = day.astimezone(dt.timezone(dt.timedelta(hours=hours)))
        out.append(
            {
                "order_id": i + 1,
                "customer": CUSTOMERS[i % len(CUSTOMERS)],
                "city": CITIES[rnd.randrange(len(CITIES))],
                "order_date": day.strftime(_date_format(i)),
                "created_at": local.strftime("%Y-%m-%dT%H:%M:%S") + offset,
                "qty": 1 + i % 20,
                "amount": AMOUNTS[i % len(AMOUNTS)],
                "region": REGIONS[rnd.randrange(len(REGIONS))],
                "note": f'好評 ⭐ {i}, "quoted"' if i % 7 == 0 else "",
            }
        )
    return out


def write_messy(folder: Path, rows: int = 2000, prefix: str = "messy") -> MessyFiles:
    """Write `<prefix>.csv`, its Parquet copy `<prefix>.parquet`, `<prefix>_nested.ndjson` (rows // 4
    lines), `<prefix>_corrupt.parquet` (the Parquet copy with its data pages overwritten) and
    `<prefix>_truncated.parquet` (its first bytes only) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    data = messy_rows(rows)
    csv_path = folder / f"{prefix}.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(data[0]))
        writer.writeheader()
        writer.writerows(data)
    parquet = folder / f"{prefix}.parquet"
    with duckdb.connect() as con:
        con.execute(f"COPY (SELECT * FROM read_csv('{csv_path}')) TO '{parquet}' (FORMAT parquet)")
    ndjson = folder / f"{prefix}_nested.ndjson"
    rnd = random.Random(7)
    with ndjson.open("w", encoding="utf-8") as f:
        for i in range(max(1, rows // 4)):
            line = {
                "event_id": i + 1,
                "customer": {
                    "id": 1 + rnd.randrange(50),
                    "name": CUSTOMERS[i % len(CUSTOMERS)],
                    "address": {"city": CITIES[i % len(CITIES)], "zip": f"{rnd.randrange(100000):05d}"},
                },
                "items": [{"sku": f"SKU-{rnd.randrange(100)}", "qty": 1 + rnd.randrange(5)} for _ in range(1 + i % 3)],
                "tags": [REGIONS[(i + k) % 4] for k in range(i % 3)],
                # An object, a text or an array by row: DuckDB reads it as JSON.
                "meta": [{"source": "web", "score": i % 10}, "legacy", ["a", i]][i % 3],
            }
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    body = parquet.read_bytes()
    # Its data pages overwritten, its footer whole: the file opens, and fails when its rows are read.
    corrupt = folder / f"{prefix}_corrupt.parquet"
    corrupt.write_bytes(body[:64] + b"\xff" * 2048 + body[64 + 2048 :])
    # Cut short: not even its footer is there, so it fails as soon as it is opened.
    truncated = folder / f"{prefix}_truncated.parquet"
    truncated.write_bytes(body[:6])
    return MessyFiles(csv=csv_path, parquet=parquet, ndjson=ndjson, corrupt=corrupt, truncated=truncated, rows=rows)
