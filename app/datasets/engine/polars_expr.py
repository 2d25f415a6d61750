"""`polars_expr`: a restricted, Polars-shaped expression language compiled to DuckDB SQL.

The text is parsed with Python's `ast` module (parsing only — nothing is ever evaluated) and every
node is checked against an allow-list: a chain that starts at `pl.scan_csv / scan_parquet /
scan_ndjson / read_csv / read_parquet / read_ndjson('file')` or `pl.table('view')` (a bare name, such as
`pl.scan_csv('orders')`, is a registered dataset's view: `Compiled.names`) and continues with
`filter, select, with_columns, group_by(...).agg(...), sort, limit/head, unique, drop, count, collect,
lazy`; expressions are `pl.col('x')`, `pl.lit(v)`, `pl.len()`, arithmetic, comparisons, `& | ~`, and the
methods listed in `_METHODS` / `_STR_METHODS` / `_DT_METHODS`. Anything else is refused with 4004
naming the construct; an allowed construct given the wrong arguments (a missing one, a string where a
number goes, nesting deeper than `MAX_DEPTH`) is refused with 4001 naming what it expects. The SQL it
produces then goes through the same sandbox as any SQL query.
"""

from __future__ import annotations

import ast
import math
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.core.errors import InvalidInput, QueryError
from app.datasets.engine.sandbox import ident
from app.datasets.engine.sandbox import sql_string as lit

