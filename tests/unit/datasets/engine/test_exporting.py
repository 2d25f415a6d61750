"""app/datasets/engine/exporting.py: an export writes only its own format, inside the project's folder, and
never follows a link or replaces a folder."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from app.core.errors import CairnError
from app.datasets.engine import exporting
from app.datasets.schemas import ExportIn

QID = "q_0123456789abcdef"


def args(**kw: Any) -> ExportIn:
    return ExportIn.model_validate({"query_id": QID, "destination": "exports", **kw})


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({}, f"{QID}.parquet"),
        ({"format": "csv"}, f"{QID}.csv"),
        ({"format": "csv", "compression": "gzip"}, f"{QID}.csv.gz"),
        ({"format": "json", "compression": "zstd"}, f"{QID}.json.zst"),
        ({"format": "xlsx"}, f"{QID}.xlsx"),
        ({"format": "csv", "filename": "Sales.CSV"}, "Sales.CSV"),
        ({"format": "csv", "compression": "gzip", "filename": "dec.csv.gz"}, "dec.csv.gz"),
        ({"format": "json", "compression": "none", "filename": "rows.ndjson"}, "rows.ndjson"),
        ({"format": "parquet", "compression": "zstd", "filename": "p.pq"}, "p.pq"),
        ({"format": "csv", "partition_by": "k", "filename": "by_k"}, "by_k"),
        ({"format": "csv", "partition_by": "k", "compression": "gzip", "filename": "by_k.csv.gz"}, "by_k.csv.gz"),
        # Without a compression, the name's .gz / .zst names it.
        ({"format": "csv", "filename": "dec.csv.gz"}, "dec.csv.gz"),
        ({"format": "json", "filename": "rows.jsonl.zst", "compression": None}, "rows.jsonl.zst"),
    ],
)
def test_output_names(kw: dict[str, Any], name: str) -> None:
    assert exporting.output_name(args(**kw)) == name


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"format": "csv", "filename": "upstreams.yaml"}, "must end in .csv"),
        ({"format": "csv", "filename": "dec.csv", "compression": "gzip"}, "must end in .csv.gz"),
        ({"format": "csv", "filename": "dec.csv.gz", "compression": "snappy"}, "must end in .csv"),
        ({"format": "parquet", "filename": "x.csv"}, "must end in .parquet or .pq"),
        ({"format": "xlsx", "filename": "book"}, "must end in .xlsx"),
        ({"format": "xlsx", "partition_by": "k", "filename": "book"}, "must end in .xlsx"),
        ({"format": "xlsx", "compression": "zstd"}, "zip archives"),
        ({"format": "csv", "partition_by": "k", "filename": "by.k"}, "must end in .csv"),
    ],
)
def test_names_that_do_not_match_the_format_are_refused(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(CairnError) as caught:
        exporting.output_name(args(**kw))
    assert caught.value.code == 4001 and message in caught.value.message


def test_destination_stays_in_the_folder_and_follows_no_link(tmp_path: Path) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    assert exporting.destination(folder, "exports/2025/q1") == folder / "exports" / "2025" / "q1"
    assert (folder / "exports" / "2025" / "q1").is_dir()
    assert exporting.destination(folder, ".") == folder
    assert exporting.destination(folder, str(folder / "exports")) == folder / "exports"
    (folder / "link").symlink_to(outside, target_is_directory=True)
    (folder / "file").write_text("x")
    for raw, code in [
        ("..", 4030),
        ("../outside", 4030),
        (str(outside), 4030),
        ("exports/../../outside", 4030),
        ("uploads", 4030),
        ("uploads/sub", 4030),
        ("link", 4030),
        ("link/sub", 4030),
        ("file", 4001),
        ("file/sub", 4001),
        (".hidden", 4001),
        ("", 4001),
    ]:
        with pytest.raises(CairnError) as caught:
            exporting.destination(folder, raw)
        assert caught.value.code == code, (raw, caught.value)
    assert list(outside.iterdir()) == [] and not (folder / "uploads").exists()
    assert exporting.destination(folder, "uploads", uploads=True) == folder / "uploads"


def fresh(folder: Path, content: str = "new\n") -> Path:
    tmp = folder / ".export-tmp.csv"
    tmp.write_text(content)
    return tmp


def test_place_takes_a_free_name_or_replaces_only_a_regular_file(tmp_path: Path) -> None:
    outside = tmp_path / "victim.csv"
    outside.write_text("precious\n")
    (tmp_path / "dangling.csv").symlink_to(tmp_path / "nowhere.csv")
    (tmp_path / "linked.csv").symlink_to(outside)
    (tmp_path / "folder.csv").mkdir()
    (tmp_path / "folder.csv" / "inside").write_text("kept\n")
    (tmp_path / "plain.csv").write_text("old\n")
    for name, overwrite, code in [
        ("dangling.csv", False, 4030),
        ("dangling.csv", True, 4030),
        ("linked.csv", False, 4030),
        ("linked.csv", True, 4030),
        ("folder.csv", False, 4090),
        ("folder.csv", True, 4090),
        ("plain.csv", False, 4090),
    ]:
        tmp = fresh(tmp_path)
        with pytest.raises(CairnError) as caught:
            exporting.place(tmp, tmp_path / name, overwrite=overwrite)
        assert caught.value.code == code, (name, overwrite, caught.value)
        exporting.remove_temp(tmp)
    assert not (tmp_path / "nowhere.csv").exists() and outside.read_text() == "precious\n"
    assert (tmp_path / "folder.csv" / "inside").read_text() == "kept\n"
    exporting.place(fresh(tmp_path), tmp_path / "plain.csv", overwrite=True)
    assert (tmp_path / "plain.csv").read_text() == "new\n"
    exporting.place(fresh(tmp_path, "first\n"), tmp_path / "free.csv", overwrite=False)
    assert (tmp_path / "free.csv").read_text() == "first\n"
    assert not (tmp_path / ".export-tmp.csv").exists()
    # A folder (a partitioned export) takes only a free name.
    part = tmp_path / ".export-dir"
    (part / "k=1").mkdir(parents=True)
    with pytest.raises(CairnError) as caught:
        exporting.place(part, tmp_path / "plain.csv", overwrite=True)
    assert caught.value.code == 4090
    exporting.place(part, tmp_path / "by_k", overwrite=False)
    assert (tmp_path / "by_k" / "k=1").is_dir()


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (errno.EACCES, 4030),
        (errno.EPERM, 4030),
        (errno.EROFS, 4030),
        (errno.ENOSPC, 5001),
        (errno.EDQUOT, 5001),
        (errno.ENOTDIR, 4001),
        (errno.ENAMETOOLONG, 4001),
        (errno.ENOENT, 4002),
        (errno.EIO, 5001),
    ],
)
def test_filesystem_errors_have_their_own_codes(code: int, expected: int) -> None:
    err = exporting.storage_error(OSError(code, os.strerror(code)), "the export")
    assert err.code == expected and "database" not in err.message
