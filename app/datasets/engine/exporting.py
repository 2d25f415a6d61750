"""export_result: a stored result written as CSV, Parquet, JSON or XLSX into the caller's project folder.

The rules that make an export harmless to the files around it:

- The destination directory lies inside the project's folder (never a shared data root, never the
  `uploads/` folder the upload route owns), and each of its components is walked without following a
  symbolic link: a link anywhere in it is refused, a missing directory is created.
- The file name carries the extension of what is written (`.csv`, `.csv.gz` with gzip, `.parquet`,
  `.json`/`.jsonl`/`.ndjson`, `.xlsx`, ...), so an export can only ever produce a data file of its
  own format.
- The data is written to a fresh temporary name in the destination directory, then moved into place:
  without `overwrite` by a hard link that fails when anything exists under the name (a dangling
  symbolic link included); with `overwrite` by a rename, which replaces the directory entry and never
  follows a link. Only a regular file is ever replaced; a symbolic link or a directory at the name is
  refused, and no directory is ever deleted.
- Filesystem failures become errors with their own codes (`storage_error`), never the database's.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import uuid
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import duckdb

from app.core.errors import CairnError, Conflict, EngineError, Forbidden, InvalidInput, NotFound, TooLarge
from app.datasets.engine.databases import EngineConfig, run_locked
from app.datasets.engine.pool import offload_sync
from app.datasets.engine.rendering import capped_columns, json_export_columns
from app.datasets.engine.sandbox import ident
from app.datasets.engine.sandbox import sql_string as lit
from app.datasets.engine.values import cell_text, jsonable

if TYPE_CHECKING:
    from app.datasets.schemas import ExportedFile, ExportIn

XLSX_MAX_ROWS = 1_048_575
XLSX_MAX_SHEETS = 200
# The extensions a file of each format may carry (before a compression suffix).
EXTENSIONS = {
    "csv": (".csv",),
    "parquet": (".parquet", ".pq"),
    "json": (".json", ".jsonl", ".ndjson"),
    "xlsx": (".xlsx",),
}
UPLOADS = "uploads"
TEMP_PREFIX = ".export-"


# ------------------------------------------------------------------------------------------------ errors


def storage_error(exc: OSError, what: str) -> CairnError:
    """A filesystem failure as the caller's error (`what`: the path or action, for the message)."""
    code = exc.errno
    reason = exc.strerror or type(exc).__name__
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return Forbidden(
            f"The server may not write {what}: {reason}",
            suggestions=["The operator must make the datasets folders writable by the server"],
        )
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return EngineError(
            f"The server's disk is full: could not write {what}",
            suggestions=["Export fewer rows or a compressed format", "The operator must free disk space"],
        )
    if code in (errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTEMPTY):
        return InvalidInput(f"Cannot write {what}: {reason}", suggestions=["Choose another destination or filename"])
    if code == errno.ENOENT:
        return NotFound(f"Cannot write {what}: a folder on the way is gone", suggestions=["Retry the call"])
    return EngineError(f"Could not write {what}: {reason}")


# DuckDB errors of a COPY that are about the write or the request (others, such as an interrupt or
# running out of memory, keep the engine's own translation).
WRITE_ERRORS = (
    duckdb.IOException,
    duckdb.PermissionException,
    duckdb.NotImplementedException,
    duckdb.InvalidInputException,
    duckdb.BinderException,
    duckdb.ConversionException,
)


def _duckdb_write_error(exc: duckdb.Error, what: str) -> CairnError:
    """A DuckDB failure while writing (COPY ... TO) as the caller's error."""
    text = str(exc)
    for needle, code in (
        ("No space left", errno.ENOSPC),
        ("Permission denied", errno.EACCES),
        ("Read-only file system", errno.EROFS),
        ("Not a directory", errno.ENOTDIR),
    ):
        if needle in text:
            return storage_error(OSError(code, os.strerror(code)), what)
    if isinstance(exc, duckdb.NotImplementedException | duckdb.InvalidInputException | duckdb.BinderException):
        return InvalidInput(f"Cannot export this result: {text.strip().splitlines()[0][:300]}")
    return EngineError(f"Could not write {what}: {text.strip().splitlines()[0][:300]}")


# ------------------------------------------------------------------------------------------------ names


