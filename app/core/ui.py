"""The web console at `/ui`: a third transport over the same registry and executor as MCP and REST.

Pages are server-rendered Jinja2 templates; every read and write a page makes is an operation call
through `run_operation` (transport `console`), so it is validated, scoped, rate limited and audited
exactly like the same call over MCP or REST. A page is a route of a `console_router`; a feature
contributes `ConsoleSection`s (its navigation entries, routes and templates) on its `Feature`.

Sign-in and forms:

- **The key.** The sign-in form takes an API key and keeps it in the `cairn_key` cookie: HttpOnly
  (no script can read it), `SameSite=Strict` (no other site's page sends it), path `/ui`, `Secure`
  over HTTPS. Each request resolves it like every transport (`callers.resolve_caller`), so a revoked
  key stops working within the key cache's seconds. An open server (no keys) needs no sign-in; once a
  key exists, it locks like the other transports.
- **Forms.** Every state-changing request is a form POST carrying a CSRF token: an HMAC, under a
  server secret every host of the database shares (`server_secrets`, made by the first process that
  needs it), of the session: the `cairn_seed` cookie (HttpOnly, `SameSite=Strict`, renewed at
  sign-in) and the key cookie. It is compared in constant time. Cookies are not separated by port, so
  a page on another port of the host can set the seed, but it cannot sign it. The HTTP front also
  refuses a form body unless the browser says it comes from this server's own origin (its `Origin`
  header names the request's scheme, host and port, or `Sec-Fetch-Site: same-origin`).
- **Pages** are sent with a content security policy of their own origin only (scripts are package
  assets under `/ui/static`, never inline; charts are data: images; inline style attributes are
  allowed for the graph library), no framing, no referrer to other sites.
- **Errors** of a call are shown on the page with their code, message and suggestions; a request
  without a valid key goes to the sign-in page.
- **The project** a page shows is remembered per browser in the `cairn_project` cookie (HttpOnly,
  `SameSite=Strict`, path `/ui`): the picker on every page (a CSRF-checked form) sets it, and so does a
  page opened with `?project=`; a key bound to a project always sees its own. The home page shows the
  chosen project's counts and newest items, which each section contributes (`ConsoleSection.overview`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import secrets
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from jinja2 import ChoiceLoader, Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from pydantic import BaseModel

from app import __version__
from app.core.auth import shared_secret
from app.core.context import AppState, Principal
from app.core.errors import CairnError, Forbidden, InternalError, InvalidInput, NotFound, Unauthenticated
from app.core.executor import read_resource, run_operation
from app.core.http.callers import Callers, resolve_caller
from app.core.schemas import PROJECT_NAME

log = logging.getLogger("cairn.console")

CONSOLE_PATH = "/ui"
KEY_COOKIE = "cairn_key"
SEED_COOKIE = "cairn_seed"
FLASH_COOKIE = "cairn_flash"
PROJECT_COOKIE = "cairn_project"
FORM_SECRET = "console-forms"  # its name in `server_secrets`
PICKER_PROJECTS = 200  # projects the picker lists (by name)
_PROJECT = re.compile(PROJECT_NAME)
TRANSPORT = "console"
# The most a console form may send (fields are short: a search, tags, a query, a key).
MAX_FORM_FIELDS = 200
MAX_FORM_BYTES = 256 * 1024
_HERE = Path(__file__).parent
TEMPLATES = _HERE / "templates"
STATIC = _HERE / "static"
_STATIC_TYPES = {".css": "text/css", ".js": "text/javascript", ".txt": "text/plain", ".svg": "image/svg+xml"}
# Styles allow 'unsafe-inline' because the graph library sets style attributes on the elements it draws;
# scripts stay strictly same-origin (no inline script runs).
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True)
class Recent:
    """One of the newest items of a section, as the home page lists it."""

    label: str
    href: str
    when: Any = None
    note: str = ""


@dataclass(frozen=True)
class Tally:
    """What a section holds in a project, for the home page: a count, where to browse it, the newest items."""

    title: str
    count: int | None
    href: str
    recent: list[Recent] = field(default_factory=list)
    note: str = ""
    error: dict[str, Any] | None = None


# A section's contribution to the home page: its tallies of one project (operation calls, no SQL).
Overview = Callable[["Viewer", str], Coroutine[Any, Any, list[Tally]]]


@dataclass(frozen=True)
class ConsoleSection:
    """A part of the console: an entry in the navigation and the pages behind it.

    `router` comes from `console_router(prefix)` (so its errors render as pages); `templates` is the
    folder of its Jinja2 templates, named `<section>/<page>.html` to stay apart from the others';
    `scope` is the least scope that shows the entry (the operations still check their own);
    `overview` gives the home page its counts and newest items of a project."""

    title: str
    path: str
    router: APIRouter
    templates: Path | None = None
    scope: str = "read"
    overview: Overview | None = None


# Who pages without a resolved key show: no name, no scope (the navigation is empty).
SIGNED_OUT = Principal(key_id=None, name="", scopes=frozenset())


class SignInRequired(Unauthenticated):
    """The console needs a valid API key (rendered as a redirect to the sign-in page)."""


# Why the sign-in page is shown: the redirect names a code, never text (a link could carry any text).
SIGN_IN_REASONS = {
    "needed": "Sign in with an API key",
    "refused": "The key was not accepted (unknown or revoked); sign in again",
}


def sign_in_reason(exc: Unauthenticated) -> str:
    """The code of `SIGN_IN_REASONS` that says why `exc` sends the browser to the sign-in page."""
    return next((code for code, text in SIGN_IN_REASONS.items() if text == exc.message), "needed")


class ConsoleRoute(APIRoute):
    """A console route: a `CairnError` (or anything else) raised by the page renders an error page
    instead of the REST error body; a missing or refused key redirects to the sign-in page."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except CairnError as exc:
                return error_page(request, exc)
            except Exception:
                log.exception("console page failed", extra={"path": request.url.path})
                return error_page(request, InternalError("The page failed; the server log has the details"))

        return guarded


