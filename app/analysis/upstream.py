"""HTTP access to upstream APIs: retries with backoff, pagination styles, item extraction, and the
shaping of upstream records into stored rows (`Shaper`).

Every URL the server requests, a registry path or a next-page URL the upstream handed back, is
resolved (dot segments removed, percent-encoded ones included) and must stay on the base URL's
scheme, host and port and under its path: the server's credentials go nowhere else. Responses are
read as a stream and decompressed here, counting the bytes as they come, so a body (or a
compression bomb) larger than `CAIRN_ANALYSIS_MAX_UPSTREAM_BYTES` is cut off at the cap; a page
with more than `CAIRN_ANALYSIS_MAX_PAGE_ITEMS` items is refused.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import logging
import random
import re
import ssl
import time
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import SplitResult, quote, unquote, urljoin, urlsplit, urlunsplit

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from app.analysis.catalog import PaginationCfg, UpstreamCfg
from app.core.errors import InvalidInput, UpstreamError

log = logging.getLogger("cairn.analysis.upstream")

RETRY_STATUSES = {429, 500, 502, 503, 504}
_DEFAULT_PORTS = {"http": 80, "https": 443}
# An encoded slash or backslash in a path: servers disagree on whether it separates segments, so it is refused.
_ENCODED_SEPARATOR = re.compile(r"%(2f|5c)", re.IGNORECASE)
# Headers that described the body as sent; the body handed on is the decoded one.
_BODY_HEADERS = {"content-encoding", "content-length", "transfer-encoding"}


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every upstream client: making one loads the CA bundle, which is slow."""
    return httpx.create_ssl_context()