def _codec(fmt: str, compression: str) -> str | None:
    """DuckDB's COMPRESSION value; None for uncompressed text formats."""
    if fmt == "parquet":
        return {"none": "uncompressed"}.get(compression, compression)
    if compression in ("none", "snappy"):  # snappy is a Parquet codec: text formats stay plain
        return None
    return compression


def _suffix(fmt: str, compression: str) -> str:
    """The compression suffix a text file's name must end with ('' when plain or for Parquet/XLSX)."""
    if fmt not in ("csv", "json"):
        return ""
    return {"gzip": ".gz", "zstd": ".zst"}.get(_codec(fmt, compression) or "", "")


def output_name(args: ExportIn) -> str:
    """The file (or, with partition_by, directory) name written under the destination. A given name
    must end with the format's extension and compression suffix (4001 otherwise)."""
    if args.format == "xlsx" and args.compression in ("gzip", "zstd"):
        raise InvalidInput(
            f"xlsx files are zip archives already: compression '{args.compression}' does not apply",
            suggestions=["Use compression 'none' with xlsx, or export csv/json compressed"],
        )
    suffix = _suffix(args.format, args.compression)
    endings = [ext + suffix for ext in EXTENSIONS[args.format]]
    if not args.filename:
        return args.query_id + endings[0]
    name = args.filename
    if args.partition_by and args.format != "xlsx" and "." not in name:
        return name  # a plain folder name: the files inside get DuckDB's data_<n><ext>
    if not name.lower().endswith(tuple(endings)):
        raise InvalidInput(
            f"filename '{name}' does not match format {args.format}"
            + (f" with {args.compression} compression" if suffix else "")
            + f": it must end in {' or '.join(endings)}",
            suggestions=_name_hints(args, name, endings),
        )
    return name


def _name_hints(args: ExportIn, name: str, endings: list[str]) -> list[str]:
    """How to make a refused filename and the written content agree."""
    lower = name.lower()
    named = next((c for c, s in (("gzip", ".gz"), ("zstd", ".zst")) if lower.endswith(s)), None)
    bare = lower.removesuffix(".gz").removesuffix(".zst")
    stem = name[: len(bare)].rsplit(".", 1)[0] or "export"
    hints = [f"Name it {stem}{endings[0]}"]
    if args.format in ("csv", "json") and bare.endswith(EXTENSIONS[args.format]):
        if named is not None:
            hints.append(f"Or pass compression '{named}' (or no compression) to write {name} compressed")
        else:
            hints.append(f"Or pass compression 'none' to write {name} uncompressed")
    return [*hints, "Or omit filename"]


# ------------------------------------------------------------------------------------------------ places


def destination(folder: Path, raw: str, *, uploads: bool = False) -> Path:
    """The export directory `raw` (relative to the project's `folder`, or absolute inside it), created
    component by component without following a symbolic link. Refuses (4030) a place outside the
    folder or inside its `uploads/` (unless `uploads`: the upload route's own use), and a link on the
    way; a component that is a file is 4001."""
    text = raw.strip()
    if not text or "\x00" in text:
        raise InvalidInput("destination is empty or invalid")
    path = Path(os.path.normpath(text if os.path.isabs(text) else folder / text))
    if path != folder and not path.is_relative_to(folder):
        raise Forbidden(
            f"destination '{raw[:200]}' is outside this project's folder: exports are written only there",
            suggestions=["Use a relative destination such as 'exports'", "The shared data roots are read-only"],
        )
    parts = path.relative_to(folder).parts
    if parts and parts[0] == UPLOADS and not uploads:
        raise Forbidden(
            "uploads/ holds the uploaded datasets and is written only by the upload route",
            suggestions=["Use another destination, such as 'exports'"],
        )
    if any(p.startswith(".") for p in parts):
        raise InvalidInput("destination folders may not start with '.'", suggestions=["Use a name such as 'exports'"])
    current = folder
    for part in parts:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            try:
                os.mkdir(current)
            except FileExistsError:  # made meanwhile: checked below like any existing one
                pass
            except OSError as exc:
                raise storage_error(exc, f"the folder '{part}'") from None
            st = os.lstat(current)
        except OSError as exc:
            raise storage_error(exc, f"the folder '{part}'") from None
        if stat.S_ISLNK(st.st_mode):
            raise Forbidden(f"'{part}' in the destination is a symbolic link: exports never follow links")
        if not stat.S_ISDIR(st.st_mode):
            raise InvalidInput(f"'{part}' in the destination is a file, not a folder")
    return path


