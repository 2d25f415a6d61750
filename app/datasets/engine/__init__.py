"""The DuckDB engine of the datasets feature: everything that touches DuckDB, run in worker processes
the server can kill. The names below are the ones the feature layer uses most (`offload` and the
engine functions it runs); it imports the other modules it needs by name. The engine's own modules
import one another by module, never through this package.

Modules, each named for the one thing it is responsible for:

- `pool`: the worker processes' pool and the calls made through it (`offload`, `set_caller`);
  `slots`: the engine slots shared fairly between API keys; `process`: one worker process, seen from
  the server; `worker`: a worker process's own loop; `ipc`: what travels between them; `priority`:
  niceness and SCHED_IDLE of workers whose calls run long.
- `databases`: locked DuckDB databases, pooled and leased per call (`run_locked`); `watchdog`: the
  statement time limit; `sandbox`: paths inside the data roots and the checks of a caller's SQL;
  `sources`: a call's input files as views; `errors`: DuckDB's exceptions as the caller's errors.
- `values` and `rendering`: the rendering rule of answers, in Python and in SQL.
- The work: `query` (a query and its stored result), `profiling` (profiles and samples, with `dates`
  for dates written as text and `nested` for the inner fields of structs and lists), `exporting`
  (export_result), `charts`, `cache` (the result cache), `pysandbox` (the python engine's child
  process) and `polars_expr` (polars chains compiled to SQL).
"""

from __future__ import annotations

from app.datasets.engine.databases import EngineConfig
from app.datasets.engine.pool import offload, offload_staged, offload_sync, set_caller
from app.datasets.engine.query import StoredResult, execute_to_store, read_rows, summarize_stored
from app.datasets.engine.sources import Source, make_source
from app.datasets.engine.values import cell_text, human_bytes, is_numeric, jsonable

__all__ = [
    "EngineConfig",
    "Source",
    "StoredResult",
    "cell_text",
    "execute_to_store",
    "human_bytes",
    "is_numeric",
    "jsonable",
    "make_source",
    "offload",
    "offload_staged",
    "offload_sync",
    "read_rows",
    "set_caller",
    "summarize_stored",
]
