"""The k nearest neighbours of a query vector: the one vector search statement of every family.

A family describes a search as a `KnnQuery` (its `EmbeddedRows`, the model, the query vector, `k`,
the alias of the owner table with the family's extra condition, its parameters and extra columns)
and runs it with `nearest` / `nearest_rows`; the family keeps its own ranking of what comes back.
The statement, `KnnQuery.sql`, is always

    SELECT e.<owner> AS owner, 1 - (<distance>) AS cosine[, <columns>]
    FROM <vectors> e JOIN <table> <alias> ON <alias>.<key> = e.<owner>
    WHERE e.model = '<model>' AND e.dim = <dim> AND (<where>)
    ORDER BY <distance> LIMIT :knn_k

where `<distance>` (`distance_sql`) is `(e.embedding::vector(<dim>)) <=> CAST(:knn_q AS vector(<dim>))`.

- **The partial HNSW index applies.** Each vectors table has `USING hnsw ((embedding::vector(384))
  vector_cosine_ops) WHERE model = '<model>'`. The planner uses a partial index only when the query's
  condition implies the index's at plan time, and asyncpg prepares every statement: a bound model
  under a generic plan implies nothing. So the model is an SQL literal (`model_literal`), and the
  ordering expression is the index's expression to the character, dimension cast included.
- **The query vector is bound here alone** (`query_params`, `:knn_q`), as
  `app.core.embeddings.vectors.vector_param`: pgvector's binary form, sent as it is by the connection's
  binary `vector` codec. pgvector's SQLAlchemy type (`pgvector.sqlalchemy.Vector`) is not used: its bind
  processor always formats the vector as text (`'[0.1,…]'`), which the binary codec refuses, and the
  text path it would need instead is several times slower per statement, most of it in Python.
- **One scan policy** (`ef_search_for`, applied by `prepare_scan` in the statement's transaction, as
  `SET LOCAL` would): pgvector's iterative index scans in relaxed order, so that a filtered search
  still finds its `k` rows, with `hnsw.ef_search` at least `k` and the family's setting, at most
  pgvector's 1000. Relaxed order means the rows come back re-sorted, by cosine, best first.
- **`exact`** turns index scans off for the statement: a sequential scan and a sort, the exact
  neighbours (the reference of memory's recall benchmark).

`similarity_sql` is the cosine of rows chosen otherwise (a family scoring its text candidates), with
the same expression and parameter. Every name and fragment is written in code, never a caller's
value: the alias is checked as an identifier, fragments refuse `;` and comments, and the family's
parameters may not take the builder's names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.core.embeddings.vectors import EmbeddedRows, identifier, vector_param

if TYPE_CHECKING:
    from sqlalchemy import RowMapping

    from app.core.repository import Repository

QUERY = "knn_q"  # the query vector's parameter
LIMIT = "knn_k"  # the parameter of k
VECTORS = "e"  # the vectors table's alias
EF_SEARCH_DEFAULT = 40  # pgvector's default hnsw.ef_search
EF_SEARCH_MAX = 1000  # the largest hnsw.ef_search pgvector accepts
_NOT_IN_CONDITION = re.compile(r";|--|/\*")


def model_literal(model: str) -> str:
    """`model` as an SQL string literal (quotes doubled), for the condition that must imply a partial
    index's `model = '<model>'` at plan time."""
    if "\x00" in model:
        raise ValueError("a model name may not hold a NUL character")
    return "'" + model.replace("'", "''") + "'"


def distance_sql(dim: int, vectors: str = VECTORS) -> str:
    """The cosine distance of `vectors.embedding` to the query vector, written as the HNSW indexes'
    expression (`(embedding::vector(dim))`) so that the planner can order by the index."""
    return f"({identifier(vectors)}.embedding::vector({_dim(dim)})) <=> CAST(:{QUERY} AS vector({_dim(dim)}))"


def similarity_sql(dim: int, vectors: str = VECTORS) -> str:
    """The cosine similarity (`1 - distance`) of `vectors.embedding` to the query vector; NULL when
    either is NULL (no query vector bound, no stored vector joined)."""
    return f"1 - ({distance_sql(dim, vectors)})"


def query_params(vector: Sequence[float] | None) -> dict[str, Any]:
    """The query vector's parameter, for statements using `distance_sql` / `similarity_sql` (None
    binds NULL)."""
    return {QUERY: None if vector is None else vector_param(vector)}


def ef_search_for(k: int, setting: int = EF_SEARCH_DEFAULT) -> int:
    """`hnsw.ef_search` of a search for `k` rows: the family's `setting`, raised to `k` (a scan keeps
    `ef_search` candidates), within pgvector's 1 to 1000."""
    return max(1, min(max(int(setting), int(k)), EF_SEARCH_MAX))


