"""The console's HTTP side: its router, sign-in checks, answers, and the ASGI entry at `/console`.

The server's ASGI connection (`server/app.py`) hands every request whose path is `/console` or
under it to `Console.serve`; everything else goes to the API router as before. Answers are HTML
(or the event stream, or a static file), never the API's JSON envelope, and always carry the
console's security headers: a Content-Security-Policy that allows nothing inline (no inline
script, no inline style, no eval: htmx is told so in its config) and nothing from elsewhere,
`X-Frame-Options: DENY`, `nosniff`, and `no-store` on everything but the versioned static files.

Each route is `handler(console, visit, **path params) -> Answer`. A route is public (the sign-in
page, static files) or needs a session (`sessions.py`); one under `/console/s/{space}` also
needs the session's key to open that space (an API key its own spaces, the admin key any space
the server knows), else 404, as the API answers. A change (POST) needs the session's CSRF token
and an Origin of this host. A refusal or an error is shown as an error page with its status
(htmx requests get the message alone and the page shows it as an error), never as an empty list
and never with a stack trace.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, overload
from urllib.parse import parse_qs, quote as url_quote, urlencode

import trio

from ...actors.errors import INTERNAL, NOT_FOUND, UNAVAILABLE, VALIDATION_FAILED, KernelError
from ...actors.kernel import Kernel
from ...actors.limits import Limits
from ...actors.timestamps import parse_timestamp
from .. import wire
from ..doors import BodyReading, ClientGone, read_body
from ..errors import ApiError, status_of
from ..http import BaseRouter, Request
from ..history import PastKernel
from ..runtime import Runtime
from ..services import RouteKernel
from ..telemetry import CLIENT_GONE
from . import views
from .render import render, render_block
from .sessions import Session, Sessions, cookie_value, same_origin
from .stream import STREAM_S_MAX, Feeds

__all__ = ["Console", "Visit", "Answer", "ROUTER", "PREFIX", "refuse", "for_console"]

log = logging.getLogger("runstate.console")

PREFIX = "/console"
ROUTER: BaseRouter[Handler] = BaseRouter()

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_SECURITY = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
]
# What an action says once done (`actions._done`), by its code.
NOTICES = {
    "run-cancelled": "Run cancelled.",
    "task-cancelled": "Task cancelled.",
    "claim-released": "Claim released: the next holder gets the next generation.",
    "requeued": "Dead letters requeued.",
    "deleted": "Dead letters deleted.",
}
# Query parameters and form fields read (a longer value is refused, not cut).
TEXT_CHARS_MAX = 512
# The fields of one form: a dead-letter action's picks (at most a page's rows, 500:
# `actions.PICKED_MAX`, `views.PAGE_MAX`) and the few beside them.
FORM_FIELDS_MAX = views.PAGE_MAX + 20


def for_console(scope: dict[str, Any]) -> bool:
    """Whether an ASGI request is the console's: a path under /console, or a browser asking for
    the server's root (which the console answers with a redirect to itself)."""
    path = scope["path"]
    if path.startswith(PREFIX) and (len(path) == len(PREFIX) or path[len(PREFIX)] == "/"):
        return True
    if path == "/" and scope["method"] == "GET":
        return any(name == b"accept" and b"text/html" in value for name, value in scope["headers"])
    return False


class Answer:
    """An answer: status, body and headers (the security headers are added when it is sent)."""

    __slots__ = ("status", "body", "headers")

    def __init__(self, status: int, body: bytes | str = b"", headers: list[tuple[str, str]] | None = None,
                 content_type: str = "text/html; charset=utf-8") -> None:
        self.status = status
        self.body = body.encode() if isinstance(body, str) else body
        self.headers = [("content-type", content_type), *(headers or [])]


def redirect(location: str, headers: list[tuple[str, str]] | None = None) -> Answer:
    return Answer(303, b"", [("location", location), *(headers or [])])


def refuse(code: str, message: str, status: int | None = None) -> KernelError:
    """A refusal the console decides itself, shown as an error page."""
    return ApiError(code, message, status=status)


