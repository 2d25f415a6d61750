"""`polars_expr`: a restricted, Polars-shaped expression language compiled to DuckDB SQL.

The text is parsed with Python's `ast` module (parsing only — nothing is ever evaluated) and every
node is checked against an allow-list: a chain that starts at `pl.scan_csv / scan_parquet /
scan_ndjson / read_csv / read_parquet / read_ndjson('file')` or `pl.table('view')` and continues with
`filter, select, with_columns, group_by(...).agg(...), sort, limit/head, unique, drop, count, collect,
lazy`; expressions are `pl.col('x')`, `pl.lit(v)`, `pl.len()`, arithmetic, comparisons, `& | ~`, and the
methods listed in `_METHODS` / `_STR_METHODS` / `_DT_METHODS`. Anything else is refused with 4004
naming the construct. The SQL it produces then goes through the same sandbox as any SQL query.
"""

from __future__ import annotations

import ast
from typing import Any

from app.core.errors import QueryError
from app.datasets.sandbox import ident
from app.datasets.sandbox import sql_string as lit

MAX_CHARS = 10_000
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
_STR_METHODS = {"to_lowercase": "lower", "to_uppercase": "upper", "len_chars": "length", "strip_chars": "trim"}
_DT_METHODS = {
    "year": "year",
    "month": "month",
    "day": "day",
    "hour": "hour",
    "weekday": "isodow",
    "quarter": "quarter",
}
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


def _refuse(node: ast.AST | None, what: str) -> QueryError:
    where = f" (column {node.col_offset + 1})" if node is not None and hasattr(node, "col_offset") else ""
    return QueryError(
        f"polars_expr: {what} is not allowed{where}",
        suggestions=[
            "Allowed: pl.scan_csv/scan_parquet/scan_ndjson/table, filter, select, "
            "with_columns, group_by().agg(), sort, limit/head, unique, drop, count; "
            "pl.col, pl.lit, pl.len and common expression methods",
            "Or use query_type 'sql'",
        ],
    )


class _Expr:
    def __init__(self, sql: str, name: str | None, is_agg: bool = False) -> None:
        self.sql, self.name, self.is_agg = sql, name, is_agg

    def aliased(self) -> str:
        return f"{self.sql} AS {ident(self.name)}" if self.name else self.sql


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
    if _is_pl(func, "col"):
        if len(node.args) != 1 or node.keywords:
            raise _refuse(node, "pl.col with other than one column name")
        name = str(_const(node.args[0]))
        return _Expr(ident(name), name)
    if _is_pl(func, "lit"):
        return _Expr(_sql_value(_const(node.args[0])), "literal")
    if _is_pl(func, "len") or (_is_pl(func, "count") and not node.args):
        return _Expr("count(*)", "len" if _is_pl(func, "len") else "count", True)
    if not isinstance(func, ast.Attribute):
        raise _refuse(node, "calling a name")
    method = func.attr
    target = func.value
    # .str.xxx() / .dt.xxx()
    if isinstance(target, ast.Attribute) and target.attr in ("str", "dt"):
        base = _expr(target.value)
        if target.attr == "dt" and method in _DT_METHODS and not node.args:
            return _Expr(f"{_DT_METHODS[method]}({base.sql})", base.name, base.is_agg)
        if target.attr == "str":
            if method in _STR_METHODS and not node.args:
                return _Expr(f"{_STR_METHODS[method]}({base.sql})", base.name, base.is_agg)
            if method in ("contains", "starts_with", "ends_with") and len(node.args) == 1:
                fn = {"contains": "contains", "starts_with": "starts_with", "ends_with": "ends_with"}[method]
                return _Expr(f"{fn}({base.sql}, {_sql_value(str(_const(node.args[0])))})", base.name, base.is_agg)
        raise _refuse(node, f".{target.attr}.{method}()")
    if method not in _METHODS or method in ("str", "dt"):
        raise _refuse(node, f".{method}()")
    base = _expr(target)
    args = node.args
    if method == "alias":
        return _Expr(base.sql, str(_const(args[0])), base.is_agg)
    if method in _AGG:
        fn = _AGG[method]
        sql = f"count(DISTINCT {base.sql})" if method == "n_unique" else f"{fn}({base.sql})"
        return _Expr(sql, base.name, True)
    if method in _UNARY:
        return _Expr(f"{_UNARY[method]}({base.sql})", base.name, base.is_agg)
    if method == "is_null":
        return _Expr(f"({base.sql} IS NULL)", base.name, base.is_agg)
    if method == "is_not_null":
        return _Expr(f"({base.sql} IS NOT NULL)", base.name, base.is_agg)
    if method == "is_in":
        if len(args) != 1 or not isinstance(args[0], ast.List | ast.Tuple):
            raise _refuse(node, "is_in without a literal list")
        values = ", ".join(_sql_value(_const(v)) for v in args[0].elts)
        return _Expr(f"({base.sql} IN ({values}))", base.name, base.is_agg)
    if method == "round":
        digits = int(_const(args[0])) if args else 0
        return _Expr(f"round({base.sql}, {digits})", base.name, base.is_agg)
    if method == "fill_null":
        return _Expr(f"coalesce({base.sql}, {_expr(args[0]).sql})", base.name, base.is_agg)
    if method == "cast":
        if len(args) != 1 or not (_is_pl(args[0]) and isinstance(args[0], ast.Attribute) and args[0].attr in _TYPES):
            raise _refuse(node, "cast to anything but pl.Int64/Int32/Float64/Float32/Utf8/String/Boolean/Date/Datetime")
        return _Expr(f"CAST({base.sql} AS {_TYPES[args[0].attr]})", base.name, base.is_agg)
    raise _refuse(node, f".{method}()")


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
    if not isinstance(node, ast.Name) or node.id != "pl":
        raise _refuse(node, "a chain that does not start at pl.scan_*/pl.table")
    return list(reversed(calls))