def _dim(dim: int) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= 16000:
        raise ValueError(f"not a vector dimension: {dim!r}")
    return dim


def _condition(sql: str) -> str:
    if not sql.strip() or _NOT_IN_CONDITION.search(sql):
        raise ValueError(f"not a single SQL condition or expression: {sql!r}")
    return sql


@dataclass(frozen=True, eq=False)
class KnnQuery:
    """The `k` owners of `rows.vectors` nearest to `vector` under `model`, by cosine.

    - `rows`: the family's declaration (vectors table and owner column, owner table and key).
    - `alias`: the owner table's alias in `where` and `columns` (the vectors table is `e`).
    - `where`: the family's condition over `alias` (and `e`), with `:name` parameters in `params`.
    - `columns`: extra expressions to select (labelled as the family needs), after `owner`, `cosine`.
    """

    rows: EmbeddedRows
    model: str
    vector: Sequence[float]
    k: int
    alias: str = "t"
    where: str = "TRUE"
    params: Mapping[str, Any] = field(default_factory=dict)
    columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if identifier(self.alias) == VECTORS:
            raise ValueError(f"the owner table may not be called {VECTORS!r}: that is the vectors' alias")
        _dim(len(self.vector))
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 0:
            raise ValueError(f"k must be a count, not {self.k!r}")
        model_literal(self.model)
        for fragment in (self.where, *self.columns):
            _condition(fragment)
        taken = {QUERY, LIMIT} & set(self.params)
        if taken:
            raise ValueError(f"parameters {sorted(taken)} are the k-NN statement's own")

    @property
    def dim(self) -> int:
        """The query vector's dimension (the cast of the distance expression)."""
        return len(self.vector)

    @property
    def sql(self) -> str:
        """The statement (see the module's docstring): owners with their cosine, nearest first."""
        r, a, e = self.rows, self.alias, VECTORS
        distance = distance_sql(self.dim)
        extra = "".join(f", {c}" for c in self.columns)
        return (
            f"SELECT {e}.{r.owner} AS owner, 1 - ({distance}) AS cosine{extra} "
            f"FROM {r.vectors} {e} JOIN {r.table} {a} ON {a}.{r.key} = {e}.{r.owner} "
            f"WHERE {e}.model = {model_literal(self.model)} AND {e}.dim = {self.dim} AND ({self.where}) "
            f"ORDER BY {distance} LIMIT :{LIMIT}"
        )

    @property
    def parameters(self) -> dict[str, Any]:
        """The statement's parameters: the family's, the query vector and `k`."""
        return {**self.params, **query_params(self.vector), LIMIT: self.k}


async def prepare_scan(repo: Repository, k: int, *, setting: int = EF_SEARCH_DEFAULT, exact: bool = False) -> None:
    """For the rest of the transaction (`SET LOCAL`, in one statement): iterative HNSW scans in relaxed
    order with `ef_search_for(k, setting)`; with `exact`, no index scans (until `end_scan`)."""
    exact_sql = ", set_config('enable_indexscan', 'off', true)" if exact else ""
    await repo.execute(
        "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), "
        f"set_config('hnsw.ef_search', :ef, true){exact_sql}",
        {"ef": str(ef_search_for(k, setting))},
    )


async def end_scan(repo: Repository, *, exact: bool = False) -> None:
    """Index scans back on after an `exact` search (the transaction's next statements use indexes)."""
    if exact:
        await repo.execute("SELECT set_config('enable_indexscan', 'on', true)")


async def nearest_rows(
    repo: Repository, query: KnnQuery, *, ef_search: int = EF_SEARCH_DEFAULT, exact: bool = False
) -> list[RowMapping]:
    """Run `query` on `repo`'s session under the scan policy (`ef_search` is the family's setting):
    rows with `owner`, `cosine` and the query's columns, best first (ties in the scan's order)."""
    await prepare_scan(repo, query.k, setting=ef_search, exact=exact)
    found = await repo.rows(query.sql, query.parameters)
    await end_scan(repo, exact=exact)
    return sorted(found, key=lambda r: -float(r["cosine"]))  # relaxed order: re-sort


async def nearest(
    repo: Repository, query: KnnQuery, *, ef_search: int = EF_SEARCH_DEFAULT, exact: bool = False
) -> list[tuple[Any, float]]:
    """`nearest_rows` as (owner, cosine) pairs, best first."""
    return [(r["owner"], float(r["cosine"])) for r in await nearest_rows(repo, query, ef_search=ef_search, exact=exact)]
