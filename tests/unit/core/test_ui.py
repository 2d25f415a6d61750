"""The console's pure parts: where a sign-in may send the browser, the CSRF token, data for scripts."""

from __future__ import annotations

import json

import pytest

from app.core.errors import InvalidInput
from app.core.ui import _csrf_of, _fmt_time, _json_script, form_text, safe_next, whole_number, with_project


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (None, "/ui/"),
        ("", "/ui/"),
        ("/ui/memory?q=a", "/ui/memory?q=a"),
        ("/ui/graph/entities/a%2Fb", "/ui/graph/entities/a%2Fb"),
        ("https://evil.example/ui/", "/ui/"),
        ("//evil.example/ui/", "/ui/"),
        ("/api/v1/keys", "/ui/"),
        ("/ui\\@evil.example", "/ui/"),
        ("javascript:alert(1)", "/ui/"),
    ],
)
def test_only_console_paths_are_followed_after_sign_in(target: str | None, expected: str) -> None:
    assert safe_next(target) == expected


def test_the_csrf_token_belongs_to_its_seed() -> None:
    seed = "s" * 43
    assert _csrf_of(seed) == _csrf_of(seed)
    assert _csrf_of(seed) != _csrf_of(seed[:-1] + "t")
    assert len(_csrf_of(seed)) == 40 and seed not in _csrf_of(seed)


def test_script_data_cannot_close_its_element() -> None:
    value = {"label": "</script><script>alert(1)</script>", "amp": "a & b"}
    text = str(_json_script(value))
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == value


def test_times_read_as_iso_text_or_datetimes() -> None:
    assert _fmt_time("2026-11-25T02:14:26.123+00:00") == "2026-11-25 02:14:26"
    assert _fmt_time("not a time") == "not a time"
    assert _fmt_time(None) == ""


def test_form_fields_are_single_stripped_and_bounded() -> None:
    fields = {"name": "  a name ", "twice": ["a", "b"], "long": "x" * 11}
    assert form_text(fields, "name") == "a name" and form_text(fields, "absent") == ""
    for name, limit in (("twice", None), ("long", 10)):
        with pytest.raises(InvalidInput):
            form_text(fields, name, limit)
    assert form_text(fields, "long", 11) == "x" * 11


def test_whole_numbers_and_projects() -> None:
    assert whole_number("42", "n") == 42 and whole_number(" ", "n") is None and whole_number(None, "n") is None
    with pytest.raises(InvalidInput):
        whole_number("4.2", "n")
    assert with_project({"a": 1}, "") == {"a": 1}
    assert with_project({"a": 1}, "alpha") == {"a": 1, "project": "alpha"}