class Visit(Request):
    """One console request: the request, its session (None on public routes), its form fields."""

    __slots__ = ("session", "form", "space", "console", "streaming", "past")

    def __init__(self, method: str, raw_path: str, headers: dict[str, str], client: str | None, limits: Limits) -> None:
        super().__init__(method, raw_path, headers, b"", client, limits)
        self.session: Session | None = None
        self.form: dict[str, list[str]] = {}
        self.space: str | None = None
        self.console: Console | None = None
        self.streaming = False  # the answer's head is sent: an event stream is under way
        # The space as it stood at the page's `at` (the time scrubber), or None: the page shows now.
        self.past: PastKernel | None = None

    @property
    def reader(self) -> RouteKernel:
        """The kernel the page reads: the space at the past point asked, else the live kernel."""
        if self.past is not None:
            return self.past
        assert self.console is not None
        return self.console.kernel

    @property
    def signed(self) -> Session:
        """The session of a page that is not public (`Console._prepare` found it before the page runs)."""
        assert self.session is not None, "a page that is not public is visited signed in"
        return self.session

    @property
    def htmx(self) -> bool:
        """An htmx request for a part of a page (a live region, a dialog), not a whole page."""
        return self.headers.get("hx-request") == "true"

    @property
    def secure(self) -> bool:
        return self.headers.get("x-forwarded-proto", "").lower() == "https"

    def text(self, name: str) -> str | None:
        """A query parameter (or form field of a POST) as text, None when absent or empty."""
        values = self.form.get(name) if self.method == "POST" else None
        value = values[-1] if values else self.param(name)
        if value is None or not value.strip():
            return None
        if len(value) > TEXT_CHARS_MAX:
            raise refuse(VALIDATION_FAILED, f"{name} is longer than {TEXT_CHARS_MAX} characters")
        return value.strip()

    @overload
    def number(self, name: str, lowest: int, highest: int, default: int) -> int: ...

    @overload
    def number(self, name: str, lowest: int, highest: int, default: None = None) -> int | None: ...

    def number(self, name: str, lowest: int, highest: int, default: int | None = None) -> int | None:
        text = self.text(name)
        if text is None:
            return default
        if not (text.isascii() and text.isdigit()) or len(text) > 12 or not lowest <= int(text) <= highest:
            raise refuse(VALIDATION_FAILED, f"{name} must be a whole number from {lowest} to {highest}, got {text[:40]!r}")
        return int(text)

    def choice(self, name: str, choices: tuple[str, ...] | frozenset[str]) -> str | None:
        text = self.text(name)
        if text is not None and text not in choices:
            raise refuse(VALIDATION_FAILED, f"{name} must be one of {', '.join(sorted(choices))}, got {text[:40]!r}")
        return text

    def limit(self) -> int:
        return self.number("limit", 1, views.PAGE_MAX, views.PAGE_DEFAULT)

    def kept_query(self) -> list[tuple[str, str]]:
        """This page's filters, for the time scrubber to keep: its query but the point and the
        place in a list (a cursor of now means nothing at another point)."""
        query = parse_qs(self.query.decode("latin-1"), keep_blank_values=False)
        return [(name, values[-1]) for name, values in query.items() if name != "at" and name != "before" and not name.lower().endswith("cursor")]

    def here(self, **changes: Any) -> str:
        """This page's URL with some query parameters changed (None drops one): deep links."""
        query = {k: v[-1] for k, v in parse_qs(self.query.decode("latin-1"), keep_blank_values=False).items()}
        for name, value in changes.items():
            if value is None:
                query.pop(name, None)
            else:
                query[name] = str(value)
        return self.raw_path + ("?" + urlencode(query) if query else "")


# A page's handler answers it; the event stream's (None) sends its answer as it goes.
Handler = Callable[..., Awaitable[Answer | None]]


def page(method: str, pattern: str, *, public: bool = False, stream: bool = False) -> Callable[[Handler], Handler]:
    """Declare a console route (`pattern` under /console)."""

    def declare(handler: Handler) -> Handler:
        ROUTER.add(method, (PREFIX + pattern).rstrip("/") or PREFIX, handler, public=public, long_poll=stream)
        return handler

    return declare


