"""The HTTP front: what every request meets before a route or the MCP SDK sees it.

One pure-ASGI middleware (no task or response wrapper per request, one look at the headers):

- a request id: the client's `X-Request-ID` when it is a safe id (`[A-Za-z0-9._:-]{1,64}`), else a
  new one; set in `request_id_var`, in the scope state and on the response;
- the client's address in `callers.client_address` (the failed-authentication limit);
- browser checks on every path but the probes (`/healthz`, `/readyz`): the `Host` must be an allowed
  host (DNS rebinding, 421 / 4030); a present `Origin` must be allowed or the request's own origin,
  and without one `Sec-Fetch-Site: cross-site` is refused unless it is a top-level GET navigation
  (cross-site requests, 403 / 4030);
- own-origin writes: a POST, PUT, PATCH or DELETE to the console (`/ui/...`), or to anything on an
  open server (no key required, as last known), is refused (403 / 4030) when the browser names
  another origin than the server's own (the request's scheme and `Host`, name and port, or
  `CAIRN_PUBLIC_URL`'s origin) or, naming none, says `Sec-Fetch-Site: same-site` or `cross-site`:
  browsers treat every port of a host as one site and send its cookies to each, so a page on
  another local port is no less foreign than another site. A request without either header (curl,
  SDK clients) is not a browser's and passes;
- the body's type: a POST, PUT, PATCH or DELETE that carries a body or declares a type must declare
  `application/json` (4001), and `POST /mcp` always must. The console's forms (`/ui/...`) may post
  `application/x-www-form-urlencoded` from a browser that names their origin (an allowed `Origin`,
  or `Sec-Fetch-Site: same-origin`); else 403 / 4030. Routes that take `multipart/form-data` (a
  type any cross-site form can post) take it only with `Authorization: Bearer …` or
  `X-Requested-With` (headers such a form cannot add), or from a browser that says where the request
  comes from (an allowed `Origin`, `Sec-Fetch-Site: same-origin`); else 403 / 4030 on an open server,
  while a server with keys leaves the request to the route's authentication (4010);
- the body size: 4130 when the declared or streamed body passes `CAIRN_MAX_BODY_BYTES`, answered here
  even when the limit trips inside a task group of the MCP SDK (whose own error layer would answer 500).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from mcp.server.transport_security import TransportSecuritySettings

from app.core.auth import request_id
from app.core.config import Settings
from app.core.errors import CairnError, Forbidden, InvalidInput, TooLarge
from app.core.http.callers import Callers, client_address
from app.core.logs import request_id_var
from app.core.toolsets import MCP_PATH

log = logging.getLogger("cairn.http")

PROBES = frozenset({"/healthz", "/readyz"})
MAX_JSON_DEPTH = 200
_SAFE_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_WITH_BODY = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_JSON = b"application/json"
_MULTIPART = b"multipart/form-data"
_FORM = b"application/x-www-form-urlencoded"
CONSOLE_PREFIX = "/ui/"
# A JSON string (skipped when measuring nesting), and the bytes that are not brackets.
_JSON_STRING = re.compile(rb'"(?:[^"\\]+|\\.)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class MisdirectedHost(Forbidden):
    """The `Host` header names a server this one does not serve (DNS-rebinding protection)."""

    status = 421


def safe_request_id(raw: bytes | None) -> str:
    """The client's request id when it is safe to log, store and echo; else a new one."""
    if raw is not None:
        text = raw.decode("latin-1")
        if _SAFE_ID.fullmatch(text):
            return text
    return request_id()


def allowed_hosts(settings: Settings) -> list[str]:
    """`Host` values served (REST, MCP, docs): the loopback names, the bind address, the host of
    `CAIRN_PUBLIC_URL` and `CAIRN_ALLOWED_HOSTS`; `name:*` allows any port."""
    hosts = settings.effective_allowed_hosts()
    public = urlsplit(settings.public_url or "").netloc.rpartition("@")[2]
    if public:
        hosts = [*hosts, public]
    return list(dict.fromkeys(h.lower() for h in hosts))


