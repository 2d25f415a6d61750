"""The walls of the DuckDB engine (app/datasets/engine/): its modules import one another, never
through the package itself; the worker's side never imports the server's; the engine touches nothing
of the feature layer but its settings and reply schemas (no database session, no PostgreSQL). Sizes and
import cycles are checked for all of app/ by tests/unit/test_layout.py."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.source import parse

ENGINE = Path(__file__).resolve().parents[4] / "app" / "datasets" / "engine"
PACKAGE = "app.datasets.engine"
MODULES = {f"{PACKAGE}.{p.stem}": p for p in sorted(ENGINE.glob("*.py")) if p.stem != "__init__"}
SERVER_SIDE = {f"{PACKAGE}.{m}" for m in ("pool", "process", "slots")}


def imports(path: Path) -> Iterator[str]:
    """Every module `path` imports anywhere (in functions and under TYPE_CHECKING too)."""
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def graph() -> dict[str, set[str]]:
    return {name: {m for m in imports(path) if m in MODULES and m != name} for name, path in MODULES.items()}


def test_modules_import_one_another_not_the_package() -> None:
    bad = [f"{p.name} imports {m}" for p in MODULES.values() for m in imports(p) if m == PACKAGE]
    assert bad == []


def test_the_worker_side_never_imports_the_server_side() -> None:
    edges = graph()
    seen, todo = set(), [f"{PACKAGE}.worker"]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += edges[name]
    assert seen & SERVER_SIDE == set()


def test_the_engine_touches_only_the_features_settings_and_schemas() -> None:
    allowed = {"app.datasets.config", "app.datasets.schemas"}
    bad = []
    for path in MODULES.values():
        for module in imports(path):
            feature = module.startswith("app.datasets.") and not module.startswith(f"{PACKAGE}.")
            if (feature and not any(module == a or module.startswith(a + ".") for a in allowed)) or (
                module.startswith(("sqlalchemy", "asyncpg", "app.core.db", "app.core.repository"))
            ):
                bad.append(f"{path.name} imports {module}")
    assert bad == []