def compile_expr(text: str) -> str:
    """The DuckDB SQL equivalent of a restricted polars chain."""
    if len(text) > MAX_CHARS:
        raise QueryError(f"polars_expr is longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse("(" + text.strip() + "\n)", mode="eval")  # a chain may span lines
    except SyntaxError as exc:
        raise QueryError(f"polars_expr does not parse: {exc.msg} (line {exc.lineno})") from None
    calls = _chain(tree.body)
    first = calls[0]
    assert isinstance(first.func, ast.Attribute)
    if first.func.attr in _SOURCES:
        if len(first.args) != 1:
            raise _refuse(first, "a scan without exactly one path")
        sql = f"SELECT * FROM {_SOURCES[first.func.attr]}({lit(str(_const(first.args[0])))})"
    elif first.func.attr == "table":
        sql = f"SELECT * FROM {ident(str(_const(first.args[0])))}"
    else:
        raise _refuse(first, f"pl.{first.func.attr}()")
    pending_group: list[str] | None = None
    limited = False
    for call in calls[1:]:
        assert isinstance(call.func, ast.Attribute)
        m = call.func.attr
        kw = {k.arg: k.value for k in call.keywords}
        if pending_group is not None and m != "agg":
            raise _refuse(call, f".{m}() after group_by (expected .agg)")
        if m in ("collect", "lazy"):
            continue
        if m in ("limit", "head"):
            n = int(_const(call.args[0])) if call.args else 5
            sql = f"SELECT * FROM ({sql}) LIMIT {max(0, n)}" if limited else f"{sql} LIMIT {max(0, n)}"
            limited = True
            continue
        if m == "filter":
            conds = " AND ".join(e.sql for e in _expr_list(call.args, strings_are_columns=False))
            sql = f"SELECT * FROM ({sql}) WHERE {conds}"
        elif m == "select":
            sql = f"SELECT {', '.join(e.aliased() for e in _expr_list(call.args))} FROM ({sql})"
        elif m == "with_columns":
            sql = f"SELECT *, {', '.join(e.aliased() for e in _expr_list(call.args))} FROM ({sql})"
        elif m in ("group_by", "groupby"):
            pending_group = _names(call.args)
        elif m == "agg":
            if pending_group is None:
                raise _refuse(call, ".agg() without group_by")
            aggs = ", ".join(e.aliased() for e in _expr_list(call.args))
            keys = ", ".join(pending_group)
            sql = f"SELECT {keys}, {aggs} FROM ({sql}) GROUP BY {keys}"
            pending_group = None
        elif m == "sort":
            cols = _names(call.args)
            desc = kw.get("descending")
            flags = (
                [bool(_const(d)) for d in desc.elts]
                if isinstance(desc, ast.List)
                else [bool(_const(desc)) if desc is not None else False] * len(cols)
            )
            if len(flags) != len(cols):
                raise QueryError("polars_expr: descending must match the sort columns")
            order = ", ".join(f"{c} {'DESC' if d else 'ASC'}" for c, d in zip(cols, flags, strict=True))
            sql = f"SELECT * FROM ({sql}) ORDER BY {order}"
        elif m == "unique":
            sql = f"SELECT DISTINCT * FROM ({sql})"
        elif m == "drop":
            sql = f"SELECT * EXCLUDE ({', '.join(_names(call.args))}) FROM ({sql})"
        elif m == "count":
            sql = f"SELECT count(*) AS count FROM ({sql})"
        else:
            raise _refuse(call, f".{m}()")
        limited = False
    if pending_group is not None:
        raise QueryError("polars_expr: group_by must be followed by .agg(...)")
    return sql
