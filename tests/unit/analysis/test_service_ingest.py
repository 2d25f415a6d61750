"""app/analysis/service_ingest.py (pure parts), without a server."""

from __future__ import annotations

import pytest

from app.analysis.catalog import ChildCfg, PaginationCfg, load_catalog
from app.analysis.config import DEMO_REGISTRY
from app.analysis.schemas import IngestIn
from app.analysis.service_ingest import _Batch, _Children, _Records, _Walk, project_fields, upstream_params
from app.analysis.upstream import Page, Shaper, UpstreamFailure, dig
from app.core.errors import InvalidInput


def test_flatten_projection_and_filters() -> None:
    row = Shaper()({"id": 1, "author": {"id": 7, "name": "A"}, "_links": {"self": "x"}, "tags": [1]})
    assert row == {"id": 1, "author_id": 7, "author_name": "A", "tags": [1]}
    assert project_fields(row, ["author_name"], {"id"}) == {"id": 1, "author_id": 7, "author_name": "A"}
    assert dig({"_embedded": {"books": [1]}}, "_embedded.books") == [1] and dig([1], "") == [1]
    model = load_catalog(DEMO_REGISTRY).model("book").cfg
    assert upstream_params(model, {"status": "done", "min_rating": 3, "genre": None}) == {
        "status": "done",
        "min_rating": 3,
    }
    with pytest.raises(InvalidInput):
        upstream_params(model, {"colour": "red"})


def test_records_are_shaped_keyed_and_cut_to_the_asked_fields() -> None:
    model = load_catalog(DEMO_REGISTRY).model("book").cfg
    records = _Records.of(model, ["title"])
    rid, data = records.record({"id": 3, "title": "T", "rating": 4})
    assert (rid, data) == ("3", {"id": 3, "title": "T"})
    assert records.seen == {"id", "title", "rating"}
    assert _Records.of(model, ["colour"]).warnings() == []  # nothing seen yet: no warning
    missing = _Records.of(model, ["colour"])
    missing.record({"id": 1})
    assert missing.warnings() and "colour" in missing.warnings()[0]


def test_a_walk_starts_where_asked_and_counts_each_page() -> None:
    pagination = load_catalog(DEMO_REGISTRY).model("book").cfg.pagination
    resumed = _Walk.start(
        {"next_token": "t", "pages_done": 4, "total_available": 90},
        IngestIn.model_validate({"analysis_id": "a", "model": "m"}),
        20,
        pagination,
    )
    assert (resumed.token, resumed.pages_done, resumed.total) == ("t", 4, 90)
    third = _Walk.start(None, IngestIn.model_validate({"analysis_id": "a", "model": "m", "page": 3}), 20, pagination)
    assert third.pages_done == 2
    walk = _Walk(token=None, pages_done=0, total=None)
    walk.took(Page(items=[{}] * 10, next_token="n", total=100), [("1", {"a": 1, "b": 2})], per_page=20)
    assert (walk.pages, walk.pages_done, walk.width, walk.largest, walk.total, walk.token) == (1, 1, 2, 10, 100, "n")
    assert walk.capped_size  # ten items where twenty were asked for, and more pages follow
    walk.took(Page(items=[], next_token=None, total=None), [], per_page=20)
    assert (walk.pages, walk.width, walk.total, walk.token) == (2, 2, 100, None)


def test_a_batch_moves_its_cursor_up_to_the_first_failure_and_keeps_later_children() -> None:
    child = ChildCfg(path="/books/{parent_id}/reviews")
    records = _Records.of(child, None, "book_id")
    batch = _Batch(parents=[(11, "a"), (12, "b"), (13, "c")], cursor=10, following=30, batches_done=0)
    results: list[_Children | UpstreamFailure] = [
        _Children([{"id": 1}], truncated=False),
        UpstreamFailure("down"),
        _Children([{"id": 2}], truncated=True),
    ]
    batch.collect(results, records, "book_id", "book")
    assert (batch.cursor, batch.processed, batch.error) == (11, 1, "book b: down")
    assert (batch.fetched, batch.failed) == (2, ["b"])  # the reply counts parents listed, not the cursor
    assert batch.truncated == ["c"]
    assert [d for _, d in batch.keyed] == [{"id": 1, "book_id": "a"}, {"id": 2, "book_id": "c"}]


def test_pages_left_follow_the_page_size_the_upstream_sends() -> None:
    offset = PaginationCfg(style="offset")
    walk = _Walk(token=0, pages_done=0, total=2300)
    items = [{"id": i} for i in range(40)]  # 50 asked for, 40 sent: capped without a word
    walk.took(Page(items=items, next_token=40, total=2300), [(str(i), {"id": i}) for i in range(40)], per_page=50)
    assert walk.capped_size and walk.pages_left(50, offset) == 57  # 2260 records left at 40 a page
    page = PaginationCfg(style="page")
    assert walk.pages_left(50, page) == 57  # the items fetched so far, whatever the style
    done = _Walk(token=None, pages_done=3, total=120)
    assert done.pages_left(50, offset) == 0
    assert _Walk(token=5, pages_done=1, total=None).pages_left(50, offset) is None


def test_renamed_keys_past_the_listed_ones_are_named_as_cut() -> None:
    records = _Records.of(ChildCfg(path="/x/{parent_id}/y"), None)
    records.record({f"key-{n}": n for n in range(25)})
    assert records.renamed() is not None and len(records.renamed() or {}) == 20
    cut = records.cut("s1", None, "event")
    assert cut is not None and cut.left_out.startswith("5 more renamed key(s)") and cut.next_call is not None
    assert cut.next_call.tool == "analysis_query"
    assert cut.next_call.args == {"analysis_id": "s1", "mode": "describe", "model": "event"}
    assert records.cut("s1", "p", "event").next_call.args["project"] == "p"  # type: ignore[union-attr]
    few = _Records.of(ChildCfg(path="/x/{parent_id}/y"), None)
    few.record({"a-b": 1})
    assert few.cut("s1", None, "event") is None
