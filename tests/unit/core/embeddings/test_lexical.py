"""app/core/embeddings/lexical.py: the query vector, idf, coverage, the rare-word tsquery and the statement."""

from __future__ import annotations

import math

import pytest
from pgvector import SparseVector

from app.core.embeddings.lexical import (
    DIMENSIONS,
    K1,
    LexicalIndex,
    LexicalQuery,
    Term,
    counts_when_missing,
    idf,
    ranked,
)


def test_idf_is_bm25s_and_always_positive() -> None:
    assert math.isclose(idf(100, 10), math.log(1 + 90.5 / 10.5))
    assert idf(100, 100) > 0 and idf(100, 1) > idf(100, 50)


def test_the_query_vector_sorts_dimensions_and_adds_colliding_lexemes() -> None:
    query = LexicalQuery((Term("b", 7, 3, 1.5), Term("a", 2, 1, 2.0), Term("c", 7, 9, 0.25)))
    assert query.vector == SparseVector({1: 2.0, 6: 1.75}, DIMENSIONS)  # indices from 0, dimensions from 1
    assert query.vector.to_text() == f"{{2:2.0,7:1.75}}/{DIMENSIONS}"  # the SQL form: dimensions from 1
    assert math.isclose(query.best, 3.75 * (K1 + 1))
    assert query.coverage(query.best / 2) == pytest.approx(0.5)
    assert query.coverage(query.best * 3) == 1.0 and query.coverage(-1) == 0.0
    assert LexicalQuery(()).coverage(5.0) == 0.0 and LexicalQuery(()).vector == SparseVector({}, DIMENSIONS)


def test_rare_lexemes_become_a_quoted_tsquery() -> None:
    query = LexicalQuery((Term("o'neil", 1, 5, 3.0), Term("back\\slash", 2, 50, 2.0), Term("cell", 3, 9000, 0.1)))
    assert query.rare(100) == "'o''neil' | 'back\\\\slash'"
    assert query.rare(1) is None


def test_the_statement_adds_the_rare_word_scan_only_when_asked() -> None:
    index = LexicalIndex("memories")
    plain = index.top_sql("m", "m.project_id = :p", rare=False)
    assert "ORDER BY m.lexical <#> CAST(:lq AS sparsevec) LIMIT :k" in plain and ":rare" not in plain
    both = index.top_sql("m", "m.project_id = :p", rare=True)
    assert both.count("UNION ALL") == 1 and "m.tsv @@ CAST(:rare AS tsquery)" in both
    assert index.score_sql("m") == "(-(m.lexical <#> CAST(:lq AS sparsevec)))"


@pytest.mark.parametrize("name", ["Memories", "memories; drop", "1table"])
def test_names_must_be_plain_identifiers(name: str) -> None:
    with pytest.raises(ValueError):
        LexicalIndex(name)
    with pytest.raises(ValueError):
        LexicalIndex("memories").top_sql(name, "TRUE", rare=False)


def test_ranked_drops_zero_scores_and_sorts() -> None:
    rows = [{"id": 1, "score": 0.5}, {"id": 2, "score": 0.0}, {"id": 3, "score": 2.0}]
    assert ranked(rows) == [(3, 2.0), (1, 0.5)]


def test_rare_means_a_share_of_the_table_within_a_floor_and_a_ceiling() -> None:
    terms = tuple(Term(f"t{df}", df, df, 1.0) for df in (10, 49, 60, 900, 1500, 2500))
    assert LexicalQuery(terms, rows=45).rare() == "'t10' | 't49'"  # a small table: the floor, 50 rows
    assert LexicalQuery(terms, rows=100_000).rare() == "'t10' | 't49' | 't60' | 't900'"  # 1%: 1,000 rows
    assert LexicalQuery(terms, rows=10_000_000).rare() == "'t10' | 't49' | 't60' | 't900' | 't1500'"  # 2,000


def test_query_words_found_in_no_row_count_against_coverage() -> None:
    # "weekly yoga class schedule" over engineering notes: only "schedul" occurs, in many rows.
    n = 60
    found = (Term("schedul", 11, 6, idf(n, 6)),)
    absent = tuple(Term(w, i, 0, idf(n, 0)) for i, w in enumerate(("week", "yoga", "class")))
    alone, whole = LexicalQuery(found, n), LexicalQuery(found, n, absent)
    full_match = found[0].idf * (K1 + 1)  # a row holding "schedul" with saturated frequency
    assert alone.coverage(full_match) == 1.0  # what the found words alone would claim
    assert whole.coverage(full_match) == pytest.approx(idf(n, 6) / (idf(n, 6) + 3 * idf(n, 0)))
    assert whole.coverage(full_match) < 0.25
    assert whole.vector == alone.vector  # a word in no row adds nothing to the scan
    assert LexicalQuery((), n, absent).coverage(1.0) == pytest.approx(1.0 / LexicalQuery((), n, absent).best)


def test_only_known_words_found_in_no_row_count_against_coverage() -> None:
    assert counts_when_missing("yoga", ["yoga"]) and counts_when_missing("walnut", ["Walnuts", "walnut"])
    assert counts_when_missing("cafe", ["Café"])  # accents dropped, as the uncased vocabulary spells it
    # typos and acronyms are not words of the vocabulary: their absence says nothing of the topic
    for typo_or_acronym in ("reatment", "assosci", "PTPRS", "OmpF", "tirasemtiv"):
        assert not counts_when_missing(typo_or_acronym.lower(), [typo_or_acronym]), typo_or_acronym
    for identifier in ("kras-ralb", "alpha-tocopheryl", "g34r/v", "400mg", "g94p", "2.3"):
        assert not counts_when_missing(identifier, [identifier, "alpha"]), identifier
    assert not counts_when_missing("schedul")  # a stem outside the vocabulary, no source word given
