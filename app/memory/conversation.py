"""Conversation cues of a search: the speakers and the relative date a query names, and how they raise
the chat turns that match them (pure functions; `app.memory.service_search` applies them).

Agents store chat turns one per memory, the speaker in the metadata (`{"speaker": "Maya"}`) and the
time as the memory's `created_at`, and later ask "what did Maya say last week about the trip". Two cues
are read from such a query:

- **speaker**: a query word equal (case aside) to the `speaker` metadata of a candidate, or to one word
  of it (`maya` names "Maya Lopez"). Only names found among the candidates count, and a word counts
  when the query says someone spoke (`say`, `told`, `asked`...) or when it is written as a name (a
  capital, then lower case) after the query's first word: "what did the user say" names a speaker
  called `user`, "user account lockout" does not.
- **date**: the first relative date of the query, as a window of UTC days against a reference time
  `now` (the request's time; `date_window`): `today` (`tonight`, `this morning`...), `yesterday`
  (`last night`), `N days ago`, `this week`, `last week`, `N weeks ago` (calendar weeks from Monday),
  `this month`, `last month`, `N months ago`, `last weekend`, a weekday after `on`, `last` or `this
  past` (its latest date before today), a month after `in`, `during`, `last`, `early`, `mid` or `late`
  (its latest occurrence not after `now`; `early` is days 1-10, `mid` 11-20, `late` 21 to the end) or
  `since` (from its first day to today). N is a digit or a word up to twelve (`a` and `an` are one).

A candidate's match is the mean, over the cues the query names, of its match to each: 1 for its own
speaker, else 0; for the date, 1 inside the window, falling linearly to 0 over a margin of a quarter of
the window (at least one day) on either side, so "last week" keeps most of a Monday-morning chat.

Its score then rises with the match `m` (`boost`): `s = 1 - (1 - r) ** (1 + GAIN * m)` from its
relevance `r`; with GAIN = 2 a full match cubes the distance to 1. Worked example, "what did Maya say
last week about the flights", GAIN 2: Maya's turn of last week at r = 0.40 (m = 1) scores
1 - 0.6 ** 3 = 0.784; Tom's turn of last week at r = 0.50 (m = 0.5) scores 1 - 0.5 ** 2 = 0.75; a
turn of another week by Tom at r = 0.70 (m = 0) keeps 0.70: Maya's answer comes first. The boost is
monotone in `r` and keeps the score in [0, 1]; a candidate with r = 0 stays at 0, and the threshold
applies to `r` before the boost, so a cue reorders what is relevant and never admits an off-topic turn
nor removes one (a soft filter: no cue can empty a result). GAIN was chosen on the judged chats of
`tests/support/judged_chats.py` (docs/memory.md, "Conversations").
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from app.memory.fusion import Hit

GAIN = 2.0

_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_N = r"(\d{1,3}|" + "|".join(_NUMBERS) + r")"
_DATES = re.compile(
    r"\b(?:(?P<day>today|tonight|this\s+(?:morning|afternoon|evening)|yesterday|last\s+night)"
    rf"|(?P<ago>{_N})\s+(?P<unit>day|week|month)s?\s+ago"
    r"|(?P<rel>this|last|past|previous)\s+(?P<span>week|month|weekend)"
    rf"|(?:on|last|this\s+past)\s+(?P<weekday>{'|'.join(_WEEKDAYS)})"
    rf"|(?:in|during|last|(?P<since>since)|(?P<part>early|mid|late))\s+(?P<month>{'|'.join(_MONTHS)}))\b",
    re.IGNORECASE,
)
# Words that say someone spoke: with one of them in the query, a lower-case word may name a speaker too.
_SPEECH = frozenset(
    """