def allowed_origins(settings: Settings) -> list[str]:
    """`Origin` values accepted from browsers: the loopback origins, the origin of
    `CAIRN_PUBLIC_URL` and `CAIRN_ALLOWED_ORIGINS` (`scheme://name:*` allows any port)."""
    origins = settings.effective_allowed_origins()
    parts = urlsplit(settings.public_url or "")
    if parts.scheme and parts.netloc:
        origins = [*origins, f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"]
    return list(dict.fromkeys(o.lower().rstrip("/") for o in origins))


def sdk_transport_security(settings: Settings) -> TransportSecuritySettings:
    """The MCP SDK's own Host/Origin check, a second layer behind the front's: the same hosts, and
    the allowed origins plus each allowed host's own origins (the front's same-origin rule, which
    the SDK cannot express)."""
    hosts = allowed_hosts(settings)
    own = [f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=list(dict.fromkeys([*allowed_origins(settings), *own])),
    )


class _Patterns:
    """Exact values, plus `prefix:*` entries that match `prefix:<digits>`."""

    def __init__(self, patterns: Iterable[str]) -> None:
        values = [p.lower() for p in patterns]
        self.exact = frozenset(v for v in values if not v.endswith(":*"))
        self.bases = tuple(v[:-1] for v in values if v.endswith(":*"))

    def allows(self, value: str) -> bool:
        if value in self.exact:
            return True
        return any(value.startswith(base) and value[len(base) :].isdigit() for base in self.bases)


def multipart_paths(routers: Iterable[APIRouter]) -> frozenset[str]:
    """The paths of the routes among `routers` that declare a `multipart/form-data` body (in their
    OpenAPI extra or through form fields)."""
    found = set()
    for router in routers:
        for route in router.routes:
            if not isinstance(route, APIRoute):
                continue
            body = (route.openapi_extra or {}).get("requestBody", {})
            declared = _MULTIPART.decode() in (body.get("content") or {})
            field = route.body_field
            media = getattr(getattr(field, "field_info", None), "media_type", "") if field is not None else ""
            if declared or str(media).startswith(_MULTIPART.decode()):
                found.add(route.path)
    return frozenset(found)


def parse_json_body(raw: bytes) -> Any:
    """The arguments in a JSON request body (`{}` when it is empty).

    Raises:
        InvalidInput: the body is not JSON, or nests deeper than `MAX_JSON_DEPTH`.
    """
    if not raw.strip():
        return {}
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH and nests_deeper(raw, MAX_JSON_DEPTH):
        raise InvalidInput(
            f"The request body nests deeper than {MAX_JSON_DEPTH} levels",
            suggestions=["Send flatter arguments"],
        )
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise InvalidInput(
            "The request body is not valid JSON", suggestions=["Send one JSON object, encoded in UTF-8"]
        ) from None


def nests_deeper(raw: bytes, limit: int) -> bool:
    """True when the arrays and objects of a JSON text nest deeper than `limit` (strings skipped; a
    malformed text may count deeper than it is, never less deep). Stops at the first level too many."""
    depth = 0
    for byte in _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS):
        if byte in b"[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def error_response(err: CairnError) -> JSONResponse:
    """The REST response for an error."""
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


async def send_error(send: Any, err: CairnError) -> None:
    """Answer with the error body from plain ASGI code."""
    response = error_response(err)
    await send({"type": "http.response.start", "status": response.status_code, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})


class _BodyTooLarge(Exception):
    pass


class _Exchange:
    """One request's answer: the request id on the response, the streamed body's size, and whether
    the front answered already (then the app's own answer is dropped)."""

    __slots__ = ("_receive", "_send", "answered", "id_header", "limit", "seen", "started")

    def __init__(self, send: Any, receive: Any, id_header: tuple[bytes, bytes], limit: int) -> None:
        self._send, self._receive, self.id_header, self.limit = send, receive, id_header, limit
        self.started = self.answered = False
        self.seen = 0

    async def send(self, message: Any) -> None:
        """The app's `send`: adds the request id; drops everything once the front answered."""
        if self.answered:
            return
        if message["type"] == "http.response.start":
            self.started = True
            kept = [h for h in message.get("headers") or () if h[0].lower() != b"x-request-id"]
            kept.append(self.id_header)
            message = {**message, "headers": kept}
        await self._send(message)

    async def answer(self, err: CairnError) -> None:
        """Answer with the error body; the app's answer, if any comes, is dropped."""
        await send_error(self.send, err)
        self.answered = True

    async def receive_limited(self) -> Any:
        """The app's `receive` for a body of undeclared length: past the limit, answer 413 (unless the
        app has started its answer) and stop the app with `_BodyTooLarge`."""
        message = await self._receive()
        if message["type"] == "http.request":
            self.seen += len(message.get("body", b""))
            if self.seen > self.limit:
                if not self.started and not self.answered:
                    await self.answer(self.too_large())
                raise _BodyTooLarge
        return message

    def too_large(self) -> TooLarge:
        """The 4130 of this request."""
        return TooLarge(
            f"Request body exceeds {self.limit} bytes",
            suggestions=["Send less per request (CAIRN_MAX_BODY_BYTES)"],
        )