def _existing(target: Path) -> os.stat_result | None:
    try:
        return os.lstat(target)
    except FileNotFoundError:
        return None


def check_target(target: Path, *, overwrite: bool, directory: bool) -> None:
    """Refuse a name that an export may not take: a symbolic link (4030), a directory or anything but
    a regular file (4090), or an existing file without `overwrite` (4090)."""
    st = _existing(target)
    if st is None:
        return
    if stat.S_ISLNK(st.st_mode):
        raise Forbidden(f"{target.name} is a symbolic link: exports never follow or replace links")
    if stat.S_ISDIR(st.st_mode):
        raise Conflict(
            f"{target.name} is an existing folder: an export never replaces or deletes a folder",
            suggestions=["Choose another filename"],
        )
    if not stat.S_ISREG(st.st_mode):
        raise Conflict(f"{target.name} exists and is not a regular file", suggestions=["Choose another filename"])
    if directory:
        raise Conflict(
            f"{target.name} is an existing file: a partitioned export writes a folder",
            suggestions=["Choose another filename"],
        )
    if not overwrite:
        raise Conflict(f"{target.name} already exists in the destination", suggestions=["Pass overwrite=true"])


def place(tmp: Path, target: Path, *, overwrite: bool) -> None:
    """Move the fresh file or folder `tmp` to `target` in the same directory, atomically. Without
    `overwrite` nothing at all may exist under the name; with it only a regular file is replaced."""
    directory = tmp.is_dir() and not tmp.is_symlink()
    check_target(target, overwrite=overwrite, directory=directory)
    try:
        if directory:
            # rename(2) of a folder fails on a non-empty folder and on anything else but an empty folder,
            # which check_target has just refused; a race leaves at worst an empty folder replaced.
            os.rename(tmp, target)
        elif overwrite:
            os.rename(tmp, target)  # replaces the entry itself: a link swapped in meanwhile is not followed
        else:
            _link_new(tmp, target)
    except FileExistsError:
        raise Conflict(
            f"{target.name} already exists in the destination", suggestions=["Pass overwrite=true"]
        ) from None
    except IsADirectoryError:
        raise Conflict(f"{target.name} is an existing folder: an export never replaces a folder") from None
    except OSError as exc:
        if exc.errno == errno.ENOTEMPTY:
            raise Conflict(f"{target.name} is an existing folder: an export never replaces a folder") from None
        raise storage_error(exc, target.name) from None


def _link_new(tmp: Path, target: Path) -> None:
    """Give `tmp` the name `target`, which must not exist in any form (a dangling link included)."""
    try:
        os.link(tmp, target, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
        # A filesystem without hard links: claim the name exclusively (O_EXCL also fails on a link),
        # then move the data over that empty file.
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        os.rename(tmp, target)
        return
    os.unlink(tmp)


def remove_temp(tmp: Path) -> None:
    """Delete a temporary file or folder this module made (never followed: it holds no links)."""
    with suppress(FileNotFoundError):
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp)
        else:
            tmp.unlink()


# ------------------------------------------------------------------------------------------------ export


def export(cfg: EngineConfig, source: Path, dest_dir: Path, name: str, args: ExportIn, rows: int) -> list[ExportedFile]:
    """Write the stored result `source` as `dest_dir/name`; returns the files with their sizes."""
    from app.datasets.schemas import ExportedFile

    target = dest_dir / name
    partitioned = args.partition_by is not None and args.format != "xlsx"
    check_target(target, overwrite=args.overwrite, directory=partitioned)
    if args.format == "xlsx" and rows > XLSX_MAX_ROWS:
        raise TooLarge(
            f"XLSX holds at most {XLSX_MAX_ROWS} rows per sheet; the result has {rows}",
            suggestions=["Export as parquet or csv", "Aggregate before exporting"],
        )
    tmp = dest_dir / f"{TEMP_PREFIX}{uuid.uuid4().hex}{'' if partitioned else _suffix_of(name)}"
    try:
        if args.format == "xlsx":
            _xlsx(cfg, source, tmp, args.partition_by)
        else:
            _copy(cfg, source, tmp, args)
            if partitioned and not tmp.exists():
                os.mkdir(tmp)  # an empty result writes no partition
        place(tmp, target, overwrite=args.overwrite)
    except OSError as exc:
        raise storage_error(exc, f"the export {name}") from None
    finally:
        remove_temp(tmp)
    if partitioned:
        paths = sorted(Path(top) / f for top, _, names in os.walk(target) for f in names)
    else:
        paths = [target]
    return [ExportedFile(path=str(p), size_bytes=os.lstat(p).st_size) for p in paths]


