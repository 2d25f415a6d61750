"""The architecture rules of docs/architecture.md, checked on the source: features stand on the core
alone, the core names no feature, every family has the one layout, SQL lives in repositories."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from app.core import migrations
from app.features import FEATURES
from tests.support.source import parse

APP = Path(__file__).resolve().parents[2] / "app"
FAMILIES = sorted(p.name for p in APP.iterdir() if p.is_dir() and (p / "__init__.py").exists() and p.name != "core")
ENTRY = {"app.main", "app.cli", "app.features"}
REQUIRED = {"__init__.py", "config.py", "models.py", "schemas.py", "repository.py", "service.py", "operations.py"}
SPLIT = re.compile(r"^(schemas|repository|service|operations)_[a-z]+\.py$")


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """Every module `path` imports (absolute names), with its line."""
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:  # `from app import memory` imports app.memory
                yield node.lineno, f"{node.module}.{alias.name}"


def _owner(module: str) -> str | None:
    """`memory` for `app.memory.service`, `core` for `app.core.x`, None outside the package."""
    parts = module.split(".")
    return parts[1] if parts[0] == "app" and len(parts) > 1 else None


def test_every_family_is_listed_once_by_the_entry() -> None:
    assert sorted(f.name for f in FEATURES) == FAMILIES
    assert len({f.name for f in FEATURES}) == len(FEATURES)
    # `cairn`'s light commands take the feature names from the migration branches.
    assert migrations.feature_branches() == FAMILIES


def test_features_import_only_the_core_and_themselves() -> None:
    bad = []
    for family in FAMILIES:
        for path in sorted((APP / family).rglob("*.py")):
            for line, module in _imports(path):
                owner = _owner(module)
                if module in ENTRY or (owner in FAMILIES and owner != family):
                    bad.append(f"{path.relative_to(APP.parent)}:{line} imports {module}")
    assert bad == []


def test_the_core_names_no_feature() -> None:
    bad = []
    for path in sorted((APP / "core").rglob("*.py")):
        for line, module in _imports(path):
            if module in ENTRY or _owner(module) in FAMILIES:
                bad.append(f"{path.relative_to(APP.parent)}:{line} imports {module}")
        text = path.read_text(encoding="utf-8")
        bad += [f"{path.relative_to(APP.parent)} names the feature {f!r}" for f in FAMILIES if f'"{f}"' in text]
    assert bad == []


def test_migrations_ship_inside_the_package() -> None:
    """Each family's revisions live in its own `migrations/` folder, labelled with its name; the core's
    next to the Alembic environment. Nothing outside `app/` holds a revision, so the wheel is complete."""
    locations = migrations.version_locations()
    assert locations[0] == APP / "core" / "alembic" / "versions"
    assert locations[1:] == [APP / f / "migrations" for f in FAMILIES if (APP / f / "migrations").is_dir()]
    for family in migrations.feature_branches():
        files = sorted(p.name for p in (APP / family / "migrations").glob("*.py"))
        assert files and all(f.startswith(f"{family}_") for f in files), (family, files)
    assert not (APP.parent / "alembic").exists()
    # The ini file for plain `alembic` from a checkout names the same folders.
    ini = (APP.parent / "alembic.ini").read_text()
    line = next(x for x in ini.splitlines() if x.startswith("version_locations"))
    listed = [p.replace("%(here)s", str(APP.parent)) for p in line.split("=", 1)[1].strip().split(":")]
    assert sorted(listed) == sorted(str(p) for p in locations)


def test_every_family_has_the_one_layout() -> None:
    for family in FAMILIES:
        files = {p.name for p in (APP / family).glob("*.py")}
        assert REQUIRED <= files, (family, sorted(REQUIRED - files))
        odd = [f for f in files if f.startswith(("schemas", "repository", "service", "operations", "repo_"))]
        odd = [f for f in odd if f not in REQUIRED and not SPLIT.match(f)]
        assert odd == [], (family, odd)


def test_a_descriptor_is_the_descriptor_alone() -> None:
    """`app/<family>/__init__.py` imports and declares `FEATURE`, nothing else; its operations come from
    `operations.py`, which composes any split `operations_<part>.py` itself (a split file never adds to
    the family's set by being imported)."""
    bad = []
    for family in FAMILIES:
        init = APP / family / "__init__.py"
        for node in parse(init).body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                continue
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # the docstring
                continue
            if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["FEATURE"]:
                continue
            bad.append(f"{init.relative_to(APP.parent)}:{node.lineno} {type(node).__name__}")
        if f"app.{family}.operations.ops" not in {module for _, module in _imports(init)}:
            bad.append(f"{init.relative_to(APP.parent)} does not take ops from app.{family}.operations")
        for split in sorted((APP / family).glob("operations_*.py")):
            bad += [
                f"{split.relative_to(APP.parent)}:{line} imports {module}"
                for line, module in _imports(split)
                if module.startswith(f"app.{family}.operations") and not module.startswith(f"app.{family}.operations_")
            ]
    assert bad == []


# datasets moves to this shape in its own change; remove it from here when that lands.
def test_sql_lives_in_repositories() -> None:
    """Outside repository modules (and the core's database plumbing) nothing builds SQL text for
    PostgreSQL or executes statements on a session."""
    allowed = {"repository.py", "models.py", "db.py", "migrations.py"}
    schema_dirs = {APP / "core" / "alembic", *migrations.version_locations()}
    bad = []
    for path in sorted(APP.rglob("*.py")):
        if path.name in allowed or path.name.startswith("repository_"):
            continue
        if any(path.is_relative_to(d) for d in schema_dirs):  # migrations are schema DDL by nature
            continue
        for node in ast.walk(parse(path)):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module == "sqlalchemy"
                and any(a.name == "text" for a in node.names)
            ):
                bad.append(f"{path.relative_to(APP.parent)}:{node.lineno} imports sqlalchemy.text")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "execute"
                and "session" in ast.unparse(node.func.value)
            ):
                bad.append(f"{path.relative_to(APP.parent)}:{node.lineno} runs {ast.unparse(node.func)}")
    assert bad == []


