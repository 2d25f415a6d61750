"""The python/pandas engine: operator-enabled only, run in a separate process.

The child process (`python -I`) gets:
- CPU-time, address-space and file-size limits (`RLIMIT_CPU`, `RLIMIT_AS`, `RLIMIT_FSIZE`) and a
  wall-clock limit enforced by the parent (killed → 5003);
- no network: a new, empty network namespace (`unshare(CLONE_NEWNET)`, or with a user namespace when
  the server is unprivileged); where neither is possible, every socket operation is refused by an
  audit hook;
- an audit hook that refuses subprocesses, `os.system`/`exec*`/`fork`, `ctypes`, file writes and
  deletions, and reads outside the data roots and the Python installation;
- a locked DuckDB connection `con` with the input views (the same sandbox as SQL); the `duckdb`
  module itself is not importable by the code. `pd` is pandas (a runtime dependency); on an install
  without it, `pd` or `import pandas` fails with an error naming the command that adds it (5001), and
  so does a missing module of an optional extra (`EXTRA_OF`: scikit-learn, the `ml` extra). A relative
  path given to a pandas reader (`pd.read_csv('data.csv')`) is looked up in the readable roots in
  order, like a `file_path`.

The code sets `result` to a DuckDB relation, a pandas DataFrame or Series (an index other than the
default one, as `describe()` gives, becomes a column), a list of dicts or a dict of lists; the child
stores it as the Parquet result. Python-level isolation is defence in depth, not a
security boundary against a determined attacker: enable this engine only for trusted callers.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from app.core.errors import EngineError, QueryError, Timeout
from app.datasets.engine.databases import EngineConfig
from app.datasets.engine.sandbox import query_context, sql_string
from app.datasets.engine.sources import Source

CHILD = r"""
import ctypes, importlib, json, os, resource, sys, textwrap
spec = json.loads(sys.stdin.read())
cpu, mem = spec["cpu_seconds"], spec["memory_mb"] * 1024 * 1024
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_FSIZE, (spec["max_file_bytes"], spec["max_file_bytes"]))
isolated = False
try:
    libc = ctypes.CDLL(None, use_errno=True)
    isolated = libc.unshare(0x40000000) == 0 or libc.unshare(0x10000000 | 0x40000000) == 0
except Exception:
    isolated = False
import duckdb
try:
    import numpy  # before the audit hook: numpy imports ctypes
except Exception:
    pass
try:
    import pandas as pd
except Exception:
    pd = None
for name in spec["preload"]:  # modules the code imports that load ctypes or subprocess helpers themselves
    try:
        importlib.import_module(name)
    except Exception:  # not installed: the code's own import says so
        pass
NO_PANDAS = "pandas is not installed on this server (pip install pandas)"
class NoPandas:
    def __getattr__(self, name):
        raise ModuleNotFoundError(NO_PANDAS, name="pandas")
def located(path):
    # A relative path given to a pandas reader: the first readable root holding it, as for file_path.
    if isinstance(path, str) and path and not os.path.isabs(path) and "://" not in path:
        found = [os.path.join(r, path) for r in spec["roots"] if os.path.exists(os.path.join(r, path))]
        return (found or [os.path.join(spec["roots"][0], path)])[0]
    return path
def reader(fn):
    def read(*args, **kwargs):
        if args:
            args = (located(args[0]), *args[1:])
        for key in ("filepath_or_buffer", "path", "io", "path_or_buf"):
            if key in kwargs:
                kwargs[key] = located(kwargs[key])
        return fn(*args, **kwargs)
    read.__name__, read.__doc__ = fn.__name__, fn.__doc__
    return read
if pd is not None:
    for name in ("read_csv", "read_table", "read_fwf", "read_json", "read_parquet", "read_feather", "read_orc",
                 "read_excel"):
        if hasattr(pd, name):
            setattr(pd, name, reader(getattr(pd, name)))
con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                          "autoload_known_extensions": False,
                                          "memory_limit": spec["duckdb_memory"], "threads": 1})
allowed = ", ".join("'" + d.replace("'", "''").rstrip("/") + "/'" for d in spec["allowed"])
con.execute(f"SET allowed_directories = [{allowed}]")
for name, sql in spec["views"].items():
    con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM {sql}')
con.execute("SET enable_external_access = false")
con.execute("SET lock_configuration = true")
dest = spec["dest"]
readable = tuple(os.path.realpath(p) + os.sep for p in spec["allowed"] + [sys.prefix, sys.base_prefix,
                 sys.exec_prefix, os.path.dirname(os.__file__)])
DENY = ("socket.", "subprocess.", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.forkpty",
        "os.kill", "os.killpg", "os.putenv", "os.unsetenv", "ctypes.", "os.remove", "os.unlink", "os.rmdir",
        "os.rename", "os.chmod", "os.chown", "os.mkdir", "os.symlink", "os.link", "os.truncate", "shutil.",
        "urllib.", "http.", "ftplib.", "smtplib.", "webbrowser.", "os.chdir", "pty.", "os.listdir", "os.scandir",
        "glob.", "os.walk")
