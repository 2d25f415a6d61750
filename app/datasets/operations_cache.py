"""The seed's cache_manager and context_optimizer roles as tools: what the result cache holds, and what
an execute_query reply would cost before it runs. `operations.py` adds this set to the family's
operations (`ops.include`)."""

from __future__ import annotations

from app.core.context import CallContext
from app.core.errors import EngineError, MemoryLimit, NotFound, QueryError, SchemaError
from app.core.registry import OperationSet
from app.datasets import service_cache, service_estimate
from app.datasets.schemas_cache import CacheListIn, CacheListOut, EstimateIn, EstimateOut
from app.datasets.service_common import storage_errors

ops = OperationSet("datasets")


@ops.operation(
    name="cache_manager",
    title="List Cache",
    input=CacheListIn,
    output=CacheListOut,
    path="/datasets/cache",
    method="GET",
    read_only=True,
)
async def cache_manager(ctx: CallContext, args: CacheListIn) -> CacheListOut:
    """What the result cache holds for the project, newest first: each query result or profile an
    identical call would be answered from, with its bytes (entry and stored result), age, seconds
    left, hits and rows; totals, TTL and size cap. Drop entries with cache_invalidate."""
    with storage_errors():
        return await service_cache.cache_manager(ctx, args)


@ops.operation(
    name="context_optimizer",
    errors=(NotFound, SchemaError, QueryError, EngineError, MemoryLimit),
    title="Estimate Query Reply",
    input=EstimateIn,
    output=EstimateOut,
    path="/datasets/query/estimate",
    read_only=True,
)
async def context_optimizer(ctx: CallContext, args: EstimateIn) -> EstimateOut:
    """Price an execute_query call before making it (same arguments): its columns, rows (counted, or
    the planner's estimate when counting takes over a second or two), tokens per row and of the reply,
    whether it fits the budget, how many rows would, and what to change. Exact for a cached result;
    stores nothing."""
    with storage_errors():
        return await service_estimate.context_optimizer(ctx, args)
