"""BM25 ranking inside PostgreSQL: one inner-product index scan per query.

A family ranks text with a `LexicalIndex`: its table has a generated `tsvector` column under a text
search configuration with stemming (`english`: Snowball stems, stop words dropped) and a generated
`sparsevec` column `bm25_document(to_tsvector(config, text))` (core migration `core_0005`) with an
HNSW inner-product index. The document vector holds, per lexeme `t` (its dimension `lexeme_dim(t)`,
an md5 hash into 1..10^9), BM25's saturated term frequency

    w(t, d) = tf · (k1 + 1) / (tf + k1 · (1 - b + b · dl / L))

with k1 = 1.2, b = 0.75, `dl` the document's lexeme count and `L` a fixed reference length of 100
lexemes (a generated column cannot read the corpus average; the ranking moves little with it, as
scoring SciFact's train split with its own, longer average showed). The query vector holds each
query lexeme's idf, so the inner product is the document's BM25 score:

    idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))

`N` and `df` are the whole table's (as a search engine's shard statistics are), read without a
scan: the planner statistics of the `tsvector` column (`pg_stats.most_common_elems`, refreshed by
autovacuum's ANALYZE) give the frequency of every common lexeme, and the rare ones, which those
statistics leave out, are counted through the GIN index (cheap: they are rare; capped at
`COUNT_CAP`). The statistics are cached per table for `STATS_TTL` seconds.

`coverage` turns a score into [0, 1]: the score over the best a document could score for this
query, Σ idf · (k1 + 1) over every lexeme of the query, those found in no row included (their idf is
that of a lexeme in no row, the highest there is). A query of five words of which one ordinary word
occurs in the table thus covers little, however well a row matches that word: a word the corpus
never uses is evidence that the query is about something else. Only a word of the language counts
so (`counts_when_missing`): one of the whole words of the bundled model's WordPiece vocabulary (about
20,000 common English words, `known_words`), with no hyphen, slash or digit. A typo (`reatment`), a
gene or product acronym (`PTPRS`, `OmpF`), a hyphenated compound (`kras-ralb`, whose parts the parser
also emits), a path (`a/b`) or a version names nothing the corpus is known not to be about: its absence
says little, and counting such tokens lowered SciFact's hybrid nDCG@10 (docs/memory.md).

An index may keep its HNSW graph in a side table (`LexicalIndex.side`), so that a write does not pay
for the graph: inserting into an HNSW index is a search of the graph per row, most of the time of a
bulk insert. A trigger on the table (the family's migration) lists each new row, and each row whose
`tsv` or copied columns changed, in the pending table with a version; a background mover
(`app.core.embeddings.lexical_mover`) copies pending rows into the side table in batches and drops
them from the pending list unless they changed again meanwhile. A search reads both in one statement:
the side table's index for the rows not pending, and every pending row of the scope scored exactly
(`top_sql`), so a row is found from the moment its write commits, and scored from its current text.

Names (table, columns, configuration) are written in code, never a caller's value, and checked as
identifiers all the same; the query text is always a bound parameter.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from cachetools import TTLCache
from pgvector import SparseVector

from app.core.embeddings.tokens import get_tokenizer
from app.core.embeddings.vectors import identifier

if TYPE_CHECKING:
    from app.core.repository import Repository

K1 = 1.2  # these three are written into bm25_document (core_0005): change both or neither
B = 0.75
REFERENCE_LENGTH = 100
DIMENSIONS = 1_000_000_000  # the sparsevec dimension of bm25_document and of the query vector
COUNT_CAP = 10_000  # a rare lexeme's count through the GIN index stops here
STATS_TTL = 60.0  # seconds a table's statistics are reused
RARE_DF = 2_000  # lexemes in at most this many rows (and RARE_SHARE of them) are also looked up through
RARE_SHARE = 0.01  # the GIN index; any lexeme in at most RARE_FLOOR rows is (a small table: every one)
RARE_FLOOR = 50


@dataclass(frozen=True)
class LexicalIndex:
    """A table ranked by BM25: `tsv` is its generated `tsvector` column under `config`, `vector` its
    generated `bm25_document` column (HNSW, `sparsevec_ip_ops`), `key` its key column.

    With `side`, the HNSW index is on that table instead (module docstring): its columns are `key`,
    the `copied` columns and `vector`, named as in `table`, so a search's filter reads the same on
    both; `pending` is the table of rows waiting to be copied (`key`, `ver`, `queued_at`). A search's
    filter may then name only `copied` columns."""

    table: str
    tsv: str = "tsv"
    vector: str = "lexical"
    config: str = "english"
    key: str = "id"
    side: str | None = None
    pending: str | None = None
    copied: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in (self.table, self.tsv, self.vector, self.config, self.key, *self.copied):
            identifier(name)
        if (self.side is None) != (self.pending is None):
            raise ValueError("a side table needs a pending table, and the other way round")
        for table in (self.side, self.pending):
            if table is not None:
                identifier(table)

    def score_sql(self, alias: str, param: str = "lq") -> str:
        """The BM25 score of row `alias` for the query vector bound as `:param` (0 without a shared lexeme)."""
        return f"(-({identifier(alias)}.{self.vector} <#> CAST(:{identifier(param)} AS sparsevec)))"

    def order_sql(self, alias: str, param: str = "lq") -> str:
        """The ordering expression of the inner-product index (ascending = best first)."""
        return f"{identifier(alias)}.{self.vector} <#> CAST(:{identifier(param)} AS sparsevec)"

    def top_sql(self, alias: str, where: str, rare: bool) -> str:
        """The best `:k` rows under `where` for the query vector `:lq`, as (`key` AS id, score), best
        first, zero scores included: one scan of the inner-product HNSW index (with a side table: of
        the rows not pending there, and the pending rows scored exactly), and with `rare` the
        rows holding a rare lexeme (`:rare`, a tsquery), found through the GIN index and scored
        exactly. An HNSW walk moves only towards better scores; where no row near its path shares a
        lexeme with the query (every score 0), it cannot find the few rows that do, so those come
        from the GIN index."""
        a = identifier(alias)
        score, order = self.score_sql(a), self.order_sql(a)
        indexed = self.table if self.side is None else self.side
        fresh = (
            "" if self.pending is None else f" AND {a}.{self.key} NOT IN (SELECT p.{self.key} FROM {self.pending} p)"
        )
        parts = [
            f"(SELECT {a}.{self.key} AS id, {score} AS score FROM {indexed} {a} WHERE {where}{fresh} "
            f"ORDER BY {order} LIMIT :k)"
        ]
        if self.pending is not None:
            # Not yet in the side table, or changed since it was copied there: scored from the row itself.
            # The listed keys as one array, looked up by key: as a join, the planner may instead sort the
            # whole scope by score and probe the list row by row, until k are found.
            parts.append(
                f"(SELECT {a}.{self.key} AS id, {score} AS score FROM {self.table} {a} "
                f"WHERE {a}.{self.key} = ANY(ARRAY(SELECT p.{self.key} FROM {self.pending} p)) AND {where} "
                "ORDER BY 2 DESC LIMIT :k)"
            )
        if rare:
            parts.append(
                f"(SELECT {a}.{self.key} AS id, {score} AS score FROM {self.table} {a} WHERE {where} "
                f"AND {a}.{self.tsv} @@ CAST(:rare AS tsquery) ORDER BY 2 DESC LIMIT :k)"
            )
        return f"SELECT id, max(score) AS score FROM ({' UNION ALL '.join(parts)}) AS top GROUP BY id"


@dataclass(frozen=True)
class Term:
    """One query lexeme: its stem, its dimension in the document vectors, its document frequency
    (counted or estimated) and idf."""

    lexeme: str
    dim: int
    df: float
    idf: float


@dataclass(frozen=True)
class LexicalQuery:
    """A query's lexemes found in the table, with their idf (empty when none is), and the idf of
    those found in no row, which count in `best` only."""

    terms: tuple[Term, ...]
    rows: int = 0  # the table's row count the idf came from
    missing: tuple[Term, ...] = ()

    @property
    def best(self) -> float:
        """The score of a document holding every lexeme of the query, found or not, with saturated
        frequency: Σ idf · (k1 + 1)."""
        return sum(t.idf for t in (*self.terms, *self.missing)) * (K1 + 1)

    @property
    def vector(self) -> SparseVector:
        """The query as pgvector's `SparseVector` (idf per dimension; colliding lexemes add up), which
        the connection's `sparsevec` codec sends in binary (`app.core.db.register_vector_codec`). Its
        indices count from 0: dimension `d` of the SQL form is index `d - 1`."""
        dims: dict[int, float] = {}
        for t in self.terms:
            dims[t.dim - 1] = dims.get(t.dim - 1, 0.0) + t.idf
        return SparseVector(dims, DIMENSIONS)

    def rare(self, cap: float | None = None) -> str | None:
        """A tsquery of the lexemes in at most `cap` rows (`'a' | 'b'`; default: `RARE_DF` and
        `RARE_SHARE` of the table, but never under `RARE_FLOOR`), None when there is none."""
        if cap is None:
            cap = max(RARE_FLOOR, min(RARE_DF, RARE_SHARE * self.rows))
        found = [t.lexeme for t in self.terms if t.df <= cap]
        return " | ".join("'" + lex.replace("\\", "\\\\").replace("'", "''") + "'" for lex in found) or None

    def coverage(self, score: float) -> float:
        """`score` over `best`, within [0, 1] (0 for an empty query)."""
        best = self.best
        return min(1.0, max(0.0, score / best)) if best > 0 else 0.0


_IDENTIFIER = re.compile(r"[-/\d]")


@cache
def known_words() -> frozenset[str]:
    """The whole words (letters only, no `##` continuation) of the packaged tokenizer's vocabulary:
    a list of common English words that every deployment has, whatever its embedding provider."""
    return frozenset(t for t in get_tokenizer().get_vocab() if t.isalpha())


def plain_word(token: str) -> str:
    """`token` lower-cased with its accents dropped, as the uncased vocabulary spells words."""
    decomposed = unicodedata.normalize("NFKD", token.lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def counts_when_missing(lexeme: str, tokens: Sequence[str] = ()) -> bool:
    """Whether a query lexeme found in no row lowers coverage: a plain lexeme (no hyphen, slash or
    digit) that is itself, or comes from a query word that is, one of `known_words` (so "walnuts" counts
    through its stem "walnut") does; a typo, an acronym or an identifier does not (module docstring).
    `tokens` are the query words the lexeme came from."""
    if _IDENTIFIER.search(lexeme) is not None:
        return False
    words = known_words()
    return lexeme in words or any(plain_word(t) in words for t in tokens)


def idf(n: int, df: float) -> float:
    """BM25's idf of a lexeme in `df` of `n` documents (always positive)."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