def test_console_pages_only_call_operations() -> None:
    """A family's console pages (`pages.py`) and the core's (`ui*.py`) reach data through the executor
    only: they import no service, repository or database module of any family."""
    bad = []
    pages = [APP / f / "pages.py" for f in FAMILIES if (APP / f / "pages.py").exists()]
    pages += sorted((APP / "core").glob("ui*.py"))
    for path in pages:
        for line, module in _imports(path):
            leaf = module.split(".")[-1] if module.startswith("app.") else ""
            if leaf.startswith(("service", "repository", "models", "db")) or module.startswith("sqlalchemy"):
                bad.append(f"{path.relative_to(APP.parent)}:{line} imports {module}")
    assert bad == []


QUEUE_TABLE = re.compile(r"\b(FROM|JOIN|INTO|UPDATE|TABLE|USING)\s+embedding_queue\b", re.IGNORECASE)


def test_only_the_embeddings_package_touches_the_queue_table() -> None:
    """The embedding queue's table is read and written by `app/core/embeddings/repository.py` alone
    (declared by the core's models and created by its migration): no other module holds a statement
    on it, and families reach it through the package's functions."""
    owner = APP / "core" / "embeddings" / "repository.py"
    declared = {APP / "core" / "models.py", *(APP / "core" / "alembic" / "versions").glob("*.py")}
    bad = []
    for path in sorted(APP.rglob("*.py")):
        if path == owner or path in declared:
            continue
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and QUEUE_TABLE.search(node.value):
                bad.append(f"{path.relative_to(APP.parent)}:{node.lineno} names the table embedding_queue")
    assert bad == []
    # ... and the statement that proves the test can see one
    assert QUEUE_TABLE.search(owner.read_text(encoding="utf-8"))