class UpstreamFailure(UpstreamError):
    """An upstream request failed after its retries (carries the last status, if any)."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class _Retryable(Exception):
    """An attempt that may succeed if repeated: a 429/5xx answer or a transport error."""

    def __init__(self, why: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(why)
        self.why, self.status, self.retry_after = why, status, retry_after


def _why(state: RetryCallState) -> str:
    exc = state.outcome.exception() if state.outcome is not None else None
    return exc.why if isinstance(exc, _Retryable) else repr(exc)


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds a Retry-After header asks for (delta-seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def path_segment(value: str) -> str | None:
    """`value` (a record id from upstream data) as one URL path segment, every reserved character
    percent-encoded; None when it cannot be one: '', '.' and '..' name another resource once the
    path is resolved, and a '/' or '\\' is one that many servers decode before resolving."""
    if value in ("", ".", "..") or "/" in value or "\\" in value:
        return None
    return quote(value, safe="")


def _port(parts: SplitResult) -> int | None:
    return parts.port if parts.port is not None else _DEFAULT_PORTS.get(parts.scheme.lower())


def _remove_dot_segments(path: str) -> str:
    """`path` with its `.` and `..` segments applied (RFC 3986 5.2.4), percent-encoded ones included;
    `..` at the root stays at the root."""
    out: list[str] = []
    segments = path.lstrip("/").split("/")
    for n, segment in enumerate(segments):
        plain = unquote(segment)
        if plain not in (".", ".."):
            out.append(segment)
            continue
        if plain == ".." and out:
            out.pop()
        if n == len(segments) - 1:
            out.append("")  # "a/b/.." names the directory a/
    return "/" + "/".join(out)


def within_base(base_url: str, url: str) -> str | None:
    """`url` normalised (dot segments removed, no fragment) when it stays on `base_url`'s scheme,
    host and port and under its path; None when it leaves them (or cannot be read)."""
    try:
        base, target = urlsplit(base_url), urlsplit(url)
        same_origin = (
            target.scheme.lower() == base.scheme.lower()
            and target.hostname is not None
            and target.hostname == base.hostname
            and _port(target) == _port(base)
            and target.username is None
            and target.password is None
        )
    except ValueError:  # a malformed port or host
        return None
    if not same_origin or "\\" in target.path or _ENCODED_SEPARATOR.search(target.path):
        return None
    path = _remove_dot_segments(target.path or "/")
    prefix = _remove_dot_segments(base.path or "/").rstrip("/")
    if prefix and path != prefix and not path.startswith(prefix + "/"):
        return None
    return urlunsplit((target.scheme, target.netloc, path, target.query, ""))


class _Inflater:
    """Decodes a body's content encoding chunk by chunk, never making more than asked for: a small
    compressed chunk can stand for gigabytes."""

    def __init__(self, encoding: str, upstream: str) -> None:
        names = [e.strip().lower() for e in encoding.split(",") if e.strip()]
        names = [e for e in names if e != "identity"]
        self.upstream, self.raw_deflate_tried = upstream, False
        self.kind = names[0] if len(names) == 1 and names[0] in ("gzip", "x-gzip", "deflate") else None
        if names and self.kind is None:
            raise UpstreamFailure(f"Upstream '{upstream}' sent a body encoded as '{encoding}', which is not supported")
        wbits = zlib.MAX_WBITS | 16 if self.kind in ("gzip", "x-gzip") else zlib.MAX_WBITS
        self.z = zlib.decompressobj(wbits) if self.kind else None

    def decode(self, data: bytes, room: int) -> bytes:
        """The decoded bytes of `data`: at most `room` + 1 (one more than fits tells that the cap is passed)."""
        if self.z is None:
            return data
        try:
            return self.z.decompress(data, room + 1)
        except zlib.error:
            if self.kind == "deflate" and not self.raw_deflate_tried:  # deflate sent without its zlib header
                self.raw_deflate_tried, self.z = True, zlib.decompressobj(-zlib.MAX_WBITS)
                return self.decode(data, room)
            raise UpstreamFailure(f"Upstream '{self.upstream}' sent a malformed {self.kind} body") from None

    def flush(self) -> bytes:
        """What the decoder still holds at the end of the body."""
        return self.z.flush() if self.z is not None else b""


class UpstreamClient:
    """One upstream's HTTP client (use as an async context manager).

    `max_bytes` caps each response body once decompressed and `max_items` the items of one page
    (`CAIRN_ANALYSIS_MAX_UPSTREAM_BYTES`, `CAIRN_ANALYSIS_MAX_PAGE_ITEMS`)."""

    def __init__(
        self,
        name: str,
        cfg: UpstreamCfg,
        *,
        user_id: str | None = None,
        max_bytes: int,
        max_items: int,
    ) -> None:
        self.name = name
        self.cfg = cfg
        self.max_bytes = max_bytes
        self.max_items = max_items
        # Only encodings decoded here under the cap (httpx would add br or zstd when installed).
        headers = {"Accept": "application/json", "Accept-Encoding": "gzip, deflate", **cfg.headers}
        if cfg.auth is not None:
            headers[cfg.auth.header] = cfg.auth.header_value()
        if user_id is not None:
            if not cfg.impersonation_header:
                raise InvalidInput(
                    f"Upstream '{name}' does not support user_id impersonation",
                    suggestions=["Omit user_id or configure impersonation_header"],
                )
            headers[cfg.impersonation_header] = user_id
        self.client = httpx.AsyncClient(
            base_url=cfg.base_url + "/",
            headers=headers,
            timeout=httpx.Timeout(cfg.timeout_seconds),
            limits=httpx.Limits(max_connections=10, max_keepalive_connections=10),
            follow_redirects=False,
            verify=_tls(),
        )

    async def __aenter__(self) -> UpstreamClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    def url(self, path: str) -> str:
        """The absolute, normalised URL of a registry path (relative to base_url) or of a full
        next-URL; UpstreamFailure, before anything is sent, when it leaves the base URL."""
        absolute = path
        if not path.startswith(("http://", "https://")):
            absolute = urljoin(self.cfg.base_url + "/", path.lstrip("/"))
        resolved = within_base(self.cfg.base_url, absolute)
        if resolved is None:
            raise UpstreamFailure(
                f"Upstream '{self.name}' pointed outside its base URL {self.cfg.base_url} "
                f"({_short(absolute)}): refused, nothing was sent there"
            )
        return resolved

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json_body: Any = None,
        retries: int | None = None,
    ) -> httpx.Response:
        """Send with retries on 429/5xx and transport errors, honouring Retry-After.

        Returns the final response (which may be a 4xx); raises UpstreamFailure when every attempt
        failed with a retryable status or a transport error."""
        attempts = (self.cfg.max_retries if retries is None else retries) + 1
        url = self.url(path)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(attempts),
            wait=self._wait,
            retry=retry_if_exception_type(_Retryable),
            before_sleep=lambda state: log.info(
                "upstream retry",
                extra={"upstream": self.name, "attempt": state.attempt_number, "why": _why(state)},
            ),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._attempt(method, url, params, json_body)
        except _Retryable as exc:
            raise UpstreamFailure(
                f"Upstream '{self.name}' {exc.why} ({method} {_short(url)}, {attempts} attempt(s))", exc.status
            ) from None
        raise AssertionError("unreachable: tenacity either returns or re-raises")

    async def _attempt(self, method: str, url: str, params: dict[str, Any] | None, json_body: Any) -> httpx.Response:
        """One attempt with `timeout_seconds` as the deadline of the whole answer: httpx's timeouts
        bound each read, and an upstream sending a byte now and then would pass them for ever."""
        try:
            async with asyncio.timeout(self.cfg.timeout_seconds):
                return await self._send(method, url, params, json_body)
        except TimeoutError:
            raise _Retryable(f"timed out after {self.cfg.timeout_seconds:g}s") from None

    async def _send(self, method: str, url: str, params: dict[str, Any] | None, json_body: Any) -> httpx.Response:
        """One attempt: the response with its body read under the byte cap, or _Retryable for
        429/5xx and transport errors."""
        request = self.client.build_request(method, url, params=params or None, json=json_body)
        try:
            response = await self.client.send(request, stream=True)
        except httpx.TimeoutException:
            raise _Retryable(f"timed out after {self.cfg.timeout_seconds:g}s") from None
        except httpx.HTTPError as exc:
            raise _Retryable(f"connection failed ({type(exc).__name__})") from None
        try:
            if response.status_code in RETRY_STATUSES:
                hinted = retry_after_seconds(response.headers.get("retry-after"))
                if hinted is not None and hinted > self.cfg.max_retry_after_seconds:
                    raise UpstreamFailure(
                        f"Upstream '{self.name}' asked to retry after {hinted:g}s (over the "
                        f"{self.cfg.max_retry_after_seconds:g}s limit)",
                        response.status_code,
                    )
                raise _Retryable(f"answered HTTP {response.status_code}", response.status_code, hinted)
            body = await self._read_capped(response, method, url)
        except httpx.TimeoutException:
            raise _Retryable(f"timed out after {self.cfg.timeout_seconds:g}s") from None
        except httpx.HTTPError as exc:
            raise _Retryable(f"connection failed ({type(exc).__name__})") from None
        finally:
            await response.aclose()
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _BODY_HEADERS]
        return httpx.Response(response.status_code, headers=headers, content=body, request=request)

    async def _read_capped(self, response: httpx.Response, method: str, url: str) -> bytes:
        """The decoded body, refused (UpstreamFailure, not retried) once it passes `max_bytes`."""
        cap = self.max_bytes

        def too_large() -> UpstreamFailure:
            return UpstreamFailure(
                f"Upstream '{self.name}' sent a response larger than {cap} bytes (CAIRN_ANALYSIS_MAX_UPSTREAM_BYTES) "
                f"for {method} {_short(url)}: refused",
                response.status_code,
            )

        declared = response.headers.get("content-length", "")
        if not response.headers.get("content-encoding") and declared.isdigit() and int(declared) > cap:
            raise too_large()
        inflater = _Inflater(response.headers.get("content-encoding", ""), self.name)
        body = bytearray()
        async for chunk in response.aiter_raw():
            body += inflater.decode(chunk, cap - len(body))
            if len(body) > cap:
                raise too_large()
        body += inflater.flush()
        if len(body) > cap:
            raise too_large()
        return bytes(body)

    def _wait(self, state: RetryCallState) -> float:
        """Seconds before the next attempt: the upstream's Retry-After when it gave one, else
        exponential backoff from `backoff_seconds` with up to 50% jitter."""
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            return exc.retry_after
        base: float = self.cfg.backoff_seconds * (2 ** (state.attempt_number - 1))
        return base + random.uniform(0, base / 2)

    async def get_json(self, path: str, params: dict[str, Any] | None = None) -> tuple[Any, httpx.Response]:
        """GET and decode JSON; non-2xx and malformed bodies become UpstreamFailure."""
        response = await self.request("GET", path, params=params)
        if response.status_code >= 400:
            raise UpstreamFailure(
                f"Upstream '{self.name}' answered HTTP {response.status_code} for "
                f"GET {_short(str(response.request.url))}",
                response.status_code,
            )
        try:
            return response.json(), response
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise UpstreamFailure(
                f"Upstream '{self.name}' returned malformed JSON for GET {_short(str(response.request.url))}",
                response.status_code,
            ) from None


def _short(url: str) -> str:
    return url if len(url) <= 120 else url[:117] + "..."


def dig(body: Any, path: str | None) -> Any:
    """The value at a dotted path (`_embedded.books`); the body itself for an empty path."""
    if not path:
        return body
    node = body
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


_NOT_NAME = re.compile(r"[^A-Za-z0-9_]+")
MAX_NAME = 64


@functools.lru_cache(maxsize=4096)
def stored_name(key: str) -> str:
    """The queryable name of one upstream key: runs of other characters than letters, digits and `_`
    become one `_`; a leading digit gets an `f_` prefix; at most 64 characters."""
    name = _NOT_NAME.sub("_", key).strip("_") if _NOT_NAME.search(key) else key
    if not name:
        name = "f"
    elif name[0].isdigit():
        name = "f_" + name
    return name[:MAX_NAME]


def _epoch_to_iso(value: Any, fmt: str, date_only: bool) -> Any:
    """An epoch number (or numeric text) as ISO 8601 UTC; anything else unchanged."""
    if isinstance(value, bool):
        return value
    try:
        number = float(value) if isinstance(value, int | float | str) else None
    except ValueError:
        return value
    if number is None or number != number:  # NaN
        return value
    if fmt == "epoch_millis":
        number /= 1000.0
    try:
        moment = datetime.fromtimestamp(number, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return value
    if date_only:
        return moment.date().isoformat()
    return moment.isoformat(timespec="milliseconds" if number % 1 else "seconds").replace("+00:00", "Z")


@dataclass
class Shaper:
    """Upstream records to stored rows: flattening, renames, queryable names, epoch dates (the rules are
    in registry._Shaped). `names` gathers the upstream key paths stored under another name than their
    plain flattening (`a.b` as `a_b`)."""

    depth: int = 1
    rename: dict[str, str] = field(default_factory=dict)
    epoch: dict[str, tuple[str, bool]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, cfg: Any) -> Shaper:
        """The shaper of a model or child configuration (registry.ModelCfg / ChildCfg)."""
        epoch = {
            name: (a.format, a.type == "date")
            for name, a in cfg.attributes.items()
            if a.format in ("epoch_seconds", "epoch_millis")
        }
        return cls(depth=cfg.flatten_depth, rename=dict(cfg.rename), epoch=epoch)

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        self._walk(row, "", "", 0, out)
        for name, (fmt, date_only) in self.epoch.items():
            if out.get(name) is not None:
                out[name] = _epoch_to_iso(out[name], fmt, date_only)
        return out

    def _walk(self, node: dict[str, Any], path: str, prefix: str, level: int, out: dict[str, Any]) -> None:
        for key, value in node.items():
            if not isinstance(key, str) or key in ("_links", "_embedded") or (level and key.startswith("_")):
                continue
            source = f"{path}.{key}" if path else key
            renamed = self.rename.get(source)
            if renamed is None and isinstance(value, dict) and level < self.depth:
                self._walk(value, source, f"{prefix}{stored_name(key)}_", level + 1, out)
                continue
            name = renamed or (prefix + stored_name(key))[:MAX_NAME]
            if name in out:
                if out[name] == value:
                    continue
                n = 2
                while f"{name}_{n}" in out:
                    n += 1
                name = f"{name}_{n}"
            if name != source.replace(".", "_"):  # plain flattening needs no mention
                self.names.setdefault(source, name)
            out[name] = value


@dataclass
class Page:
    """One fetched page."""

    items: list[dict[str, Any]]
    next_token: Any
    total: int | None
    size: int = 0  # bytes of the decoded body


def first_token(p: PaginationCfg) -> Any:
    """Where listing starts."""
    if p.style == "page":
        return p.start_page
    if p.style == "offset":
        return 0
    return None


def token_for_page(p: PaginationCfg, page: int, per_page: int) -> Any:
    """The token of a 1-based page number (only page and offset styles can jump)."""
    if p.style == "page":
        return p.start_page + page - 1
    if p.style == "offset":
        return (page - 1) * per_page
    if page != 1:
        raise InvalidInput(
            f"page: {p.style} pagination cannot jump to page {page}",
            suggestions=["Use ingest_all, or resume: true to continue where the last call stopped"],
        )
    return None


async def fetch_page(
    client: UpstreamClient,
    path: str,
    p: PaginationCfg,
    items_path: str | None,
    token: Any,
    per_page: int,
    params: dict[str, Any],
) -> Page:
    """Fetch the page at `token` and work out the next token (None at the end)."""
    query = dict(params)
    target = path
    if p.style != "none":
        query[p.per_page_param] = per_page
    if p.style == "page":
        query[p.page_param] = token
    elif p.style == "offset":
        query[p.offset_param] = token
    elif p.style == "cursor" and token is not None:
        if isinstance(token, str) and token.startswith(("http://", "https://")):
            target, query = token, {}
        else:
            query[p.cursor_param] = token
    elif p.style == "link" and token is not None:
        target, query = token, {}
    body, response = await client.get_json(target, query)
    items = dig(body, items_path)
    if items is None and isinstance(body, dict) and items_path and "_embedded" in items_path:
        items = []  # HAL omits _embedded on an empty page
    if not isinstance(items, list):
        raise UpstreamFailure(f"Upstream '{client.name}' response has no item list at '{items_path or '(body)'}'")
    if len(items) > client.max_items:
        raise UpstreamFailure(
            f"Upstream '{client.name}' sent {len(items)} items in one page; the limit is {client.max_items} "
            "(CAIRN_ANALYSIS_MAX_PAGE_ITEMS): refused"
        )
    rows = [r for r in items if isinstance(r, dict)]
    total_raw = dig(body, p.total_path) if p.total_path and isinstance(body, dict) else None
    total = int(total_raw) if isinstance(total_raw, int | float) and not isinstance(total_raw, bool) else None
    said = dig(body, p.has_more_path) if p.has_more_path and isinstance(body, dict) else None
    has_more = said if isinstance(said, bool) else None
    nxt: Any = None
    if p.style == "page":
        # An upstream may cap the page size below what was asked: judge by what actually came back, and
        # without a total or has_more only an empty page is the end.
        size = min(per_page, len(items)) or per_page
        if has_more is not None:
            more = has_more
        else:
            more = (token - p.start_page + 1) * size < total if total is not None else bool(items)
        nxt = token + 1 if more and items else None
    elif p.style == "offset":
        if has_more is not None:
            more = has_more
        else:
            more = token + len(items) < total if total is not None else bool(items)
        nxt = token + len(items) if more and items else None
    elif p.style == "cursor":
        found = dig(body, p.next_path) if isinstance(body, dict) else None
        nxt = found if found not in (None, "") and items and has_more is not False else None
        if isinstance(nxt, str) and nxt.startswith(("http://", "https://", "/")):
            # Checked against the base URL when requested: a refused next page ends the ingest after
            # this one is stored.
            nxt = urljoin(str(response.request.url), nxt)
    elif p.style == "link":
        link = response.links.get("next", {}).get("url")  # httpx parses the RFC 8288 Link header
        nxt = urljoin(str(response.request.url), link) if link and items else None
    return Page(items=rows, next_token=nxt, total=total, size=len(response.content))