@dataclass
class _Stats:
    rows: int
    frequent: dict[str, float]  # lexeme -> share of rows, for the lexemes the planner tracks


_STATS: TTLCache[tuple[str, str], _Stats] = TTLCache(maxsize=64, ttl=STATS_TTL)
# A lexeme as a one-lexeme tsquery: quoted, its backslashes and quotes escaped (as `rare` does).
_QUOTED = "chr(39) || replace(replace(u.lexeme, chr(92), chr(92) || chr(92)), chr(39), chr(39) || chr(39)) || chr(39)"


async def _table_stats(repo: Repository, index: LexicalIndex) -> _Stats:
    place = (str(getattr(repo.session.bind, "url", "")), index.table)  # one process may serve several databases
    cached = _STATS.get(place)
    if cached is not None:
        return cached
    row = await repo.row(
        "SELECT c.reltuples::bigint AS rows, s.most_common_elems::text::text[] AS elems, "
        "s.most_common_elem_freqs AS freqs FROM pg_class c LEFT JOIN pg_stats s "
        "ON s.schemaname = current_schema() AND s.tablename = :t AND s.attname = :col "
        "WHERE c.oid = to_regclass(:t)",
        {"t": index.table, "col": index.tsv},
    )
    rows = int(row["rows"]) if row is not None and row["rows"] is not None else -1
    frequent: dict[str, float] = {}
    if row is not None and row["elems"] and row["freqs"]:
        # The last three frequencies are the minimum, the maximum and the share of empty vectors.
        frequent = dict(zip(row["elems"], row["freqs"][: len(row["elems"])], strict=True))
    if rows < 0 or not frequent:
        # Never analysed (a new or small table): count, and count every lexeme.
        rows = int(await repo.scalar(f"SELECT count(*) FROM {index.table}"))
        frequent = {}
    stats = _Stats(rows=rows, frequent=frequent)
    _STATS[place] = stats
    return stats


