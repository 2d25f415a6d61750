"""app/memory/schemas.py: tags (a single string is one tag), time windows in UTC, the seed's argument
aliases, summarize's bounds, and how replies print times and scores."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from app.memory.schemas import (
    MAX_TAGS,
    PushIn,
    SearchIn,
    SummarizeIn,
    TimeRange,
    compact_time,
    move_aliases,
    round_score,
    utc,
)


def test_a_single_tag_is_a_one_element_list_and_tags_are_bounded() -> None:
    assert SearchIn.model_validate({"query_text": "q", "tags": "rain"}).tags == ["rain"]
    assert SearchIn.model_validate({"query_text": "q", "tags": [" a ", "b"]}).tags == ["a", "b"]
    assert SearchIn.model_validate({"query_text": "q"}).tags is None
    for bad in ([""], ["x" * 129], ["t"] * (MAX_TAGS + 1), 7):
        with pytest.raises(ValidationError):
            SearchIn.model_validate({"query_text": "q", "tags": bad})
    schema = SearchIn.model_json_schema()["properties"]["tags"]
    assert {"type": "string", "minLength": 1, "maxLength": 128} in schema["anyOf"]  # advertised as accepted


def test_utc_takes_naive_times_as_utc_and_keeps_zoned_ones() -> None:
    naive = datetime(2026, 1, 2, 3, 4)
    assert utc(naive) == naive.replace(tzinfo=UTC)
    zoned = datetime(2026, 1, 2, 3, 4, tzinfo=timezone(timedelta(hours=2)))
    assert utc(zoned) is zoned
    assert utc(None) is None


def test_a_time_range_is_ordered_and_zoned() -> None:
    window = TimeRange(start=datetime(2026, 1, 1), end=datetime(2026, 1, 1))  # equal bounds pass
    assert window.start is not None and window.start.tzinfo is UTC
    assert TimeRange(start=datetime(2026, 1, 1)).end is None
    with pytest.raises(ValidationError, match=re.escape("start must be <= time_range.end")):
        TimeRange(start=datetime(2026, 1, 2), end=datetime(2026, 1, 1))
    # compared as instants: 10:00 at +02:00 is before 09:00 UTC
    TimeRange(
        start=datetime(2026, 1, 1, 10, tzinfo=timezone(timedelta(hours=2))), end=datetime(2026, 1, 1, 9, tzinfo=UTC)
    )


def test_move_aliases_puts_an_alias_on_its_field() -> None:
    aliases = {"project": "project_id", "k": "limit"}
    assert move_aliases({"project": "p", "k": 3}, aliases) == {"project_id": "p", "limit": 3}
    assert move_aliases({"project": "p", "project_id": "p"}, aliases) == {"project_id": "p"}  # the same value
    assert move_aliases({"project": None, "project_id": "p"}, aliases) == {"project_id": "p"}
    assert move_aliases({"project": "p", "project_id": None}, aliases) == {"project_id": "p"}
    with pytest.raises(ValueError, match="'project' and 'project_id' are the same argument but differ"):
        move_aliases({"project": "a", "project_id": "b"}, aliases)
    assert move_aliases(["not", "a", "dict"], aliases) == ["not", "a", "dict"]
    given = {"project": "p"}
    move_aliases(given, aliases)
    assert given == {"project": "p"}  # the caller's dict is left alone


def test_search_and_push_take_the_seed_aliases() -> None:
    search = SearchIn.model_validate({"query_text": "q", "project": "alpha", "type": "episodic", "k": 4})
    assert (search.project_id, search.memory_type, search.limit) == ("alpha", "episodic", 4)
    push = PushIn.model_validate({"text": "t", "project": "alpha"})
    assert push.project_id == "alpha" and push.wait_for_embedding is None
    with pytest.raises(ValidationError):
        PushIn.model_validate({"text": "t", "k": 4})  # push has no limit: `k` is not its alias
    with pytest.raises(ValidationError):
        SearchIn.model_validate({"query_text": "q", "project_id": "not a name"})


def test_summarize_needs_both_bounds() -> None:
    both = {"start": "2026-01-01T00:00:00Z", "end": "2026-02-01T00:00:00Z"}
    assert SummarizeIn.model_validate({"time_range": both}).limit == 50
    with pytest.raises(ValidationError, match="time_range needs both start and end"):
        SummarizeIn.model_validate({"time_range": {"start": both["start"]}})
    with pytest.raises(ValidationError):
        SummarizeIn.model_validate({})


def test_compact_time_is_to_the_minute_in_utc_or_the_date_at_midnight() -> None:
    assert compact_time(datetime(2026, 11, 24, 23, 5, 59, tzinfo=UTC)) == "2026-11-24T23:05Z"
    assert compact_time(datetime(2026, 11, 24, tzinfo=UTC)) == "2026-11-24"
    assert compact_time(datetime(2026, 11, 25, 1, 5, tzinfo=timezone(timedelta(hours=2)))) == "2026-11-24T23:05Z"
    assert compact_time(datetime(2026, 11, 24, 7, 30)) == "2026-11-24T07:30Z"  # naive: taken as UTC


def test_round_score_keeps_three_decimals() -> None:
    assert round_score(0.123456) == 0.123 and round_score(0.9996) == 1.0 and round_score(0.0) == 0.0
