"""app/datasets/cuts.py: the words of a cut reply (why, what, the next call), alike in every tool."""

from __future__ import annotations

from app.datasets import cuts


def test_the_reason_names_the_budget_and_whose_it_is() -> None:
    assert cuts.budget_reason(350, 350) == "max_tokens 350"
    assert cuts.budget_reason(2000, None) == "max_tokens 2000 (default)"


def test_names_are_listed_then_counted() -> None:
    assert cuts.named(["a", "b"]) == "a, b"
    assert cuts.named([f"c{i}" for i in range(11)], 3) == "c0, c1, c2 (+8 more)"
    assert cuts.named([]) == ""


def test_rows_are_a_one_based_span() -> None:
    assert cuts.rows_text(10, 100, 100) == "rows 10-100 of 100"
    assert cuts.rows_text(7, 7, None) == "row 7"
    assert cuts.rows_text(3, 9, 9, "sampled rows") == "sampled rows 3-9 of 9"


def test_a_cut_joins_its_parts_and_names_its_call() -> None:
    cut = cuts.cut("max_tokens 50", ["rows 2-3 of 3", "", "columns b"], "get_result", query_id="q_1", offset=1)
    assert cut.left_out == "rows 2-3 of 3; columns b"
    assert cut.next_call is not None and cut.next_call.tool == "get_result"
    assert cut.next_call.args == {"query_id": "q_1", "offset": 1}
    assert cuts.cut("why", ["what"]).next_call is None
