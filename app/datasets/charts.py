"""Charts of a query result: a PNG drawn here with numpy (no plotting library), kept under a byte
budget, and/or a Vega-Lite spec.

Column roles: bar/line use the first column as x and the numeric columns as y (line: up to 5
series); scatter uses the first two numeric columns; histogram bins the first numeric column (20
bins); heatmap uses the first two non-numeric columns as x/y and the first numeric column as value.
Charts read at most `MAX_POINTS` rows of the result. Labels use a built-in 3x5 pixel font
(upper-case letters, digits, a few signs).
"""

from __future__ import annotations

import base64
import math
import struct
import zlib
from typing import Any

import numpy as np

from app.core.errors import InvalidInput
from app.datasets.engine import is_numeric
from app.datasets.schemas import Visualization

MAX_POINTS = 5000
VEGA_MAX_ROWS = 100
W, H = 640, 400
PAD_L, PAD_R, PAD_T, PAD_B = 60, 20, 20, 50
PALETTE = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189)]

# 3x5 glyphs, rows top to bottom, '#' = ink.
_FONT_SRC = {
    "0": "### # # # # # # ###",
    "1": " #  ##   #   #  ###",
    "2": "###   # ### #   ###",
    "3": "###   # ###   # ###",
    "4": "# # # # ###   #   #",
    "5": "### #   ###   # ###",
    "6": "### #   ### # # ###",
    "7": "###   #   #   #   #",
    "8": "### # # ### # # ###",
    "9": "### # # ###   # ###",
    ".": "             #    ",
    "-": "      ###         ",
    "A": " #  # # ### # # # #",
    "B": "##  # # ##  # # ## ",
    "C": " ## #   #   #    ##",
    "D": "##  # # # # # # ## ",
    "E": "### #   ##  #   ###",
    "F": "### #   ##  #   #  ",
    "G": " ## #   # # # #  ##",
    "H": "# # # # ### # # # #",
    "I": "###  #   #   #  ###",
    "J": "  #   #   # # #  # ",
    "K": "# # # # ##  # # # #",
    "L": "#   #   #   #   ###",
    "M": "# # ### ### # # # #",
    "N": "##  # # # # # # # #",
    "O": " #  # # # # # #  # ",
    "P": "##  # # ##  #   #  ",
    "Q": " #  # # # # ##   ##",
    "R": "##  # # ##  # # # #",
    "S": " ## #    #    # ## ",
    "T": "###  #   #   #   # ",
    "U": "# # # # # # # # ###",
    "V": "# # # # # # # #  # ",
    "W": "# # # # ### ### # #",
    "X": "# # # #  #  # # # #",
    "Y": "# # # #  #   #   # ",
    "Z": "###   #  #  #   ###",
    "_": "                ###",
    " ": "                   ",
    "%": "# #   #  #  #   # #",
    ",": "             #  #  ",
    "+": "     #  ###  #     ",
    "/": "  #   #  #  #   #  ",
}


def _glyph(ch: str) -> np.ndarray:
    src = _FONT_SRC.get(ch, _FONT_SRC[" "]).ljust(19)
    rows = [src[i * 4 : i * 4 + 3] for i in range(5)]
    return np.array([[c == "#" for c in r.ljust(3)] for r in rows], dtype=bool)


class Canvas:
    """An RGB raster with just enough drawing for charts."""

    def __init__(self, w: int = W, h: int = H) -> None:
        self.w, self.h = w, h
        self.px = np.full((h, w, 3), 255, dtype=np.uint8)

    def rect(self, x0: float, y0: float, x1: float, y1: float, color: tuple[int, int, int]) -> None:
        xa, xb = sorted((round(x0), round(x1)))
        ya, yb = sorted((round(y0), round(y1)))
        self.px[max(0, ya) : min(self.h, yb + 1), max(0, xa) : min(self.w, xb + 1)] = color

    def line(self, x0: float, y0: float, x1: float, y1: float, color: tuple[int, int, int]) -> None:
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        xs = np.linspace(x0, x1, n).round().astype(int)
        ys = np.linspace(y0, y1, n).round().astype(int)
        ok = (xs >= 0) & (xs < self.w) & (ys >= 0) & (ys < self.h)
        self.px[ys[ok], xs[ok]] = color

    def text(
        self,
        x: float,
        y: float,
        s: str,
        scale: int = 2,
        color: tuple[int, int, int] = (40, 40, 40),
        anchor: str = "left",
    ) -> None:
        s = s.upper()
        width = len(s) * 4 * scale
        x0 = int(x - (width if anchor == "right" else width / 2 if anchor == "center" else 0))
        for i, ch in enumerate(s):
            g = np.kron(_glyph(ch), np.ones((scale, scale), dtype=bool))
            gx, gy = x0 + i * 4 * scale, int(y)
            for r, c in zip(*np.nonzero(g), strict=True):
                if 0 <= gy + r < self.h and 0 <= gx + c < self.w:
                    self.px[gy + r, gx + c] = color

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + self.px[y].tobytes() for y in range(self.h))

        def chunk(tag: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

        header = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
        )