# What only the front door (app/core/http/) may name: key lookup (the store, the key table's lookup by
# hash), bearer parsing, the open server's guard, the failed-authentication address and the SDK's
# verified token. Outside it a transport asks `resolve_caller` (the console) or is handed what the
# front resolved; the entry builds `Callers` and checks at start-up whether any key exists.
CALLER_INTERNALS = frozenset(
    {
        "KeyStore",
        "OpenModeGuard",
        "CairnTokenVerifier",
        "bearer_token",
        "scope_bearer",
        "client_address",
        "mcp_caller",
        "get_access_token",
        "has_any_key",
        "by_hash",
    }
)
# Methods: named as attributes only (a local variable may share the word).
CALLER_METHODS = frozenset({"has_any_key", "by_hash"})
CALLER_USERS = {"resolve_caller", "Callers", "keys_exist", "starts_open"}


def test_only_the_front_door_resolves_callers() -> None:
    """Nothing outside app/core/http looks a key up, reads a bearer header or decides open mode: it
    names none of the caller internals, imports only `Callers`/`resolve_caller` (and the entry the
    start-up checks) from `app.core.http.callers`, and calls no key store's `verify` or `refusal`."""
    front = APP / "core" / "http"
    bad = []
    for path in sorted(APP.rglob("*.py")):
        if path.is_relative_to(front):
            continue
        where = path.relative_to(APP.parent)
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.ImportFrom) and node.module == "app.core.http.callers":
                bad += [f"{where}:{node.lineno} imports {a.name}" for a in node.names if a.name not in CALLER_USERS]
            elif isinstance(node, ast.ImportFrom):
                bad += [f"{where}:{node.lineno} imports {a.name}" for a in node.names if a.name in CALLER_INTERNALS]
            elif isinstance(node, ast.Name) and node.id in CALLER_INTERNALS - CALLER_METHODS:
                bad.append(f"{where}:{node.lineno} names {node.id}")
            elif isinstance(node, ast.Attribute) and node.attr in CALLER_INTERNALS | {"verify", "refusal"}:
                if node.attr in ("verify", "refusal") and "store" not in ast.unparse(node.value):
                    continue
                bad.append(f"{where}:{node.lineno} uses {ast.unparse(node)}")
    assert bad == []


# ------------------------------------------------------------------------------ size and cycles
EXEMPT = {APP / "analysis" / "demo_upstream.py"}  # a stand-in upstream for demos, not part of the house
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80


def _house() -> Iterator[Path]:
    """Every module of app/ but migrations, the Alembic environment and the exempt demo."""
    schema_dirs = {APP / "core" / "alembic", *migrations.version_locations()}
    for path in sorted(APP.rglob("*.py")):
        if path not in EXEMPT and not any(path.is_relative_to(d) for d in schema_dirs):
            yield path


def test_no_module_or_function_is_too_long() -> None:
    bad = []
    for path in _house():
        source = path.read_text(encoding="utf-8")
        if (lines := len(source.splitlines())) > MAX_MODULE_LINES:
            bad.append(f"{path.relative_to(APP.parent)}: {lines} lines")
        for node in ast.walk(parse(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    bad.append(f"{path.relative_to(APP.parent)}:{node.lineno} {node.name}: {length} lines")
    assert bad == []


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(APP.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the app modules it imports anywhere in its text (type-only and function-level imports
    included), `from pkg import mod` counted as importing `pkg.mod`."""
    paths = {_module_name(p): p for p in APP.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(parse(path)):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*parent, *([node.module] if node.module else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names]
            for target in targets:
                while target not in paths and "." in target:
                    target = target.rpartition(".")[0]
                if target in paths and target != name:
                    deps.add(target)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle() -> None:
    """No two modules of app/ import each other, directly or around a circle, counting imports made
    only for type checking or inside functions: each layer stands on the ones below it."""
    assert _cycles(_import_graph()) == []
