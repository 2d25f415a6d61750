"""Builds the mirror REST API (`/api/v1`) from the registry.

Every operation gets one route whose request body (or query string, for GET) is validated by the
same Pydantic model as the MCP tool, through the same executor; `app.core.http.openapi` describes
them in /openapi.json.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from app.core.context import AppState, Principal
from app.core.errors import InvalidInput
from app.core.executor import read_resource, run_operation
from app.core.http.callers import Callers, bearer_token, resolve_caller
from app.core.http.front import parse_json_body
from app.core.registry import Operation, ResourceDef, first_sentence

API_PREFIX = "/api/v1"


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