MAX_CHARS = 10_000
MAX_DEPTH = 200  # levels of the parsed expression (a chain of methods counts two per method)
_SOURCES = {
    "scan_csv": "read_csv_auto",
    "read_csv": "read_csv_auto",
    "scan_parquet": "read_parquet",
    "read_parquet": "read_parquet",
    "scan_ndjson": "read_json_auto",
    "read_ndjson": "read_json_auto",
    "read_json": "read_json_auto",
}
_AGG = {
    "sum": "sum",
    "mean": "avg",
    "min": "min",
    "max": "max",
    "count": "count",
    "n_unique": "count(DISTINCT",
    "median": "median",
    "std": "stddev_samp",
    "var": "var_samp",
    "first": "first",
    "last": "last",
}
_UNARY = {"abs": "abs", "sqrt": "sqrt", "floor": "floor", "ceil": "ceil", "log": "ln", "exp": "exp"}
_STR_METHODS = {
    "to_lowercase": "lower",
    "to_uppercase": "upper",
    "len_chars": "length",
    "len_bytes": "strlen",
    "strip_chars": "trim",
    "strip_chars_start": "ltrim",
    "strip_chars_end": "rtrim",
    "reverse": "reverse",
}
_DT_METHODS = {
    "year": "year",
    "month": "month",
    "day": "day",
    "hour": "hour",
    "minute": "minute",
    "second": "second",
    "weekday": "isodow",
    "week": "week",
    "ordinal_day": "dayofyear",
    "quarter": "quarter",
    "date": "CAST(? AS DATE)",
}
# `.str` methods that take arguments: the names, for the refusal's list.
_STR_WITH_ARGS = (
    "contains",
    "starts_with",
    "ends_with",
    "strptime",
    "to_date",
    "to_datetime",
    "replace",
    "replace_all",
    "slice",
    "head",
    "tail",
    "zfill",
    "pad_start",
    "pad_end",
)
_DT_WITH_ARGS = ("strftime", "to_string", "truncate")
# A bare name (no extension, no folder) at the chain's start: a registered dataset, read as its view.
_BARE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
# Polars' duration strings of `.dt.truncate` as DuckDB's date_trunc parts.
_TRUNCATE = {"1y": "year", "1q": "quarter", "1mo": "month", "1w": "week", "1d": "day", "1h": "hour", "1m": "minute"}
_TYPES = {
    "Int64": "BIGINT",
    "Int32": "INTEGER",
    "Float64": "DOUBLE",
    "Float32": "FLOAT",
    "Utf8": "VARCHAR",
    "String": "VARCHAR",
    "Boolean": "BOOLEAN",
    "Date": "DATE",
    "Datetime": "TIMESTAMP",
}
_BINOPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.BitAnd: "AND",
    ast.BitOr: "OR",
}
_CMPOPS = {ast.Eq: "=", ast.NotEq: "<>", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_METHODS = (
    set(_AGG) | set(_UNARY) | {"alias", "is_null", "is_not_null", "is_in", "round", "cast", "fill_null", "str", "dt"}
)
_CHAIN_METHODS = {
    "collect",
    "lazy",
    "limit",
    "head",
    "filter",
    "select",
    "with_columns",
    "group_by",
    "groupby",
    "agg",
    "sort",
    "unique",
    "drop",
    "count",
}


def _refuse(node: ast.AST | None, what: str, hint: str | None = None) -> QueryError:
    where = f" (column {node.col_offset + 1})" if node is not None and hasattr(node, "col_offset") else ""
    return QueryError(
        f"polars_expr: {what} is not supported{where}",
        suggestions=[
            *([hint] if hint else []),
            "Supported: pl.scan_csv/scan_parquet/scan_ndjson/read_*/table, filter, select, "
            "with_columns, group_by().agg(), sort, limit/head, unique, drop, count; "
            "pl.col, pl.lit, pl.len and common expression methods",
            "Or use query_type 'sql'",
        ],
    )


def _bad(node: ast.AST | None, what: str) -> InvalidInput:
    column: int | None = None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.end_col_offset is not None:
        column = node.func.end_col_offset - len(node.func.attr)  # the method's name
    elif isinstance(node, ast.expr):
        column = node.col_offset
    # The text is parsed inside "(": an offset there is the 1-based column of the caller's text.
    where = f" (column {column})" if column is not None else ""
    return InvalidInput(f"polars_expr: {what}{where}", suggestions=["Check the method's arguments"])


def _args(call: ast.Call, name: str, least: int, most: int) -> list[ast.expr]:
    """The positional arguments of `call`, between `least` and `most` of them; no keyword."""
    if call.keywords:
        raise _bad(call, f"{name} takes no keyword arguments")
    n = len(call.args)
    if not least <= n <= most:
        want = str(least) if least == most else f"{least} to {most}"
        raise _bad(call, f"{name} takes {want} argument{'' if want == '1' else 's'}, got {n}")
    return call.args


def _int(node: ast.AST, name: str, low: int, high: int) -> int:
    """A whole-number literal argument within [low, high]."""
    value = _const(node)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(node, f"{name} takes a whole number, got {type(value).__name__}")
    if not low <= value <= high:
        raise _bad(node, f"{name} takes a number from {low} to {high}, got {value}")
    return value


def _text(node: ast.AST, name: str) -> str:
    """A string literal argument."""
    value = _const(node)
    if not isinstance(value, str):
        raise _bad(node, f"{name} takes a string, got {type(value).__name__}")
    return value


def _depth_ok(tree: ast.AST) -> None:
    """Refuse a tree nested deeper than MAX_DEPTH (the compiler recurses over it)."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _bad(None, f"the expression nests deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


class _Expr:
    def __init__(self, sql: str, name: str | None, is_agg: bool = False) -> None:
        self.sql, self.name, self.is_agg = sql, name, is_agg

    def aliased(self) -> str:
        # A bare column keeps its name without an alias: DuckDB then names a missing one as missing.
        return f"{self.sql} AS {ident(self.name)}" if self.name and self.sql != ident(self.name) else self.sql


def _const(node: ast.AST) -> Any:
    if (isinstance(node, ast.Constant) and isinstance(node.value, str | int | float | bool)) or (
        isinstance(node, ast.Constant) and node.value is None
    ):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, int | float)
    ):
        return -node.operand.value
    raise _refuse(node, "a non-literal value")


def _sql_value(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        raise _bad(None, f"the number {value!r} is not finite")
    if isinstance(value, int | float):
        return repr(value)
    return lit(str(value))


def _is_pl(node: ast.AST, attr: str | None = None) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "pl"
        and (attr is None or node.attr == attr)
    )


def _expr(node: ast.AST) -> _Expr:
    if isinstance(node, ast.Constant):
        return _Expr(_sql_value(_const(node)), None)
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.Invert | ast.Not):
            inner = _expr(node.operand)
            return _Expr(f"(NOT {inner.sql})", inner.name, inner.is_agg)
        if isinstance(node.op, ast.USub):
            inner = _expr(node.operand)
            return _Expr(f"(-{inner.sql})", inner.name, inner.is_agg)
        raise _refuse(node, "this unary operator")
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _expr(node.left), _expr(node.right)
        return _Expr(
            f"({left.sql} {_BINOPS[type(node.op)]} {right.sql})", left.name or right.name, left.is_agg or right.is_agg
        )
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMPOPS:
        left, right = _expr(node.left), _expr(node.comparators[0])
        return _Expr(f"({left.sql} {_CMPOPS[type(node.ops[0])]} {right.sql})", left.name, left.is_agg)
    if isinstance(node, ast.Call):
        return _call(node)
    raise _refuse(node, type(node).__name__)


def _call(node: ast.Call) -> _Expr:
    func = node.func
    found = _pl_function(node)
    if found is not None:
        return found
    if not isinstance(func, ast.Attribute):
        raise _refuse(node, "calling a name")
    method, target = func.attr, func.value
    if isinstance(target, ast.Attribute) and target.attr in ("str", "dt"):
        return _namespace_call(node, target, method)
    if method not in _METHODS or method in ("str", "dt"):
        raise _refuse(node, f".{method}()")
    return _method_call(node, method, _expr(target))


def _pl_function(node: ast.Call) -> _Expr | None:
    """`pl.col('x')`, `pl.lit(v)`, `pl.len()` or `pl.count()`; None for any other call."""
    func = node.func
    if _is_pl(func, "col"):
        if len(node.args) != 1 or node.keywords:
            raise _refuse(node, "pl.col with other than one column name")
        name = _text(node.args[0], "pl.col")
        return _Expr(ident(name), name)
    if _is_pl(func, "lit"):
        return _Expr(_sql_value(_const(_args(node, "pl.lit", 1, 1)[0])), "literal")
    if _is_pl(func, "len") or (_is_pl(func, "count") and not node.args):
        _args(node, "pl.len" if _is_pl(func, "len") else "pl.count", 0, 0)
        return _Expr("count(*)", "len" if _is_pl(func, "len") else "count", True)
    return None


def _namespace_call(node: ast.Call, target: ast.Attribute, method: str) -> _Expr:
    """`.str.xxx()` or `.dt.xxx()` of an expression."""
    base = _expr(target.value)
    label = f".{target.attr}.{method}()"
    if target.attr == "dt" and method in _DT_METHODS:
        _args(node, label, 0, 0)
        fn = _DT_METHODS[method]
        sql = fn.replace("?", base.sql) if "?" in fn else f"{fn}({base.sql})"
        return _Expr(sql, base.name, base.is_agg)
    if target.attr == "str" and method in _STR_METHODS:
        _args(node, label, 0, 0)
        return _Expr(f"{_STR_METHODS[method]}({base.sql})", base.name, base.is_agg)
    if target.attr == "str" and method in ("contains", "starts_with", "ends_with"):
        if method == "contains":  # a regular expression in Polars (literal=True: a plain substring)
            needle = _text(_args_kw(node, label, 1, {"literal"})[0], label)
            literal = _keywords(node, label, {"literal": False})["literal"]
            call = f"contains({base.sql}, {_sql_value(needle)})" if literal else None
            return _Expr(call or f"regexp_matches({base.sql}, {_sql_value(needle)})", base.name, base.is_agg)
        needle = _text(_args(node, label, 1, 1)[0], label)
        return _Expr(f"{method}({base.sql}, {_sql_value(needle)})", base.name, base.is_agg)
    if target.attr == "str" and method in _STR_WITH_ARGS:
        return _Expr(_str_call(node, label, method, base.sql), base.name, base.is_agg)
    if target.attr == "dt" and method in _DT_WITH_ARGS:
        return _Expr(_dt_call(node, label, method, base.sql), base.name, base.is_agg)
    raise _refuse(node, label, _namespace_help(target.attr))


def _namespace_help(space: str) -> str:
    """The `.str` or `.dt` methods polars_expr knows, for a refusal."""
    names = [*_STR_METHODS, *_STR_WITH_ARGS] if space == "str" else [*_DT_METHODS, *_DT_WITH_ARGS]
    return f"The .{space} methods polars_expr supports: " + ", ".join(sorted(names))


def _keywords(node: ast.Call, label: str, allowed: dict[str, Any]) -> dict[str, Any]:
    """The literal keyword arguments of `node`, each one of `allowed` (name: default)."""
    out = dict(allowed)
    for k in node.keywords:
        if k.arg not in allowed:
            raise _bad(node, f"{label} takes the keywords {', '.join(allowed) or 'none'}, not {k.arg}")
        out[k.arg] = _const(k.value)
    return out


def _str_call(node: ast.Call, label: str, method: str, col: str) -> str:
    """The SQL of a `.str` method that takes arguments."""
    if method in ("strptime", "to_date", "to_datetime"):
        kw = _keywords(node, label, {"format": None, "strict": True, "exact": True})
        args = node.args
        if method == "strptime":
            if not args or not (_is_pl(args[0]) and isinstance(args[0], ast.Attribute) and args[0].attr in _TYPES):
                raise _bad(node, f"{label} takes a type first (pl.Date or pl.Datetime), then a format")
            target, args = _TYPES[args[0].attr], args[1:]
        else:
            target = "DATE" if method == "to_date" else "TIMESTAMP"
        if len(args) > 1:
            raise _bad(node, f"{label} takes one format")
        fmt = _text(args[0], label) if args else kw["format"]
        fn = "strptime" if kw["strict"] else "try_strptime"
        text = f"CAST({col} AS VARCHAR)"
        if fmt is None:  # no format: Polars infers it; DuckDB's cast reads ISO 8601
            parsed = f"{'CAST' if kw['strict'] else 'TRY_CAST'}({text} AS {target})"
        else:
            parsed = f"CAST({fn}({text}, {_sql_value(str(fmt))}) AS {target})"
        # Polars reads a CSV's dates as text; DuckDB's reader may have typed the column already.
        typed = f"typeof({col}) = 'DATE' OR typeof({col}) LIKE 'TIMESTAMP%'"
        return f"CASE WHEN {typed} THEN CAST({col} AS {target}) ELSE {parsed} END"
    if method in ("replace", "replace_all"):
        pattern, value = (_text(a, label) for a in _args_kw(node, label, 2, {"literal"}))
        literal = _keywords(node, label, {"literal": False})["literal"]
        if literal:
            one = f"replace({col}, {_sql_value(pattern)}, {_sql_value(value)})"
            if method == "replace_all":
                return one
            pattern = re.escape(pattern)
        flags = ", 'g'" if method == "replace_all" else ""
        return f"regexp_replace({col}, {_sql_value(pattern)}, {_sql_value(value)}{flags})"
    if method in ("slice", "head", "tail"):
        args = _args(node, label, 1, 2 if method == "slice" else 1)
        n = _int(args[0], label, -(2**31), 2**31)
        if method == "head":
            return f"left({col}, {n})"
        if method == "tail":
            return f"right({col}, {n})"
        start = f"{n + 1}" if n >= 0 else f"length({col}) + {n + 1}"
        length = f", {_int(args[1], label, 0, 2**31)}" if len(args) > 1 else ""
        return f"substring({col}, {start}{length})"
    # zfill / pad_start / pad_end
    args = _args(node, label, 1, 1 if method == "zfill" else 2)
    width = _int(args[0], label, 0, 10_000)
    fill = _text(args[1], label) if len(args) > 1 else ("0" if method == "zfill" else " ")
    fn = "rpad" if method == "pad_end" else "lpad"
    return f"{fn}({col}, CAST(greatest({width}, length({col})) AS INTEGER), {_sql_value(fill)})"


def _args_kw(node: ast.Call, label: str, n: int, keywords: set[str]) -> list[ast.expr]:
    """Exactly `n` positional arguments of `node`, which may also take the `keywords`."""
    other = [str(k.arg) for k in node.keywords if k.arg not in keywords]
    if other:
        raise _bad(node, f"{label} takes the keywords {', '.join(sorted(keywords))}, not {other[0]}")
    if len(node.args) != n:
        raise _bad(node, f"{label} takes {n} argument{'' if n == 1 else 's'}, got {len(node.args)}")
    return node.args


def _dt_call(node: ast.Call, label: str, method: str, col: str) -> str:
    """The SQL of a `.dt` method that takes arguments."""
    arg = _text(_args(node, label, 1, 1)[0], label)
    if method == "truncate":
        part = _TRUNCATE.get(arg)
        if part is None:
            raise _bad(node, f"{label} takes one of {', '.join(_TRUNCATE)}, got {arg!r}")
        return f"date_trunc({_sql_value(part)}, {col})"
    return f"strftime({col}, {_sql_value(arg)})"


def _method_call(node: ast.Call, method: str, base: _Expr) -> _Expr:
    """An expression method of `_METHODS` (not `.str` / `.dt`) applied to `base`."""
    label = f".{method}()"
    if method == "alias":
        return _Expr(base.sql, _text(_args(node, label, 1, 1)[0], label), base.is_agg)
    if method in _WITH_ARGUMENT:
        args = _args(node, label, 0 if method == "round" else 1, 1)
        return _WITH_ARGUMENT[method](node, base, args)
    _args(node, label, 0, 0)
    if method in _AGG:
        sql = f"count(DISTINCT {base.sql})" if method == "n_unique" else f"{_AGG[method]}({base.sql})"
        return _Expr(sql, base.name, True)
    if method in _UNARY:
        return _Expr(f"{_UNARY[method]}({base.sql})", base.name, base.is_agg)
    if method == "is_null":
        return _Expr(f"({base.sql} IS NULL)", base.name, base.is_agg)
    if method == "is_not_null":
        return _Expr(f"({base.sql} IS NOT NULL)", base.name, base.is_agg)
    raise _refuse(node, label)


def _is_in(node: ast.Call, base: _Expr, args: list[ast.expr]) -> _Expr:
    if not isinstance(args[0], ast.List | ast.Tuple):
        raise _refuse(node, "is_in without a literal list")
    values = ", ".join(_sql_value(_const(v)) for v in args[0].elts)
    return _Expr(f"({base.sql} IN ({values}))", base.name, base.is_agg)


def _round(node: ast.Call, base: _Expr, args: list[ast.expr]) -> _Expr:
    digits = _int(args[0], ".round()", -38, 38) if args else 0
    return _Expr(f"round({base.sql}, {digits})", base.name, base.is_agg)


def _fill_null(node: ast.Call, base: _Expr, args: list[ast.expr]) -> _Expr:
    return _Expr(f"coalesce({base.sql}, {_expr(args[0]).sql})", base.name, base.is_agg)


def _cast(node: ast.Call, base: _Expr, args: list[ast.expr]) -> _Expr:
    if not (_is_pl(args[0]) and isinstance(args[0], ast.Attribute) and args[0].attr in _TYPES):
        raise _refuse(node, "cast to anything but pl.Int64/Int32/Float64/Float32/Utf8/String/Boolean/Date/Datetime")
    return _Expr(f"CAST({base.sql} AS {_TYPES[args[0].attr]})", base.name, base.is_agg)


# The expression methods that take an argument (`.round()` may go without).
_WITH_ARGUMENT = {"is_in": _is_in, "round": _round, "fill_null": _fill_null, "cast": _cast}


def _expr_list(args: list[ast.expr], strings_are_columns: bool = True) -> list[_Expr]:
    """Expressions of a method's arguments (lists flattened); as in Polars, a bare string names a column."""
    items: list[ast.expr] = []
    for a in args:
        items.extend(a.elts if isinstance(a, ast.List | ast.Tuple) else [a])
    out = []
    for i in items:
        if strings_are_columns and isinstance(i, ast.Constant) and isinstance(i.value, str):
            out.append(_Expr(ident(i.value), i.value))
        else:
            out.append(_expr(i))
    return out


def _names(args: list[ast.expr]) -> list[str]:
    out = []
    for e in _expr_list(args):
        if e.name is None:
            raise QueryError("polars_expr: expected column names")
        out.append(e.sql)
    return out


def _chain(node: ast.AST) -> list[ast.Call]:
    calls: list[ast.Call] = []
    while isinstance(node, ast.Call):
        calls.append(node)
        func = node.func
        if not isinstance(func, ast.Attribute):
            raise _refuse(node, "calling a name")
        node = func.value
        if isinstance(node, ast.Name):
            break
    if not calls or not isinstance(node, ast.Name) or node.id != "pl":
        raise _refuse(node, "a chain that does not start at pl.scan_*/pl.table")
    return list(reversed(calls))


@dataclass(frozen=True)
class Compiled:
    """A chain as DuckDB SQL, and the bare names its start reads (`pl.scan_csv('orders')`,
    `pl.table('orders')`): views the call must have, a registered dataset's each."""

    sql: str
    names: list[str]


def compile_expr(text: str) -> str:
    """The DuckDB SQL equivalent of a restricted polars chain."""
    return compile_chain(text).sql


def compile_chain(text: str) -> Compiled:
    """`compile_expr`, with the names of the views the chain reads."""
    calls = _chain(_parse(text).body)
    source, names = _source(calls[0])
    chain = _Chain(source)
    for call in calls[1:]:
        chain.apply(call)
    if chain.group is not None:
        raise QueryError("polars_expr: group_by must be followed by .agg(...)")
    return Compiled(chain.sql, names)


def _parse(text: str) -> ast.Expression:
    """The parsed text (never evaluated), refused when too long or nested too deep."""
    if len(text) > MAX_CHARS:
        raise QueryError(f"polars_expr is longer than {MAX_CHARS} characters")
    try:
        with warnings.catch_warnings():  # a caller's odd literal ("1sum") is not the server log's business
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse("(" + text.strip() + "\n)", mode="eval")  # a chain may span lines
    except SyntaxError as exc:
        raise QueryError(f"polars_expr does not parse: {exc.msg} (line {exc.lineno})") from None
    except (RecursionError, MemoryError):
        raise _bad(None, f"the expression nests deeper than {MAX_DEPTH} levels") from None
    _depth_ok(tree)
    return tree


def _source(first: ast.Call) -> tuple[str, list[str]]:
    """The SQL of the chain's start: `pl.scan_*('file')` / `pl.read_*('file')` or `pl.table('view')`, and
    the bare name it reads, if any (a registered dataset: its view, whatever its format)."""
    assert isinstance(first.func, ast.Attribute)
    if first.func.attr in _SOURCES:
        if len(first.args) != 1:
            raise _refuse(first, "a scan without exactly one path")
        path = _text(_args(first, f"pl.{first.func.attr}()", 1, 1)[0], f"pl.{first.func.attr}()")
        if _BARE_NAME.fullmatch(path):
            return f"SELECT * FROM {ident(path.lower())}", [path]
        return f"SELECT * FROM {_SOURCES[first.func.attr]}({lit(path)})", []
    if first.func.attr == "table":
        name = _text(_args(first, "pl.table()", 1, 1)[0], "pl.table()")
        return f"SELECT * FROM {ident(name)}", [name] if _BARE_NAME.fullmatch(name) else []
    raise _refuse(first, f"pl.{first.func.attr}()")


class _Chain:
    """A chain compiled so far: its SQL, the keys of a group_by waiting for its `.agg()`, and whether
    its last step was a limit (a second one limits the first's result)."""

    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.group: list[_Expr] | None = None
        self.limited = False

    def apply(self, call: ast.Call) -> None:
        """Add the step `call` (a method of `_CHAIN_METHODS`) to the chain."""
        assert isinstance(call.func, ast.Attribute)
        m = call.func.attr
        _check_step(call, m, self.group is not None)
        if m in ("collect", "lazy"):
            return
        if m in ("limit", "head"):
            n = _int(call.args[0], f".{m}()", 0, 2**62) if call.args else 5
            self.sql = f"SELECT * FROM ({self.sql}) LIMIT {n}" if self.limited else f"{self.sql} LIMIT {n}"
            self.limited = True
            return
        if m in ("group_by", "groupby"):
            self.group = _expr_list(call.args)  # names, or expressions (`pl.col('d').dt.month().alias('m')`)
            if any(e.name is None for e in self.group):
                raise QueryError("polars_expr: group_by takes column names or named expressions")
        elif m == "agg":
            if self.group is None:
                raise _refuse(call, ".agg() without group_by")
            aggs = ", ".join(e.aliased() for e in _expr_list(call.args))
            keys = ", ".join(e.aliased() for e in self.group)
            self.sql = f"SELECT {keys}, {aggs} FROM ({self.sql}) GROUP BY {', '.join(e.sql for e in self.group)}"
            self.group = None
        else:
            self.sql = _STEPS[m](call, self.sql)
        self.limited = False


def _check_step(call: ast.Call, m: str, grouping: bool) -> None:
    """Refuse a step that is not allowed there, or that has the wrong arguments for its method `m`."""
    label = f".{m}()"
    if m not in _CHAIN_METHODS:
        raise _refuse(call, label)
    if grouping and m != "agg":
        raise _refuse(call, f".{m}() after group_by (expected .agg)")
    if m == "sort":
        if any(k.arg != "descending" for k in call.keywords):
            raise _bad(call, ".sort() takes only the keyword descending")
    elif call.keywords:
        raise _bad(call, f"{label} takes no keyword arguments")
    if m in ("collect", "lazy", "unique", "count"):
        _args(call, label, 0, 0)
    elif m in ("limit", "head"):
        _args(call, label, 0, 1)
    elif not call.args:
        raise _bad(call, f"{label} needs at least one argument")


def _sort(call: ast.Call, sql: str) -> str:
    cols = _names(call.args)
    desc = next((k.value for k in call.keywords if k.arg == "descending"), None)
    flags = (
        [bool(_const(d)) for d in desc.elts]
        if isinstance(desc, ast.List)
        else [bool(_const(desc)) if desc is not None else False] * len(cols)
    )
    if len(flags) != len(cols):
        raise QueryError("polars_expr: descending must match the sort columns")
    order = ", ".join(f"{c} {'DESC' if d else 'ASC'}" for c, d in zip(cols, flags, strict=True))
    return f"SELECT * FROM ({sql}) ORDER BY {order}"


# The steps that wrap the chain's SQL so far, by method.
_STEPS: dict[str, Callable[[ast.Call, str], str]] = {
    "filter": lambda call, sql: (
        f"SELECT * FROM ({sql}) WHERE {' AND '.join(e.sql for e in _expr_list(call.args, strings_are_columns=False))}"
    ),
    "select": lambda call, sql: f"SELECT {', '.join(e.aliased() for e in _expr_list(call.args))} FROM ({sql})",
    "with_columns": lambda call, sql: f"SELECT *, {', '.join(e.aliased() for e in _expr_list(call.args))} FROM ({sql})",
    "sort": _sort,
    "unique": lambda call, sql: f"SELECT DISTINCT * FROM ({sql})",
    "drop": lambda call, sql: f"SELECT * EXCLUDE ({', '.join(_names(call.args))}) FROM ({sql})",
    "count": lambda call, sql: f"SELECT count(*) AS count FROM ({sql})",
}