BLOCKED_MODULES = {"ctypes", "_ctypes", "socket", "_socket", "ssl", "subprocess", "_posixsubprocess",
                   "multiprocessing", "duckdb", "_duckdb", "gc", "cffi", "pty"}
state = {"armed": False}
def inside_readable(path):
    real = os.path.realpath(os.fsdecode(path))
    return (real + os.sep).startswith(readable) or real.startswith(readable)
def hook(event, args):
    if not state["armed"]:
        return
    if event in ("os.listdir", "os.scandir") and isinstance(args[0], (str, bytes)) and inside_readable(args[0]):
        return  # the import system lists the folders it loads a module from (a lazy import in a library)
    if event.startswith(DENY):
        raise PermissionError(f"{event} is not allowed in the python engine")
    if event == "import" and args[0].split(".")[0] in BLOCKED_MODULES:
        raise PermissionError(f"import {args[0]} is not allowed in the python engine")
    if event == "import" and pd is None and args[0].split(".")[0] == "pandas":
        raise ModuleNotFoundError(NO_PANDAS, name="pandas")
    if event == "open":
        path, mode = args[0], args[1] or "r"
        if isinstance(path, int):
            return
        real = os.path.realpath(os.fsdecode(path))
        writing = any(ch in str(mode) for ch in "wax+") or (isinstance(args[2], int) and args[2] & 0o3)
        if writing and real != dest:
            raise PermissionError("writing files is not allowed in the python engine")
        if not writing and not inside_readable(real):
            raise PermissionError(f"reading {path!r} is not allowed (outside the data roots)")
sys.addaudithook(hook)
for mod in [m for m in sys.modules if m.split(".")[0] in BLOCKED_MODULES]:
    sys.modules.pop(mod, None)
namespace = {"con": con, "pd": NoPandas() if pd is None else pd, "inputs": spec["inputs"], "result": None,
             "__name__": "__cairn__"}
def compiled(source):
    # Code quoted from an example comes indented as a whole, and its first line loses its indent when the
    # arguments are trimmed: when the code as sent is badly indented, try it dedented.
    try:
        return compile(source, "<python query>", "exec")
    except IndentationError as exc:
        first = exc
    head, _, rest = source.partition("\n")
    for variant in (textwrap.dedent(source), head.strip() + "\n" + textwrap.dedent(rest)):
        try:
            return compile(variant, "<python query>", "exec")
        except SyntaxError:
            pass
    raise first
state["armed"] = True
try:
    exec(compiled(spec["code"]), namespace)
    result = namespace.get("result")
    state["armed"] = False
    if result is None:
        raise ValueError("the code must set `result`")
    if isinstance(result, dict):  # a dict of lists: the columns
        result = pd.DataFrame(result) if pd is not None else [dict(zip(result, r)) for r in zip(*result.values())]
    if pd is not None and isinstance(result, pd.Series):
        result = result.to_frame()
    if pd is not None and isinstance(result, pd.DataFrame):
        if not isinstance(result.index, pd.RangeIndex):  # describe(), groupby(): the index is data
            result = result.reset_index()
        rel = con.from_df(result)
    elif isinstance(result, list):
        rel = con.sql("SELECT unnest($r, recursive := true)", params={"r": result}) if result else None
        if rel is None:
            raise ValueError("`result` is an empty list")
    else:
        rel = result
    rel.write_parquet(dest)
    print(json.dumps({"ok": True, "isolated": isolated}))
except BaseException as exc:
    state["armed"] = False
    no_pandas = pd is None and "pandas" in str(exc) and (isinstance(exc, ImportError) or "not installed" in str(exc))
    missing = "pandas" if no_pandas else None
    if missing is None and isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in spec["extras"]:
        missing = exc.name.split(".")[0]
    line, tb = getattr(exc, "lineno", None) if isinstance(exc, SyntaxError) else None, exc.__traceback__
    while tb is not None:  # the innermost line of the caller's code
        if tb.tb_frame.f_code.co_filename == "<python query>":
            line = tb.tb_lineno
        tb = tb.tb_next
    print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:400], "isolated": isolated,
                      "missing": missing, "line": line}))