def forget_stats() -> None:
    """Drop the cached table statistics (tests that load a table and rank at once)."""
    _STATS.clear()


async def lexical_query(repo: Repository, index: LexicalIndex, text: str) -> LexicalQuery:
    """The lexemes of `text` under the index's configuration, with their idf (the planner's
    frequencies for common lexemes, a capped GIN count for the others); the known words in no row go
    to `missing`, which lowers every coverage of the query."""
    stats = await _table_stats(repo, index)
    known = list(stats.frequent)
    rows = await repo.rows(
        f"SELECT u.lexeme, w.tokens, lexeme_dim(u.lexeme) AS dim, CASE WHEN u.lexeme = ANY(CAST(:known AS text[])) "
        f"THEN NULL ELSE (SELECT count(*) FROM (SELECT 1 FROM {index.table} "
        f"WHERE {index.tsv} @@ CAST({_QUOTED} AS tsquery) LIMIT :cap) x) END AS df "
        f"FROM unnest(to_tsvector(CAST(:cfg AS regconfig), :text)) AS u LEFT JOIN ("
        f"SELECT v.lexeme, array_agg(DISTINCT p.token) AS tokens FROM ts_parse((SELECT cfgparser FROM "
        f"pg_ts_config WHERE oid = CAST(:cfg AS regconfig)), :text) AS p, "
        f"unnest(to_tsvector(CAST(:cfg AS regconfig), p.token)) AS v GROUP BY v.lexeme) AS w USING (lexeme) "
        f"ORDER BY u.lexeme",
        {"known": known, "cap": COUNT_CAP, "cfg": index.config, "text": text},
    )
    n = max(stats.rows, 1)
    terms: list[Term] = []
    missing: list[Term] = []
    for r in rows:
        df = float(r["df"]) if r["df"] is not None else stats.frequent[r["lexeme"]] * n
        term = Term(str(r["lexeme"]), int(r["dim"]), df, idf(n, min(df, n)))
        if df > 0:
            terms.append(term)
        elif counts_when_missing(term.lexeme, r["tokens"] or ()):
            missing.append(term)
    return LexicalQuery(tuple(terms), n, tuple(missing))


def ranked(rows: Sequence[Any], key: str = "id", score: str = "score") -> list[tuple[Any, float]]:
    """Rows of an index scan (relaxed order) as (key, score), best first, zero scores dropped."""
    out = [(r[key], float(r[score])) for r in rows if float(r[score]) > 0]
    out.sort(key=lambda h: -h[1])
    return out
