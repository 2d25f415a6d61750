"""Result cache, in memory (cachetools' LRU with a TTL) and in a store shared by the hosts (one JSON entry
per key: a local folder beside the stored results, or the object store, see `app.datasets.storage`).

A key is the SHA-256 of the caller's project, the normalised query (DuckDB tokens re-joined, comments dropped, keywords
lower-cased), the inputs' view definitions, the options that change the answer, and each input file's
fingerprint (path, size, mtime). A changed file therefore never hits an old entry. Entries expire
after a TTL; stored results are swept oldest first when they pass the size cap.

Sweeping lists the whole result store, so a query does not sweep after every miss: `sweep_if_due`
sweeps when this process's count of stored bytes (the store's size at the last sweep plus what it
wrote since) may be past the cap, or when a sweep interval (a minute, or a tenth of the result TTL
when that is shorter) has passed.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import threading
import time
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Protocol

import duckdb
from cachetools import LRUCache, TTLCache

from app.core.errors import CacheError

SWEEP_INTERVAL = 60.0  # seconds between sweeps of the result store when nothing forces one
# Whether an entry found now counts as a hit (`Cache.hits`): a lookup that only prices a call does not.
COUNT_HITS: ContextVar[bool] = ContextVar("cairn_cache_count_hits", default=True)


def normalize_sql(sql: str) -> str:
    """The query's tokens joined by one space, keywords lower-cased, comments dropped."""
    try:
        tokens = duckdb.tokenize(sql)
    except duckdb.Error:
        return " ".join(sql.split())
    parts: list[str] = []
    for i, (start, ttype) in enumerate(tokens):
        end = tokens[i + 1][0] if i + 1 < len(tokens) else len(sql)
        piece = sql[start:end].strip()
        name = getattr(ttype, "name", str(ttype))
        if name == "comment" or not piece:
            continue
        parts.append(piece.lower() if name == "keyword" else piece)
    return " ".join(parts)