class HttpFront:
    """The middleware described in the module docstring (outermost of the application's own)."""

    def __init__(
        self,
        app: Any,
        settings: Settings,
        *,
        exempt: tuple[str, ...] = (),
        multipart: frozenset[str] = frozenset(),
        callers: Callers,
    ) -> None:
        self.app = app
        self.limit = settings.max_body_bytes
        self.exempt = exempt
        self.multipart = multipart
        self.callers = callers
        self.hosts = _Patterns(allowed_hosts(settings))
        self.origins = _Patterns(allowed_origins(settings))
        parts = urlsplit(settings.public_url or "")
        self.public_origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}".lower() if parts.netloc else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        rid = safe_request_id(headers.get(b"x-request-id"))
        scope.setdefault("state", {})["request_id"] = rid
        exchange = _Exchange(send, receive, (b"x-request-id", rid.encode("latin-1")), self.limit)
        client = scope.get("client")
        rid_token = request_id_var.set(rid)
        client_token = client_address.set(client[0] if client else None)
        try:
            path: str = scope["path"]
            refusal = None if path in PROBES else self._refusal(scope, path, headers)
            if refusal is not None:
                await exchange.answer(refusal)
                return
            receive_fn = receive
            if not (self.exempt and path.startswith(self.exempt)):
                declared = headers.get(b"content-length")
                if declared is not None:
                    # The server delivers no more than a declared length, so only its size is checked.
                    if declared.isdigit() and int(declared) > self.limit:
                        await exchange.answer(exchange.too_large())
                        return
                elif b"transfer-encoding" in headers:
                    receive_fn = exchange.receive_limited
            try:
                await self.app(scope, receive_fn, exchange.send)
            except Exception as exc:
                if not exchange.answered:
                    raise
                # Answered 413 already; the app stops on the limit's exception, possibly wrapped in an
                # ExceptionGroup by a task group or turned into a 500 answer (dropped) on its way out.
                if not _only(exc, _BodyTooLarge):
                    log.warning("error after a refused request body", exc_info=exc)
        finally:
            client_address.reset(client_token)
            request_id_var.reset(rid_token)

    def _refusal(self, scope: Any, path: str, headers: dict[bytes, bytes]) -> CairnError | None:
        """Why this request is refused before anything runs, or None."""
        host = headers.get(b"host", b"").decode("latin-1").lower()
        if not self.hosts.allows(host):
            return MisdirectedHost(
                f"Host {host[:100]!r} is not served here (DNS-rebinding protection)",
                suggestions=[
                    "Connect through an allowed name (127.0.0.1, localhost or the public URL)",
                    "Add the name clients use to CAIRN_ALLOWED_HOSTS",
                ],
            )
        method: str = scope["method"]
        origin = headers.get(b"origin")
        text = origin.decode("latin-1").lower() if origin is not None else None
        own = text is not None and self._own_origin(text, host)
        if text is not None:
            if not own and not self.origins.allows(text):
                return Forbidden(
                    f"Origin {text[:100]!r} is not allowed (cross-site request protection)",
                    suggestions=["A browser app on another origin must be listed in CAIRN_ALLOWED_ORIGINS"],
                )
        elif headers.get(b"sec-fetch-site") == b"cross-site" and not (
            method in ("GET", "HEAD") and headers.get(b"sec-fetch-mode") == b"navigate"
        ):
            return Forbidden(
                "Cross-site browser requests are refused (cross-site request protection)",
                suggestions=["A browser app on another origin must be listed in CAIRN_ALLOWED_ORIGINS"],
            )
        if method in _WITH_BODY:
            if path.startswith(CONSOLE_PREFIX) or not self.callers.keys_known_required:
                foreign = _foreign(text, own, headers)
                if foreign is not None:
                    return foreign
            return self._body_refusal(method, path, headers)
        return None

    def _own_origin(self, origin: str, host: str) -> bool:
        """Whether a browser's `Origin` is this server's own: the request's scheme-less `Host` (name
        and port) over http or https, or the origin of `CAIRN_PUBLIC_URL`."""
        scheme, _, rest = origin.partition("://")
        return (rest == host and scheme in ("http", "https")) or origin == self.public_origin

    def _body_refusal(self, method: str, path: str, headers: dict[bytes, bytes]) -> CairnError | None:
        declared = headers.get(b"content-type")
        if declared is None:
            length = headers.get(b"content-length", b"0").strip()
            has_body = b"transfer-encoding" in headers or length not in (b"", b"0")
            if not has_body and not (method == "POST" and (path == MCP_PATH or path.startswith(MCP_PATH + "/"))):
                return None
            return _not_json("none")
        media = declared.split(b";", 1)[0].strip().lower()
        if media == _JSON:
            return None
        if media in (_FORM, _MULTIPART) and path.startswith(CONSOLE_PREFIX):
            # The console's forms: only from a browser that says the page is this server's (an Origin,
            # already checked above, or Sec-Fetch-Site); the console also checks its CSRF token.
            if b"origin" in headers or headers.get(b"sec-fetch-site") == b"same-origin":
                return None
            return Forbidden(
                "A console form must come from a console page of this server (no Origin header was sent)",
                suggestions=["Open the console in a browser at /ui"],
            )
        if media == _MULTIPART and path in self.multipart:
            # Safe: a header a cross-site form cannot add, or a browser's word that the request is not
            # cross-site (an Origin, already checked, or Sec-Fetch-Site), e.g. the /docs page.
            authorization = headers.get(b"authorization", b"")
            if (
                authorization[:7].lower() == b"bearer "
                or b"x-requested-with" in headers
                or b"origin" in headers
                or headers.get(b"sec-fetch-site") == b"same-origin"
            ):
                return None
            if self.callers.keys_known_required:
                return None  # keys are required: the route's authentication answers (4010)
            return Forbidden(
                "A multipart upload must carry an 'X-Requested-With' or 'Authorization: Bearer' header "
                "(a cross-site form cannot add either)",
                suggestions=["curl: add -H 'X-Requested-With: curl'"],
            )
        return _not_json(media.decode("latin-1")[:100])


