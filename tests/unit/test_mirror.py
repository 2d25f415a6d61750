"""The unit tests mirror the code: every module of app/ with logic has tests/unit/<family>/test_<module>.py
(app/core/db.py -> tests/unit/core/test_db.py; app/cli.py -> tests/unit/test_cli.py; a subpackage adds
its folder: app/core/http/front.py -> tests/unit/core/http/test_front.py).

A module has logic when it defines a function or a method that is not a declaration (a handler
registered with `@ops.operation(...)` or `@ops.resource(...)`, whose behaviour the transports' tests
exercise). A
family's `__init__.py` (its descriptor), `__main__.py`, migrations and alembic's scripts are not
mirrored. Models, schemas and settings made of fields alone have no logic.

`NOT_YET_MIRRORED` names the one module without a mirror of its own (the demo upstream). It may only
shrink: a module named there that has since gained its mirror, or that is gone, fails the test too,
so the list stays true."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.source import parse_text

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"
UNIT = ROOT / "tests" / "unit"

# Not mirrored: the demo upstream is a stand-in outside system that the analysis tests (unit and e2e)
# run against throughout, as test_layout.py exempts it from the house's sizes.
NOT_YET_MIRRORED = frozenset({"app/analysis/demo_upstream.py"})


DECLARATIONS = {"operation", "resource"}


def _declares_an_operation(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(
        isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr in DECLARATIONS
        for d in node.decorator_list
    )


def has_logic(source: str) -> bool:
    """True when the module defines a function or method other than a declaration."""
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not _declares_an_operation(node)
        for node in ast.walk(parse_text(source))
    )


def mirror_of(module: Path) -> Path:
    """tests/unit/<folders>/test_<module>.py for app/<folders>/<module>.py."""
    rel = module.relative_to(APP)
    return UNIT.joinpath(*rel.parts[:-1], f"test_{module.stem}.py")


def mirrored_modules() -> list[Path]:
    """The modules of app/ the rule covers (descriptors, entry points and migrations aside)."""
    return [
        path
        for path in sorted(APP.rglob("*.py"))
        if path.name not in {"__init__.py", "__main__.py"}
        and not {"migrations", "alembic"} & set(path.relative_to(APP).parts)
    ]


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_rule_reads_logic_and_mirrors_as_documented() -> None:
    declarations = (
        "@ops.operation(name='x', input=A, output=B)\nasync def x(ctx, args):\n    return await service.x(ctx, args)\n"
    )
    assert not has_logic(declarations)
    assert not has_logic("@ops.resource('cairn://x', name='x')\nasync def x(ctx):\n    return await service.x(ctx)\n")
    assert not has_logic("class Out(BaseModel):\n    n: int = 0\n")
    assert has_logic(declarations + "def helper() -> int:\n    return 1\n")
    assert has_logic("class Settings(BaseSettings):\n    @model_validator(mode='after')\n    def check(self): ...\n")
    assert mirror_of(APP / "core" / "db.py") == UNIT / "core" / "test_db.py"
    assert mirror_of(APP / "cli.py") == UNIT / "test_cli.py"
    assert mirror_of(APP / "core" / "http" / "front.py") == UNIT / "core" / "http" / "test_front.py"
    names = {_name(p) for p in mirrored_modules()}
    assert "app/core/db.py" in names and "app/graph/scoring.py" in names
    assert not {n for n in names if n.endswith("__init__.py") or "/migrations/" in n or "/alembic/" in n}


def test_every_module_with_logic_has_its_mirror() -> None:
    missing = [
        _name(path)
        for path in mirrored_modules()
        if has_logic(path.read_text()) and not mirror_of(path).exists() and _name(path) not in NOT_YET_MIRRORED
    ]
    assert not missing, f"modules with logic and no tests/unit/<family>/test_<module>.py: {missing}"


def test_the_allow_list_only_names_modules_still_without_a_mirror() -> None:
    stale = sorted(
        name
        for name in NOT_YET_MIRRORED
        if not (ROOT / name).exists() or mirror_of(ROOT / name).exists() or not has_logic((ROOT / name).read_text())
    )
    assert not stale, f"gone, mirrored or without logic now: take them off the allow-list: {stale}"
