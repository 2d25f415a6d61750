"""app/datasets/cuts.py: the datasets words of a cut reply (what, the next call or the way), alike in every
tool; the shared words (`named`, `budget_reason`) are tested with app/core/cuts.py."""

from __future__ import annotations

from app.datasets import cuts


def test_rows_are_a_one_based_span() -> None:
    assert cuts.rows_text(10, 100, 100) == "rows 10-100 of 100"
    assert cuts.rows_text(7, 7, None) == "row 7"
    assert cuts.rows_text(3, 9, 9, "sampled rows") == "sampled rows 3-9 of 9"


def test_a_cut_joins_its_parts_and_names_its_call() -> None:
    cut = cuts.cut("max_tokens 50", ["rows 2-3 of 3", "", "columns b"], "get_result", query_id="q_1", offset=1)
    assert cut.left_out == "rows 2-3 of 3; columns b"
    assert cut.next_call is not None and cut.next_call.tool == "get_result"
    assert cut.next_call.args == {"query_id": "q_1", "offset": 1}
    worded = cuts.cut("why", ["what"], how="a narrower query")
    assert worded.next_call is None and worded.how == "a narrower query"