def _suffix_of(name: str) -> str:
    """The extension(s) of an output name, kept on its temporary name."""
    lower = name.lower()
    for fmt_exts in EXTENSIONS.values():
        for ext in fmt_exts:
            for comp in ("", ".gz", ".zst"):
                if lower.endswith(ext + comp):
                    return ext + comp
    return ""


def _copy(cfg: EngineConfig, source: Path, tmp: Path, args: ExportIn) -> None:
    opts = [f"FORMAT {args.format}"]
    codec = _codec(args.format, args.compression)
    if codec:
        opts.append(f"COMPRESSION {codec}")
    if args.format == "csv":
        opts.append("HEADER true")
    if args.partition_by:
        opts.append(f"PARTITION_BY ({ident(args.partition_by)})")
    target = f"TO {lit(str(tmp))} ({', '.join(opts)})"
    offload_sync(copy_out, cfg, f"read_parquet({lit(str(source))})", target, args.format == "json")


def copy_out(cfg: EngineConfig, relation: str, target: str, json_numbers: bool = False) -> None:
    """Run `COPY (SELECT … FROM relation) target`, built by `_copy`, on a locked database (in a DuckDB
    worker); with `json_numbers`, numbers are written as `rendering.json_export_columns` renders them."""

    def work(con: duckdb.DuckDBPyConnection) -> None:
        picked = json_export_columns(con, relation) if json_numbers else "*"
        try:
            con.execute(f"COPY (SELECT {picked} FROM {relation}) {target}")
        except WRITE_ERRORS as exc:
            raise _duckdb_write_error(exc, "the export") from None

    run_locked(cfg, [], work)


def _xlsx(cfg: EngineConfig, source: Path, tmp: Path, partition_by: str | None) -> None:
    import xlsxwriter
    from xlsxwriter.exceptions import FileCreateError

    # A fresh name opened exclusively, never through a link; XlsxWriter writes into the open file.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    fh: BinaryIO = os.fdopen(fd, "wb")
    con = duckdb.connect(":memory:", config={"autoload_known_extensions": False, "threads": 1})
    book = xlsxwriter.Workbook(
        fh, {"constant_memory": True, "strings_to_numbers": False, "tmpdir": str(cfg.work / "tmp")}
    )
    try:
        con.execute("SET TimeZone = 'UTC'")  # as in a locked database: TIMESTAMPTZ values render in UTC
        src = f"read_parquet({lit(str(source))})"
        names = [str(d[0]) for d in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()]
        shown = capped_columns(con, src, names, cut=False)  # rendered whole as answers render values
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
            cur = con.execute(f"SELECT {shown} FROM {src}{where}", [g] if partition_by and g is not None else [])
            name = _sheet_name("data" if not partition_by else f"{partition_by}={cell_text(jsonable(g))}", used)
            sheet = book.add_worksheet(name)
            sheet.write_row(0, 0, names)
            r = 1
            while True:
                chunk = cur.fetchmany(10_000)
                if not chunk:
                    break
                for row in chunk:
                    sheet.write_row(r, 0, [_cell(v) for v in row])
                    r += 1
    finally:
        try:
            book.close()
        except FileCreateError as exc:
            inner = exc.args[0] if exc.args else None
            if isinstance(inner, OSError):
                raise inner from None
            raise EngineError(f"Could not write the xlsx file: {str(exc)[:200]}") from None
        finally:
            fh.close()
            con.close()


def _cell(value: object) -> object:
    """A value as one xlsx cell: rendered whole by the rule of answers (`jsonable`), lists and objects
    as JSON text."""
    v = jsonable(value, cut=False)
    return cell_text(v) if isinstance(v, dict | list) else v


def _sheet_name(raw: str, used: set[str]) -> str:
    name = "".join("_" if ch in "[]:*?/\\" else ch for ch in raw)[:28] or "sheet"
    base, i = name, 2
    while name.lower() in used:
        name = f"{base[:25]}_{i}"
        i += 1
    used.add(name.lower())
    return name
