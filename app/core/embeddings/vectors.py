"""What a family embeds, and how a vector travels to PostgreSQL.

A family declares the rows it keeps a vector of as `EmbeddedRows` (source table, key, text, table of
vectors, liveness) and hands `app.core.embeddings.targets.embedding_target(rows)` to its `Feature`:
the texts / store / missing functions the embedding queue calls, whose SQL is
`app.core.embeddings.repository.VectorRepository`.

Every vector parameter, stored or searched with, is `vector_param(values)`: pgvector's binary form,
sent as it is by the binary codec of the `vector` type that the engine registers on each connection
(`app.core.db.register_vector_codec`). SQL keeps casting the parameter (`CAST(:knn_q AS vector(384))`
in `app.core.embeddings.knn`, `CAST(:vectors AS vector[])`), so each statement reads, and plans, as it
did with text literals. A query vector is bound by `app.core.embeddings.knn` alone, the only module that
writes distances.
"""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")
KEY_TYPES: dict[str, Callable[[str], Any]] = {"bigint": int, "uuid": uuid.UUID}
# An SQL fragment declared in code takes no parameters and stays one expression.
_NOT_IN_FRAGMENT = re.compile(r";|--|/\*|(?<![:\w]):\w")


def vector_param(values: Sequence[float]) -> bytes:
    """A vector as a statement parameter: pgvector's binary form (what `pgvector.Vector.to_binary`
    makes: dimension, a zero, big-endian float4s), for `CAST(:q AS vector(N))` or as an element of
    `CAST(:vectors AS vector[])`. One `struct.pack` is the cheapest way there from a list of floats."""
    n = len(values)
    return struct.pack(f">HH{n}f", n, 0, *values)


def identifier(name: str) -> str:
    """`name` when it is a plain lower-case SQL identifier; ValueError otherwise."""
    if not IDENTIFIER.fullmatch(name):
        raise ValueError(f"not a plain SQL identifier: {name!r}")
    return name


def _fragment(sql: str) -> str:
    if not sql.strip() or _NOT_IN_FRAGMENT.search(sql):
        raise ValueError(f"not a single parameterless SQL expression: {sql!r}")
    return sql


@dataclass(frozen=True)
class EmbeddedRows:
    """Rows of one table that carry a vector per model, declared by the family that owns them.

    - `target`: the embedding queue's name for them (`EmbeddingTarget.name`).
    - `table`, `key`, `key_type`: the source table, its key column and that column's type.
    - The text to embed: `text`, a column of `table` or an SQL expression over it (alias `t`); or
      `compose(**{column: value})`, composed in Python from `columns`.
    - `vectors`, `owner`: the table of vectors (one row per owner and `model`, with `dim` and
      `embedding`) and its column that holds the key.
    - `live`: an SQL condition over `t`; rows failing it are neither embedded nor swept.
    - `stamped`: `vectors` has a `created_at`, set again when a vector is replaced.

    Names are identifiers and fragments written in code, never a caller's value; they are checked
    here all the same (plain lower-case identifiers; fragments without `;`, comments or parameters).
    """

    target: str
    table: str
    vectors: str
    text: str | None = None
    columns: tuple[str, ...] = ()
    compose: Callable[..., str] | None = None
    key: str = "id"
    key_type: Literal["bigint", "uuid"] = "bigint"
    owner: str = "owner_id"
    live: str | None = None
    stamped: bool = True

    def __post_init__(self) -> None:
        for name in (self.target, self.table, self.vectors, self.key, self.owner, *self.columns):
            identifier(name)
        if self.key_type not in KEY_TYPES:
            raise ValueError(f"key_type must be one of {sorted(KEY_TYPES)}, not {self.key_type!r}")
        if (self.text is None) == (self.compose is None) or bool(self.columns) != (self.compose is not None):
            raise ValueError(f"{self.target}: declare either `text`, or `columns` and `compose`")
        if "ref" in self.columns:  # the key's label in the statement that reads the texts
            raise ValueError(f"{self.target}: a composed column may not be called 'ref'")
        for fragment in (self.text, self.live):
            if fragment is not None:
                _fragment(fragment)

    @property
    def text_column(self) -> str | None:
        """`text` when it names a column of `table` (otherwise it is an expression, or None)."""
        return self.text if self.text is not None and IDENTIFIER.fullmatch(self.text) else None
