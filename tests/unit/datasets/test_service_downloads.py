"""app/datasets/service_downloads.py: only a regular, visible file of the project's own folder, reached
without a symbolic link, is handed to the console's download."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.errors import Forbidden, InvalidInput, NotFound
from app.datasets.service_downloads import checked_file, checked_or_stored, media_type
from app.datasets.storage import project_key
from tests.support.objectstore import two_spaces_on_s3


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    own = tmp_path / "project"
    (own / "exports" / "parts").mkdir(parents=True)
    (own / "exports" / "sales.csv").write_text("a\n1\n")
    (own / "exports" / ".export-123").write_text("being written")
    (tmp_path / "secret.csv").write_text("x\n")
    (own / "exports" / "link.csv").symlink_to(tmp_path / "secret.csv")
    (own / "linked").symlink_to(tmp_path)
    return own


def test_a_file_of_the_folder_is_sent_with_its_size_and_media_type(folder: Path) -> None:
    for raw in ("exports/sales.csv", str(folder / "exports" / "sales.csv"), " exports/./sales.csv "):
        out = checked_file(folder, raw)
        assert (out.relative_path, out.name, out.size_bytes, out.media_type) == (
            "exports/sales.csv",
            "sales.csv",
            4,
            "text/csv",
        )
        assert out.path == str(folder / "exports" / "sales.csv")


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("", InvalidInput),
        (".", InvalidInput),
        ("../secret.csv", Forbidden),
        ("exports/link.csv", Forbidden),
        ("linked/secret.csv", Forbidden),
        ("exports/.export-123", NotFound),
        ("exports/missing.csv", NotFound),
        ("exports/parts", NotFound),
        ("exports/sales.csv/x", NotFound),
    ],
)
def test_anything_else_is_refused(folder: Path, raw: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        checked_file(folder, raw)


def test_media_types_by_the_last_extension() -> None:
    assert media_type("a.parquet") == "application/vnd.apache.parquet"
    assert media_type("a.csv.gz") == "application/gzip"
    assert media_type("a.unknown") == "application/octet-stream"


def test_a_file_another_host_exported_is_read_from_the_object_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with two_spaces_on_s3(tmp_path, monkeypatch) as (writer, reader):
        exported = writer.folder / "exports" / "sales.csv"
        exported.parent.mkdir()
        exported.write_text("a\n1\n")
        writer.store.put(project_key("p", "exports/sales.csv"), exported)
        out = checked_or_stored(reader, "exports/sales.csv")
        assert Path(out.path).read_text() == "a\n1\n" and Path(out.path).is_relative_to(tmp_path / "b")
        assert (out.relative_path, out.name, out.size_bytes) == ("exports/sales.csv", "sales.csv", 4)
        with pytest.raises(NotFound):
            checked_or_stored(reader, "exports/other.csv")
        with pytest.raises(Forbidden):
            checked_or_stored(reader, "../../a/datasets-projects/p/exports/sales.csv")
