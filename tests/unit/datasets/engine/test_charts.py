"""The pure parts of the charts: column roles, histogram bins, value rounding and the PNG re-deflate."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest

from app.core.errors import InvalidInput
from app.datasets.engine import charts


def test_roles_pick_the_columns_each_kind_draws() -> None:
    cols, types = ["day", "shop", "sales", "cost"], ["DATE", "VARCHAR", "BIGINT", "DECIMAL(10,2)"]
    assert charts.roles("bar", cols, types) == charts.Roles("bar", "day", "DATE", ("sales",))
    assert charts.roles("line", cols, types).values == ("sales", "cost")
    assert charts.roles("scatter", cols, types) == charts.Roles("scatter", "sales", "BIGINT", ("cost",))
    assert charts.roles("histogram", cols, types).x == "sales"
    assert charts.roles("heatmap", cols, types) == charts.Roles("heatmap", "day", "DATE", ("sales",), "shop")
    assert charts.roles("bar", ["n"], ["BIGINT"]).values == ("n",)  # the only numeric column is both
    for kind, columns, ctypes in [
        ("bar", ["a"], ["VARCHAR"]),
        ("scatter", ["a", "b"], ["DOUBLE", "VARCHAR"]),
        ("heatmap", ["a", "b"], ["VARCHAR", "DOUBLE"]),
        ("pie", ["a"], ["DOUBLE"]),
    ]:
        with pytest.raises(InvalidInput):
            charts.roles(kind, columns, ctypes)


@pytest.mark.parametrize(
    ("lo", "hi", "most", "integer"),
    [(0, 99, 20, False), (0, 1049, 20, True), (-3.7, 12.2, 10, False), (1, 9, 20, True), (5, 5, 20, False)],
)
def test_bins_cover_the_range_in_at_most_the_asked_number(lo: float, hi: float, most: int, integer: bool) -> None:
    start, step, count = charts.bins(lo, hi, most, integer)
    assert 1 <= count <= most and start <= lo and start + count * step >= hi
    assert not integer or step == int(step) >= 1
    if hi > lo:
        mantissa = step / 10 ** int(f"{step:e}".split("e")[1])
        assert round(mantissa, 6) in (1, 2, 2.5, 5)


def test_values_are_rounded_to_their_range() -> None:
    rows: list[dict[str, Any]] = [{"x": 1234567.891, "y": 0.123456}, {"x": 1234999.5, "y": 0.5}, {"x": None, "y": 1.0}]
    charts._tidy(rows, ["x", "y"])
    # 1/1,000 of each range: x spans 431.6 (one decimal), y spans 0.88 (four)
    assert rows == [{"x": 1234567.9, "y": 0.1235}, {"x": 1234999.5, "y": 0.5}, {"x": None, "y": 1}]


def _chunk(tag: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))


def test_the_png_is_deflated_again_losslessly() -> None:
    width, height = 64, 32
    raw = b"".join(b"\x00" + bytes([255, 255, 255, 255]) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    idat = zlib.compress(raw, 0)  # stored, as a fast encoder might
    png = (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", idat[:100])
        + _chunk(b"IDAT", idat[100:])
        + _chunk(b"IEND", b"")
    )
    small = charts._smaller(png)
    assert small[:8] == png[:8] and len(small) < len(png) // 10
    assert small[8:33] == _chunk(b"IHDR", header) and small.endswith(_chunk(b"IEND", b""))
    (length,) = struct.unpack(">I", small[33:37])
    assert small[37:41] == b"IDAT" and zlib.decompress(small[41 : 41 + length]) == raw


def test_whole_numbers_fall_one_value_per_bin() -> None:
    """1..20 in 20 bins of one value each, not 19 whose last holds both 19 and 20."""
    assert charts.bins(1, 20, 20, True) == (1.0, 1.0, 20)
    start, step, count = charts.bins(1, 20, 19, True)  # too many values for one per bin: two per bin
    assert step == 2 and count <= 19 and start <= 1 and start + (count - 1) * step <= 20 < start + count * step
    assert charts.bins(0, 10, 10, False) == (0.0, 1.0, 10)  # real numbers: the last edge closed for hi
