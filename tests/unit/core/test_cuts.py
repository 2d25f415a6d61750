"""app/core/cuts.py: the one shape of a cut (reason, left_out, next_call or how, the absent ones left
out of the reply) and the words every family shares."""

from __future__ import annotations

from app.core import cuts


def test_a_cut_leaves_out_the_ways_it_has_not() -> None:
    call = cuts.NextCall(tool="get_result", args={"offset": 5})
    full = cuts.Cut(reason="max_tokens 50", left_out="rows 6-9 of 9", next_call=call)
    assert full.model_dump() == {
        "reason": "max_tokens 50",
        "left_out": "rows 6-9 of 9",
        "next_call": {"tool": "get_result", "args": {"offset": 5}},
    }
    worded = cuts.Cut(reason="a limit", left_out="a value", how="ask for it by name")
    assert worded.model_dump() == {"reason": "a limit", "left_out": "a value", "how": "ask for it by name"}


def test_the_reason_names_the_budget_and_whose_it_is() -> None:
    assert cuts.budget_reason(350, 350) == "max_tokens 350"
    assert cuts.budget_reason(2000, None) == "max_tokens 2000 (default)"
    assert cuts.budget_reason(10, 10, "limit") == "limit 10"


def test_names_are_listed_then_counted() -> None:
    assert cuts.named(["a", "b"]) == "a, b"
    assert cuts.named([f"c{i}" for i in range(11)], 3) == "c0, c1, c2 (+8 more)"
    assert cuts.named([]) == ""
    assert len(cuts.named([f"c{i}" for i in range(20)]).split(", ")) == cuts.NAMES_LISTED


def test_a_call_in_words() -> None:
    assert cuts.call_text(cuts.NextCall(tool="t", args={"run_id": 3, "offset": 0})) == "t with run_id 3, offset 0"
    assert cuts.call_text(cuts.NextCall(tool="t", args={})) == "t"
