"""The conversation cues of a search: relative dates against a reference time, speaker names, the
boost and the reranking."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from app.memory.conversation import (
    GAIN,
    Turn,
    Window,
    boost,
    combined,
    date_window,
    matches,
    may_name_cues,
    names,
    query_words,
    rerank,
)
from app.memory.fusion import Hit

NOW = datetime(2026, 4, 16, 9, 0, tzinfo=UTC)  # a Thursday


def _d(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("what did she say yesterday", "2026-04-15", "2026-04-16"),
        ("notes from today", "2026-04-16", "2026-04-17"),
        ("what did we say this morning", "2026-04-16", "2026-04-17"),
        ("what did we discuss last night", "2026-04-15", "2026-04-16"),
        ("three days ago", "2026-04-13", "2026-04-14"),
        ("what did she say last week about the trip", "2026-04-06", "2026-04-13"),
        ("this week", "2026-04-13", "2026-04-20"),
        ("a week ago", "2026-04-06", "2026-04-13"),
        ("two weeks ago", "2026-03-30", "2026-04-06"),
        ("What book were we reading 3 weeks ago?", "2026-03-23", "2026-03-30"),
        ("last month", "2026-03-01", "2026-04-01"),
        ("this month", "2026-04-01", "2026-05-01"),
        ("four months ago", "2025-12-01", "2026-01-01"),
        ("last weekend", "2026-04-11", "2026-04-13"),
        ("what did we decide on Sunday", "2026-04-12", "2026-04-13"),
        ("on Wednesday", "2026-04-15", "2026-04-16"),
        ("last Thursday", "2026-04-09", "2026-04-10"),  # today is Thursday: the one before
        ("this past monday", "2026-04-13", "2026-04-14"),
        ("the budget we discussed in March", "2026-03-01", "2026-04-01"),
        ("in May", "2025-05-01", "2025-06-01"),  # the latest May not after now
        ("during december", "2025-12-01", "2026-01-01"),
        ("last March", "2026-03-01", "2026-04-01"),
        ("everything since February", "2026-02-01", "2026-04-17"),
        ("early March", "2026-03-01", "2026-03-11"),
        ("mid March", "2026-03-11", "2026-03-21"),
        ("late February", "2026-02-21", "2026-03-01"),
    ],
)
def test_relative_dates_are_windows_of_utc_days(query: str, start: str, end: str) -> None:
    window = date_window(query, NOW)
    assert window is not None, query
    assert (window.start, window.end) == (_d(start), _d(end)), query


@pytest.mark.parametrize(
    "query",
    [
        "May can be hot in Lisbon",  # a modal verb, not the month
        "What did Tom say about his new job?",
        "we talked about the weekend",  # 'we' is no Wednesday
        "the Sunday market",  # a weekday without on/last/this past
        "a week of rain",
    ],
)
def test_words_that_name_no_date(query: str) -> None:
    assert date_window(query, NOW) is None


def test_the_first_date_of_a_query_counts() -> None:
    window = date_window("yesterday we spoke about last month", NOW)
    assert window is not None and window.phrase == "yesterday"


def test_a_date_matches_inside_its_window_and_fades_over_a_margin() -> None:
    week = Window(_d("2026-04-06"), _d("2026-04-13"), "last week")  # margin 7/4 days
    assert week.match(_d("2026-04-09")) == 1.0
    assert week.match(_d("2026-04-06")) == 1.0
    assert week.match(_d("2026-04-13") + timedelta(hours=21)) == pytest.approx(0.5)
    assert week.match(_d("2026-04-16")) == 0.0
    day = Window(_d("2026-04-15"), _d("2026-04-16"), "yesterday")  # margin one day
    assert day.match(_d("2026-04-14") + timedelta(hours=12)) == pytest.approx(0.5)
    assert day.match(_d("2026-04-12")) == 0.0


def test_speakers_are_named_by_a_whole_word_case_aside() -> None:
    words = query_words("What did maya say about Tom's knee?")
    assert names("Maya", words) and names("Tom", words)
    assert names("Maya Lopez", words)  # one word of the name
    assert not names("Priya", words) and not names(None, words) and not names("", words)
    assert not names("Tomas", words)  # a whole word, not a prefix


def test_an_ordinary_word_names_a_speaker_only_when_the_query_speaks_of_speaking_or_capitalises_it() -> None:
    assert names("user", query_words("what did the user ask about the export?"))
    assert not names("user", query_words("user account lockout after three attempts"))
    assert not names("user", query_words("User account lockout"))  # the first word: capitalised anyway
    assert names("Priya", query_words("What was Priya's goal time for the marathon?"))
    assert not names("Priya", query_words("what was priya's goal time"))


def test_the_boost_follows_its_worked_example() -> None:
    assert GAIN == 2.0
    assert boost(0.40, 1.0) == pytest.approx(1 - 0.6**3)  # 0.784
    assert boost(0.50, 0.5) == pytest.approx(0.75)
    assert boost(0.70, 0.0) == pytest.approx(0.70)
    assert boost(0.0, 1.0) == 0.0 and boost(1.0, 1.0) == 1.0
    scores = [boost(r / 20, 0.7) for r in range(21)]
    assert scores == sorted(scores) and all(0 <= s <= 1 for s in scores)


def test_matches_name_only_the_cues_the_query_has() -> None:
    maya, tom = uuid.uuid4(), uuid.uuid4()
    turns = {maya: Turn("Maya", _d("2026-04-12")), tom: Turn("Tom", _d("2026-03-05"))}
    assert matches("what about the trip", NOW, turns) == {}
    assert matches("what did Priya say", NOW, turns) == {}  # nobody among the turns is Priya
    only_speaker = matches("what did Maya say", NOW, turns)
    assert only_speaker == {maya: {"speaker": 1.0}, tom: {"speaker": 0.0}}
    both = matches("what did Maya say last week", NOW, turns)
    assert both[maya] == {"speaker": 1.0, "date": 1.0} and both[tom] == {"speaker": 0.0, "date": 0.0}
    assert combined(both[maya]) == 1.0 and combined({"speaker": 1.0, "date": 0.0}) == 0.5 and combined({}) == 0.0


def test_rerank_raises_the_named_speakers_turn_and_explains_it() -> None:
    maya, tom, note = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    hits = [
        Hit(tom, 0.70, {"semantic": {"rank": 1, "score": 0.7}}),
        Hit(note, 0.60, {"lexical": {"rank": 1, "score": 0.5}}),
        Hit(maya, 0.40, {"semantic": {"rank": 3, "score": 0.4}}),
    ]
    turns = {maya: Turn("Maya", _d("2026-04-12")), tom: Turn("Tom", _d("2026-03-05")), note: Turn(None, NOW)}
    out = rerank(hits, turns, "what did Maya say last week about the flights", NOW)
    assert [h.id for h in out] == [maya, tom, note]
    assert out[0].score == pytest.approx(1 - 0.6**3, abs=1e-6)
    assert out[0].signals == {"semantic": {"rank": 3, "score": 0.4}, "speaker": {"score": 1.0}, "date": {"score": 1.0}}
    assert out[1].signals == hits[0].signals  # Tom in March: no cue matched, none listed
    assert out[2].score == 0.60  # no speaker, and dated today: no match, the relevance as it was
    assert rerank(hits, turns, "the flights", NOW) is hits  # no cue: nothing changes


def test_a_query_without_capitals_speech_or_dates_needs_no_cue_lookup() -> None:
    assert not may_name_cues("statement timeout of the database migration")
    assert not may_name_cues("0-dimensional biomaterials show inductive properties.")
    assert not may_name_cues("CRP is not predictive of mortality after CABG surgery")  # acronyms
    assert may_name_cues("ADAR1 binds to Dicer")  # a protein written as a name: read, matches nobody

    assert may_name_cues("what did she say")  # a speaker of that name may exist
    assert may_name_cues("notes from the Lisbon trip")
    assert may_name_cues("notes from last week")
