"""app/analysis/service.py with a real call context on a database of its own: impersonation kept to
admins, findings stored with their lifetime and their vectors queued, a session cleared (both layers,
only its own), and conditions that cannot match named as warnings (another case included)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from app.analysis import service
from app.analysis.repository import FINDING_TARGET, AnalysisRepository
from app.analysis.schemas import ClearIn, FindingIn, StoreIn
from app.analysis.validation import parse_where
from app.core.context import CallContext, Principal
from app.core.db import Database
from app.core.errors import Forbidden, InvalidInput, NotFound
from tests.support.calls import service_call
from tests.support.databases import database_fixture

WRITER = Principal(key_id="w", name="writer", scopes=frozenset({"write"}))
ADMIN = Principal(key_id="a", name="admin", scopes=frozenset({"admin"}))


db = database_fixture(["analysis"])


def call(db: Database, principal: Principal = WRITER) -> AbstractAsyncContextManager[CallContext]:
    return service_call(db, principal)


async def test_impersonation_is_for_admins(db: Database) -> None:
    async with call(db) as ctx:
        service.check_impersonation(ctx, None)
        with pytest.raises(Forbidden, match="admin"):
            service.check_impersonation(ctx, "u-1")
    async with call(db, ADMIN) as ctx:
        service.check_impersonation(ctx, "u-1")


async def test_findings_are_stored_with_their_lifetime_and_vectors_queued(db: Database) -> None:
    async with call(db) as ctx:
        out = await service.store(
            ctx,
            StoreIn(project="lab", analysis_id="s1", findings=[FindingIn(finding="a"), FindingIn(finding="b")]),
        )
        assert out.stored == 2 and len(out.ids) == 2 and not out.persistent and out.tokens > 0
        assert out.expires_at is not None and "(expire at " in out.message
        kept = await service.store(
            ctx, StoreIn(project="lab", analysis_id="s1", findings=[FindingIn(finding="c")], persistent=True)
        )
        assert kept.expires_at is None and "kept until analysis_clear" in kept.message
        queued = await AnalysisRepository(ctx.session).scalars(
            "SELECT ref FROM embedding_queue WHERE target = :t ORDER BY ref::bigint", {"t": FINDING_TARGET}
        )
        assert queued == [str(i) for i in [*out.ids, *kept.ids]]
        big = FindingIn(finding="d", metadata={"blob": "m" * service.MAX_METADATA_CHARS})
        with pytest.raises(InvalidInput) as bad:
            await service.store(ctx, StoreIn(project="lab", analysis_id="s1", findings=[FindingIn(finding="e"), big]))
        assert bad.value.details["errors"][0]["field"] == "findings.1.metadata"  # type: ignore[index]


async def test_clearing_deletes_both_layers_of_one_session(db: Database) -> None:
    async with call(db) as ctx:
        repo = AnalysisRepository(ctx.session)
        pid = await service.project_for_write(ctx, repo, "shop")
        await repo.upsert_records(pid, "c1", "order", 1, [("1", {"a": 1}), ("2", {"a": 2})], 3600)
        await repo.upsert_records(pid, "c2", "order", 1, [("1", {"a": 1})], 3600)
        await service.store(ctx, StoreIn(project="shop", analysis_id="c1", findings=[FindingIn(finding="f")]))
        out = await service.clear(ctx, ClearIn(project="shop", analysis_id="c1"))
        assert (out.records_deleted, out.findings_deleted) == (2, 1) and "Cleared 2" in out.message
        assert await repo.session_models(pid, "c2") == [("order", 1)]  # the other session stays
        none = await service.clear(ctx, ClearIn(project="never-made", analysis_id="c1"))
        assert (none.records_deleted, none.findings_deleted) == (0, 0)
        assert await repo.project_id("never-made") is None  # clearing creates no project
        assert await service.project_for_read(ctx, repo, "shop", "c2") == pid
        with pytest.raises(NotFound, match="No analysis session 'x'"):
            await service.project_for_read(ctx, repo, "never-made", "x")


async def test_conditions_that_cannot_match_are_warned(db: Database) -> None:
    async with call(db) as ctx:
        repo = AnalysisRepository(ctx.session)
        pid = await repo.ensure_project("warn")
        rows: list[tuple[str | None, dict[str, Any]]] = [("1", {"n": 1, "s": "x", "at": 1700000000, "d": "2026-01-01"})]
        await repo.upsert_records(pid, "w", "m", 1, rows, 3600)
        assert await service.where_warnings(repo, pid, "w", "m", parse_where(None), {}) is None
        fine = parse_where({"n": 1, "s": "x", "d": {"$gte": "2025-12-01"}})
        assert await service.where_warnings(repo, pid, "w", "m", fine, {"stratify_by": ("s", "any")}) is None
        bad = parse_where({"n": "1", "ghost": 2, "s": {"$gt": 3}, "at": {"$lt": "2026-01-01"}})
        warned = await service.where_warnings(repo, pid, "w", "m", bad, {"stratify_by": ("ghost", "any")})
        assert warned == [
            "where.n: 'n' holds no string values, so this exact match finds nothing",
            "where.ghost: no m record has a field 'ghost' (mode describe lists the fields)",
            "where.s.>: 's' holds no numbers, so a numeric comparison matches nothing",
            "where.at.<: 'at' holds no ISO dates, so a date comparison matches nothing (epoch numbers: declare "
            "the attribute with format epoch_seconds or epoch_millis in the registry and ingest again)",
            "stratify_by: no m record has a field 'ghost' (mode describe lists the fields)",
        ]
        cased = await service.where_warnings(repo, pid, "w", "m", parse_where({"s": "X"}), {})
        assert cased == [
            'where.s: no m record has "X" exactly, but "x" (1 record(s)) differ only in case (exact values match '
            "case-sensitively): use the stored spelling"
        ]
        assert await service.where_warnings(repo, pid, "w", "m", parse_where({"s": "X"}), {}, False) is None
