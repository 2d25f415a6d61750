"""docs/configuration.md is true to the code: every setting of the core and of each family is
documented, every documented variable exists, and each documented default is the code's default."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

from pydantic_settings import BaseSettings

from app.core.config import Settings
from app.features import FEATURES

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
# The section of variables read by the container's entrypoint script, not by the server.
ENTRYPOINT_SECTION = "## Container entrypoint"
ROW = re.compile(r"^\| `(CAIRN_[A-Z0-9_]+)` \| (?P<default>[^|]*) \|")


def _settings_classes() -> list[type[BaseSettings]]:
    """The core Settings, each family's declared settings and any other BaseSettings class defined in
    an `app/<family>/config.py` (so a class a family forgot to declare is still checked)."""
    classes: list[type[BaseSettings]] = [Settings, *[f.settings for f in FEATURES if f.settings is not None]]
    for feature in FEATURES:
        if (ROOT / "app" / feature.name / "config.py").exists():
            module = importlib.import_module(f"app.{feature.name}.config")
            classes += [
                obj
                for obj in vars(module).values()
                if isinstance(obj, type)
                and issubclass(obj, BaseSettings)
                and obj is not BaseSettings
                and obj.__module__ == module.__name__
                and obj not in classes
            ]
    return classes


def _variables() -> dict[str, Any]:
    """Every setting the code reads, by environment variable: name -> default."""
    classes = _settings_classes()
    assert len(classes) >= 2
    found: dict[str, Any] = {}
    for cls in classes:
        prefix = str(cls.model_config.get("env_prefix") or "").upper()
        for name, field in cls.model_fields.items():
            default = field.get_default(call_default_factory=False) if field.default_factory is None else ...
            found[f"{prefix}{name.upper()}"] = default
    return found


def _documented(section: str | None = None) -> dict[str, str]:
    """Variable -> documented default, of the server's sections (or only of `section`)."""
    rows, heading = {}, ""
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            heading = line.strip()
        match = ROW.match(line)
        if match and ((heading == section) if section else heading != ENTRYPOINT_SECTION):
            rows[match.group(1)] = match.group("default").strip()
    return rows


def _literal(value: Any) -> str | None:
    """How a default is written in the table (None: not a simple literal)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        return str(value)
    return None


def test_every_setting_is_documented_and_every_documented_one_exists() -> None:
    code, doc = _variables(), _documented()
    assert sorted(set(code) - set(doc)) == [], "settings missing from docs/configuration.md"
    assert sorted(set(doc) - set(code)) == [], "documented settings the code does not read"


def test_entrypoint_variables_are_documented_and_read_by_the_entrypoint() -> None:
    script = ENTRYPOINT.read_text(encoding="utf-8")
    documented = _documented(ENTRYPOINT_SECTION)
    assert documented
    assert [name for name in documented if "${" + name not in script] == []
    # Every variable the script reads is documented (in its section, or as a server setting).
    everywhere = {**_documented(), **documented}
    assert [name for name in re.findall(r"\$\{(CAIRN_[A-Z_]+)", script) if name not in everywhere] == []


def test_documented_defaults_are_the_code_defaults() -> None:
    code, doc = _variables(), _documented()
    wrong = []
    checked = 0
    for name, written in doc.items():
        default = code.get(name, ...)
        if default is ...:
            continue
        first = re.match(r"`([^`]*)`", written)
        if written.startswith(("unset", "empty")):
            checked += 1
            if default not in (None, "", [], ()):
                wrong.append(f"{name}: documented {written!r}, code {default!r}")
        elif first is not None and _literal(default) is not None:
            checked += 1
            text, value = first.group(1), _literal(default)
            same = text == value
            if not same and isinstance(default, int | float) and not isinstance(default, bool):
                try:
                    same = float(text) == float(default)
                except ValueError:
                    same = False
            if not same:
                wrong.append(f"{name}: documented {text!r}, code {value!r}")
    assert wrong == []
    assert checked >= 0.8 * len(doc), (checked, len(doc))  # the check covers nearly every row
