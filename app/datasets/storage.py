"""Where the datasets files live: an object store shared by every host of a fleet (uploads, stored
results, exports and the result cache's entries), named by keys relative to the store.

Keys (what the database records for uploads and stored results):

- `projects/<project>/<path>`: a file of the project's folder (`uploads/<name>.csv`, exports);
- `results/<project>/<query_id>.parquet`: a stored result;
- `cache/<entry>.json`: an entry of the result cache.

Two stores answer the same calls, so the services have one code path:

- `FolderStore` (the default, no `CAIRN_OBJECT_STORE_URL`): the local folders as before: keys map to
  `<projects dir>/<project>/…`, `<work dir>/projects/<project>/results/…` and `<work dir>/cache/…`, and
  a file is read where it lies.
- `S3Store` (`CAIRN_OBJECT_STORE_URL=s3://bucket/prefix`, with the standard `AWS_*` variables): any
  S3-compatible store through boto3 (imported on first use). DuckDB reads local files only, so an
  object is read through a `LocalCache` in the host's data dir, keyed by the object's version (its
  ETag): a replaced object is fetched again, an unchanged one never.

Every method blocks: the services call them in threads (`asyncio.to_thread`).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol
from urllib.parse import urlparse

from app.core.errors import Conflict, InvalidInput, Unavailable
from app.datasets.engine import exporting

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


@dataclass(frozen=True)
class ObjectInfo:
    """One object: its key, version (ETag, or size and mtime of a local file), size and modification
    time (seconds since the epoch)."""

    key: str
    version: str
    size: int
    modified: float


def check_key(key: str) -> str:
    """`key` when it is a relative key of plain parts (no '', '.', '..' nor a leading '/')."""
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") or "\x00" in p for p in parts):
        raise InvalidInput(f"Not an object key: {key[:200]!r}")
    return key


def is_key(path: str) -> bool:
    """True when a recorded path is a store key (rows written before the store hold absolute paths)."""
    return not os.path.isabs(path) and path.split("/", 1)[0] in ("projects", "results", "cache")


def project_key(project: str, relative: str | Path) -> str:
    """The key of a file of the project's folder (`relative` to it)."""
    return check_key(f"projects/{project}/{Path(relative).as_posix()}")


def result_key(project: str, query_id: str) -> str:
    """The key of a stored result."""
    return check_key(f"results/{project}/{query_id}.parquet")


