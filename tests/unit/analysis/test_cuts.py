"""app/analysis/cuts.py: long values shortened and named, rows and items fitted to a token budget
(at least one kept), and a cut's parts joined into one `Cut` that says what, why and how."""

from __future__ import annotations

from typing import Any

from app.analysis import cuts
from app.core import budget


def test_long_values_are_trimmed_and_named() -> None:
    row: dict[str, Any] = {"short": "ok", "long": "x" * 400, "n": 5, "deep": {"k": "y" * 400}, "few": [1, 2]}
    trimmed, cut = cuts.trim_row(row)
    assert cut == ["long", "deep"] and trimmed["short"] == "ok" and trimmed["n"] == 5 and trimmed["few"] == [1, 2]
    assert trimmed["long"] == "x" * cuts.MAX_VALUE_CHARS + "…"
    assert trimmed["deep"] == budget.dumps(row["deep"])[: cuts.MAX_VALUE_CHARS] + "…"
    assert cuts.trim_row({"a": "b"}) == ({"a": "b"}, [])


def test_rows_are_cut_to_the_budget_keeping_at_least_one() -> None:
    rows = [{"i": i, "text": "word " * 20} for i in range(50)]
    size = budget.item_tokens(rows[:1])[0] + 1
    kept = cuts.bounded_rows(rows, size * 3)
    assert [r["i"] for r in kept.rows] == [0, 1, 2] and kept.dropped == 47 and kept.cut
    whole = cuts.bounded_rows(rows[:2], size * 3)
    assert whole.rows == rows[:2] and not whole.cut
    one = cuts.bounded_rows(rows, 1)
    assert len(one.rows) == 1 and one.dropped == 49
    trimmed = cuts.bounded_rows([{"t": "z" * 500}], 10_000)
    assert len(trimmed.rows) == 1 and trimmed.shortened == ["t"] and trimmed.cut  # a value was cut though it fits


def test_items_fit_in_order_and_at_least_one_is_kept() -> None:
    items = [{"n": i, "text": "word " * 10} for i in range(10)]
    size = budget.item_tokens(items[:1])[0] + 1
    assert cuts.fitting(items, size * 4) == 4
    assert cuts.fitting(items, 1) == 1
    assert cuts.fitting(items, 10**6) == 10
    assert cuts.fitting([], 10) == 0


def test_a_cut_names_what_why_and_how() -> None:
    assert cuts.joined([]) is None
    part = cuts.shortened_part(["notes", "body"])
    assert "notes, body" in part.left_out and "300 characters" in part.reason and part.call is None
    assert part.how is not None and "group_by 'notes'" in part.how
    rows = cuts.Part("3 rows", cuts.budget_why(200), cuts.call("analysis_query", offset=5))
    cut = cuts.joined([rows, part])
    assert cut is not None and cut.next_call == cuts.call("analysis_query", offset=5)
    assert cut.left_out.startswith("3 rows; the values of notes, body")
    assert cut.reason.startswith("the reply budget of 200 tokens (CAIRN_ANALYSIS_MAX_RESPONSE_TOKENS)")
    assert cut.how == part.how


def test_the_calls_of_several_parts_make_one_next_call_and_name_the_rest() -> None:
    a = cuts.Part("a", "r", cuts.call("analysis_session", findings_limit=60))
    b = cuts.Part("b", "r", cuts.call("analysis_session", summaries_limit=30), how="or this")
    c = cuts.Part("c", "s", cuts.call("analysis_act_runs", run_id=3, offset=0))
    cut = cuts.joined([a, b, c])
    assert cut is not None and cut.reason == "r; s" and cut.left_out == "a; b; c"
    assert cut.next_call == cuts.call("analysis_session", findings_limit=60, summaries_limit=30)
    assert cut.how == "or this; analysis_act_runs with run_id 3, offset 0"
    clash = cuts.joined([a, cuts.Part("d", "r", cuts.call("analysis_session", findings_limit=9))])
    assert clash is not None and clash.how == "analysis_session with findings_limit 9"
    assert clash.next_call == a.call


def test_text_is_cut_with_a_mark() -> None:
    assert cuts.text_cut("abc", 5) == ("abc", False)
    assert cuts.text_cut("abcdef", 3) == ("abc…", True)