def _fmt(v: float) -> str:
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:.1f}B"
    if a >= 1e6:
        return f"{v / 1e6:.1f}M"
    if a >= 1e4:
        return f"{v / 1e3:.0f}K"
    if a >= 100 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.2f}"


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _axes(c: Canvas, lo: float, hi: float) -> tuple[float, float]:
    x0, y0, x1, y1 = PAD_L, c.h - PAD_B, c.w - PAD_R, PAD_T
    c.line(x0, y0, x1, y0, (90, 90, 90))
    c.line(x0, y0, x0, y1, (90, 90, 90))
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        y = y0 - (y0 - y1) * i / 4
        c.line(x0 - 4, y, x0, y, (90, 90, 90))
        c.line(x0 + 1, y, x1, y, (235, 235, 235)) if i else None
        c.text(x0 - 6, y - 5, _fmt(v), anchor="right")
    return lo, hi


def _scale(v: float, lo: float, hi: float, a: float, b: float) -> float:
    return a + (b - a) * ((v - lo) / (hi - lo) if hi > lo else 0.5)


def _range(values: list[float], zero: bool) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    if zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi == lo:
        hi = lo + 1
    return lo, hi


def draw(kind: str, columns: list[str], types: list[str], rows: list[dict[str, Any]]) -> Canvas:
    """Draw the chart; raises InvalidInput when the result has no suitable columns."""
    numeric = [c for c, t in zip(columns, types, strict=False) if is_numeric(t)]
    other = [c for c in columns if c not in numeric]
    c = Canvas()
    left, right, top, bottom = PAD_L, W - PAD_R, PAD_T, H - PAD_B
    if not rows:
        raise InvalidInput("The result is empty: nothing to chart")
    if kind in ("bar", "line"):
        if not numeric:
            raise InvalidInput(f"A {kind} chart needs a numeric column")
        xcol = columns[0]
        series = [n for n in numeric if n != xcol][:5] or numeric[:1]
        pts = rows[:200] if kind == "line" else rows[:60]
        vals = [_num(r.get(s)) or 0.0 for r in pts for s in series]
        lo, hi = _axes(c, *_range(vals, zero=True))
        n = len(pts)
        step = (right - left) / max(1, n)
        for si, s in enumerate(series if kind == "line" else series[:1]):
            prev = None
            for i, r in enumerate(pts):
                v = _num(r.get(s)) or 0.0
                xc = left + step * (i + 0.5)
                y = _scale(v, lo, hi, bottom, top)
                if kind == "bar":
                    c.rect(xc - step * 0.38, _scale(0, lo, hi, bottom, top), xc + step * 0.38, y, PALETTE[0])
                else:
                    if prev is not None:
                        c.line(prev[0], prev[1], xc, y, PALETTE[si % 5])
                    prev = (xc, y)
        every = max(1, n // 12)
        for i, r in enumerate(pts):
            if i % every == 0:
                c.text(left + step * (i + 0.5), bottom + 8, str(r.get(xcol, ""))[:8], anchor="center")
        c.text((left + right) / 2, H - 18, f"{', '.join(series)} BY {xcol}"[:70], anchor="center")
    elif kind == "scatter":
        if len(numeric) < 2:
            raise InvalidInput("A scatter chart needs two numeric columns")
        xs_, ys_ = numeric[0], numeric[1]
        pairs = [
            (xv, yv) for r in rows if (xv := _num(r.get(xs_))) is not None and (yv := _num(r.get(ys_))) is not None
        ]
        if not pairs:
            raise InvalidInput("No numeric points to chart")
        ylo, yhi = _axes(c, *_range([p[1] for p in pairs], zero=False))
        xlo, xhi = _range([p[0] for p in pairs], zero=False)
        for xv, yv in pairs:
            px, py = _scale(xv, xlo, xhi, left + 4, right - 4), _scale(yv, ylo, yhi, bottom, top)
            c.rect(px - 1, py - 1, px + 1, py + 1, PALETTE[0])
        c.text(left, bottom + 8, _fmt(xlo))
        c.text(right, bottom + 8, _fmt(xhi), anchor="right")
        c.text((left + right) / 2, H - 18, f"{ys_} VS {xs_}"[:70], anchor="center")
    elif kind == "histogram":
        if not numeric:
            raise InvalidInput("A histogram needs a numeric column")
        col = numeric[0]
        hist_vals = [hv for r in rows if (hv := _num(r.get(col))) is not None]
        if not hist_vals:
            raise InvalidInput("No numeric values to chart")
        counts, edges = np.histogram(np.array(hist_vals), bins=20)
        lo, hi = _axes(c, 0.0, float(max(counts.max(), 1)))
        step = (right - left) / len(counts)
        for i, n in enumerate(counts):
            c.rect(
                left + step * i + 1,
                bottom,
                left + step * (i + 1) - 1,
                _scale(float(n), lo, hi, bottom, top),
                PALETTE[0],
            )
        c.text(left, bottom + 8, _fmt(float(edges[0])))
        c.text(right, bottom + 8, _fmt(float(edges[-1])), anchor="right")
        c.text((left + right) / 2, H - 18, f"DISTRIBUTION OF {col}"[:70], anchor="center")
    elif kind == "heatmap":
        if len(other) < 2 or not numeric:
            raise InvalidInput("A heatmap needs two category columns (x, y) and a numeric value column")
        xcol, ycol, vcol = other[0], other[1], numeric[0]
        xs = list(dict.fromkeys(str(r.get(xcol)) for r in rows))[:40]
        ys = list(dict.fromkeys(str(r.get(ycol)) for r in rows))[:30]
        grid = np.full((len(ys), len(xs)), np.nan)
        for r in rows:
            hx, hy, hval = str(r.get(xcol)), str(r.get(ycol)), _num(r.get(vcol))
            if hx in xs and hy in ys and hval is not None:
                grid[ys.index(hy), xs.index(hx)] = hval
        finite = grid[np.isfinite(grid)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        cw, ch = (right - left) / len(xs), (bottom - top) / len(ys)
        for j in range(len(ys)):
            for i in range(len(xs)):
                cell = float(grid[j, i])
                if not math.isfinite(cell):
                    continue
                t = (cell - lo) / (hi - lo) if hi > lo else 0.5
                color = (int(255 - 200 * t), int(255 - 120 * t), int(255 - 40 * t))
                c.rect(left + cw * i, top + ch * j, left + cw * (i + 1) - 1, top + ch * (j + 1) - 1, color)
        for j, ylabel in enumerate(ys[:15]):
            c.text(left - 4, top + ch * (j + 0.5) - 5, ylabel[:7], anchor="right")
        for i, xlabel in enumerate(xs[:12]):
            c.text(left + cw * (i + 0.5), bottom + 8, xlabel[:6], anchor="center")
        c.text((left + right) / 2, H - 18, f"{vcol} ({_fmt(lo)}-{_fmt(hi)})"[:70], anchor="center")
    else:
        raise InvalidInput(f"Unknown chart type {kind}")
    return c


def vega_lite(kind: str, columns: list[str], types: list[str], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A Vega-Lite v5 spec with the (capped) rows inline."""
    numeric = [c for c, t in zip(columns, types, strict=False) if is_numeric(t)]
    other = [c for c in columns if c not in numeric]
    first = columns[0] if columns else ""
    enc: dict[str, Any]
    mark: str = {"histogram": "bar", "heatmap": "rect", "scatter": "point"}.get(kind, kind)
    if kind == "scatter" and len(numeric) >= 2:
        enc = {"x": {"field": numeric[0], "type": "quantitative"}, "y": {"field": numeric[1], "type": "quantitative"}}
    elif kind == "histogram" and numeric:
        enc = {
            "x": {"field": numeric[0], "bin": {"maxbins": 20}, "type": "quantitative"},
            "y": {"aggregate": "count", "type": "quantitative"},
        }
    elif kind == "heatmap" and len(other) >= 2 and numeric:
        enc = {
            "x": {"field": other[0], "type": "nominal"},
            "y": {"field": other[1], "type": "nominal"},
            "color": {"field": numeric[0], "type": "quantitative"},
        }
    else:
        y = next((n for n in numeric if n != first), numeric[0] if numeric else first)
        enc = {
            "x": {"field": first, "type": "ordinal" if kind == "line" else "nominal", "sort": None},
            "y": {"field": y, "type": "quantitative"},
        }
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
        "mark": mark,
        "encoding": enc,
        "data": {"values": rows[:VEGA_MAX_ROWS]},
    }


def make_chart(
    kind: str, columns: list[str], types: list[str], rows: list[dict[str, Any]], fmt: str, max_bytes: int
) -> Visualization:
    """The visualization object: PNG (base64, shrunk until under `max_bytes`) and/or Vega-Lite."""
    viz = Visualization(type=kind)
    if fmt in ("png", "both"):
        canvas = draw(kind, columns, types, rows)
        data = canvas.png()
        px = canvas.px
        while len(data) > max_bytes and px.shape[1] > 80:
            px = px[::2, ::2]
            small = Canvas(px.shape[1], px.shape[0])
            small.px = np.ascontiguousarray(px)
            data = small.png()
        if len(data) > max_bytes:
            raise InvalidInput(f"The chart does not fit in {max_bytes} bytes")
        viz.base64_image = base64.b64encode(data).decode()
        viz.mime_type = "image/png"
        viz.bytes = len(data)
    if fmt in ("vega-lite", "both"):
        viz.vega_lite = vega_lite(kind, columns, types, rows)
    return viz
