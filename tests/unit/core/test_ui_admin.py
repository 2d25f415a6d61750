"""app/core/ui_admin.py on the test server, over plain HTTP: the admin section, a key created from the
form and shown this once, a single scope read as a list, revocation with its message, revoked keys
shown on request, the audit log filtered, health and settings, and a key without the admin scope
refused by the operations behind the pages."""

from __future__ import annotations

import re
from typing import Any

import pytest

from app.core import ui, ui_admin
from tests.support.console import signed_in
from tests.support.server import ADMIN_KEY, READ_KEY, RunningServer

pytestmark = pytest.mark.slow  # the test server


def test_the_admin_section_is_for_admin_keys() -> None:
    (section,) = ui_admin.sections()
    assert (section.title, section.path, section.scope) == ("Admin", "/ui/admin", "admin")
    assert section.router is ui_admin.router


async def test_keys_are_created_shown_once_and_revoked(server: RunningServer) -> None:
    async with signed_in(server.url, ADMIN_KEY) as console:
        made = await console.post(
            "/ui/admin/keys", {"name": "from-form", "scopes": ["read", "write"], "project": "lab"}
        )
        assert made.status_code == 200
        token = re.search(r'id="new-token">(cairn_[^<]+)<', made.text)
        assert token is not None
        row = re.search(r'<tr data-key-id="([^"]+)">\s*<td>from-form</td>.*?</tr>', made.text, re.S)
        assert row is not None and "read, write" in row.group(0) and "<td>lab</td>" in row.group(0)
        listed = await console.page("/ui/admin")
        assert "from-form" in listed and token.group(1) not in listed  # shown this once
        single = await console.post("/ui/admin/keys", {"name": "one-scope", "scopes": "write"})
        assert re.search(r"<td>one-scope</td><td><code>[^<]+</code></td><td>write</td><td>any</td>", single.text)
        key_id = row.group(1)
        revoked = await console.post(f"/ui/admin/keys/{key_id}/revoke")
        assert revoked.status_code == 303 and revoked.headers["location"] == "/ui/admin"
        assert console.flash(revoked) == f"Key {key_id} revoked"
        assert "from-form" not in await console.page("/ui/admin")
        shown = await console.page("/ui/admin", revoked="1")
        assert "from-form" in shown and "revoked " in shown and "Hide revoked keys" in shown
        bad = await console.post("/ui/admin/keys", {"name": "x", "scopes": "root"})
        assert bad.status_code == 400 and "invalid" in bad.text.lower()


async def test_the_audit_log_is_filtered_and_health_and_settings_shown(server: RunningServer) -> None:
    async with signed_in(server.url, ADMIN_KEY) as console:
        await console.post("/ui/admin/keys", {"name": "audited", "scopes": "read"})
        audit = await console.page("/ui/admin/audit", operation=" create_key ")
        assert "create_key" in audit and 'value="create_key"' in audit
        assert "create_key" not in await console.page("/ui/admin/audit", operation="forget")
        health = await console.page("/ui/admin/health")
        settings = await console.page("/ui/admin/settings")
    state = server.app.state.cairn
    assert state.embedder.model in health and "ok" in health
    # Writes wait for their vectors here: the queue is empty, and says so (no "oldest s").
    assert '<dd id="health-queue">empty</dd>' in health and "oldest" not in health
    assert all(f in settings for f in state.features)


async def test_a_key_without_the_admin_scope_is_refused(server: RunningServer) -> None:
    async with signed_in(server.url, READ_KEY) as console:
        await console.page("/ui/admin", status=403)
        await console.page("/ui/admin/audit", status=403)
        refused = await console.post("/ui/admin/keys", {"name": "x", "scopes": "read"})
        assert refused.status_code == 403


def _queue_line(server: RunningServer, queue: dict[str, Any] | None) -> str:
    """The health page's queue line for `queue` (the template rendered on its own)."""
    health: dict[str, Any] = {
        "status": "ok",
        "version": "x",
        "database": {"reachable": True, "embedded": False, "migrations_at_head": True},
        "embedding": {"provider": "p", "model": "m", "dimension": 3, "loaded": True},
        "embedding_queue": queue,
        "features": [],
    }
    env = server.app.state.console.env
    html = env.get_template("admin/health.html").render(
        health=health, principal=ui.SIGNED_OUT, nav=[], csrf="x", flash=None, path="/ui/admin/health", picker={}
    )
    found = re.search(r'<dd id="health-queue">(.*?)</dd>', html)
    assert found is not None
    return found.group(1)


def test_the_queue_line_names_only_what_it_knows(server: RunningServer) -> None:
    assert _queue_line(server, {"depth": 0, "oldest_seconds": None, "retrying": 0}) == "empty"
    assert _queue_line(server, {"depth": 3, "oldest_seconds": None, "retrying": 0}) == "3 queued"
    assert _queue_line(server, {"depth": 3, "oldest_seconds": 12.34, "retrying": 1}) == (
        "3 queued, the oldest for 12.3 s, 1 retrying"
    )
    assert _queue_line(server, None) == "not shown to this key"
