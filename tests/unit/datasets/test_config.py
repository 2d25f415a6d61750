"""app/datasets/config.py: the data roots as the environment gives them, and the folders the
settings place (made if missing, resolved)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.datasets.config import DatasetSettings, data_roots, object_cache_dir, projects_dir, work_dir


def test_data_roots_are_split_on_commas_else_colons(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_DATA_ROOTS", "/a, /b ,")
    assert DatasetSettings().data_roots == [Path("/a"), Path("/b")]
    monkeypatch.setenv("CAIRN_DATA_ROOTS", "/a:/b")
    assert DatasetSettings().data_roots == [Path("/a"), Path("/b")]


def test_the_default_root_is_in_the_data_directory(tmp_path: Path) -> None:
    assert data_roots(tmp_path, DatasetSettings(data_roots=[])) == [(tmp_path / "datasets").resolve()]
    assert (tmp_path / "datasets").is_dir()


def test_roots_are_made_resolved_and_listed_once(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    cfg = DatasetSettings(data_roots=[tmp_path / "real", tmp_path / "alias", tmp_path / "new"])
    assert data_roots(tmp_path, cfg) == [(tmp_path / "real").resolve(), (tmp_path / "new").resolve()]


def test_the_private_folders_follow_the_settings_given(tmp_path: Path) -> None:
    cfg = DatasetSettings()
    assert projects_dir(tmp_path, cfg) == (tmp_path / "datasets-projects").resolve()
    work = work_dir(tmp_path, cfg)
    assert work == (tmp_path / "datasets-work").resolve()
    assert all((work / sub).is_dir() for sub in ("results", "cache", "tmp"))
    moved = DatasetSettings(datasets_projects_dir=tmp_path / "p", datasets_work_dir=tmp_path / "w")
    assert (projects_dir(tmp_path, moved), work_dir(tmp_path, moved)) == (
        (tmp_path / "p").resolve(),
        (tmp_path / "w").resolve(),
    )


def test_the_object_store_is_an_s3_url_or_nothing() -> None:
    assert DatasetSettings(object_store_url="  ").object_store_url is None
    assert DatasetSettings(object_store_url="s3://bucket/prefix").object_store_url == "s3://bucket/prefix"
    for bad in ("https://bucket/x", "s3://", "bucket/prefix"):
        with pytest.raises(ValidationError, match="s3://bucket/prefix"):
            DatasetSettings(object_store_url=bad)


def test_the_object_cache_lives_in_the_data_directory_unless_set(tmp_path: Path) -> None:
    assert object_cache_dir(tmp_path, DatasetSettings()) == (tmp_path / "datasets-objects").resolve()
    chosen = DatasetSettings(datasets_object_cache_dir=tmp_path / "elsewhere")
    assert (
        object_cache_dir(tmp_path, chosen) == (tmp_path / "elsewhere").resolve() and (tmp_path / "elsewhere").is_dir()
    )
