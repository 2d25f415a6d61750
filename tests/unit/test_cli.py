"""The `cairn` command's parser: every option and argument says what it is for."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

from app.cli import build_parser


def _undocumented(parser: argparse.ArgumentParser, path: str) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _undocumented(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            yield f"{path}: {action.option_strings[0] if action.option_strings else action.dest}"


def test_every_option_has_help() -> None:
    assert list(_undocumented(build_parser(), "cairn")) == []


def test_sub_commands_use_the_same_help_formatter() -> None:
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {type(p).__name__ for p in subs.choices.values()} == {type(parser).__name__}
    assert "serve" in parser.format_help() and "stdio" in parser.format_help()


def test_the_readme_lists_every_command() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    listed = readme.split("## Commands", 1)[1].split("```")[1]
    subs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert [name for name in subs.choices if f"cairn {name}" not in listed] == []
