"""The command line's output helpers: tables for people, JSON lines for scripts; path checks."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from app.core import terminal


def test_render_table_aligns_columns_and_shows_empty_values() -> None:
    rows: list[dict[str, Any]] = [
        {"prefix": "ck_abc", "scopes": ["read", "write"], "project": None, "revoked": False},
        {"prefix": "ck_longer_one", "scopes": [], "project": "notes", "revoked": True},
    ]
    text = terminal.render_table(rows, ["prefix", "scopes", "project", "revoked"])
    assert text.splitlines() == [
        "PREFIX         SCOPES      PROJECT  REVOKED",
        "ck_abc         read,write  -        False",
        "ck_longer_one  -           notes    True",
    ]
    assert terminal.render_table([], ["prefix"]).splitlines() == ["PREFIX", "(none)"]


def test_table_prints_json_lines_for_scripts(capsys: pytest.CaptureFixture[str]) -> None:
    terminal.table([{"prefix": "ck_abc", "scopes": ["read"]}], ["prefix", "scopes"])  # stdout is not a terminal
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [
        {"prefix": "ck_abc", "scopes": ["read"]}
    ]


def test_path_arguments_are_checked(tmp_path: Path) -> None:
    present = tmp_path / "dump.bin"
    present.write_bytes(b"x")
    assert terminal.readable_file(str(present)) == str(present)
    assert terminal.readable_file("-") == "-"
    with pytest.raises(argparse.ArgumentTypeError, match="no such file"):
        terminal.readable_file(str(tmp_path / "missing"))
    assert terminal.existing_dir(str(tmp_path)) == str(tmp_path)
    with pytest.raises(argparse.ArgumentTypeError, match="no such directory"):
        terminal.existing_dir(str(present))


def test_progress_summary_lines() -> None:
    assert terminal.summary("embedding", 0, 0, 0.0) == "embedding: nothing to do"
    assert terminal.summary("embedding", 3000, 3000, 12.0) == "embedding: 3,000 done in 12.0 s, 250/s"
    assert terminal.summary("queue", 2999, 3000, 2.0) == "queue: 2,999 of 3,000 done in 2.0 s, 1,500/s"
