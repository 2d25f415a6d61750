"""app/analysis/summaries.py (pure parts), without a server."""

from __future__ import annotations

from app.analysis.summaries import summarize


def test_page_summary_text() -> None:
    rows = [
        {"id": i, "status": s, "rating": r, "at": f"2026-0{m}-01T00:00:00Z", "author_id": 3, "title": f"T{i}"}
        for i, (s, r, m) in enumerate([("done", 5, 1), ("done", 1, 3), ("open", None, 2), ("done", 3, 4)])
    ]
    text = summarize("book", "page 2", rows)
    assert text.startswith("book page 2 (4 records): ")
    assert "status done 3, open 1" in text and "rating 1-5 avg 3 median 3 (1 empty)" in text
    assert "at 2026-01-01..2026-04-01" in text and "author_id" not in text and "T1" not in text
