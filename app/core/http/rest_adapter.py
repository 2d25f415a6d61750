"""Builds the mirror REST API (`/api/v1`) from the registry.

Every operation gets one route whose request body (or query string, for GET) is validated by the
same Pydantic model as the MCP tool, through the same executor. The OpenAPI document is patched so
each route's request and response schemas are exactly the operation's input and output schemas.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response

from app import __version__
from app.core.context import AppState, Principal
from app.core.errors import CairnError, ErrorBody, InvalidInput
from app.core.executor import read_resource, run_operation
from app.core.http.callers import Callers, bearer_token, resolve_caller
from app.core.http.front import parse_json_body
from app.core.jsonschema import example_of, lean
from app.core.registry import Operation, ResourceDef, first_sentence

API_PREFIX = "/api/v1"
# Only operations that call an upstream can answer 502.
_UPSTREAM_ONLY = frozenset({"502"})


async def authenticate(request: Request) -> Principal:
    """The caller of a REST request (or a feature's own route), from its `Authorization: Bearer`
    header (see `callers.resolve_caller`)."""
    callers: Callers = request.app.state.callers
    return await resolve_caller(callers, bearer_token(request.headers.get("authorization", "")))


def _list_fields(op: Operation) -> frozenset[str]:
    """The arguments of `op` that take a list (a repeated query parameter); computed once per route."""
    props = op.input_schema().get("properties", {})
    return frozenset(
        name
        for name, prop in props.items()
        if prop.get("type") == "array" or any(alt.get("type") == "array" for alt in prop.get("anyOf", []))
    )


def _query_args(lists: frozenset[str], request: Request) -> dict[str, Any]:
    query = request.query_params
    return {key: query.getlist(key) if key in lists else query[key] for key in query}


def _operation_endpoint(op: Operation) -> Any:
    lists = _list_fields(op) if op.method == "GET" else frozenset()
    path_params = op.path_params()

    async def endpoint(request: Request) -> Response:
        state: AppState = request.app.state.cairn
        principal = await authenticate(request)
        if op.method == "GET":
            args: Any = _query_args(lists, request)
        else:
            args = parse_json_body(await request.body())
        if path_params:
            if not isinstance(args, dict):
                raise InvalidInput("Arguments must be a JSON object")
            for name in path_params:
                if name in args and args[name] != request.path_params[name]:
                    raise InvalidInput(f"'{name}' in the body differs from the path")
                args[name] = request.path_params[name]
        result = await run_operation(state, op, args, principal, transport="rest", request_id=request.state.request_id)
        return JSONResponse(result.model_dump(mode="json", by_alias=True))

    endpoint.__name__ = op.name.replace("-", "_")
    endpoint.__doc__ = op.description
    return endpoint


def _resource_endpoint(res: ResourceDef) -> Any:
    async def endpoint(request: Request) -> Response:
        state: AppState = request.app.state.cairn
        principal = await authenticate(request)
        params = {p: request.path_params[p] for p in res.params}
        result = await read_resource(
            state, res, params, principal, transport="rest", request_id=request.state.request_id
        )
        return JSONResponse(result.model_dump(mode="json", by_alias=True))

    endpoint.__name__ = "resource_" + res.name.replace("-", "_")
    return endpoint


def build_router(state: AppState) -> APIRouter:
    """One route per operation and per resource, all under /api/v1."""
    router = APIRouter(prefix=API_PREFIX)
    for op in state.registry.operations:
        if not op.rest:
            continue
        router.add_api_route(
            op.path,
            _operation_endpoint(op),
            methods=[op.method],
            name=op.name,
            operation_id=op.name.replace("-", "_"),  # one style; the tool name stays in x-cairn-operation
            summary=op.summary,
            description=op.description,
            tags=[op.feature],
            openapi_extra={"x-cairn-operation": op.name, "x-cairn-scope": op.scope},
        )
    for res in state.registry.resources:
        router.add_api_route(
            res.path,
            _resource_endpoint(res),
            methods=["GET"],
            name=f"resource:{res.uri}",
            operation_id=f"read_{res.name.replace('-', '_')}",
            summary=first_sentence(res.description),
            description=res.description,
            tags=[res.feature],
            openapi_extra={"x-cairn-resource": res.uri},
        )
    return router


def _hoist(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """Move `$defs` into components.schemas and point `$ref`s there (OpenAPI resolves refs from the
    document root)."""
    schema = copy.deepcopy(schema)
    defs = schema.pop("$defs", {})

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: (
                    v.replace("#/$defs/", "#/components/schemas/") if k == "$ref" and isinstance(v, str) else rewrite(v)
                )
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    for name, sub in defs.items():
        components.setdefault(name, rewrite(sub))
    return rewrite(schema)  # type: ignore[no-any-return]


def _json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def install_openapi(app: FastAPI, state: AppState) -> None:
    """Generate /openapi.json with each operation's exact input and output schemas."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        doc = get_openapi(
            title="Cairn",
            version=__version__,
            routes=app.routes,
            description="Mirror REST API of the Cairn MCP server.",
        )
        components = doc.setdefault("components", {}).setdefault("schemas", {})
        error_schema = _hoist(ErrorBody.model_json_schema(), components)
        # Every status an error can have, described by the error codes that use it (one ErrorBody each).
        by_status: dict[int, list[str]] = {}
        for cls in _error_classes():
            by_status.setdefault(cls.status, []).append(f"{cls.code} {cls.category}")
        errors = {
            str(status): {"description": ", ".join(sorted(set(names))), "content": _json_content(error_schema)}
            for status, names in sorted(by_status.items())
        }
        doc["tags"] = [
            {"name": name, "description": state.registry.descriptions.get(name, "")}
            for name in dict.fromkeys(
                [*(op.feature for op in state.registry.operations), *(r.feature for r in state.registry.resources)]
            )
        ]
        doc.setdefault("components", {})["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer", "description": "Cairn API key"}
        }
        by_name = {op.name: op for op in state.registry.operations}
        by_uri = {res.uri: res for res in state.registry.resources}
        for item in doc.get("paths", {}).values():
            for method, entry in item.items():
                entry["security"] = [{"bearer": []}]
                op = by_name.get(entry.get("x-cairn-operation", ""))
                res = by_uri.get(entry.get("x-cairn-resource", ""))
                if op is not None:
                    _describe_operation(entry, method, op, errors, components)
                elif res is not None:
                    out = _hoist(res.output_model.model_json_schema(mode="serialization", by_alias=True), components)
                    mine = {k: v for k, v in errors.items() if k not in _UPSTREAM_ONLY}
                    entry["responses"] = {"200": {"description": "Success", "content": _json_content(out)}, **mine}
                else:  # a feature's own route (e.g. an upload): the same errors, its own success
                    for status, response in errors.items():
                        if status not in _UPSTREAM_ONLY:
                            entry.setdefault("responses", {}).setdefault(status, response)
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