class Console:
    """The console of one server: its sessions and its live feeds."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.sessions = Sessions()
        self.feeds = Feeds(lambda: runtime.kernel)
        runtime.telemetry.fenced.listener = self.feeds.fenced
        runtime.telemetry.charts.listener = self.feeds.charts

    @property
    def kernel(self) -> Kernel:
        return self.runtime.kernel

    def now_s(self) -> float:
        return trio.current_time()

    # -- who is signed in ------------------------------------------------------------------------

    def check_key(self, session: Session) -> bool:
        """Whether the session's key still opens anything (a revoked key ends its sessions)."""
        if session.admin:
            return self.runtime.admin.matches(session.secret)
        session.spaces, role = views.key_access(self.kernel, session.secret)
        session.role = role or session.role
        return bool(session.spaces)

    def spaces_of(self, session: Session) -> list[str]:
        if session.admin:
            return views.known_spaces(self.kernel)
        return sorted(session.spaces)

    def opens(self, session: Session, space: str) -> bool:
        return space in session.spaces if not session.admin else space in views.known_spaces(self.kernel)

    # -- serving ---------------------------------------------------------------------------------

    async def serve(self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]], send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        runtime = self.runtime
        telemetry = runtime.telemetry
        started = telemetry.begin()
        raw = scope.get("raw_path") or scope["path"].encode()
        raw_path = raw.decode("latin-1").partition("?")[0]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        client = scope.get("client")
        visit = Visit(scope["method"], raw_path, headers, client[0] if client else None, runtime.limits)
        visit.query = scope.get("query_string", b"")
        visit.console = self
        route, status, code = None, CLIENT_GONE, None
        reading = BodyReading()
        try:
            try:
                if raw_path == "/":  # a browser at the server's root
                    answer = redirect(PREFIX)
                else:
                    route, params = ROUTER.match(visit.method, raw_path.rstrip("/") or PREFIX)
                    if visit.method == "HEAD":  # served as its GET, as the API's (the connection sends the head alone)
                        visit.method = "GET"
                    await self._prepare(visit, route, params, receive, reading)
                    if route.long_poll:  # the event stream: its answer is sent as it goes
                        status = 200
                        await route.handler(self, visit, send=send, receive=receive, **params)
                        return
                    answered = await route.handler(self, visit, **params)
                    assert answered is not None, f"a page answers ({route.path} is not the event stream)"
                    answer = answered
            except KernelError as error:
                code = error.code
                answer = self._error_page(visit, error)
            status = answer.status
            await self._send(send, visit, answer)
        except ClientGone:
            status = CLIENT_GONE
        except Exception:
            log.exception("console request %s %s failed (%s)", visit.method, raw_path, visit.request_id)
            code, status = INTERNAL, 500
            if not visit.streaming:  # (a stream already answered: it just ends, and the browser reconnects)
                failure = KernelError(INTERNAL, f"internal error (request {visit.request_id}); the server's log has the details")
                await self._send(send, visit, self._error_page(visit, failure))
        finally:
            runtime.doors.release(reading.held)
            telemetry.end(visit.method, route, status, started, visit.request_id, code)

    async def _prepare(self, visit: Visit, route: Any, params: dict[str, Any], receive: Any, reading: BodyReading) -> None:
        """Read the form, find the session, check the key, the space, and a change's origin and token."""
        runtime = self.runtime
        if not route.public and not runtime.ready:
            raise refuse(UNAVAILABLE, "the server is recovering its state; reload in a moment")
        if visit.method == "POST":
            with trio.move_on_after(runtime.settings.body_timeout_s) as timer:
                body = await read_body(receive, visit.headers, runtime.limits.request_bytes_max, runtime.doors, reading)
            if timer.cancelled_caught:
                raise refuse("REQUEST_TIMEOUT", "the form did not arrive in time", status=408)
            try:
                visit.form = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=FORM_FIELDS_MAX)
            except (UnicodeDecodeError, ValueError):
                raise refuse(VALIDATION_FAILED, "the form is not valid") from None
            if not same_origin(visit.headers):
                raise refuse("FORBIDDEN", "refused: this change did not come from a page of this console (Origin)", status=403)
        if route.public:
            return
        session = self.sessions.get(cookie_value(visit.headers.get("cookie")), self.now_s())
        if session is None or not self.check_key(session):
            if session is not None:
                self.sessions.close(session.id)
            raise _SignIn()
        visit.session = session
        if visit.method == "POST":
            sent = visit.form.get("csrf")
            token = visit.headers.get("x-csrf-token") or (sent[-1] if sent else None)
            if not session.csrf_matches(token):
                raise refuse("FORBIDDEN", "refused: the change lacks this session's CSRF token; reload the page and try again", status=403)
        space = params.get("space")
        if space is not None:
            if not self.opens(session, space):
                raise refuse(NOT_FOUND, f"space {space!r} not found")
            visit.space = space
            at = visit.text("at") if visit.method == "GET" and not route.long_poll else None
            if at is not None:  # a page of the past: every read of it from the state rebuilt there
                visit.past = await runtime.history.at(space, at)

    def context(self, visit: Visit, **values: Any) -> dict[str, Any]:
        """What every page's template is given besides its own values."""
        session = visit.session
        theme = cookie_value(visit.headers.get("cookie"), "runstate_theme")
        return {
            "visit": visit,
            "session": session,
            "space": visit.space,
            "spaces": [] if session is None else self.spaces_of(session),
            "csrf": None if session is None else session.csrf,
            "may_act": session is not None and session.may_act and visit.past is None,
            "past": None if visit.past is None else {**wire.encode(visit.past.point.view()), "asked": visit.text("at")},
            "scrubber": self._scrubber(visit),
            "theme": theme if theme in ("light", "dark") else "auto",
            "cursor": values.pop("cursor", None),
            "notice": _notice(visit),
            **values,
        }

    def _scrubber(self, visit: Visit) -> dict[str, Any] | None:
        """The time scrubber's reach on a space's page: from the oldest point the space's history
        keeps to now (wall ms), or None where the server keeps no history (no data directory)."""
        if visit.space is None or visit.session is None or self.runtime.kernel_if_open is None:
            return None
        try:
            kept = wire.encode(self.runtime.history.kept(visit.space))  # (as the history route writes it)
        except KernelError:
            return None
        now_ms = self.kernel.clock.now_ms()
        oldest = kept["oldest"]["at"]
        oldest_ms = parse_timestamp(oldest) if oldest else self._first_ms(visit.space, now_ms)
        at_ms = None if visit.past is None else visit.past.point.now_ms
        return {"from_ms": min(oldest_ms, now_ms), "to_ms": now_ms, "at_ms": at_ms, "oldest": kept["oldest"]}

    def _first_ms(self, space: str, now_ms: int) -> int:
        """When a history kept from its very beginning starts: the space's oldest event kept (or now)."""
        if not self.kernel.space_known(space):
            return now_ms
        for _, _, at_ms in self.kernel.space_view(space).events.scan():
            return at_ms
        return now_ms

    def page(self, visit: Visit, template: str, region: str = "region", **values: Any) -> Answer:
        """A page, or only its live region when htmx asks for it."""
        context = self.context(visit, **values)
        if visit.htmx and visit.headers.get("hx-target") == region:
            return Answer(200, render_block(template, region, context))
        return Answer(200, render(template, context))

    def _error_page(self, visit: Visit, error: KernelError) -> Answer:
        if isinstance(error, _SignIn):
            target = url_quote(visit.raw_path + ("?" + visit.query.decode("latin-1") if visit.query else ""), safe="/")
            location = f"{PREFIX}/login?next={target}" if visit.method == "GET" else f"{PREFIX}/login"
            if visit.htmx:
                return Answer(401, "Signed out: sign in again.", [("hx-redirect", location)], content_type="text/plain; charset=utf-8")
            return redirect(location)
        status = getattr(error, "status", None) or status_of(error.code)
        if visit.htmx:
            return Answer(status, f"{error.code}: {error.message}", content_type="text/plain; charset=utf-8")
        context = self.context(visit, error=error, status=status)
        return Answer(status, render("error.html", context))

    async def _send(self, send: Callable[[dict[str, Any]], Awaitable[None]], visit: Visit, answer: Answer) -> None:
        headers = [(k.encode(), v.encode()) for k, v in answer.headers]
        headers += _SECURITY
        if not any(k == b"cache-control" for k, _ in headers):
            headers.append((b"cache-control", b"no-store"))
        headers += [(b"content-length", b"%d" % len(answer.body)), (b"x-request-id", visit.request_id.encode())]
        if self.runtime.draining:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": answer.body})

    # -- the stream ------------------------------------------------------------------------------

    def stream_lifetime_s(self) -> float:
        """How long one stream lasts: below the server's read timeout, which closes a connection
        whose client sends nothing that long (an event stream's client sends nothing)."""
        return max(1.0, min(STREAM_S_MAX, self.runtime.settings.read_timeout_s / 2))

    async def stream_head(self, send: Callable[[dict[str, Any]], Awaitable[None]], visit: Visit) -> None:
        visit.streaming = True
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no"), (b"x-request-id", visit.request_id.encode()), *_SECURITY,
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})

    def signed_in(self, session: Session) -> Callable[[], bool]:
        def check() -> bool:
            return self.sessions.get(session.id, self.now_s()) is session and self.check_key(session)

        return check

    def serving(self) -> bool:
        kernel = self.runtime.kernel_if_open
        return not self.runtime.draining and not (kernel is not None and kernel.waits_ended)


def _notice(visit: Visit) -> str | None:
    """The notice of an action just done (`actions._done`), on the page it sent the browser to:
    taken from the session by the next whole page it opens, so it is shown once (a live region's
    refresh leaves it be, and a page of another path lets it go unshown)."""
    session = visit.session
    if session is None or session.notice is None or visit.htmx or visit.method != "GET":
        return None
    path, text = session.notice
    session.notice = None
    return text if path == visit.raw_path else None


class _SignIn(KernelError):
    """No session (or its key no longer opens anything): the visitor is sent to sign in."""

    def __init__(self) -> None:
        super().__init__("UNAUTHENTICATED", "sign in with an API key")


# The pages and actions declare their routes on ROUTER when imported.
from . import pages, actions  # noqa: E402,F401
