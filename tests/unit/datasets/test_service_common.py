"""app/datasets/service_common.py: the caller's space (its project's folders, made and checked), the
engine limits and token budget a call gets from the settings it is given, naming the caller to the
engine, and the views that file references become. Calls run on a real CallContext over a real
AppState whose settings are the test's own (no database: these helpers take none)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from app.core.context import Principal
from app.core.errors import CairnError, EngineError, Forbidden, InvalidInput, NotFound
from app.datasets import engine, service_common
from app.datasets.config import DatasetSettings
from app.datasets.engine import pool
from app.datasets.models import Dataset
from app.datasets.service_common import (
    budget_of,
    engine_config,
    is_name,
    make_space,
    name_caller,
    own_relative,
    portable_fingerprints,
    sources_of,
    space_of,
    storage_errors,
    stored_file,
    view_name,
)
from app.datasets.storage import FolderStore, S3Store
from tests.support.datasets import call_context as context


@pytest.fixture
def cfg(tmp_path: Path) -> DatasetSettings:
    return DatasetSettings(data_roots=[tmp_path / "shared"])


@pytest.fixture(autouse=True)
def _fresh_spaces() -> None:
    service_common._SPACES.clear()


def test_a_space_has_its_own_folders_beside_the_shared_roots(tmp_path: Path, cfg: DatasetSettings) -> None:
    space = make_space(tmp_path, "alpha", cfg)
    assert space.project == "alpha"
    assert space.shared == [(tmp_path / "shared").resolve()]
    assert space.folder == (tmp_path / "datasets-projects").resolve() / "alpha"
    assert space.work == (tmp_path / "datasets-work").resolve() / "projects" / "alpha"
    assert (space.work / "results").is_dir() and (space.work / "tmp").is_dir() and space.folder.is_dir()
    assert space.roots == [space.folder, *space.shared]


def test_a_private_area_inside_a_shared_root_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    inside = shared / "inside"
    for setting, bad in (
        ("CAIRN_DATASETS_PROJECTS_DIR", DatasetSettings(data_roots=[shared], datasets_projects_dir=inside)),
        ("CAIRN_DATASETS_WORK_DIR", DatasetSettings(data_roots=[shared], datasets_work_dir=inside)),
    ):
        with pytest.raises(EngineError, match=f"{setting} overlaps a data root"):
            make_space(tmp_path, "alpha", bad)


def test_a_project_folder_that_is_a_link_is_refused(tmp_path: Path, cfg: DatasetSettings) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "datasets-projects").mkdir()
    (tmp_path / "datasets-projects" / "alpha").symlink_to(elsewhere)
    with pytest.raises(EngineError, match="symbolic link"):
        make_space(tmp_path, "alpha", cfg)


async def test_space_of_is_a_lookup_that_remakes_folders_removed_meanwhile(
    tmp_path: Path, cfg: DatasetSettings
) -> None:
    ctx = context(tmp_path, cfg)
    engine.set_caller("someone-else")
    first = await space_of(ctx, "alpha")
    assert await space_of(ctx, "alpha") is first  # remembered
    assert pool._caller.get() == "someone-else"  # a lookup names no caller
    (first.work / "results").rmdir()
    again = await space_of(ctx, "alpha")
    assert again is not first and (again.work / "results").is_dir()
    assert (await space_of(ctx, None)).project == "default"


async def test_the_project_is_checked_by_the_call_context(tmp_path: Path, cfg: DatasetSettings) -> None:
    with pytest.raises(InvalidInput, match="Invalid project name"):
        await space_of(context(tmp_path, cfg), "../up")
    bound = Principal(key_id="key-bob", name="bob", scopes=frozenset({"write"}), project="bobs")
    assert (await space_of(context(tmp_path, cfg, bound), None)).project == "bobs"
    with pytest.raises(Forbidden):
        await space_of(context(tmp_path, cfg, bound), "alpha")
    assert not (tmp_path / "datasets-projects" / "alpha").exists()


@pytest.mark.parametrize("project", ["..", ".", "a/../..", "../escape"])
async def test_a_key_bound_to_a_project_that_is_no_folder_name_makes_nothing(
    tmp_path: Path, cfg: DatasetSettings, project: str
) -> None:
    # A static key's project is the operator's configuration: `ctx.project` returns it unchecked.
    bound = Principal(key_id="key-odd", name="odd", scopes=frozenset({"write"}), project=project)
    data = tmp_path / "data"
    with pytest.raises(EngineError, match="is not a folder name"):
        await space_of(context(data, cfg, bound), None)
    assert list((data / "datasets-projects").iterdir()) == []
    assert not (data / "datasets-work" / "projects").exists()
    assert not (data / "escape").exists() and not (data / "datasets-work" / "escape").exists()


async def test_the_settings_come_from_the_call_context(tmp_path: Path) -> None:
    elsewhere = DatasetSettings(data_roots=[tmp_path / "other"], datasets_projects_dir=tmp_path / "private")
    space = await space_of(context(tmp_path, elsewhere), "alpha")
    assert space.shared == [(tmp_path / "other").resolve()]
    assert space.folder == (tmp_path / "private").resolve() / "alpha"


async def test_name_caller_names_the_bound_project_else_the_key_else_the_principal() -> None:
    cfg = DatasetSettings()
    name_caller(context(Path("/nonexistent"), cfg))
    assert pool._caller.get() == "key:key-alice"
    name_caller(context(Path("/nonexistent"), cfg, Principal(key_id=None, name="open-mode", scopes=frozenset())))
    assert pool._caller.get() == "key:open-mode"
    # Every key bound to one project (those its admin key minted too) is one caller for the engine.
    for key_id in ("key-bob", "key-minted-by-bob"):
        bound = Principal(key_id=key_id, name=key_id, scopes=frozenset({"admin"}), project="bobs")
        name_caller(context(Path("/nonexistent"), cfg, bound))
        assert pool._caller.get() == "project:bobs"


def test_a_call_may_only_lower_the_time_limit(tmp_path: Path) -> None:
    cfg = DatasetSettings(datasets_query_timeout_ms=30_000, datasets_threads=3, datasets_memory_limit="1GB")
    space = make_space(tmp_path, "alpha", cfg)
    assert engine_config(cfg, space).timeout_s == 30.0
    assert engine_config(cfg, space, 500).timeout_s == 0.5
    assert engine_config(cfg, space, 90_000).timeout_s == 30.0
    limits = engine_config(cfg, space)
    assert (limits.roots, limits.work, limits.threads, limits.memory_limit) == (space.roots, space.work, 3, "1GB")


def test_the_token_budget_is_capped() -> None:
    cfg = DatasetSettings(datasets_max_tokens=2000, datasets_max_tokens_cap=5000)
    assert (budget_of(cfg, None), budget_of(cfg, 100), budget_of(cfg, 50_000)) == (2000, 100, 5000)


def test_a_filesystem_failure_becomes_a_storage_error() -> None:
    with pytest.raises(CairnError) as caught, storage_errors():
        raise OSError(errno.ENOSPC, "No space left on device")
    assert caught.value.code == 5001 and "disk is full" in caught.value.message


def test_view_names_are_identifiers_apart_from_those_taken() -> None:
    assert view_name("sales 2024.csv.gz", set()) == "sales_2024"
    assert view_name("2024.parquet", set()) == "t_2024"
    assert view_name("data/*.csv", set()) == "data"
    assert view_name("Sales.csv", {"sales", "sales_2"}) == "sales_3"
    assert is_name("penguins") and not is_name("penguins.csv") and not is_name("a/b") and not is_name("q*")


def test_sources_name_files_registered_datasets_and_stored_results(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "cities.csv").write_text("city\nOslo\n")
    (root / "towns.csv").write_text("town\nBergen\n")
    one, ids, taken = sources_of(["cities.csv"], {}, [root])
    assert [s.name for s in one] == ["cities", "data"] and ids == [] and taken == {"cities", "data"}
    assert one[1].files == one[0].files == [root / "cities.csv"]
    known = {"towns": Dataset(name="towns", path=str(root / "towns.csv"))}
    two, ids, taken = sources_of(["cities.csv", "towns", "q_0123456789abcdef"], known, [root])
    assert [s.name for s in two] == ["cities", "towns"] and ids == ["q_0123456789abcdef"]
    assert taken == {"cities", "towns", "q_0123456789abcdef"}
    assert two[1].files == [root / "towns.csv"]


def test_the_store_is_the_local_folders_unless_an_object_store_is_set(tmp_path: Path, cfg: DatasetSettings) -> None:
    space = make_space(tmp_path, "alpha", cfg)
    assert isinstance(space.store, FolderStore) and space.stored == ()
    assert space.store.path_of("projects/alpha/uploads/a.csv") == space.folder / "uploads" / "a.csv"
    assert space.store.path_of("results/alpha/q_1.parquet") == space.work / "results" / "q_1.parquet"
    remote = cfg.model_copy(update={"object_store_url": "s3://bucket/prefix"})
    far = make_space(tmp_path, "alpha", remote)
    assert isinstance(far.store, S3Store) and (far.store.bucket, far.store.prefix) == ("bucket", "prefix")
    objects = (tmp_path / "datasets-objects").resolve()
    assert far.stored == (objects / "projects" / "alpha", objects / "results" / "alpha")
    assert all(p.is_dir() for p in far.stored)
    assert set(far.stored) <= set(engine_config(remote, far).allowed)


def test_a_stored_result_is_read_by_key_or_by_the_path_an_older_row_holds(tmp_path: Path, cfg: DatasetSettings) -> None:
    space = make_space(tmp_path, "alpha", cfg)
    (space.work / "results" / "q_1.parquet").write_bytes(b"PAR1")
    assert stored_file(space, "results/alpha/q_1.parquet") == space.work / "results" / "q_1.parquet"
    assert stored_file(space, str(space.work / "results" / "q_1.parquet")) == space.work / "results" / "q_1.parquet"
    assert stored_file(space, "results/alpha/q_2.parquet") is None
    other = make_space(tmp_path, "beta", cfg)
    (other.work / "results" / "q_3.parquet").write_bytes(b"PAR1")
    assert stored_file(space, "results/beta/q_3.parquet") is None  # another project's key
    assert stored_file(space, str(other.work / "results" / "q_3.parquet")) is None  # another project's path


def test_fingerprints_of_cached_objects_are_named_alike_on_every_host(tmp_path: Path, cfg: DatasetSettings) -> None:
    remote = cfg.model_copy(update={"object_store_url": "s3://bucket/prefix"})
    space = make_space(tmp_path, "alpha", remote)
    assert isinstance(space.store, S3Store)
    cached = str(space.store.cache.path_of("projects/alpha/uploads/a.csv", "v1"))
    local = str(tmp_path / "shared" / "b.csv")
    fps = portable_fingerprints(space, [[cached, 10, 123], [local, 5, 456]])
    assert fps == [["store:projects/alpha/uploads/a.csv@v1/a.csv", 10, 0], [local, 5, 456]]


def test_an_upload_registered_by_key_is_read_from_the_store(tmp_path: Path, cfg: DatasetSettings) -> None:
    space = make_space(tmp_path, "alpha", cfg)
    upload = space.folder / "uploads" / "towns.csv"
    upload.parent.mkdir()
    upload.write_text("town\nBergen\n")
    known = {"towns": Dataset(name="towns", path="projects/alpha/uploads/towns.csv")}
    (src, data), _, _ = sources_of(["towns"], known, space.roots, space.store)
    assert src.name == "towns" and src.files == data.files == [upload] and src.fmt == "csv"
    gone = {"towns": Dataset(name="towns", path="projects/alpha/uploads/gone.csv")}
    with pytest.raises(NotFound):
        sources_of(["towns"], gone, space.roots, space.store)


def test_a_key_of_the_callers_own_file_reads_as_its_path_in_the_project_folder() -> None:
    assert own_relative("projects/beta/uploads/x.csv", "beta") == "uploads/x.csv"
    assert own_relative("projects/alpha/uploads/x.csv", "beta") == "projects/alpha/uploads/x.csv"  # not its own
    assert own_relative("projects/beta/", "beta") == "projects/beta/"
    assert own_relative("uploads/x.csv", "beta") == "uploads/x.csv"
    assert own_relative("projects/beta/uploads/x.csv", None) == "projects/beta/uploads/x.csv"