def _foreign(origin: str | None, own: bool, headers: dict[bytes, bytes]) -> Forbidden | None:
    """The 4030 for a state-changing browser request that does not come from this server's own pages
    (another origin, another port of the same host included), else None; a request naming no origin
    and no fetch site (curl, SDK clients) is not a browser's and passes."""
    if origin is not None and not own:
        return Forbidden(
            f"Origin {origin[:100]!r} may not change anything here: only this server's own pages may "
            "(cross-origin request protection)",
            suggestions=[
                "Send the request without a browser (curl, an SDK), or from the console at /ui",
                "A browser app on another origin needs a server with API keys and CAIRN_ALLOWED_ORIGINS",
            ],
        )
    if origin is None and headers.get(b"sec-fetch-site") in (b"cross-site", b"same-site"):
        return Forbidden(
            "A page of another origin may not change anything here (cross-origin request protection)",
            suggestions=["Send the request from this server's own pages, or without a browser"],
        )
    return None


def _not_json(media: str) -> InvalidInput:
    return InvalidInput(
        f"Unsupported request body type {media!r}: send JSON with 'Content-Type: application/json'",
        suggestions=[
            "Add the header 'Content-Type: application/json' (curl: -H 'Content-Type: application/json')",
            "Files are uploaded as multipart/form-data to their upload route only",
        ],
    )


def _only(exc: BaseException, kind: type[BaseException]) -> bool:
    """True when `exc` is `kind`, or a group of nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_only(inner, kind) for inner in exc.exceptions)
    return isinstance(exc, kind)
