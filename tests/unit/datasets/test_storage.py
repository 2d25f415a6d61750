"""The datasets store: keys, the local folders as a store, the bounded local cache of a remote store,
and an S3 store against a real S3 server (`rclone serve s3`)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.errors import CairnError, Conflict, InvalidInput
from app.datasets import storage
from app.datasets.storage import CacheEntries, FolderStore, LocalCache, S3Store
from tests.support.objectstore import S3Server


def test_keys_are_relative_and_plain() -> None:
    assert storage.project_key("acme", "uploads/a.csv") == "projects/acme/uploads/a.csv"
    assert storage.result_key("acme", "q_1") == "results/acme/q_1.parquet"
    assert storage.is_key("results/acme/q_1.parquet") and storage.is_key("projects/acme/x.csv")
    assert not storage.is_key("/srv/data/x.csv") and not storage.is_key("sales/x.csv")
    for bad in ("", "/abs", "a//b", "a/../b", "./a", "a/"):
        with pytest.raises(InvalidInput):
            storage.check_key(bad)
    assert storage.parse_url("s3://bucket/some/prefix/") == ("bucket", "some/prefix")
    assert storage.parse_url("s3://bucket") == ("bucket", "")
    with pytest.raises(ValueError):
        storage.parse_url("https://bucket/x")


def test_the_folder_store_keeps_every_file_where_it_always_lived(tmp_path: Path) -> None:
    projects, work = tmp_path / "projects", tmp_path / "work"
    store = FolderStore(projects, work)
    assert store.path_of("projects/acme/uploads/a.csv") == projects / "acme" / "uploads" / "a.csv"
    assert store.path_of("results/acme/q_1.parquet") == work / "projects" / "acme" / "results" / "q_1.parquet"
    assert store.path_of("cache/query_1.json") == work / "cache" / "query_1.json"
    staged = tmp_path / "staged.csv"
    staged.write_text("a\n1\n")
    info = store.put("projects/acme/uploads/a.csv", staged, overwrite=False)
    assert not staged.exists() and store.fetch("projects/acme/uploads/a.csv") == store.path_of(info.key)
    assert info.size == 4 and store.head("projects/acme/uploads/a.csv") == info
    staged.write_text("a\n2\n")
    with pytest.raises(Conflict):
        store.put("projects/acme/uploads/a.csv", staged, overwrite=False)
    # A file already in its place (a result a worker wrote there) stays.
    in_place = store.path_of("results/acme/q_1.parquet")
    in_place.parent.mkdir(parents=True)
    in_place.write_bytes(b"PAR1")
    assert store.put("results/acme/q_1.parquet", in_place).size == 4 and in_place.is_file()
    store.put_bytes("cache/e.json", b"{}")
    assert store.read_bytes("cache/e.json") == b"{}" and store.read_bytes("cache/none.json") is None
    keys = {o.key for o in store.listing("")}
    assert keys == {"projects/acme/uploads/a.csv", "results/acme/q_1.parquet", "cache/e.json"}
    assert [o.key for o in store.listing("results/")] == ["results/acme/q_1.parquet"]
    store.delete(["cache/e.json", "cache/none.json"])
    assert store.head("cache/e.json") is None and store.fetch("cache/e.json") is None
    assert store.local_dirs("acme") == [] and store.portable("/x/y") == "/x/y"


def _file(path: Path, size: int) -> Path:
    path.write_bytes(b"x" * size)
    return path


def test_the_local_cache_is_keyed_by_version_and_evicts_the_least_recently_used(tmp_path: Path) -> None:
    cache = LocalCache(tmp_path / "objects", max_bytes=250)
    a1 = cache.add("projects/p/a.csv", "v1", _file(tmp_path / "a", 100), keep=False)
    assert (
        a1.name == "a.csv" and cache.get("projects/p/a.csv", "v1") == a1 and cache.get("projects/p/a.csv", "v2") is None
    )
    assert cache.object_of(a1) == ("projects/p/a.csv", "v1") and cache.object_of(tmp_path / "a") is None
    # A new version replaces the old one's file.
    a2 = cache.add("projects/p/a.csv", "v2", _file(tmp_path / "a", 100), keep=False)
    assert a2.is_file() and not a1.exists() and cache.total_bytes == 100
    kept = _file(tmp_path / "b", 100)
    b = cache.add("projects/p/b.csv", "v1", kept, keep=True)
    assert kept.is_file() and b.is_file() and cache.total_bytes == 200
    assert cache.get("projects/p/a.csv", "v2") == a2  # a is now the most recently used
    c = cache.add("results/p/q.parquet", "v1", _file(tmp_path / "c", 100), keep=False)
    assert c.is_file() and a2.is_file() and not b.exists() and cache.total_bytes == 200
    # Another cache over the same folder (another process of the host) finds the files on disk.
    again = LocalCache(tmp_path / "objects", max_bytes=250)
    assert again.total_bytes == 200 and again.get("results/p/q.parquet", "v1") == c


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server.start(tmp_path_factory.mktemp("s3") / "store")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def aws(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    return s3


def test_an_s3_store_reads_through_a_local_cache_keyed_by_version(aws: S3Server, tmp_path: Path) -> None:
    url = f"s3://{aws.bucket}/unit-{time.monotonic_ns()}"
    host_a = S3Store(url, LocalCache(tmp_path / "a", 1 << 20))
    host_b = S3Store(url, LocalCache(tmp_path / "b", 1 << 20))
    upload = _file(tmp_path / "up.csv", 10)
    info = host_a.put("projects/p/uploads/x.csv", upload, overwrite=False, keep=False)
    # The uploader keeps its copy in its cache: it reads it without a download.
    assert not upload.exists() and host_a.cache.get(info.key, info.version) is not None
    with pytest.raises(Conflict):
        host_a.put("projects/p/uploads/x.csv", _file(tmp_path / "up.csv", 3), overwrite=False)
    seen = host_b.fetch("projects/p/uploads/x.csv")
    assert seen is not None and seen.read_bytes() == b"x" * 10
    assert host_b.fetch("projects/p/uploads/x.csv") == seen  # the same version: the cached file
    host_a.put("projects/p/uploads/x.csv", _file(tmp_path / "up.csv", 5), keep=False)
    replaced = host_b.fetch("projects/p/uploads/x.csv")
    assert replaced is not None and replaced != seen and replaced.read_bytes() == b"x" * 5 and not seen.exists()
    assert host_b.portable(f"read_csv('{replaced}')").startswith("read_csv('store:projects/p/uploads/x.csv@")
    assert host_b.local_dirs("p") == [tmp_path / "b" / "projects" / "p", tmp_path / "b" / "results" / "p"]
    assert host_b.fetch("projects/p/none.csv") is None and host_b.head("projects/p/none.csv") is None
    host_a.put_bytes("cache/e.json", b'{"k": 1}')
    assert host_b.read_bytes("cache/e.json") == b'{"k": 1}' and host_b.read_bytes("cache/none.json") is None
    assert {o.key for o in host_b.listing("")} == {"projects/p/uploads/x.csv", "cache/e.json"}
    host_b.delete(["cache/e.json", "cache/none.json"])
    assert [o.key for o in host_a.listing("")] == ["projects/p/uploads/x.csv"]


def test_cache_entries_and_the_sweep_use_the_store(aws: S3Server, tmp_path: Path) -> None:
    store = S3Store(f"s3://{aws.bucket}/sweep-{time.monotonic_ns()}", LocalCache(tmp_path / "c", 1 << 20))
    entries = CacheEntries(store)
    entries.write("query_1.json", b"{}")
    assert entries.names() == ["query_1.json"] and entries.read("query_1.json") == b"{}"
    store.put("results/p/q_1.parquet", _file(tmp_path / "r1", 30))
    assert entries.result_exists("results/p/q_1.parquet")  # a key: its reader fetches it (and finds out)
    assert entries.result_exists(str(tmp_path / "c")) is False  # an older absolute path: looked for on disk
    entries.remove(["query_1.json"])
    assert entries.names() == []
    store.put("results/p/q_2.parquet", _file(tmp_path / "r2", 30))
    assert storage.sweep(store, "results/", ttl=3600, max_bytes=40) == 1  # the oldest goes past the cap
    assert [o.key for o in store.listing("results/")] == ["results/p/q_2.parquet"]
    assert storage.sweep(store, "results/", ttl=-1, max_bytes=1 << 20) == 1


def test_an_unreachable_store_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    store = S3Store("s3://bucket/x", LocalCache(tmp_path / "c", 1 << 20))
    with pytest.raises(CairnError) as caught:
        store.head("projects/p/a.csv")
    assert caught.value.code == 5030 and os.path.isdir(tmp_path / "c")