def fingerprint(paths: list[Path]) -> list[list[Any]]:
    """(path, size, mtime_ns) of each file."""
    out: list[list[Any]] = []
    for p in sorted(set(paths)):
        try:
            st = p.stat()
            out.append([str(p), st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([str(p), -1, -1])
    return out


def make_key(kind: str, **parts: Any) -> str:
    """A stable cache key."""
    blob = json.dumps({"kind": kind, **parts}, sort_keys=True, default=str)
    return f"{kind}:" + hashlib.sha256(blob.encode()).hexdigest()[:40]


class Entries(Protocol):
    """Where the cache's entries are kept, by name (`<key>.json`), and how it tells that a stored result
    an entry names is still there: a local folder by default, the shared object store on a fleet."""

    def read(self, name: str) -> bytes | None:
        """The entry's bytes, or None."""
        ...

    def write(self, name: str, data: bytes) -> None:
        """Store an entry."""
        ...

    def remove(self, names: list[str]) -> None:
        """Drop entries (missing ones are no error)."""
        ...

    def names(self) -> list[str]:
        """Every entry's name."""
        ...

    def result_exists(self, path: str) -> bool:
        """True when the stored result `path` (a local path or a store key) is still there."""
        ...


class FolderEntries:
    """Entries as JSON files of one folder."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def read(self, name: str) -> bytes | None:
        """See `Entries.read`."""
        try:
            return (self.dir / name).read_bytes()
        except OSError:
            return None

    def write(self, name: str, data: bytes) -> None:
        """See `Entries.write` (a temporary file renamed into place)."""
        tmp = (self.dir / name).with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(self.dir / name)

    def remove(self, names: list[str]) -> None:
        """See `Entries.remove`."""
        for name in names:
            try:
                (self.dir / name).unlink()
            except FileNotFoundError:
                pass

    def names(self) -> list[str]:
        """See `Entries.names`."""
        return [f.name for f in self.dir.glob("*.json")]

    def result_exists(self, path: str) -> bool:
        """See `Entries.result_exists`."""
        return Path(path).is_file()


class Cache:
    """Memory + shared cache of small JSON entries (results themselves are Parquet files).

    Entries remembered in memory carry the epoch they were read in: a call passes its project's
    current epoch (`get`'s `epoch`, read from the database), and an entry remembered in an older epoch
    is read again from `entries`, where another host's invalidation has removed it."""

    def __init__(
        self,
        directory: Path,
        results: Path,
        ttl: float,
        max_bytes: int,
        memory_entries: int,
        projects: Path | None = None,
        entries: Entries | None = None,
    ) -> None:
        self.dir = directory
        self.results = results
        self.store: Entries = entries if entries is not None else FolderEntries(directory)
        # Each project's result store is `<projects>/<project>/results`; the cap covers them all.
        self.projects = projects
        self.ttl = ttl
        self.max_bytes = max_bytes
        self.memory_entries = memory_entries
        # Least recently used entries go first once `memory_entries` are held; each leaves after `ttl`.
        self._mem: TTLCache[str, tuple[int, dict[str, Any]]] = TTLCache(maxsize=max(memory_entries, 1), ttl=ttl)
        self._lock = threading.Lock()
        self._swept_at: float | None = None  # time.monotonic() of the last sweep
        # Hits of each key answered by this process (`hits`), the least recently hit forgotten first.
        self._hits: LRUCache[str, int] = LRUCache(maxsize=max(4 * memory_entries, 1024))
        self._stored_bytes = 0  # the store's size at the last sweep, plus results stored since

    @staticmethod
    def _name(key: str) -> str:
        return key.replace(":", "_") + ".json"

    def get(self, key: str, epoch: int = 0) -> dict[str, Any] | None:
        """The live entry for `key`, or None (expired entries are dropped). Always None when the TTL is
        0: the cache is off. `epoch`: the caller's project's cache epoch (see the class docstring)."""
        if self.ttl <= 0:
            return None
        now = time.time()
        with self._lock:
            held = self._mem.get(key)
        entry = held[1] if held is not None and held[0] >= epoch else None
        if entry is None:
            try:
                entry = json.loads(self.store.read(self._name(key)) or b"null")
            except ValueError:
                entry = None
            if not isinstance(entry, dict):
                return None
            with self._lock:
                self._mem[key] = (epoch, entry)
        if entry.get("expires_at", 0) < now or not self._result_ok(entry):
            self.remove([key])
            return None
        if COUNT_HITS.get():
            with self._lock:
                self._hits[key] = self._hits.get(key, 0) + 1
        return entry

    def hits(self, key: str) -> int:
        """How many calls this process answered from `key`'s entry (other processes and hosts count their
        own)."""
        with self._lock:
            return self._hits.get(key, 0)

    def _result_ok(self, entry: dict[str, Any]) -> bool:
        path = entry.get("result_path")
        return path is None or self.store.result_exists(str(path))

    def put(self, key: str, entry: dict[str, Any], epoch: int = 0) -> None:
        """Store an entry (memory and `entries`); nothing with a TTL of 0."""
        if self.ttl <= 0:
            return
        entry = {**entry, "key": key, "created_at": time.time(), "expires_at": time.time() + self.ttl}
        try:
            self.store.write(self._name(key), json.dumps(entry, default=str).encode())
        except OSError as exc:
            raise CacheError(f"Could not write the cache entry: {exc.strerror}") from None
        with self._lock:
            self._mem[key] = (epoch, entry)

    def entries(self) -> list[dict[str, Any]]:
        """Every stored entry (bounded by the cache size)."""
        out: list[dict[str, Any]] = []
        for name in self.store.names():
            try:
                entry = json.loads(self.store.read(name) or b"null")
            except ValueError:
                continue
            if isinstance(entry, dict):
                out.append(entry)
        return out

    def remove(self, keys: list[str]) -> None:
        """Drop entries by key."""
        with self._lock:
            for k in keys:
                self._mem.pop(k, None)
                self._hits.pop(k, None)
        self.store.remove([self._name(k) for k in keys])

    def invalidate(
        self, pattern: str | None, files: list[str] | None, project: str | None = None
    ) -> list[dict[str, Any]]:
        """Remove entries whose key, label or query_id matches `pattern` (shell wildcards) or that read
        one of `files`; with `project`, only that project's entries (an entry without one is
        'default''s). Returns the removed entries."""
        wanted = set(files or [])
        removed: list[dict[str, Any]] = []
        for entry in self.entries():
            if project is not None and entry.get("project", "default") != project:
                continue
            hit = pattern is not None and matches(entry, pattern)
            if wanted and any(f[0] in wanted for f in entry.get("files", [])):
                hit = True
            if hit:
                removed.append(entry)
        self.remove([str(e.get("key", "")) for e in removed])
        return removed

    @property
    def swept_at(self) -> float | None:
        """time.monotonic() of the last sweep (None before the first)."""
        with self._lock:
            return self._swept_at

    def sweep_if_due(self, result_ttl: float, stored: Path | None = None) -> int:
        """`sweep` when it may delete something that must go now; `stored` is a result just written."""
        try:
            added = stored.stat().st_size if stored is not None else 0
        except OSError:
            added = 0
        with self._lock:
            self._stored_bytes += added
            due = (
                self._swept_at is None
                or self._stored_bytes > self.max_bytes
                or time.monotonic() - self._swept_at >= min(SWEEP_INTERVAL, result_ttl / 10)
            )
        return self.sweep(result_ttl) if due else 0

    def sweep(self, result_ttl: float) -> int:
        """Delete stored results older than `result_ttl` and the oldest beyond the size cap."""
        started = time.monotonic()
        now = time.time()
        files: list[tuple[float, int, Path]] = []
        stored = [self.results.glob("*.parquet")]
        if self.projects is not None:
            stored.append(self.projects.glob("*/results/*.parquet"))
        for f in (f for found in stored for f in found):
            try:
                st = f.stat()
            except OSError:
                continue
            files.append((st.st_mtime, st.st_size, f))
        files.sort()
        total = sum(s for _, s, _ in files)
        deleted = 0
        for mtime, size, f in files:
            if now - mtime > result_ttl or total > self.max_bytes:
                try:
                    os.unlink(f)
                    deleted += 1
                    total -= size
                except OSError:
                    pass
        with self._lock:
            self._swept_at, self._stored_bytes = started, total
        return deleted


def matches(entry: dict[str, Any], pattern: str) -> bool:
    """True when the entry's key, label or query_id matches `pattern` (shell wildcards)."""
    names = [str(entry.get("key", "")), str(entry.get("label") or ""), _query_id(entry)]
    return any(n and fnmatch.fnmatchcase(n, pattern) for n in names)


def _query_id(entry: dict[str, Any]) -> str:
    meta = entry.get("meta")
    return str(meta.get("query_id") or "") if isinstance(meta, dict) else ""


def describe(entry: dict[str, Any], width: int = 120) -> str:
    """What a cache entry holds, as its caller knows it (at most `width` characters): a query's
    `query_id` and its label (`cache_key`) or query text, or `profile <file_path>`; the key when the
    entry predates these fields."""
    key = str(entry.get("key", ""))
    label, text = str(entry.get("label") or ""), str(entry.get("text") or "")
    if key.startswith("profile:"):
        out = f"profile {text or label.removeprefix('profile:')}"
    else:
        out = " ".join(part for part in (_query_id(entry), label or text) if part) or key
    return out if len(out) <= width else out[: width - 1] + "…"


_caches: dict[str, Cache] = {}
_caches_lock = threading.Lock()


def get_cache(
    work: Path, ttl: float, max_bytes: int, memory_entries: int, entries: Entries | None = None, store: str = ""
) -> Cache:
    """The process-wide cache of one work directory, its entries kept in `entries` (the work directory's
    `cache/` folder by default); `store` names where, so that two stores get two caches."""
    key = f"{work}|{store}"
    with _caches_lock:
        cache = _caches.get(key)
        if cache is None:
            cache = Cache(work / "cache", work / "results", ttl, max_bytes, memory_entries, work / "projects", entries)
            _caches[key] = cache
        return cache
