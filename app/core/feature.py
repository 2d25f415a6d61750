"""What a feature family contributes to the server, declared once in its package.

Each `app/<feature>/__init__.py` exports `FEATURE = Feature(...)`; the application entry lists the
features once (`app/features.py`) and everything else — the registry, the REST routes, the lifespan
hooks, the `cairn` sub-commands, the feature's settings — is built from these descriptors. The core
never names a feature.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fastapi import APIRouter
from pydantic import BaseModel
from pydantic_settings import BaseSettings

from app.core.registry import OperationSet, Registry

if TYPE_CHECKING:
    from app.core.context import AppState, CallContext
    from app.core.embeddings.lexical import LexicalIndex
    from app.core.embeddings.targets import EmbeddingTarget
    from app.core.ui import ConsoleSection

Hook = Callable[["AppState"], Awaitable[None]]


@runtime_checkable
class LiveSection(Protocol):
    """A section of mcp://settings whose values depend on the call (e.g. on the active model)."""

    async def resolved(self, ctx: CallContext) -> BaseModel:
        """The section's values for this call."""
        ...


@dataclass(frozen=True)
class Feature:
    """One feature family.

    - `operations`: its tools/routes (an `OperationSet` named after the feature).
    - `settings`: its `CAIRN_*` settings class; the server builds it once and handlers read it with
      `ctx.feature_settings(TheClass)`.
    - `public_settings`: the part of those settings shown in the `mcp://settings` resource, as
      top-level sections (e.g. `{"search": {...}}`); a `LiveSection` is resolved when it is read (its
      values depend on the call, e.g. the active model).
    - `routers`: plain REST routes that are not operations (they must still call the executor);
      `own_body_limit` lists path prefixes among them that enforce their own size limit (streamed
      uploads), so the server's request-body cap does not apply there.
    - `startup` / `shutdown`: lifespan hooks (sweeps, background runners), run in listing order and
      in reverse.
    - `cli`: `register(subparsers)` adding `cairn <command>` sub-commands.
    - `embedding_targets`: the kinds of rows it keeps a vector of, served by the core embedding queue.
    - `lexical_indexes`: its BM25 indexes kept in a side table, filled by the core's lexical mover
      (`app.core.embeddings.lexical_mover`).
    - `console`: its sections of the web console at `/ui` (`app.core.ui.ConsoleSection`: a navigation
      entry, pages whose every read and write is an operation run by the executor, and templates).
    """

    name: str
    operations: OperationSet
    settings: type[BaseSettings] | None = None
    public_settings: Callable[[Any], dict[str, BaseModel | LiveSection]] | None = None
    routers: tuple[APIRouter, ...] = ()
    own_body_limit: tuple[str, ...] = ()
    startup: Hook | None = None
    shutdown: Hook | None = None
    cli: Callable[[Any], None] | None = None
    embedding_targets: tuple[EmbeddingTarget, ...] = ()
    lexical_indexes: tuple[LexicalIndex, ...] = ()
    console: tuple[ConsoleSection, ...] = ()

    def __post_init__(self) -> None:
        if self.operations.feature != self.name:
            raise ValueError(f"feature {self.name!r} declares operations of {self.operations.feature!r}")


def resolve(known: Sequence[str], names: Sequence[str]) -> list[str]:
    """The names of `known` that `CAIRN_FEATURES` enables (`all` for every one), in `known`'s order.

    Raises:
        ValueError: a name that is not known.
    """
    wanted = [n.strip().lower() for n in names if n.strip()]
    if wanted == ["all"]:
        return list(known)
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        raise ValueError(f"unknown features {unknown}; known: {list(known)} (or 'all')")
    return [n for n in known if n in wanted]


def select(available: Sequence[Feature], names: Sequence[str]) -> list[Feature]:
    """The features named by `CAIRN_FEATURES` (see `resolve`), in their listing order."""
    chosen = set(resolve([f.name for f in available], names))
    return [f for f in available if f.name in chosen]


def build_registry(core: OperationSet, features: Sequence[Feature]) -> Registry:
    """The registry of the core operations plus every given feature's."""
    registry = Registry()
    registry.add(core)
    for feature in features:
        registry.add(feature.operations)
    return registry


def build_settings(features: Sequence[Feature]) -> dict[type[BaseSettings], BaseSettings]:
    """Each feature's settings, read once from the environment."""
    return {f.settings: f.settings() for f in features if f.settings is not None}
