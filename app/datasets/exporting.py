"""export_result: a stored result written as CSV, Parquet, JSON or XLSX inside a data root."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from app.core.errors import Conflict, InvalidInput, TooLarge
from app.datasets.engine import EngineConfig, jsonable, run_locked
from app.datasets.sandbox import ident
from app.datasets.sandbox import sql_string as lit

if TYPE_CHECKING:
    from app.datasets.schemas import ExportedFile, ExportIn

XLSX_MAX_ROWS = 1_048_575
XLSX_MAX_SHEETS = 200
EXT = {"csv": ".csv", "parquet": ".parquet", "json": ".json", "xlsx": ".xlsx"}


def _codec(fmt: str, compression: str) -> str | None:
    """DuckDB's COMPRESSION value; None for uncompressed text formats."""
    if fmt == "parquet":
        return {"none": "uncompressed"}.get(compression, compression)
    if compression in ("none", "snappy"):  # snappy is a Parquet codec: text formats stay plain
        return None
    return compression


def output_name(args: ExportIn) -> str:
    """The file (or, with partition_by, directory) name written under the destination."""
    if args.filename:
        return args.filename
    name = args.query_id + EXT[args.format]
    codec = _codec(args.format, args.compression) if args.format in ("csv", "json") else None
    if codec == "gzip":
        name += ".gz"
    elif codec == "zstd":
        name += ".zst"
    return name


def export(cfg: EngineConfig, source: Path, dest_dir: Path, args: ExportIn, rows: int) -> list[ExportedFile]:
    """Write the files; returns them with their sizes."""
    from app.datasets.schemas import ExportedFile

    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / output_name(args)
    if target.exists():
        if not args.overwrite:
            raise Conflict(f"{target.name} already exists in the destination", suggestions=["Pass overwrite=true"])
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
    if args.format == "xlsx":
        _xlsx(source, target, args.partition_by, rows)
    else:
        opts = [f"FORMAT {args.format}"]
        codec = _codec(args.format, args.compression)
        if codec:
            opts.append(f"COMPRESSION {codec}")
        if args.format == "csv":
            opts.append("HEADER true")
        if args.partition_by:
            opts.append(f"PARTITION_BY ({ident(args.partition_by)})")
        stmt = f"COPY (SELECT * FROM read_parquet({lit(str(source))})) TO {lit(str(target))} ({', '.join(opts)})"

        def work(con: duckdb.DuckDBPyConnection) -> None:
            con.execute(stmt)

        run_locked(cfg, [], work)
    paths = sorted(p for p in target.rglob("*") if p.is_file()) if target.is_dir() else [target]
    return [ExportedFile(path=str(p), size_bytes=p.stat().st_size) for p in paths]


def _xlsx(source: Path, target: Path, partition_by: str | None, rows: int) -> None:
    import xlsxwriter

    if rows > XLSX_MAX_ROWS:
        raise TooLarge(
            f"XLSX holds at most {XLSX_MAX_ROWS} rows per sheet; the result has {rows}",
            suggestions=["Export as parquet or csv", "Aggregate before exporting"],
        )
    con = duckdb.connect(":memory:", config={"autoload_known_extensions": False, "threads": 1})
    book = xlsxwriter.Workbook(str(target), {"constant_memory": True, "strings_to_numbers": False})
    try:
        src = f"read_parquet({lit(str(source))})"
        groups: list[object] = [None]
        if partition_by:
            groups = [
                g[0]
                for g in con.execute(
                    f"SELECT DISTINCT {ident(partition_by)} FROM {src} ORDER BY 1 NULLS LAST"
                ).fetchall()
            ]
            if len(groups) > XLSX_MAX_SHEETS:
                raise InvalidInput(f"partition_by gives {len(groups)} sheets; XLSX export allows {XLSX_MAX_SHEETS}")
        used: set[str] = set()
        for g in groups:
            where = ""
            if partition_by:
                where = f" WHERE {ident(partition_by)} IS NULL" if g is None else f" WHERE {ident(partition_by)} = $1"
            cur = con.execute(f"SELECT * FROM {src}{where}", [g] if partition_by and g is not None else [])
            cols = [d[0] for d in cur.description or []]
            name = _sheet_name("data" if not partition_by else f"{partition_by}={g}", used)
            sheet = book.add_worksheet(name)
            sheet.write_row(0, 0, cols)
            r = 1
            while True:
                chunk = cur.fetchmany(10_000)
                if not chunk:
                    break
                for row in chunk:
                    sheet.write_row(r, 0, [_cell(v) for v in row])
                    r += 1
    finally:
        book.close()
        con.close()


def _cell(value: object) -> object:
    v = jsonable(value)
    if isinstance(v, dict | list):
        return str(v)
    return v


def _sheet_name(raw: str, used: set[str]) -> str:
    name = "".join("_" if ch in "[]:*?/\\" else ch for ch in raw)[:28] or "sheet"
    base, i = name, 2
    while name.lower() in used:
        name = f"{base[:25]}_{i}"
        i += 1
    used.add(name.lower())
    return name