def _describe_operation(
    entry: dict[str, Any], method: str, op: Operation, errors: dict[str, Any], components: dict[str, Any]
) -> None:
    """Fill one operation's OpenAPI entry: its parameters or request body (with an example), its
    result and the errors it can answer."""
    example = _example(op)
    in_schema = _hoist(op.input_schema(), components)
    if method == "get":
        props = in_schema.get("properties", {})
        required = set(in_schema.get("required", []))
        entry["parameters"] = [
            {
                "name": n,
                "in": "path" if n in op.path_params() else "query",
                "required": n in required or n in op.path_params(),
                "schema": s,
            }
            for n, s in props.items()
        ]
        for param in entry["parameters"]:
            if example is not None and param["name"] in example:
                param["example"] = example[param["name"]]
    else:
        entry["parameters"] = [
            {"name": n, "in": "path", "required": True, "schema": {"type": "string"}} for n in op.path_params()
        ]
        entry["requestBody"] = {"required": bool(in_schema.get("required")), "content": _json_content(in_schema)}
        if example is not None:
            entry["requestBody"]["content"]["application/json"]["example"] = example
    out = _hoist(op.output_schema(), components)
    mine = {k: v for k, v in errors.items() if op.open_world or k not in _UPSTREAM_ONLY}
    entry["responses"] = {"200": {"description": "Success", "content": _json_content(out)}, **mine}


def _example(op: Operation) -> dict[str, Any] | None:
    """Example arguments of `op`: its declared ones, else made from its schema; published only when
    the operation's own model accepts them."""
    example = op.example if op.example is not None else example_of(lean(op.input_schema()))
    try:
        op.input_model.model_validate(example)
    except ValueError:
        return None
    return example if isinstance(example, dict) else None


def _error_classes() -> list[type[CairnError]]:
    """Every concrete error class (each has its own code)."""
    found, todo = [], list(CairnError.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if isinstance(getattr(cls, "status", None), int):
            found.append(cls)
    return found
