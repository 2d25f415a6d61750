"""The OpenAPI document (/openapi.json) of the REST API, made from the registry.

Each route's request and response schemas are exactly its operation's input and output schemas. Its
error responses are the errors the operation can answer (`Operation.error_classes`), one response
per HTTP status listing its codes (also as `x-cairn-codes`). Its examples are a real call: the tests
record one request and its response per operation (tests/e2e/test_openapi_examples.py) into
`openapi_examples.json` beside the module declaring the operation, keyed by operationId; an
operation without a recorded call shows its declared `example` (or one made from its schema).
"""

from __future__ import annotations

import copy
import functools
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, Response

from app import __version__
from app.core.context import AppState
from app.core.errors import ErrorBody
from app.core.jsonschema import example_of, lean
from app.core.registry import ErrorClass, Operation, ResourceDef

EXAMPLES_FILE = "openapi_examples.json"


def operation_id(item: Operation | ResourceDef) -> str:
    """The REST operationId of an operation (its name, one style) or a resource (`read_<name>`)."""
    if isinstance(item, Operation):
        return item.name.replace("-", "_")
    return f"read_{item.name.replace('-', '_')}"


def examples_file(handler: Callable[..., Any]) -> Path | None:
    """Where the recorded examples of the operations declared in `handler`'s module live: beside it."""
    module = sys.modules.get(handler.__module__)
    file = getattr(module, "__file__", None)
    return Path(file).with_name(EXAMPLES_FILE) if file else None


@functools.cache
def _load(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def recorded(item: Operation | ResourceDef) -> dict[str, Any] | None:
    """The recorded call of `item` (`{"request": ..., "response": ...}`), if any."""
    path = examples_file(item.handler)
    found = _load(path).get(operation_id(item)) if path is not None else None
    return found if isinstance(found, dict) else None


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


def _json_content(schema: dict[str, Any], example: Any = None) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": schema}
    if example is not None:
        media["example"] = example
    return {"application/json": media}


def error_responses(classes: Sequence[ErrorClass], error_schema: dict[str, Any]) -> dict[str, Any]:
    """One response per HTTP status of `classes`, described by its codes (`x-cairn-codes` lists them)."""
    by_status: dict[int, list[ErrorClass]] = {}
    for cls in sorted(classes, key=lambda c: c.code):
        by_status.setdefault(cls.status, []).append(cls)
    return {
        str(status): {
            "description": ", ".join(f"{c.code} {c.category}" for c in group),
            "x-cairn-codes": [c.code for c in group],
            "content": _json_content(error_schema),
        }
        for status, group in sorted(by_status.items())
    }


def _success(schema: dict[str, Any], call: dict[str, Any] | None) -> dict[str, Any]:
    return {"description": "Success", "content": _json_content(schema, (call or {}).get("response"))}


def install_openapi(app: FastAPI, state: AppState) -> None:
    """Generate /openapi.json: each operation's exact schemas, its own errors and its examples."""

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
        registry = state.registry
        doc["tags"] = [
            {"name": name, "description": registry.descriptions.get(name, "")}
            for name in dict.fromkeys(
                [*(op.feature for op in registry.operations), *(r.feature for r in registry.resources)]
            )
        ]
        doc["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer", "description": "Cairn API key"}
        }
        by_id = {operation_id(op): op for op in registry.operations}
        by_uri = {res.uri: res for res in registry.resources}
        for item in doc.get("paths", {}).values():
            for method, entry in item.items():
                entry["security"] = [{"bearer": []}]
                op = by_id.get(entry.get("operationId", ""))
                res = by_uri.get(entry.get("x-cairn-resource", ""))
                if res is not None:
                    out = _hoist(res.output_model.model_json_schema(mode="serialization", by_alias=True), components)
                    entry["responses"] = {
                        "200": _success(out, recorded(res)),
                        **error_responses(res.error_classes(), error_schema),
                    }
                elif op is not None:
                    _describe_operation(entry, method, op, error_schema, components)
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


def _describe_operation(
    entry: dict[str, Any], method: str, op: Operation, error_schema: dict[str, Any], components: dict[str, Any]
) -> None:
    """Fill one operation's OpenAPI entry: its parameters or request body with their example (a
    feature's own route, e.g. a multipart upload, keeps the request it declares), its result with
    the recorded one, and the errors it can answer."""
    call = recorded(op)
    example = _example(op, call)
    if op.rest:
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
        else:
            entry["parameters"] = [
                {"name": n, "in": "path", "required": True, "schema": {"type": "string"}} for n in op.path_params()
            ]
            body = {k: v for k, v in (example or {}).items() if k not in op.path_params()}
            entry["requestBody"] = {
                "required": bool(in_schema.get("required")),
                "content": _json_content(in_schema, body if example is not None else None),
            }
    for param in entry.get("parameters", []):
        if example is not None and param["name"] in example:
            param["example"] = example[param["name"]]
    out = _hoist(op.output_schema(), components)
    entry["responses"] = {"200": _success(out, call), **error_responses(op.error_classes(), error_schema)}


def _example(op: Operation, call: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Example arguments of `op`: the recorded call's, else its declared ones, else made from its
    schema; published only when the operation's own model accepts them."""
    if call is not None and isinstance(call.get("request"), dict):
        example: Any = call["request"]
    else:
        example = op.example if op.example is not None else example_of(lean(op.input_schema()))
    try:
        op.input_model.model_validate(example)
    except ValueError:
        return None
    return example if isinstance(example, dict) else None


# ReDoc's sidebar shows Redocly's logo from their CDN; an empty source renders nothing and fetches nothing.
_REDOC_LOGO = b'src:"https://cdn.redoc.ly/redoc/logo-mini.svg"'


@functools.cache
def redoc_script() -> bytes:
    """The ReDoc bundle shipped in fastapi-offline, its one remote image (the logo) removed."""
    script = (Path(fastapi_offline.__file__).parent / "static" / "redoc.standalone.js").read_bytes()
    return script.replace(_REDOC_LOGO, b'src:""')


def install_docs(
    app: FastAPI, *, static_url: str, redoc_url: str = "/redoc", script_url: str = "/docs/redoc.js"
) -> None:
    """Serve ReDoc at `redoc_url` from this server only: the page, its script (at `script_url`) and
    its favicon (from fastapi-offline's assets at `static_url`), no web fonts."""

    @app.get(script_url, include_in_schema=False)
    async def redoc_js() -> Response:
        return Response(redoc_script(), media_type="text/javascript", headers={"Cache-Control": "public, max-age=3600"})

    @app.get(redoc_url, include_in_schema=False)
    async def redoc_page(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{script_url}",
            redoc_favicon_url=f"{root}{static_url}/favicon.png",
            with_google_fonts=False,
        )