say says said saying tell tells told ask asks asked mention mentions mentioned think thinks thought reply
replied answer answered write wrote talk talked explain explained suggest suggested propose proposed promise
promised agree agreed decide decided want wanted claim claimed complain complained
""".split()
)
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class Window:
    """A span of time a query names: [start, end), and the words that named it."""

    start: datetime
    end: datetime
    phrase: str

    def match(self, when: datetime) -> float:
        """1 inside the window, falling linearly to 0 over a margin of a quarter of its length (at
        least one day) on either side."""
        margin = max(timedelta(days=1), (self.end - self.start) / 4)
        if self.start <= when < self.end:
            return 1.0
        gap = self.start - when if when < self.start else when - self.end
        return max(0.0, 1.0 - gap / margin)


def _day(d: date) -> datetime:
    return datetime.combine(d, time(), tzinfo=UTC)


def _month_start(year: int, month: int) -> date:
    """The first day of `month` of `year`, where month may run past 12 or under 1."""
    year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
    return date(year, month, 1)


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS[word.lower()]


def date_window(query: str, now: datetime) -> Window | None:
    """The first relative date `query` names, as a window of UTC days against `now`, or None.

    With now = Thursday 2026-04-16 09:00 UTC: "yesterday" is [04-15, 04-16), "last week" [04-06,
    04-13), "two weeks ago" [03-30, 04-06), "on Sunday" [04-12, 04-13), "in March" [03-01, 04-01),
    "early March" [03-01, 03-11), "in May" May of 2025 (the latest May not after now)."""
    found = _DATES.search(query)
    if found is None:
        return None
    today = now.astimezone(UTC).date()
    monday = today - timedelta(days=today.weekday())
    g = {k: (v.lower() if v else v) for k, v in found.groupdict().items()}
    if g["day"]:
        start = today - timedelta(days=1 if g["day"] in ("yesterday", "last night") else 0)
        end = start + timedelta(days=1)
    elif g["ago"]:
        n = _count(g["ago"])
        if g["unit"] == "day":
            start = today - timedelta(days=n)
            end = start + timedelta(days=1)
        elif g["unit"] == "week":
            start = monday - timedelta(weeks=n)
            end = start + timedelta(weeks=1)
        else:
            start = _month_start(today.year, today.month - n)
            end = _month_start(today.year, today.month - n + 1)
    elif g["span"]:
        back = 0 if g["rel"] == "this" else 1
        if g["span"] == "week":
            start = monday - timedelta(weeks=back)
            end = start + timedelta(weeks=1)
        elif g["span"] == "weekend":
            start = monday - timedelta(days=2) + timedelta(weeks=1 - back)
            end = start + timedelta(days=2)
        else:
            start = _month_start(today.year, today.month - back)
            end = _month_start(today.year, today.month - back + 1)
    elif g["weekday"]:
        back = (today.weekday() - _WEEKDAYS.index(g["weekday"])) % 7 or 7
        start = today - timedelta(days=back)
        end = start + timedelta(days=1)
    else:
        month = _MONTHS.index(g["month"]) + 1
        year = today.year if month <= today.month else today.year - 1
        start = date(year, month, 1)
        end = _month_start(year, month + 1)
        if g["part"]:
            first, last = {"early": (1, 11), "mid": (11, 21), "late": (21, None)}[g["part"]]
            start = date(year, month, first)
            end = date(year, month, last) if last else end
        elif g["since"]:
            end = today + timedelta(days=1)
    return Window(_day(start), _day(end), found.group(0))


def query_words(query: str) -> frozenset[str]:
    """The words of a query that may name a speaker, case folded (possessives split off: `Maya's` gives
    `maya`): every word when the query says someone spoke (`say`, `told`, `asked`...), else those
    written as a name (`Maya`: a capital, then lower case) after the first word, so that a speaker
    called `user` is not named by a query about user accounts, nor anyone by `DNA` or `ADAR1`."""
    words = _WORD.findall(query)
    folded = [w.casefold() for w in words]
    if _SPEECH.intersection(folded):
        return frozenset(folded)
    return frozenset(f for w, f in zip(words[1:], folded[1:], strict=True) if _name_like(w))


def _name_like(word: str) -> bool:
    """`Maya`, not `DNA`, `ADAR1` or `maya`: a capital, then lower-case letters."""
    return word.isalpha() and word[:1].isupper() and word[1:].islower()


def names(speaker: str | None, words: frozenset[str]) -> bool:
    """Whether `words` (of a query) name `speaker`: its whole value, or one of its words of two letters
    or more, case aside."""
    if not speaker:
        return False
    folded = speaker.casefold().strip()
    parts = [p for p in _WORD.findall(folded) if len(p) > 1]
    return folded in words or any(p in words for p in parts)


def boost(relevance: float, match: float, gain: float = GAIN) -> float:
    """The score of a candidate of relevance `relevance` whose cues match by `match` in [0, 1]:
    `1 - (1 - r) ** (1 + gain * m)`; r itself when m = 0."""
    return 1.0 - float((1.0 - relevance) ** (1.0 + gain * match))


@dataclass(frozen=True)
class Turn:
    """What the cues look at in a candidate: its `speaker` metadata (or None) and its time."""

    speaker: str | None
    when: datetime


def matches(query: str, now: datetime, turns: Mapping[uuid.UUID, Turn]) -> dict[uuid.UUID, dict[str, float]]:
    """Per candidate (by key), its match to each cue the query names (`speaker`, `date`), or {} when
    the query names neither a speaker among `turns` nor a date."""
    words = query_words(query)
    window = date_window(query, now)
    speaking = any(names(t.speaker, words) for t in turns.values())
    if not speaking and window is None:
        return {}
    out: dict[uuid.UUID, dict[str, float]] = {}
    for key, turn in turns.items():
        cues: dict[str, float] = {}
        if speaking:
            cues["speaker"] = 1.0 if names(turn.speaker, words) else 0.0
        if window is not None:
            cues["date"] = window.match(turn.when)
        out[key] = cues
    return out


def combined(cues: dict[str, float]) -> float:
    """The match of a candidate: the mean of its cue matches (0 without cues)."""
    return sum(cues.values()) / len(cues) if cues else 0.0


def now() -> datetime:
    """The reference time of relative dates: the request's time (tests pin it here)."""
    return datetime.now(UTC)


def may_name_cues(query: str) -> bool:
    """Whether `query` may name a speaker (`query_words`) or names a date: when it does neither, a
    search need not read its candidates' speakers and times."""
    return bool(query_words(query)) or _DATES.search(query) is not None


def rerank(hits: list[Hit], turns: Mapping[uuid.UUID, Turn], query: str, at: datetime) -> list[Hit]:
    """`hits` scored by `boost` of their cue matches (`matches`), best first (ties keep their order),
    each cue it matches listed in its signals (`speaker`, `date`: the match in (0, 1]); `hits`
    unchanged when the query names no cue."""
    found = matches(query, at, {h.id: t for h in hits if (t := turns.get(h.id)) is not None})
    if not found:
        return hits
    out = []
    for h in hits:
        cues = found.get(h.id, {})
        signals = {**h.signals, **{name: {"score": round(v, 6)} for name, v in cues.items() if v > 0}}
        out.append(Hit(h.id, round(boost(h.score, combined(cues)), 6), signals))
    return sorted(out, key=lambda h: -h.score)
