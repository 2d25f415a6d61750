"""app/analysis/service_act.py with a real call context on a database of its own, against the demo
upstream on 127.0.0.1: what it refuses before sending anything, the dry run's scope, a live update and
delete judged per record (locked books refused, already-done records, a missing book deleted already,
an id that cannot be a URL path), the copy following what the upstream accepted (also through the
rollback step when the call's transaction does not commit), and records cut off by their budget."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
import pytest

from app.analysis.config import AnalysisSettings
from app.analysis.repository import AnalysisRepository
from app.analysis.schemas import ActIn, ActOut
from app.analysis.service_act import act
from app.analysis.validation import parse_where
from app.core.context import CallContext, Principal
from app.core.db import Database
from app.core.errors import CairnError, Forbidden, InvalidInput, NotFound
from tests.support import analysis as analysis_helpers
from tests.support.analysis import TOKEN, Upstream, expected_books
from tests.support.calls import service_call
from tests.support.databases import database_fixture

upstream = analysis_helpers.upstream
bookshelf = analysis_helpers.bookshelf

WRITER = Principal(key_id="w", name="writer", scopes=frozenset({"write"}))
BOOKS = expected_books()
LOCKED = [b for b in BOOKS if b["locked"]][:2]
OPEN = [b for b in BOOKS if not b["locked"]][:6]


class Aborted(Exception):
    """Raised inside a call to roll its transaction back."""


db = database_fixture(["analysis"])


def call(db: Database, up: Upstream, principal: Principal = WRITER) -> AbstractAsyncContextManager[CallContext]:
    return service_call(db, principal, feature_settings={AnalysisSettings: AnalysisSettings(upstreams=up.registry)})


async def seed(db: Database, aid: str, books: list[dict[str, Any]]) -> None:
    async with db.transaction() as s:
        repo = AnalysisRepository(s)
        pid = await repo.ensure_project("lab")
        await repo.upsert_records(pid, aid, "book", 1, [(str(b["id"]), dict(b)) for b in books], 3600)


async def run(db: Database, up: Upstream, **kw: Any) -> ActOut:
    async with call(db, up) as ctx:
        return await act(ctx, ActIn.model_validate({"project": "lab", "model": "book", **kw}))


async def copy(db: Database, aid: str, where: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    async with db.transaction() as s:
        repo = AnalysisRepository(s)
        pid = await repo.project_id("lab")
        assert pid is not None
        return (await repo.filter(pid, aid, "book", parse_where(where), 100, 0))[1]


async def runs(db: Database, aid: str) -> list[dict[str, Any]]:
    """The act runs recorded for a session, oldest first."""
    async with db.transaction() as s:
        repo = AnalysisRepository(s)
        return await repo.dicts("SELECT * FROM analysis_act_runs WHERE analysis_id = :aid ORDER BY id", {"aid": aid})


def upstream_book(up: Upstream, book_id: int) -> httpx.Response:
    return httpx.get(f"{up.url}/api/books/{book_id}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)


async def test_what_is_refused_before_anything_is_sent(db: Database, bookshelf: Upstream) -> None:
    await seed(db, "refusals", OPEN[:1])

    async def refused(error: type[CairnError], **kw: Any) -> CairnError:
        with pytest.raises(error) as caught:
            await run(db, bookshelf, **{"analysis_id": "refusals", **kw})
        return caught.value

    def field(err: CairnError) -> str:
        return str(err.details["errors"][0]["field"])  # type: ignore[index]

    await refused(Forbidden, action="delete", user_id="u1")
    assert field(await refused(InvalidInput, action="delete", model="author")) == "model"
    assert field(await refused(InvalidInput, action="update")) == "attributes"
    assert field(await refused(InvalidInput, action="update", attributes={"pages": 3})) == "attributes.pages"
    empty = await refused(NotFound, action="delete", analysis_id="never-ingested")
    assert empty.suggestions == ["Run analysis_ingest(model='book') in this session first"]
    await refused(NotFound, action="delete", project="nowhere")
    assert bookshelf.stats()["requests"] == {}  # nothing went upstream


async def test_a_dry_run_reports_the_scope_and_sends_nothing(db: Database, bookshelf: Upstream) -> None:
    await seed(db, "dry", OPEN)
    out = await run(db, bookshelf, analysis_id="dry", action="delete", dry_run=True)
    assert out.dry_run and out.matched_count == len(OPEN) and out.sample_ids == [str(b["id"]) for b in OPEN]
    assert out.sample_data is not None and len(out.sample_data) == 3 and out.sample_data[0]["ingestedAt"]
    assert out.ingestedAtRange is not None and out.ingestedAtRange.earliest is not None
    assert out.warnings is None and "would apply to 6 book record(s)" in out.message
    none = await run(db, bookshelf, analysis_id="dry", action="delete", dry_run=True, where={"colour": "red"})
    assert none.matched_count == 0 and none.warnings and "no book record has a field 'colour'" in none.warnings[0]
    assert bookshelf.stats()["requests"] == {} and len(await copy(db, "dry")) == len(OPEN)


async def test_a_live_update_is_judged_per_record_and_the_copy_follows(db: Database, bookshelf: Upstream) -> None:
    books = [*OPEN[:3], *LOCKED]
    already = dict(OPEN[0], title="Kept")
    await seed(db, "update", [already, *books[1:]])
    assert upstream_book(bookshelf, OPEN[0]["id"]).json()["title"] != "Kept"
    out = await run(db, bookshelf, analysis_id="update", action="update", attributes={"title": "Kept"})
    assert out.summary is not None and not out.dry_run
    assert (out.summary.total, out.summary.succeeded, out.summary.failed) == (5, 3, 2)
    assert out.summary.already_done == 1  # the copy already held the title
    assert {e.record_id for e in out.sample_errors or []} == {str(b["id"]) for b in LOCKED}
    assert {(e.status_code, e.message) for e in out.sample_errors or []} == {(409, "book is locked")}
    assert out.message.startswith("update: 3 of 5 succeeded (1 already in the requested state), 2 failed.")
    assert out.run_id is not None and f"Recorded as act run {out.run_id}" in out.message
    (recorded,) = await runs(db, "update")
    assert (recorded["state"], recorded["key_name"], recorded["transport"]) == ("finished", "writer", "test")
    assert (recorded["total"], recorded["succeeded"], recorded["failed"], recorded["already_done"]) == (5, 3, 2, 1)
    assert sorted(recorded["failed_ids"]) == sorted(str(b["id"]) for b in LOCKED)
    assert recorded["attributes"] == {"title": "Kept"} and recorded["where"] is None
    for book in OPEN[:3]:
        assert upstream_book(bookshelf, book["id"]).json()["title"] == "Kept"
    kept = {r["id"]: r["title"] for r in await copy(db, "update")}
    assert kept == {**{b["id"]: "Kept" for b in OPEN[:3]}, **{b["id"]: b["title"] for b in LOCKED}}


async def test_a_live_delete_counts_missing_books_as_done_and_refuses_odd_ids(
    db: Database, bookshelf: Upstream
) -> None:
    ghost = dict(OPEN[1], id=999_999)
    await seed(db, "delete", [OPEN[0], ghost])
    async with db.transaction() as s:
        repo = AnalysisRepository(s)
        pid = await repo.ensure_project("lab")
        await repo.upsert_records(pid, "delete", "book", 1, [("..", {"id": ".."})], 3600)
    out = await run(db, bookshelf, analysis_id="delete", action="delete")
    assert out.summary is not None
    assert (out.summary.succeeded, out.summary.already_done, out.summary.failed) == (2, 1, 1)
    errors = out.sample_errors or []
    assert [e.record_id for e in errors] == [".."] and "cannot name a record in a URL path" in errors[0].message
    assert upstream_book(bookshelf, OPEN[0]["id"]).status_code == 404
    assert [r["id"] for r in await copy(db, "delete")] == [".."]  # the refused record stays
    nothing = await run(db, bookshelf, analysis_id="delete", action="delete", where={"id": 5})
    assert nothing.summary is not None and nothing.summary.total == 0 and nothing.warnings


async def test_the_rollback_step_records_what_the_upstream_accepted(db: Database, bookshelf: Upstream) -> None:
    await seed(db, "rollback", OPEN[:2])
    with pytest.raises(Aborted):
        async with call(db, bookshelf) as ctx:
            args = ActIn(project="lab", analysis_id="rollback", model="book", action="update", attributes={"rating": 1})
            out = await act(ctx, args)
            assert out.summary is not None and out.summary.succeeded == 2
            steps = list(ctx.rollback_steps)
            raise Aborted  # the call's transaction does not commit
    assert {r["rating"] for r in await copy(db, "rollback")} != {1}  # the copy's update was rolled back
    assert await runs(db, "rollback") == []  # the run's record was rolled back with the call
    async with db.transaction() as s:
        for step in steps:
            await step(s)
    assert {r["rating"] for r in await copy(db, "rollback")} == {1}
    (recorded,) = await runs(db, "rollback")
    assert (recorded["state"], recorded["total"], recorded["succeeded"], recorded["failed"]) == ("interrupted", 2, 2, 0)


async def test_a_record_cut_off_by_its_budget_is_unknown(db: Database, bookshelf: Upstream) -> None:
    slow, quick = OPEN[:2]
    await seed(db, "budget", [slow, quick])
    bookshelf.faults({"path": f"/api/books/{slow['id']}", "method": "PATCH", "mode": "hang", "hang_seconds": 3})
    out = await run(
        db, bookshelf, analysis_id="budget", action="update", attributes={"status": "reading"}, record_seconds=1
    )
    assert out.summary is not None and (out.summary.succeeded, out.summary.unknown) == (1, 1)
    assert out.unknown_ids == [str(slow["id"])] and not out.summary.deadline_reached
    assert "ran out of their time (record_seconds)" in out.message and "run the same act again" in out.message
    statuses = {r["id"]: r["status"] for r in await copy(db, "budget")}
    assert statuses == {slow["id"]: slow["status"], quick["id"]: "reading"}  # only the accepted one follows
