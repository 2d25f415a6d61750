"""The console's admin pages: API keys, the audit log, health and settings (core operations only)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response

from app.core.ui import ConsoleSection, console_router, form_text, viewer

router = console_router("/admin")
SCOPES = ("read", "write", "admin")


def sections() -> list[ConsoleSection]:
    """The admin section (shown to admin keys; the operations check their scope themselves)."""
    return [ConsoleSection(title="Admin", path="/ui/admin", router=router, scope="admin")]


@router.get("")
async def keys_page(request: Request) -> Response:
    """API keys: the stored ones, a form to create one, and a revoke button per key."""
    view = await viewer(request)
    show_revoked = request.query_params.get("revoked") == "1"
    listed = await view.call("list_keys", {"include_revoked": show_revoked})
    return view.render("admin/keys.html", keys=listed["keys"], created=None, show_revoked=show_revoked)


@router.post("/keys")
async def create_key(request: Request) -> Response:
    """Create a key and show it this once (the page is not stored: only its hash is)."""
    view = await viewer(request)
    fields = await view.form()
    scopes = fields.get("scopes", [])
    args: dict[str, Any] = {
        "name": form_text(fields, "name"),
        "scopes": scopes if isinstance(scopes, list) else [scopes],
    }
    project = form_text(fields, "project")
    if project:
        args["project"] = project
    created = await view.call("create_key", args)
    listed = await view.call("list_keys", {})
    return view.render("admin/keys.html", keys=listed["keys"], created=created, show_revoked=False)


@router.post("/keys/{key_id}/revoke")
async def revoke_key(request: Request, key_id: str) -> Response:
    """Revoke one key."""
    view = await viewer(request)
    await view.form()
    await view.call("revoke_key", {"key_id": key_id})
    return view.redirect("/ui/admin", flash=f"Key {key_id[:64]} revoked")


@router.get("/audit")
async def audit_page(request: Request) -> Response:
    """The audit log, newest first, filtered by key, operation, project and time, paged backwards."""
    view = await viewer(request)
    query = request.query_params
    args = {k: query[k].strip() for k in ("key_id", "operation", "project", "since", "before_id") if query.get(k)}
    page = await view.call("audit_log", {**args, "limit": 50})
    return view.render("admin/audit.html", entries=page["entries"], next_before_id=page["next_before_id"], filters=args)


@router.get("/health")
async def health_page(request: Request) -> Response:
    """Database, embedder and embedding queue, as the health resource reports them."""
    view = await viewer(request)
    return view.render("admin/health.html", health=await view.resource("health"))


@router.get("/settings")
async def settings_page(request: Request) -> Response:
    """The settings the server publishes (features, embedding model, each feature's defaults)."""
    view = await viewer(request)
    return view.render("admin/settings.html", settings=await view.resource("settings"))