class Store(Protocol):
    """What the datasets services ask of a store (see the module docstring)."""

    def head(self, key: str) -> ObjectInfo | None:
        """The object's current version, or None when there is none."""
        ...

    def put(self, key: str, src: Path, *, overwrite: bool = True, keep: bool = True) -> ObjectInfo:
        """Store the local file `src` under `key` (without `overwrite`, 4090 when the key exists). With
        `keep` the file stays where it is, else it is moved (into the local cache of a remote store)."""
        ...

    def put_bytes(self, key: str, data: bytes) -> None:
        """Store a small object."""
        ...

    def fetch(self, key: str) -> Path | None:
        """A local file holding the object's current version, or None when there is no object."""
        ...

    def read_bytes(self, key: str) -> bytes | None:
        """A small object's content, or None."""
        ...

    def delete(self, keys: list[str]) -> None:
        """Remove objects (missing ones are no error)."""
        ...

    def listing(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose key starts with `prefix`."""
        ...

    def local_dirs(self, project: str) -> list[Path]:
        """Local folders, besides the project's own, where the project's objects are read (DuckDB must
        be allowed to read them)."""
        ...

    def portable(self, path: str) -> str:
        """`path` (a local file, a pattern or a view's SQL naming them) named the same on every host: a
        cached object's local path becomes `store:<key>@<version>/<name>`, anything else is left as is."""
        ...


def _info_of(key: str, path: Path) -> ObjectInfo | None:
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not path.is_file():
        return None
    return ObjectInfo(key, f"{st.st_mtime_ns:x}-{st.st_size:x}", st.st_size, st.st_mtime)


class FolderStore:
    """The local folders as a store (the embedded default): each key is a file where it has always
    lived, read in place."""

    def __init__(self, projects: Path, work: Path) -> None:
        self.projects = projects
        self.work = work

    def path_of(self, key: str) -> Path:
        """The local file of `key`."""
        top, _, rest = check_key(key).partition("/")
        if top == "projects":
            return self.projects / rest
        if top == "results" and "/" in rest:
            project, _, name = rest.partition("/")
            return self.work / "projects" / project / "results" / name
        if top == "cache":
            return self.work / "cache" / rest
        raise InvalidInput(f"Not an object key: {key[:200]!r}")

    def head(self, key: str) -> ObjectInfo | None:
        """See `Store.head`."""
        return _info_of(key, self.path_of(key))

    def put(self, key: str, src: Path, *, overwrite: bool = True, keep: bool = True) -> ObjectInfo:
        """See `Store.put`: a file already in its place stays; another is moved there (`keep` makes no
        difference: a local store's files are read in place)."""
        target = self.path_of(key)
        if os.path.abspath(src) != os.path.abspath(target):
            target.parent.mkdir(parents=True, exist_ok=True)
            exporting.place(src, target, overwrite=overwrite)
        info = self.head(key)
        assert info is not None
        return info

    def put_bytes(self, key: str, data: bytes) -> None:
        """See `Store.put_bytes` (written to a temporary name, then renamed)."""
        target = self.path_of(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_bytes(data)
        tmp.replace(target)

    def fetch(self, key: str) -> Path | None:
        """See `Store.fetch`: the file itself."""
        path = self.path_of(key)
        return path if path.is_file() else None

    def read_bytes(self, key: str) -> bytes | None:
        """See `Store.read_bytes`."""
        try:
            return self.path_of(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def delete(self, keys: list[str]) -> None:
        """See `Store.delete`."""
        for key in keys:
            try:
                self.path_of(key).unlink()
            except (FileNotFoundError, NotADirectoryError):
                pass

    def listing(self, prefix: str) -> list[ObjectInfo]:
        """See `Store.listing` (hidden files, such as files being written, are left out)."""
        out: list[ObjectInfo] = []
        for top, base in (("projects", self.projects), ("cache", self.work / "cache")):
            if not (f"{top}/".startswith(prefix) or prefix.startswith(f"{top}/")):
                continue
            for path in base.rglob("*") if base.is_dir() else []:
                rel = path.relative_to(base)
                key = f"{top}/{rel.as_posix()}"
                if key.startswith(prefix) and not any(p.startswith(".") for p in rel.parts):
                    info = _info_of(key, path)
                    if info is not None:
                        out.append(info)
        if "results/".startswith(prefix) or prefix.startswith("results/"):
            for path in (self.work / "projects").glob("*/results/*.parquet"):
                key = f"results/{path.parent.parent.name}/{path.name}"
                info = _info_of(key, path) if key.startswith(prefix) else None
                if info is not None:
                    out.append(info)
        return out

    def local_dirs(self, project: str) -> list[Path]:
        """See `Store.local_dirs`: none (the project's own folder and result store hold its files)."""
        return []

    def portable(self, path: str) -> str:
        """See `Store.portable`: a single host's paths are its own names."""
        return path


class LocalCache:
    """Objects of a remote store kept on local disk, at most `max_bytes` of them (least recently used
    first out): `<root>/<key>@<version>/<file name>`, so a new version of an object is a new file and the
    cache is never stale. Files another process of the host added are found on disk."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._files: OrderedDict[Path, int] = OrderedDict()
        self._total = 0
        root.mkdir(parents=True, exist_ok=True)
        found: list[tuple[float, Path, int]] = []
        for path in root.rglob("*"):
            if path.is_file() and "@" in path.parent.name and not path.name.startswith("."):
                st = path.stat()
                found.append((st.st_atime, path, st.st_size))
        for _, path, size in sorted(found):
            self._files[path] = size
            self._total += size

    def path_of(self, key: str, version: str) -> Path:
        """Where version `version` of `key` is kept."""
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in version)[:80]
        return self.root / f"{check_key(key)}@{safe}" / key.rsplit("/", 1)[-1]

    def get(self, key: str, version: str) -> Path | None:
        """The local file of that version, if kept (it becomes the most recently used)."""
        path = self.path_of(key, version)
        if not path.is_file():
            with self._lock:
                self._total -= self._files.pop(path, 0)
            return None
        with self._lock:
            if path in self._files:
                self._files.move_to_end(path)
            else:
                size = path.stat().st_size
                self._files[path] = size
                self._total += size
        return path

    def add(self, key: str, version: str, src: Path, *, keep: bool) -> Path:
        """Keep the local file `src` as that version (moved, or with `keep` linked or copied), drop the
        key's other versions, and evict the least recently used files past the cap."""
        path = self.path_of(key, version)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{uuid.uuid4().hex}")
        if keep:
            try:
                os.link(src, tmp)
            except OSError:
                shutil.copyfile(src, tmp)
        else:
            shutil.move(src, tmp)
        os.replace(tmp, path)
        size = path.stat().st_size
        with self._lock:
            self._total += size - self._files.pop(path, 0)
            self._files[path] = size
        base = path.parent.name.rsplit("@", 1)[0]
        for other in path.parent.parent.glob(f"{glob.escape(base)}@*"):
            if other != path.parent:
                self._drop_dir(other)
        self._evict(keep_path=path)
        return path

    def _drop_dir(self, folder: Path) -> None:
        with self._lock:
            for f in [f for f in self._files if f.parent == folder]:
                self._total -= self._files.pop(f)
        shutil.rmtree(folder, ignore_errors=True)

    def _evict(self, keep_path: Path) -> None:
        while True:
            with self._lock:
                if self._total <= self.max_bytes:
                    return
                victim = next((f for f in self._files if f != keep_path), None)
                if victim is None:
                    return
                self._total -= self._files.pop(victim)
            # A reader holding the file open keeps reading it: unlinking never cuts a read short.
            shutil.rmtree(victim.parent, ignore_errors=True)

    @property
    def total_bytes(self) -> int:
        """Bytes held."""
        with self._lock:
            return self._total

    def object_of(self, path: Path) -> tuple[str, str] | None:
        """(key, version) of a file of this cache, or None."""
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            return None
        if len(rel.parts) < 2 or "@" not in rel.parts[-2]:
            return None
        key, _, version = rel.parent.as_posix().rpartition("@")
        return key, version


def parse_url(url: str) -> tuple[str, str]:
    """(bucket, prefix) of `s3://bucket/prefix` (the prefix without slashes around it)."""
    parsed = urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"CAIRN_OBJECT_STORE_URL must look like s3://bucket/prefix, not {url!r}")
    return parsed.netloc, parsed.path.strip("/")


class S3Store:
    """An S3-compatible store (boto3 honours `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
    `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`), read through a `LocalCache`."""

    def __init__(self, url: str, cache: LocalCache) -> None:
        self.bucket, self.prefix = parse_url(url)
        self.cache = cache
        self._client: S3Client | None = None
        self._client_lock = threading.Lock()

    @property
    def client(self) -> S3Client:
        """The boto3 client, made on first use (boto3 takes a while to import)."""
        with self._client_lock:
            if self._client is None:
                import boto3
                from botocore.config import Config

                # A custom endpoint (MinIO, rclone, Ceph...) is addressed by path; AWS itself by host.
                style: Literal["path", "auto"] = "path" if os.environ.get("AWS_ENDPOINT_URL") else "auto"
                config = Config(
                    s3={"addressing_style": style},
                    retries={"max_attempts": 3, "mode": "standard"},
                    connect_timeout=5,
                    read_timeout=60,
                )
                self._client = boto3.client("s3", config=config)
            return self._client

    def _name(self, key: str) -> str:
        return f"{self.prefix}/{check_key(key)}" if self.prefix else check_key(key)

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        """One client call; a store that cannot be reached is 5030, a missing object None."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(**kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchKey", "NotFound"):
                return None
            raise Unavailable(f"The object store refused to {what}: {code or exc}") from None
        except BotoCoreError as exc:
            raise Unavailable(
                f"The object store could not {what}: {str(exc)[:200]}",
                suggestions=["Retry shortly; the operator must check CAIRN_OBJECT_STORE_URL and AWS_ENDPOINT_URL"],
            ) from None

    def head(self, key: str) -> ObjectInfo | None:
        """See `Store.head`."""
        got = self._call("read an object", self.client.head_object, Bucket=self.bucket, Key=self._name(key))
        if got is None:
            return None
        return ObjectInfo(key, str(got["ETag"]).strip('"'), int(got["ContentLength"]), got["LastModified"].timestamp())

    def put(self, key: str, src: Path, *, overwrite: bool = True, keep: bool = True) -> ObjectInfo:
        """See `Store.put`: uploaded, then kept in the local cache under its new version."""
        if not overwrite and self.head(key) is not None:
            raise Conflict(f"{key.rsplit('/', 1)[-1]} already exists", suggestions=["Pass overwrite/replace=true"])
        with src.open("rb") as body:
            self._call("store an object", self.client.put_object, Bucket=self.bucket, Key=self._name(key), Body=body)
        info = self.head(key)
        if info is None:
            raise Unavailable("The object store lost an object just written", suggestions=["Retry the call"])
        self.cache.add(key, info.version, src, keep=keep)
        return info

    def put_bytes(self, key: str, data: bytes) -> None:
        """See `Store.put_bytes`."""
        self._call("store an object", self.client.put_object, Bucket=self.bucket, Key=self._name(key), Body=data)

    def fetch(self, key: str) -> Path | None:
        """See `Store.fetch`: one HEAD when the current version is cached, else one GET too."""
        info = self.head(key)
        if info is None:
            return None
        cached = self.cache.get(key, info.version)
        if cached is not None:
            return cached
        got = self._call("read an object", self.client.get_object, Bucket=self.bucket, Key=self._name(key))
        if got is None:
            return None
        tmp = self.cache.root / f".get-{uuid.uuid4().hex}"
        try:
            with tmp.open("wb") as out:
                shutil.copyfileobj(got["Body"], out, 1024 * 1024)
            # The version the GET returned, which is what was read, even if the object changed since HEAD.
            return self.cache.add(key, str(got["ETag"]).strip('"'), tmp, keep=False)
        finally:
            tmp.unlink(missing_ok=True)

    def read_bytes(self, key: str) -> bytes | None:
        """See `Store.read_bytes` (not cached: cache entries are small and read once per process)."""
        got = self._call("read an object", self.client.get_object, Bucket=self.bucket, Key=self._name(key))
        return None if got is None else bytes(got["Body"].read())

    def delete(self, keys: list[str]) -> None:
        """See `Store.delete` (a thousand keys per request)."""
        for i in range(0, len(keys), 1000):
            objects: Any = [{"Key": self._name(k)} for k in keys[i : i + 1000]]
            self._call(
                "delete objects",
                self.client.delete_objects,
                Bucket=self.bucket,
                Delete={"Objects": objects, "Quiet": True},
            )

    def listing(self, prefix: str) -> list[ObjectInfo]:
        """See `Store.listing`."""
        out: list[ObjectInfo] = []
        skip = len(self.prefix) + 1 if self.prefix else 0
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full}
            if token:
                kwargs["ContinuationToken"] = token
            page = self._call("list objects", self.client.list_objects_v2, **kwargs) or {}
            for obj in page.get("Contents", []):
                out.append(
                    ObjectInfo(
                        str(obj["Key"])[skip:],
                        str(obj.get("ETag", "")).strip('"'),
                        int(obj.get("Size", 0)),
                        obj["LastModified"].timestamp(),
                    )
                )
            token = page.get("NextContinuationToken") if page.get("IsTruncated") else None
            if not token:
                return out

    def local_dirs(self, project: str) -> list[Path]:
        """See `Store.local_dirs`: the project's part of the local cache."""
        return [self.cache.root / "projects" / project, self.cache.root / "results" / project]

    def portable(self, path: str) -> str:
        """See `Store.portable`."""
        return path.replace(f"{self.cache.root}{os.sep}", "store:")


def read_json(store: Store, key: str) -> dict[str, Any] | None:
    """A JSON object stored under `key`, or None (missing or unreadable)."""
    data = store.read_bytes(key)
    try:
        value = json.loads(data) if data is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def sweep(store: Store, prefix: str, ttl: float, max_bytes: int) -> int:
    """Delete the objects under `prefix` older than `ttl` seconds, then the oldest beyond `max_bytes`."""
    now = time.time()
    objects = sorted(store.listing(prefix), key=lambda o: o.modified)
    total = sum(o.size for o in objects)
    gone: list[str] = []
    for o in objects:
        if now - o.modified > ttl or total > max_bytes:
            gone.append(o.key)
            total -= o.size
    if gone:
        store.delete(gone)
    return len(gone)


class CacheEntries:
    """The result cache's entries (`app.datasets.engine.cache.Entries`) as `cache/<name>` objects of a
    store, shared by every host that uses the store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def read(self, name: str) -> bytes | None:
        """See `Entries.read`."""
        return self.store.read_bytes(f"cache/{name}")

    def write(self, name: str, data: bytes) -> None:
        """See `Entries.write`."""
        self.store.put_bytes(f"cache/{name}", data)

    def remove(self, names: list[str]) -> None:
        """See `Entries.remove`."""
        self.store.delete([f"cache/{n}" for n in names])

    def names(self) -> list[str]:
        """See `Entries.names`."""
        return [o.key.removeprefix("cache/") for o in self.store.listing("cache/") if o.key.endswith(".json")]

    def result_exists(self, path: str) -> bool:
        """See `Entries.result_exists`: an older absolute path is looked for on disk; a key is taken as
        present (the hit's caller fetches its file, one request, and counts a missing one as a miss)."""
        return True if is_key(path) else Path(path).is_file()
