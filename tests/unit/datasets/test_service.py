"""app/datasets/service.py (the parts without a database): the data files a project can read, the
upload's accepted file types, and the refusals that come before the registry is touched."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

from app.core.errors import InvalidInput
from app.datasets.config import DatasetSettings
from app.datasets.models import Dataset
from app.datasets.schemas import UploadIn
from app.datasets.service import UPLOAD_TYPES, _scan_files, dataset_out, listed_files, register, upload_dataset
from app.datasets.service_common import make_space, stored_copy
from app.datasets.storage import project_key
from tests.support.datasets import call_context as context
from tests.support.objectstore import two_spaces_on_s3


def test_data_files_are_listed_by_the_shortest_name_that_reads_them_back(tmp_path: Path) -> None:
    own, shared = tmp_path / "own", tmp_path / "shared"
    for folder in (own, shared / "sub", own / ".hidden"):
        folder.mkdir(parents=True)
    (own / "a.csv").write_text("x\n1\n")
    (own / ".incoming-123").write_text("staged")
    (own / ".hidden" / "b.csv").write_text("x\n1\n")
    (shared / "a.csv").write_text("x\n2\n")  # the same relative path as the own folder's
    (shared / "sub" / "c.parquet.gz").write_bytes(b"x")
    (shared / "notes.txt.bak").write_text("not data")
    files, more = _scan_files([own, shared], 10)
    assert [(f.path, f.format) for f in files] == [
        ("a.csv", "csv"),
        (str(shared / "a.csv"), "csv"),
        ("sub/c.parquet.gz", "parquet"),
    ]
    assert not more and files[0].size_bytes == 4
    assert _scan_files([own, shared], 2) == (files[:2], True)


def test_files_under_a_folder_are_listed_alone(tmp_path: Path) -> None:
    root = tmp_path / "own"
    for folder in ("exports/by_x/x=1", "exports/by_x/x=2", "exports/by_xy"):
        (root / folder).mkdir(parents=True)
    for name in ("exports/by_x/x=1/data_0.csv", "exports/by_x/x=2/data_0.csv", "exports/by_xy/a.csv", "b.csv"):
        (root / name).write_text("x\n1\n")
    files, _ = _scan_files([root], 10, "exports/by_x/")
    assert [f.path for f in files] == ["exports/by_x/x=1/data_0.csv", "exports/by_x/x=2/data_0.csv"]
    assert len(_scan_files([root], 10)[0]) == 4


@pytest.mark.parametrize(
    ("name", "suffix"),
    [("cities.csv", ".csv"), ("Cities.CSV.GZ", ".CSV.GZ"), ("x.ndjson.zst", ".ndjson.zst"), ("t.pq", ".pq")],
)
def test_upload_types(name: str, suffix: str) -> None:
    found = UPLOAD_TYPES.search(name)
    assert found is not None and found.group(0) == suffix


def test_other_upload_types_are_not_accepted() -> None:
    assert all(UPLOAD_TYPES.search(n) is None for n in ("x.xlsx", "x.csv.bz2", "csv", "x.exe"))


def test_dataset_out_is_the_registry_row() -> None:
    now = datetime.datetime.now(datetime.UTC)
    row = Dataset(
        name="cities", path="/d/c.csv", format="csv", size_bytes=5, description="d", source="upload", created_at=now
    )
    out = dataset_out(row)
    assert (out.name, out.path, out.format, out.size_bytes, out.source, out.created_at) == (
        "cities",
        "/d/c.csv",
        "csv",
        5,
        "upload",
        now,
    )


async def test_an_upload_without_a_body_is_refused(tmp_path: Path) -> None:
    ctx = context(tmp_path, DatasetSettings(data_roots=[tmp_path / "shared"]))
    with pytest.raises(InvalidInput, match="reads a multipart body"):
        await upload_dataset(ctx, UploadIn())


async def test_a_file_outside_the_readable_roots_is_not_registered(tmp_path: Path) -> None:
    cfg = DatasetSettings(data_roots=[tmp_path / "shared"])
    space = make_space(tmp_path, "alpha", cfg)
    outside = tmp_path / "elsewhere.csv"
    outside.write_text("x\n1\n")
    kw: dict[str, Any] = {"description": "", "source": "registered", "replace": False}
    with pytest.raises(InvalidInput, match="inside a data root"):
        await register(context(tmp_path, cfg), space, name="x", pattern=str(outside), files=[outside], **kw)


def test_files_only_the_object_store_holds_are_listed_and_read_by_their_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with two_spaces_on_s3(tmp_path, monkeypatch) as (writer, reader):
        for rel, text in (("exports/out.csv", "a\n1\n"), ("exports/.export-1.csv", "x"), ("notes/read.me", "x")):
            made = writer.folder / rel
            made.parent.mkdir(parents=True, exist_ok=True)
            made.write_text(text)
            writer.store.put(project_key("p", rel), made)
        (reader.shared[0] / "exports").mkdir()
        shadow = reader.shared[0] / "exports" / "shadowed.csv"
        shadow.write_text("b\n2\n")
        writer.store.put(project_key("p", "exports/shadowed.csv"), shadow)
        files, more = listed_files(reader, 10)
        assert [(f.path, f.size_bytes) for f in files] == [("exports/shadowed.csv", 4), ("exports/out.csv", 4)]
        assert not more and listed_files(reader, 1) == (files[:1], True)
        copy = stored_copy(reader.store, "p", "exports/out.csv")
        assert copy is not None and copy.read_text() == "a\n1\n" and copy.is_relative_to(tmp_path / "b")
        for ref in ("exports/*.csv", "/abs/out.csv", "exports/.export-1.csv", "../q/exports/out.csv"):
            assert stored_copy(reader.store, "p", ref) is None
        assert stored_copy(reader.store, "p", "exports/none.csv") is None
        assert stored_copy(writer.store, None, "exports/out.csv") is None  # no project: nothing to read