"""


# Packages whose modules load ctypes (and joblib's process helpers) when imported, which the audit
# hook refuses once the code runs: the modules of these that the code imports are imported before.
PRELOADABLE = ("sklearn", "scipy")
_IMPORTED = re.compile(r"^[ \t]*(?:from|import)[ \t]+((?:" + "|".join(PRELOADABLE) + r")(?:\.\w+)*)", re.M)


# The modules of the python engine's optional extras, by the extra that installs them.
EXTRA_OF = {"sklearn": "ml", "scipy": "ml"}


def preloaded(code: str) -> list[str]:
    """The modules of `PRELOADABLE` packages that `code` imports (at most 20), in order."""
    return list(dict.fromkeys(_IMPORTED.findall(code)))[:20]


def run_python(
    cfg: EngineConfig,
    code: str,
    sources: list[Source],
    dest: Path,
    *,
    cpu_seconds: int,
    memory_mb: int,
    max_file_bytes: int,
) -> bool:
    """Run `code` in the sandboxed child; the result lands at `dest`. Returns whether the network
    namespace isolation was in force."""
    spec = {
        "code": code,
        "preload": preloaded(code),
        "extras": sorted(EXTRA_OF),
        "views": {s.name: s.sql() for s in sources},
        "inputs": {s.name: s.pattern for s in sources},
        "allowed": [str(p) for p in cfg.allowed],
        "roots": [str(p) for p in cfg.roots],
        "dest": str(dest),
        "cpu_seconds": cpu_seconds,
        "memory_mb": memory_mb,
        "max_file_bytes": max_file_bytes,
        "duckdb_memory": f"{max(64, memory_mb // 2)}MB",
    }
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-c", CHILD],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            timeout=cfg.timeout_s,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            cwd=str(cfg.work / "tmp"),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise Timeout(
            "The python code exceeded its time limit and was killed: the python engine keeps no partial result",
            suggestions=[
                "Raise timeout_ms (up to CAIRN_DATASETS_QUERY_TIMEOUT_MS), or work on fewer rows",
                "query_type 'sql' answers the rows a query produced before its limit",
            ],
        ) from None
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.startswith("{")]
    if not lines:
        if proc.returncode in (-9, -24, 137, 152) or "MemoryError" in proc.stderr:
            kind = "CPU time" if proc.returncode in (-24, 152) else "a resource"
            raise Timeout(f"The python code exceeded {kind} limit and was stopped")
        raise EngineError(f"The python engine failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    report = json.loads(lines[-1])
    if report.get("missing"):
        raise _not_installed(str(report["missing"]))
    if not report["ok"]:
        lines = code.splitlines()
        line = report.get("line")
        raise QueryError(
            f"python: {report['error']}",
            suggestions=[
                "Set `result` to a DuckDB relation (con.sql(...)), a DataFrame or a list of "
                "dicts; no network, subprocesses or file writes are allowed"
            ],
            query_context=(
                f"line {line}: {query_context(lines[line - 1])}"
                if isinstance(line, int) and 0 < line <= len(lines)
                else None
            ),
        )
    return bool(report.get("isolated"))


def _not_installed(module: str) -> EngineError:
    """5001 for a module the python engine's code needs that this server lacks, naming the one command
    that adds it: pandas (a runtime dependency: the install is incomplete) or a module of an extra."""
    if module == "pandas":
        return EngineError(
            "The python engine has no pandas: it is not installed on this server "
            "(a runtime dependency: the install is incomplete)",
            suggestions=[
                "Use `con` (DuckDB: con.sql(...)) in the code, or query_type 'sql'",
                "The operator installs it: pip install pandas",
            ],
        )
    extra = EXTRA_OF.get(module, "ml")
    return EngineError(
        f"The python engine has no {module}: it is not installed on this server",
        suggestions=[f"The operator installs the {extra} extra: pip install 'cairn-server[{extra}]'"],
    )


def files_named(code: str, roots: list[Path]) -> list[Path]:
    """The files python `code` names by a string literal that a pandas reader would find in `roots`
    (the first root holding it, as the sandbox looks them up): the files its result depends on beyond
    `files`, so a cached result is not served once one of them changed. Names built at run time are not
    seen; code that does not parse names none."""
    head, _, rest = code.partition("\n")
    # As the sandbox compiles it: as sent, dedented, or with its trimmed first line put back in line.
    for variant in (code, textwrap.dedent(code), head.strip() + "\n" + textwrap.dedent(rest)):
        try:
            tree = ast.parse(variant)
            break
        except (SyntaxError, ValueError):
            continue
    else:
        return []
    found: list[Path] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or not 0 < len(node.value) < 1024:
            continue
        name = node.value
        if "\n" in name or "\x00" in name or Path(name).is_absolute() or ".." in Path(name).parts:
            continue
        for root in roots:
            candidate = root / name
            try:
                here = candidate.is_file()
            except OSError:  # a literal no file could be named by (too long, say)
                here = False
            if here:
                found.append(candidate)
                break
    return found


def describe_result(path: Path) -> tuple[list[str], list[str], int]:
    """Columns, types and row count of a Parquet file written by the child."""
    import duckdb

    con = duckdb.connect(":memory:", config={"autoload_known_extensions": False, "threads": 1})
    try:
        rel = con.sql(f"SELECT * FROM read_parquet({sql_string(str(path))})")
        count = int(con.execute(f"SELECT count(*) FROM read_parquet({sql_string(str(path))})").fetchone()[0])  # type: ignore[index]
        return list(rel.columns), [str(t) for t in rel.types], count
    finally:
        con.close()