def console_router(prefix: str) -> APIRouter:
    """A router for console pages under `/ui<prefix>` (not part of the OpenAPI document)."""
    return APIRouter(prefix=CONSOLE_PATH + prefix, route_class=ConsoleRoute, include_in_schema=False)


def csrf_token(secret: bytes, seed: str, key: str) -> str:
    """The form token of a session: its seed cookie and key cookie, signed with the server's secret."""
    session = hashlib.sha256(key.encode()).hexdigest()
    return hmac.new(secret, f"cairn-console-form\0{seed}\0{session}".encode(), hashlib.sha256).hexdigest()[:40]


def _fmt_time(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return str(value)
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return "" if value is None else str(value)


def _fmt_num(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return "" if value is None else str(value)


def _json_script(value: Any) -> Markup:
    """JSON for a `<script type="application/json">` element (no `</script>` can close it early)."""
    text = json.dumps(value, default=str).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Markup(text)  # the escapes above make it inert inside the element


class Console:
    """The console's shared parts: templates, sections and how a request's key is resolved."""

    def __init__(
        self,
        state: AppState,
        sections: Sequence[ConsoleSection],
        callers: Callers,
    ) -> None:
        self.state = state
        self.sections = list(sections)
        self.callers = callers
        folders = [str(TEMPLATES), *(str(s.templates) for s in sections if s.templates is not None)]
        self.env = Environment(
            loader=ChoiceLoader([FileSystemLoader(f) for f in dict.fromkeys(folders)]),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(time=_fmt_time, num=_fmt_num, json_script=_json_script, urlq=lambda v: quote(str(v)))
        self.env.globals.update(version=__version__, console_path=CONSOLE_PATH)
        self._secret: bytes | None = None

    async def form_secret(self) -> bytes:
        """The key of the form tokens, shared by every host of the database (read once per process).

        Raises:
            Unavailable: the database cannot answer (5030).
        """
        if self._secret is None:
            self._secret = (await shared_secret(self.state.db, FORM_SECRET)).encode()
        return self._secret

    async def keys_required(self) -> bool:
        """True when a key is needed to sign in (keys configured, or an open server locked since)."""
        return await self.callers.keys_required()

    async def principal(self, token: str | None) -> Principal:
        """The caller behind the key cookie.

        Raises:
            SignInRequired: keys are required and the cookie holds none, or an unknown or revoked one.
            RateLimited: the client presented too many unknown keys lately.
        """
        try:
            return await resolve_caller(self.callers, token or "")
        except Unauthenticated:
            if not token:
                raise SignInRequired(SIGN_IN_REASONS["needed"]) from None
            raise SignInRequired(SIGN_IN_REASONS["refused"]) from None

    def nav(self, principal: Principal) -> list[ConsoleSection]:
        """The sections this caller may open."""
        return [s for s in self.sections if principal.has_scope(s.scope)]


def console_of(request: Request) -> Console:
    """The application's console."""
    console: Console = request.app.state.console
    return console


@dataclass
class Viewer:
    """One console request: who is calling and the tools a page uses (calls, forms, rendering)."""

    request: Request
    console: Console
    principal: Principal
    seed: str
    new_seed: bool = False
    secret: bytes = b""
    cookies: dict[str, str | None] = field(default_factory=dict)
    project: str = ""
    projects: list[str] | None = None

    @property
    def csrf(self) -> str:
        """The token every form of this session carries."""
        return csrf_token(self.secret, self.seed, self.request.cookies.get(KEY_COOKIE, ""))

    @property
    def state(self) -> AppState:
        """The server's shared state."""
        return self.console.state

    def can(self, scope: str) -> bool:
        """Whether the caller's key has `scope` (pages hide what it cannot do)."""
        return self.principal.has_scope(scope)

    async def call(self, name: str, args: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Run the operation `name` through the executor and return its result as JSON data."""
        op = self.state.registry.get(name)
        if op is None:
            raise NotFound(f"No operation {name!r} on this server")
        result = await run_operation(
            self.state,
            op,
            dict(args or {}),
            self.principal,
            transport=TRANSPORT,
            request_id=self.request.state.request_id,
        )
        return _data(result)

    async def resource(self, name: str, **params: str) -> dict[str, Any]:
        """Read the resource `name` through the executor."""
        res = next((r for r in self.state.registry.resources if r.name == name), None)
        if res is None:
            raise NotFound(f"No resource {name!r} on this server")
        result = await read_resource(
            self.state, res, params, self.principal, transport=TRANSPORT, request_id=self.request.state.request_id
        )
        return _data(result)

    async def form(self) -> dict[str, Any]:
        """The posted form's fields (a field sent more than once is a list), its CSRF token checked.

        Raises:
            Forbidden: the token is missing or does not belong to this session.
            TooLarge / InvalidInput: more fields or bytes than a console form sends.
        """
        try:
            data = await self.request.form(max_files=0, max_fields=MAX_FORM_FIELDS, max_part_size=MAX_FORM_BYTES)
        except Exception as exc:  # a malformed or oversized body: python-multipart's and Starlette's errors
            raise InvalidInput(f"The form could not be read: {str(exc)[:200]}") from None
        if any(not isinstance(value, str) for _, value in data.multi_items()):
            raise InvalidInput("Console forms take no files")
        fields: dict[str, Any] = {}
        for key in data:
            values = data.getlist(key)
            fields[key] = values if len(values) > 1 else values[0]
        self.check_token(fields.pop("csrf", ""))
        return fields

    def check_token(self, token: Any) -> None:
        """Check a form's CSRF token (a file upload's travels in its action's query string, so that it
        is checked before a byte of the body is read).

        Raises:
            Forbidden: the token is missing or does not belong to this session.
        """
        if (
            self.new_seed
            or not self.secret
            or not isinstance(token, str)
            or not hmac.compare_digest(token.encode(), self.csrf.encode())
        ):
            raise Forbidden(
                "The form's security token is missing or expired (cross-site request protection)",
                suggestions=["Reload the page and send the form again"],
            )

    def render(self, template: str, status: int = 200, **context: Any) -> Response:
        """The page `template` with the shared context (caller, navigation, CSRF token, flash)."""
        raw_flash = self.request.cookies.get(FLASH_COOKIE)
        flash = unquote(raw_flash) if raw_flash else None
        page = self.console.env.get_template(template)
        html = page.render(
            viewer=self,
            principal=self.principal,
            nav=self.console.nav(self.principal),
            csrf=self.csrf,
            flash=flash[:500] if flash else None,
            path=self.request.url.path,
            query=dict(self.request.query_params),
            picker={"project": self.project, "projects": self.projects, "next": _without_project(self.request)},
            **context,
        )
        response = HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)
        if raw_flash:
            self.cookies.setdefault(FLASH_COOKIE, None)
        return self.finish(response)

    def redirect(self, url: str, flash: str | None = None) -> Response:
        """See-other to `url` (a console path), with a one-time message for the next page."""
        response = RedirectResponse(safe_next(url), status_code=303, headers=SECURITY_HEADERS)
        if flash:
            self.cookies[FLASH_COOKIE] = flash[:500]
        return self.finish(response)

    def finish(self, response: Response) -> Response:
        """Set the session cookies this request changed."""
        secure = _secure(self.request)
        if self.new_seed:
            self.cookies[SEED_COOKIE] = self.seed
        for name, value in self.cookies.items():
            if value is None:
                response.delete_cookie(name, path=CONSOLE_PATH, secure=secure, httponly=True, samesite="strict")
            else:
                response.set_cookie(
                    name,
                    quote(value, safe="") if name == FLASH_COOKIE else value,
                    path=CONSOLE_PATH,
                    secure=secure,
                    httponly=True,
                    samesite="strict",
                    max_age=60 if name == FLASH_COOKIE else None,
                )
        return response


def form_text(fields: Mapping[str, Any], name: str, limit: int | None = None) -> str:
    """One field of a posted form, stripped ("" when absent).

    Raises:
        InvalidInput: the field was sent more than once, or is longer than `limit` characters.
    """
    value = fields.get(name, "")
    if isinstance(value, list):
        raise InvalidInput(f"'{name}' was sent more than once")
    text = str(value).strip()
    if limit is not None and len(text) > limit:
        raise InvalidInput(f"'{name}' is longer than {limit} characters")
    return text


def whole_number(raw: str | None, name: str) -> int | None:
    """A whole number typed into a form or a query string (None when empty).

    Raises:
        InvalidInput: not a whole number.
    """
    if raw is None or not raw.strip():
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidInput(f"'{name}' must be a whole number") from None


def chosen_project(request: Request, fields: Mapping[str, Any] | None = None) -> str:
    """The project a page was asked for: the posted form's `project` field, else the query string's,
    else the one remembered for this browser ("" for none; the operations check the name and the key's
    binding)."""
    raw = form_text(fields, "project") if fields is not None else request.query_params.get("project", "").strip()
    if not raw:
        raw = getattr(request.state, "console_project", "")
    return raw[:128]


def project_name(raw: str | None) -> str:
    """`raw` when it is a valid project name, else ""."""
    return raw if raw and _PROJECT.match(raw) else ""


def _without_project(request: Request) -> str:
    """This page's path and query without `project` (where the picker returns to)."""
    kept = [(k, v) for k, v in request.query_params.multi_items() if k != "project"]
    return request.url.path + (f"?{urlencode(kept)}" if kept else "")


def with_project(args: dict[str, Any], project: str) -> dict[str, Any]:
    """`args` with the page's project, when one was chosen (else the key's or the default applies)."""
    return {**args, "project": project} if project else args


def _data(result: BaseModel) -> dict[str, Any]:
    data: dict[str, Any] = result.model_dump(mode="json", by_alias=True)
    return data


def _secure(request: Request) -> bool:
    return request.url.scheme == "https" or request.headers.get("x-forwarded-proto") == "https"


def safe_next(url: str | None) -> str:
    """`url` when it is a console path on this server, else the console's home (no open redirect)."""
    if not url:
        return CONSOLE_PATH + "/"
    parts = urlsplit(url)
    if parts.scheme or parts.netloc or not parts.path.startswith(CONSOLE_PATH) or "\\" in url:
        return CONSOLE_PATH + "/"
    return url


def _seed(request: Request) -> tuple[str, bool]:
    seed = request.cookies.get(SEED_COOKIE, "")
    if len(seed) >= 32 and seed.isascii():
        return seed, False
    return secrets.token_urlsafe(32), True


async def viewer(request: Request) -> Viewer:
    """The signed-in caller of a console request (FastAPI dependency of every page).

    Raises:
        SignInRequired: keys are required and the request has no valid one.
    """
    console = console_of(request)
    principal = await console.principal(request.cookies.get(KEY_COOKIE))
    seed, new = _seed(request)
    view = Viewer(request, console, principal, seed, new, await console.form_secret())
    remembered = project_name(request.cookies.get(PROJECT_COOKIE))
    asked = project_name(request.query_params.get("project", "").strip())
    if principal.project:
        view.project = principal.project
    elif asked:
        view.project = asked
        if asked != remembered:
            view.cookies[PROJECT_COOKIE] = asked  # a page opened on a project makes it the chosen one
    else:
        view.project = remembered
    request.state.console_project = view.project
    view.projects = [view.project] if principal.project else await _picker_projects(view)
    return view


async def _picker_projects(view: Viewer) -> list[str] | None:
    """The project names the picker offers (None when the list cannot be read: the picker is a text box)."""
    try:
        listed = await view.call("list_projects", {"limit": PICKER_PROJECTS})
    except CairnError:
        return None
    names = [p["name"] for p in listed["projects"]]
    if view.project and view.project not in names:
        names.insert(0, view.project)
    return names


async def anonymous(request: Request) -> Viewer:
    """The caller of the sign-in and sign-out forms, who may not be signed in: the key cookie is not
    looked up (a stale one would cost a lookup and count as a failed attempt on every visit)."""
    seed, new = _seed(request)
    console = console_of(request)
    return Viewer(request, console, SIGNED_OUT, seed, new, await console.form_secret())


def error_page(request: Request, exc: CairnError) -> Response:
    """The page for a failed console request (the sign-in page for a missing or refused key)."""
    console = console_of(request)
    if isinstance(exc, Unauthenticated):
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if request.method != "GET":
            target = CONSOLE_PATH + "/"
        response = RedirectResponse(
            f"{CONSOLE_PATH}/login?next={quote(target, safe='')}&why={sign_in_reason(exc)}",
            status_code=303,
            headers=SECURITY_HEADERS,
        )
        response.delete_cookie(KEY_COOKIE, path=CONSOLE_PATH, httponly=True, samesite="strict")
        return response
    seed, new = _seed(request)
    view = Viewer(request, console, SIGNED_OUT, seed, new, console._secret or b"")  # no token passes without
    body = exc.body()["error"]
    return view.render("console/error.html", status=exc.status, error=body)


def install(
    app: FastAPI,
    state: AppState,
    sections: Sequence[ConsoleSection],
    callers: Callers,
) -> None:
    """Mount the console: sign-in, home, static assets and every section's pages."""
    app.state.console = Console(state, sections, callers)
    app.include_router(core_router)
    for section in sections:
        app.include_router(section.router)
    app.include_router(fallback_router)


core_router = console_router("")


@core_router.get("")
async def root() -> Response:
    """`/ui` goes to the home page."""
    return RedirectResponse(CONSOLE_PATH + "/", status_code=307)


@core_router.get("/static/{name}")
async def static(name: str) -> Response:
    """The console's own assets (styles, scripts and the vendored graph library), never a CDN."""
    path = (STATIC / name).resolve()
    if path.parent != STATIC.resolve() or not path.is_file() or path.suffix not in _STATIC_TYPES:
        raise NotFound(f"No console asset {name!r}")
    return FileResponse(path, media_type=_STATIC_TYPES[path.suffix], headers={"Cache-Control": "public, max-age=3600"})


@core_router.get("/")
async def home(request: Request) -> Response:
    """The home page: the chosen project's counts and newest items per section, the embedding queue,
    the other projects (each a link that picks it) and the server's health."""
    view = await viewer(request)
    project = view.project or "default"
    sections = [s for s in view.console.nav(view.principal) if s.overview is not None]
    health, *found = await asyncio.gather(view.resource("health"), *(_tallies(view, s, project) for s in sections))
    tallies = [t for group in found for t in group]
    queue = health.get("embedding_queue")
    if queue is not None:
        tallies.append(
            Tally(
                title="Embedding queue (server)",
                count=queue["depth"],
                href=CONSOLE_PATH + "/admin/health" if view.can("admin") else "",
                note="server-wide: rows waiting for a vector"
                + (f", {queue['retrying']} retrying" if queue["retrying"] else ""),
            )
        )
    return view.render("console/home.html", health=health, project=project, tallies=tallies)


async def _tallies(view: Viewer, section: ConsoleSection, project: str) -> list[Tally]:
    """A section's tallies, or one that shows its error (the other sections still show)."""
    assert section.overview is not None
    try:
        return await section.overview(view, project)
    except CairnError as exc:
        if isinstance(exc, Unauthenticated):
            raise
        return [Tally(title=section.title, count=None, href=section.path, error=exc.body()["error"])]


@core_router.post("/project")
async def pick_project(request: Request) -> Response:
    """The picker: remember the project for this browser (empty: none), then back to the page."""
    view = await viewer(request)
    fields = await view.form()
    raw = form_text(fields, "project", 128)
    chosen = project_name(raw)
    if raw and not chosen:
        raise InvalidInput(f"{raw[:128]!r} is not a project name", suggestions=["Pick a project from the list"])
    target = safe_next(form_text(fields, "next", 2000) or None)
    parts = urlsplit(target)
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k not in ("project", "offset")])
    view.cookies[PROJECT_COOKIE] = chosen or None
    return view.redirect(parts.path + (f"?{query}" if query else ""), flash=f"Project: {chosen or 'none chosen'}")


@core_router.get("/login")
async def login_page(request: Request) -> Response:
    """The sign-in form (straight to the home page on an open server)."""
    view = await anonymous(request)
    if not await view.console.keys_required():
        return view.redirect(safe_next(request.query_params.get("next")))
    return view.render(
        "console/login.html",
        next=safe_next(request.query_params.get("next")),
        why=SIGN_IN_REASONS.get(request.query_params.get("why", ""), ""),
    )


@core_router.post("/login")
async def login(request: Request) -> Response:
    """Check the key and keep it in the session cookie; a new CSRF seed starts with the session."""
    view = await anonymous(request)
    fields = await view.form()
    key = fields.get("key")
    target = safe_next(fields.get("next") if isinstance(fields.get("next"), str) else None)
    if not isinstance(key, str) or not key.strip() or len(key) > 512:
        raise InvalidInput("Enter an API key")
    principal = await view.console.principal(key.strip())
    view.cookies[KEY_COOKIE] = key.strip()
    view.cookies[PROJECT_COOKIE] = None  # another key: no project carried over
    view.seed, view.new_seed = secrets.token_urlsafe(32), True
    log.info("console sign-in", extra={"key_id": principal.key_id})
    return view.redirect(target, flash=f"Signed in as {principal.name}")


@core_router.post("/logout")
async def logout(request: Request) -> Response:
    """Forget the key (the cookie) and the CSRF seed."""
    view = await anonymous(request)
    await view.form()
    view.cookies[KEY_COOKIE] = None
    view.cookies[SEED_COOKIE] = None
    view.cookies[PROJECT_COOKIE] = None
    response = RedirectResponse(CONSOLE_PATH + "/login", status_code=303, headers=SECURITY_HEADERS)
    return view.finish(response)


fallback_router = console_router("")


@fallback_router.get("/{rest:path}")
async def unknown_page(rest: str) -> Response:
    """Any other console path."""
    raise NotFound(f"No console page /ui/{rest[:100]}", suggestions=["Start from /ui/"])
