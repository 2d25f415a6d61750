"""app/core/budget.py: what a reply costs, measured on the text MCP sends, and the degradation ladder."""

from __future__ import annotations

import base64
import random
from typing import Any, ClassVar

from pydantic import BaseModel

from app.core import budget
from app.core.embeddings.tokens import count_tokens


def _envelope(rows: list[Any], summary: dict[str, Any] | None, level: str) -> dict[str, Any]:
    return {"data": rows, "rest_summary": summary, "degradation": level, "context_tokens_used": 0}


ROWS = [{"id": i, "city": f"City number {i}", "note": "word " * 8} for i in range(40)]


def _summary(offset: int) -> dict[str, Any]:
    return {"rows": len(ROWS) - offset, "columns": {"id": {"min": offset, "max": 39}, "city": {"distinct": 40}}}


def test_finalize_counts_the_payload_with_its_own_count() -> None:
    payload = budget.finalize({"data": ROWS[:5]})
    assert payload["context_tokens_used"] == count_tokens(budget.dumps(payload))


def test_finalize_never_over_counts_when_no_value_equals_its_own_count() -> None:
    # With such a payload a count of 359 tokenises so that the payload has 360 tokens, and 360 so that
    # it has 359: no value is exact. The field then says one token less, never more.
    words = "books toys revenue quantity note order_id year category sales_2024 data tabular".split()
    found = 0
    for n in range(150, 260):
        payload = budget.finalize(
            {"summary": {"rows": 2000, "ms": n % 130}, "cols": [words[(i * 7 + n) % len(words)] for i in range(n // 3)]}
        )
        gap = budget.tokens_of(payload) - payload["context_tokens_used"]
        assert gap in (0, 1), (n, gap)
        found += gap
    assert found  # the case exists among these payloads


def test_an_image_costs_its_placeholder_not_its_base64() -> None:
    png = base64.b64encode(random.Random(7).randbytes(3000)).decode()  # '+' and '/' split it into many words
    chart: dict[str, Any] = {"visualization": {"base64_image": png, "mime_type": "image/png"}, "n": 1}
    text, images = budget.sent_text(chart, ("visualization.base64_image",))
    assert images == [(png, "image/png")]
    assert text["visualization"]["base64_image"] == budget.image_placeholder(1)
    assert budget.tokens_of(chart, ("visualization.base64_image",)) == count_tokens(budget.dumps(text))
    assert budget.tokens_of(chart) > 10 * budget.tokens_of(chart, ("visualization.base64_image",))


def test_measured_fills_the_field_from_the_model_as_sent() -> None:
    class Out(BaseModel):
        mcp_image_fields: ClassVar[tuple[str, ...]] = ()
        items: list[str]
        tokens: int = 0

    out = budget.measured(Out(items=["alpha", "beta"]))
    assert out.tokens == count_tokens(budget.dumps(out.model_dump(mode="json")))


def test_ladder_levels() -> None:
    everything = budget.fit_rows(_envelope, ROWS, 100_000, _summary)
    assert (everything[1], everything[2]) == (40, "none")
    full = budget.tokens_of(everything[0])
    limits = {"fewer_rows": int(full * 0.8), "rows_and_summary": int(full * 0.3), "summary_only": 60, "minimal": 5}
    fits = {level: budget.fit_rows(_envelope, ROWS, limit, _summary) for level, limit in limits.items()}
    assert {level: got[2] for level, got in fits.items()} == {level: level for level in limits}
    assert 20 <= fits["fewer_rows"][1] < 40
    kept = fits["rows_and_summary"][1]
    assert 1 <= kept < 20 and fits["rows_and_summary"][0]["rest_summary"] == _summary(kept)
    assert fits["summary_only"][1] == fits["minimal"][1] == 0
    for level, (payload, _, _) in fits.items():
        assert 0 <= budget.tokens_of(payload) - payload["context_tokens_used"] <= 1
        if level != "minimal":  # the envelope alone may not fit a tiny budget; it is still the answer
            assert payload["context_tokens_used"] <= limits[level]


def test_an_estimate_of_the_rest_only_sizes_the_first_try() -> None:
    full = budget.tokens_of(budget.fit_rows(_envelope, ROWS, 100_000, _summary)[0])
    limit = int(full * 0.3)
    exact: list[int] = []

    def summarize(offset: int) -> dict[str, Any]:
        exact.append(offset)
        return _summary(offset)

    plain = budget.fit_rows(_envelope, ROWS, limit, summarize)
    asked_plain = len(exact)
    exact.clear()
    guessed: list[int] = []

    def estimate(offset: int) -> dict[str, Any]:
        guessed.append(offset)
        return _summary(offset)

    sized = budget.fit_rows(_envelope, ROWS, limit, summarize, estimate_rest=estimate)
    # The same answer, with the summary of what was left out computed exactly, and one exact summary fewer.
    assert sized[1:] == plain[1:] and sized[0] == plain[0] and guessed
    assert sized[0]["rest_summary"] == _summary(sized[1]) and exact == [sized[1]]
    assert len(exact) == asked_plain - 1


def test_largest_fitting_bisects_a_monotone_predicate() -> None:
    assert budget.largest_fitting(100, lambda k: k <= 37) == 37
    assert budget.largest_fitting(100, lambda k: True) == 100
    assert budget.largest_fitting(100, lambda k: k == 0) == 0
