"""Helpers of the datasets end-to-end tests: the server's data root and a real public dataset."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import httpx

from app.core.config import Settings
from app.core.context import AppState, CallContext, Principal
from app.core.feature import build_registry
from app.core.operations import ops as core_ops
from app.core.registry import Registry
from app.datasets.config import DatasetSettings
from app.datasets.engine import EngineConfig
from app.features import FEATURES
from tests.support.server import ADMIN_KEY, PROJECT_KEY, RunningServer, mcp_client, overridden


def root_of(server: RunningServer) -> Path:
    """The first data root of the test server (created if missing)."""
    root = Path(server.settings.data_dir) / "datasets"
    root.mkdir(parents=True, exist_ok=True)
    return root


def penguins_csv() -> Path:
    """The palmerpenguins CSV shipped by its package."""
    spec = importlib.util.find_spec("palmerpenguins")
    assert spec is not None and spec.submodule_search_locations, (
        "palmerpenguins (dev dependency, installed with --no-deps) provides the public test dataset"
    )
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "penguins.csv"
    assert path.is_file()
    return path


def project_folder(server: RunningServer, project: str = "default") -> Path:
    """A project's private datasets folder on the test server (uploads, exports)."""
    return Path(server.settings.data_dir) / "datasets-projects" / project


def exported(server: RunningServer, path: str, project: str = "default") -> Path:
    """The host file of a path export_result reported (relative to the project's folder, never a host path)."""
    assert not Path(path).is_absolute() and ".." not in Path(path).parts, path
    return project_folder(server, project) / path


def tree(*folders: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under `folders` (not following links): kind, size and, for small files, content."""
    out: dict[str, tuple[str, int, bytes]] = {}
    for folder in folders:
        if not folder.exists():
            continue
        for path in sorted(folder.rglob("*")):
            st = path.lstat()
            kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
            body = path.read_bytes() if kind == "file" and st.st_size < 100_000 else b""
            out[str(path)] = (kind, st.st_size if kind == "file" else 0, body)
    return out


ALICE = Principal(key_id="key-alice", name="alice", scopes=frozenset({"admin"}))


def call_context(data_dir: Path, cfg: DatasetSettings, principal: Principal = ALICE) -> CallContext:
    """A call context for the datasets services' unit tests: a real app state holding `cfg` as the
    datasets settings and `data_dir` as the data directory, with no database (for helpers that use none)."""
    state = AppState(
        settings=Settings(data_dir=data_dir),
        db=cast(Any, None),
        embedder=cast(Any, None),
        registry=Registry(),
        feature_settings={DatasetSettings: cfg},
    )
    return CallContext(session=cast(Any, None), principal=principal, app=state, request_id="t", transport="test")


def small_engine_config(tmp_path: Path, *, memory_limit: str, timeout_s: float) -> EngineConfig:
    """An engine configuration of its own (so its own pool key) with one small CSV, `a.csv`, in its root."""
    root, work = tmp_path / "root", tmp_path / "work"
    for folder in (root, work / "results", work / "tmp"):
        folder.mkdir(parents=True)
    (root / "a.csv").write_text("x,y\n1,one\n2,two\n3,three\n")
    return EngineConfig(
        roots=[root], work=work, memory_limit=memory_limit, threads=1, timeout_s=timeout_s, concurrency=2
    )


OK = 0
ROUTES = {op.name: (op.method, op.path) for op in build_registry(core_ops, FEATURES).operations}


class Both:
    """Calls a tool over MCP and over REST with one key; each answer is (0 or the error code, body)."""

    def __init__(self, server: RunningServer, key: str, mcp: Any) -> None:
        self.server, self.key, self.mcp = server, key, mcp

    async def mcp_call(self, tool: str, args: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        res = await self.mcp.call_tool(tool, args)
        body = json.loads(res.content[0].text) if res.is_error else res.structured_content
        return (body["error"]["code"] if res.is_error else OK), body

    async def rest_call(self, tool: str, args: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        method, path = ROUTES[tool]
        args = dict(args)
        for name in [n for n in args if "{" + n + "}" in path]:
            path = path.replace("{" + name + "}", quote(str(args.pop(name)), safe=""))
        async with httpx.AsyncClient(
            base_url=self.server.url, timeout=60, headers={"Authorization": f"Bearer {self.key}"}
        ) as c:
            if method == "GET":
                r = await c.get(f"/api/v1{path}", params=args)
            else:
                r = await c.request(method, f"/api/v1{path}", json=args)
        assert r.status_code < 500 or r.json()["error"]["code"] not in (5000, 5030), (tool, args, r.text)
        body = r.json()
        return (OK if r.status_code == 200 else body["error"]["code"]), body

    async def both(self, tool: str, args: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        return [await self.mcp_call(tool, args), await self.rest_call(tool, args)]

    async def refused(self, tool: str, args: dict[str, Any], code: int, needle: str = "") -> dict[str, Any]:
        """Both transports refuse with `code` (and a message holding `needle`); returns the REST error."""
        answers = await self.both(tool, args)
        for got, body in answers:
            assert got == code, (tool, args, body)
            assert needle.lower() in body["error"]["message"].lower(), (needle, body)
            assert set(body["error"]) >= {"code", "category", "message", "suggestions"}
        return answers[1][1]["error"]  # type: ignore[no-any-return]

    async def ok(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        got, body = await self.rest_call(tool, args)
        assert got == OK, (tool, args, body)
        return body


@asynccontextmanager
async def callers(server: RunningServer) -> AsyncIterator[tuple[Both, Both]]:
    """An unbound admin key and a key bound to BOUND_PROJECT, each with its MCP session."""
    async with mcp_client(server.url, key=ADMIN_KEY) as a, mcp_client(server.url, key=PROJECT_KEY) as b:
        yield Both(server, ADMIN_KEY, a), Both(server, PROJECT_KEY, b)


def python_engine_on(server: RunningServer, cpu_seconds: int, memory_mb: int) -> Iterator[None]:
    """The operator switch of the python engine on, with these limits, for one test (a fixture's body:
    the running server's settings are changed for the test and restored after it)."""
    with overridden(
        server,
        DatasetSettings,
        datasets_python_enabled=True,
        datasets_python_cpu_seconds=cpu_seconds,
        datasets_python_memory_mb=memory_mb,
    ):
        yield
