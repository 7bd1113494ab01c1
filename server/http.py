"""HTTP plumbing: the request object, the router and the ASGI connection handler.

Routing works on the raw path, one percent-decoded segment at a time, so a claim key such as
`file/a b` arrives intact from `/claims/file%2Fa%20b/renew`. Each route is a plain
coroutine `(services, request, **path_params) -> (status, body)`; it never sees ASGI or Quart, which
keeps handlers testable and the per-request cost to parsing, one kernel call and one `wire.dumps`
(orjson, with the kernel's typed views written as `wire/` declares them).

Every answer is JSON, refusals in the error envelope, including the ones no route decides: unknown
paths (404), wrong methods (405), bodies over the limit (413), a server still recovering (503).
Long-poll routes also watch the connection: when the client goes away, the handler is cancelled
and its wait withdrawn, so no lease is handed to nobody.

One function answers every request (`respond`: a `Reply`, or None when the client of a long poll
left); two doors lead to it: `serve_http`, the ASGI entry (our connection's h11 path, another
ASGI server, the in-process transport of `runstate.testing`), and `serve_whole`, which the
connection calls for a request whose head and body have all come (no ASGI scope or messages).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import re
from functools import partial
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Coroutine, Generic, TypeVar
from urllib.parse import parse_qs, unquote
from urllib.parse import quote as quote_url

import trio

from ..actors.errors import INTERNAL, NOT_FOUND, STALE_CLAIM, UNAUTHENTICATED, UNAVAILABLE, VALIDATION_FAILED, KernelError, quote
from ..actors.fields import unknown
from ..actors.kernel import Idem
from ..actors.partition import ON_PARK
from .forward import FORWARDED_BY, Forwarded, lead_or_forward, partition_of_request
from ..actors.limits import Limits
from .body import Body, parse_body
from .doors import BodyReading, ClientGone, check_known_key, declared_length, drain, read_body, send_while_discarding, take_body
from .errors import ApiError, envelope
from .telemetry import CLIENT_GONE
from . import wire


if TYPE_CHECKING:  # the runtime reads requests: its module imports this one
    from .runtime import Runtime

__all__ = ["Request", "Router", "Route", "Raw", "Reply", "serve_http", "serve_whole", "respond", "ascii_digits", "integer_of", "integer_param"]

log = logging.getLogger("runstate.http")

# A coroutine function, not any awaitable: a read at a past point runs one to its end without an
# event loop (`history_views.read_route`). `Any`: each route has its own body.
Handler = Callable[..., Coroutine[Any, Any, tuple[int, Any]]]
# Whether a route's requests are long polls (watched for the client going away): always, never,
# or decided per request (a wait the caller asked for), so that a plain call pays nothing for it.
LongPoll = bool | Callable[["Request"], bool]

_JSON_HEADERS = [(b"content-type", b"application/json")]
# While the server shuts down every answer says so, so that clients open no new request on the
# connection (one sent while the server closes it would be lost, or would stall the drain).
_CLOSE = {"connection": "close"}


# Request ids: 64 bits counted up from a random start, unique within a process and unlikely to meet
# another process's (a random draw per request costs a system call).
_REQUEST_NUMBERS = itertools.count(int.from_bytes(os.urandom(8), "big"))


class Raw:
    """An answer body that is not JSON (the metrics text): bytes, their content type, more headers."""

    __slots__ = ("body", "content_type", "headers")

    def __init__(self, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.body = body
        self.content_type = content_type
        self.headers = headers


def quote_segment(text: str) -> str:
    """`text` as one path segment, percent-encoded but for the unreserved characters."""
    return quote_url(text, safe="")


# A '%' not followed by two hex digits: a path so written is refused, not read literally.
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2}).{0,2}", re.DOTALL)

# The most digits a number of a query string or a path may have: more is refused before `int()`.
DIGITS_MAX = 18


def ascii_digits(text: str, most: int = DIGITS_MAX) -> bool:
    """ASCII digits, at most `most` of them: `int()` refuses other digits ("²"), reads others as
    ASCII ones ("٣" is 3), and refuses very long strings."""
    return text.isascii() and text.isdigit() and len(text) <= most


def integer_of(text: str, name: str, low: int, high: int | None) -> int:
    """Query parameter `name`'s text as an integer from `low` to `high` (None: no most), else
    VALIDATION_FAILED naming it."""
    if not ascii_digits(text) or int(text) < low or (high is not None and int(text) > high):
        if high is None and text.isascii() and text.isdigit():  # past the digits read: say the most
            high = 10**DIGITS_MAX - 1
        bound = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise ApiError(VALIDATION_FAILED, f"{name} must be an integer {bound}, got {quote(text)}")
    return int(text)


def integer_param(request: "Request", name: str, low: int, high: int | None) -> int | None:
    """Query parameter `name` as an integer from `low` to `high` (`integer_of`); None when it is
    absent or empty."""
    text = request.param(name)
    return None if not text else integer_of(text, name, low, high)


class Request:
    __slots__ = (
        "method", "raw_path", "headers", "body", "request_id", "client", "query", "_params", "takes", "limits", "_parsed",
        "answer_headers",
    )

    def __init__(
        self, method: str, raw_path: str, headers: dict[str, str], body: bytes, client: str | None, limits: Limits
    ) -> None:
        self.method = method
        self.raw_path = raw_path
        self.headers = headers
        self.body = body
        self.client = client
        self.request_id = "req_%016x" % (next(_REQUEST_NUMBERS) & 0xFFFF_FFFF_FFFF_FFFF)
        self.query = b""
        # The query string's parameters, parsed from the `query` they are kept with (once).
        self._params: tuple[bytes, dict[str, list[str]]] | None = None
        # The query parameters its route takes (`BaseRoute.query_names`), once routed; None: not
        # checked (a route outside the API, or a handler run in process by the console).
        self.takes: frozenset[str] | None = None
        self.limits = limits
        self._parsed: Body | None = None
        # Headers a handler adds to its answer (a long poll's wait that was capped).
        self.answer_headers: dict[str, str] | None = None

    def params(self) -> dict[str, list[str]]:
        """The query parameters, decoded: each name with its values in order (parsed once)."""
        query, parsed = self._params or (None, None)
        if parsed is None or query is not self.query:
            query = self.query
            parsed = parse_qs(query.decode("latin-1"), keep_blank_values=True) if query else {}
            self._params = (query, parsed)
        return parsed

    def param(self, name: str) -> str | None:
        """The last value of query parameter `name`, decoded; None when absent. A route reads only
        the names it declares (`respond` refused the others): a read of another would never see
        a value."""
        assert self.takes is None or name in self.takes, f"a route reads query parameter {name!r} it does not declare"
        values = self.params().get(name)
        return values[-1] if values else None

    def json(self) -> Body:
        if self._parsed is None:
            self._parsed = parse_body(self.body)
        return self._parsed

    def idem(self, space: str) -> Idem | None:
        """The request's Idempotency-Key with the fingerprint of what it was sent with."""
        key = self.headers.get("idempotency-key")
        if key is None:
            return None
        length_max = self.limits.idempotency_key_len_max
        if not 1 <= len(key) <= length_max or not key.isprintable():
            raise ApiError(VALIDATION_FAILED, f"Idempotency-Key must be 1-{length_max} printable characters")
        fingerprint = hashlib.blake2b(
            b"%s %s\n%s" % (self.method.encode(), self.raw_path.encode(), self.body), digest_size=16
        ).hexdigest()
        return Idem(space, key, fingerprint)

    def bearer(self) -> str:
        value = self.headers.get("authorization", "")
        scheme, _, secret = value.partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise ApiError(UNAUTHENTICATED, "missing or malformed Authorization header: send 'Bearer <api key>'")
        return secret.strip()


# A router's handlers: the API's (`Handler`), or the console's (`console.site.Handler`).
H = TypeVar("H", bound=Callable[..., Awaitable[Any]])


class BaseRoute(Generic[H]):
    __slots__ = ("method", "pattern", "handler", "long_poll", "public", "params", "doc", "batch", "query_names")

    def __init__(
        self, method: str, pattern: str, handler: H, *, long_poll: "LongPoll", public: bool, doc: Any = None,
        batch: Any = None, query_names: frozenset[str] | None = None,
    ) -> None:
        self.method = method
        self.pattern = tuple(pattern.strip("/").split("/"))
        self.params = tuple(p[1:-1] if p.startswith("{") else None for p in self.pattern)
        self.handler = handler
        self.long_poll = long_poll
        self.public = public
        # What the route declares for its documents (`api.Doc`): the OpenAPI operation, the docs.
        self.doc = doc
        # How it runs as an operation of a batch (`api.BatchOperation`), or None if it cannot.
        self.batch = batch
        # The query parameters it takes; any other is refused (`respond`). None: it is not checked
        # (the routes outside the API: /healthz, /metrics, the console's).
        self.query_names = query_names

    @property
    def path(self) -> str:
        return "/" + "/".join(self.pattern)


class _Node(Generic[H]):
    """A step of the router's tree: the routes ending here, and the next steps by literal segment
    or by parameter name."""

    __slots__ = ("routes", "literal", "param")

    def __init__(self) -> None:
        self.routes: list[tuple[int, BaseRoute[H]]] = []  # (order of declaration, route)
        self.literal: dict[str, _Node[H]] = {}
        self.param: dict[str, _Node[H]] = {}


class BaseRouter(Generic[H]):
    """Routes by path segments through a tree. When several routes fit a path, the first one
    declared for the method wins (a HEAD is served by the GET route); one that fits the path but
    not the method is a 405 naming the methods that fit."""

    def __init__(self) -> None:
        self.routes: list[BaseRoute[H]] = []
        self._root: _Node[H] = _Node()

    def add(
        self, method: str, pattern: str, handler: H, *, long_poll: "LongPoll" = False, public: bool = False,
        doc: Any = None, batch: Any = None, query_names: frozenset[str] | None = None,
    ) -> None:
        """Serve `handler` at `method pattern` (declarations go through `api.endpoint`)."""
        self._place(BaseRoute(
            method, pattern, handler, long_poll=long_poll, public=public, doc=doc, batch=batch, query_names=query_names,
        ))

    def include(self, other: "BaseRouter[H]") -> None:
        for route in other.routes:
            self._place(route)

    def _place(self, route: BaseRoute[H]) -> None:
        node = self._root
        for want, name in zip(route.pattern, route.params):
            branches = node.literal if name is None else node.param
            key = want if name is None else name
            node = branches.get(key) or branches.setdefault(key, _Node())
        node.routes.append((len(self.routes), route))
        self.routes.append(route)

    def match(self, method: str, raw_path: str) -> tuple[BaseRoute[H], dict[str, str]]:
        bad = _BAD_ESCAPE.search(raw_path)
        if bad is not None:  # (`unquote` keeps it as it is: `%ZZ` would name a key of those three characters)
            raise ApiError(
                VALIDATION_FAILED, f"the path has {bad.group()!r}, which is not a percent escape (write a '%' as %25)"
            )
        try:
            segments = [unquote(s, errors="strict") for s in raw_path.strip("/").split("/")]
        except UnicodeDecodeError:
            raise ApiError(VALIDATION_FAILED, "the path is not valid UTF-8 once percent-decoded") from None
        fits: list[tuple[int, BaseRoute[H], dict[str, str]]] = []
        _fit(self._root, segments, 0, [], fits)
        best: tuple[int, BaseRoute[H], dict[str, str]] | None = None
        # HEAD is the GET of the same path without its body (RFC 9110 9.3.2: every server takes
        # it where it takes GET); the connection leaves the body out.
        wanted = "GET" if method == "HEAD" else method
        for fit in fits:
            if fit[1].method == wanted and (best is None or fit[0] < best[0]):
                best = fit
        if best is not None:
            return best[1], best[2]
        if fits:
            methods = {fit[1].method for fit in fits}
            allowed = ", ".join(sorted(methods | {"HEAD"} if "GET" in methods else methods))
            raise ApiError(
                "METHOD_NOT_ALLOWED", f"{method} is not allowed on {raw_path}; use {allowed}", status=405,
                headers={"allow": allowed},
            )
        raise ApiError(NOT_FOUND, f"no such route: {method} {raw_path}")


# The API's routes and router (the console has its own, of its handlers).
Route = BaseRoute[Handler]
Router = BaseRouter[Handler]

def _fit(node: _Node[H], segments: list[str], at: int, params: list[tuple[str, str]], fits: list[tuple[int, BaseRoute[H], dict[str, str]]]) -> None:
    """Every route whose pattern fits `segments` from `at` on, below `node`, with its parameters."""
    if at == len(segments):
        for order, route in node.routes:
            fits.append((order, route, dict(params)))
        return
    segment = segments[at]
    step = node.literal.get(segment)
    if step is not None:
        _fit(step, segments, at + 1, params, fits)
    if segment and node.param:
        for name, step in node.param.items():
            params.append((name, segment))
            _fit(step, segments, at + 1, params, fits)
            params.pop()


class Reply:
    """An answer, whatever writes it (the ASGI `send`, or the connection straight to its socket):
    status, headers (names in lower case, no Connection), body; `close` when the connection must
    close after it; `linger` when the request's body was not all read, so the rest is read and
    dropped while the answer goes out, then the connection closes."""

    __slots__ = ("status", "headers", "body", "close", "linger")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, close: bool = False, linger: bool = False) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.close = close or linger
        self.linger = linger


def _json_reply(status: int, body: bytes, extra: dict[str, str] | None, request_id: str, close: bool) -> Reply:
    headers = [*_JSON_HEADERS, (b"content-length", b"%d" % len(body)), (b"x-request-id", request_id.encode())]
    if extra:
        close = extra.pop("connection", "") == "close" or close
        headers.extend((k.encode(), v.encode()) for k, v in extra.items())
    return Reply(status, headers, body, close)


def _raw_reply(status: int, raw: Raw, request_id: str, close: bool) -> Reply:
    headers = [
        (b"content-type", raw.content_type.encode()),
        (b"content-length", b"%d" % len(raw.body)),
        (b"x-request-id", request_id.encode()),
    ]
    if raw.headers:
        headers.extend((name.encode("latin-1"), value.encode("latin-1")) for name, value in raw.headers.items())
    return Reply(status, headers, raw.body, close)


def _empty_reply(request_id: str, close: bool, extra: dict[str, str] | None) -> Reply:
    headers = [(b"x-request-id", request_id.encode())]
    if extra:
        headers.extend((k.encode(), v.encode()) for k, v in extra.items())
    return Reply(204, headers, b"", close)


async def serve_http(
    services: Runtime,
    router: Router,
    scope: dict[str, Any],
    receive: Callable[[], Awaitable[dict[str, Any]]],
    send: Callable[[dict[str, Any]], Awaitable[None]],
) -> None:
    """Answer one ASGI `http` request (under our connection, another ASGI server, or in process)."""
    method = scope["method"]
    raw = scope.get("raw_path") or scope["path"].encode()
    raw_path = raw.decode("latin-1").partition("?")[0]
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    client = scope.get("client")
    request = Request(method, raw_path, headers, b"", client[0] if client else None, services.limits)
    request.query = scope.get("query_string", b"")
    gone = scope["extensions"].get("runstate.gone") if "extensions" in scope else None
    reply = await respond(services, router, request, receive, gone, None)
    if reply is None:  # the client of a long poll went away: nothing to send
        return
    if reply.close:
        reply.headers.append((b"connection", b"close"))
    if reply.linger:
        await send_while_discarding(receive, partial(_send_reply, send, reply), services.doors.linger_s)
    else:
        await _send_reply(send, reply)


async def _send_reply(send: Callable[[dict[str, Any]], Awaitable[None]], reply: Reply) -> None:
    await send({"type": "http.response.start", "status": reply.status, "headers": reply.headers})
    await send({"type": "http.response.body", "body": reply.body})


async def serve_whole(
    services: Runtime, router: Router, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes,
    client: Any, gone: Any,
) -> Reply | None:
    """Answer a request whose head and body have all come (the connection's plain path): the same
    answer `serve_http` gives, without an ASGI scope or messages."""
    raw_path, _, query = target.decode("latin-1").partition("?")
    named = {name.decode("latin-1"): value.decode("latin-1") for name, value in headers}
    request = Request(method.decode("ascii"), raw_path, named, b"", client[0] if client else None, services.limits)
    request.query = query.encode("latin-1")
    return await respond(services, router, request, _nothing_more, gone, body)


async def _nothing_more() -> dict[str, Any]:
    return {"type": "http.disconnect"}


async def respond(
    services: Runtime, router: Router, request: Request, receive: Callable[[], Awaitable[dict[str, Any]]], gone: Any, came: bytes | None,
) -> Reply | None:
    """The answer to one request, and its report (metrics, request line); None when the client of
    a long poll went away. The body is `came` when it has all come with the head, else it is read
    from `receive` once the request may proceed; `gone` (the connection's `doors.Gone`, or None
    under another ASGI server) says when the client goes away."""
    telemetry = services.telemetry
    started = telemetry.begin()
    method, raw_path, headers = request.method, request.raw_path, request.headers
    route = None
    params: dict[str, str] = {}
    status, code = CLIENT_GONE, None
    doors = services.doors
    incoming = BodyReading()
    try:
        route, params = router.match(method, raw_path)
        if method == "HEAD":  # served as its GET (the connection sends the head alone)
            request.method = "GET"
        if not route.public:
            if not services.ready:
                raise ApiError(UNAVAILABLE, "the server is recovering its state; try again shortly", headers={"retry-after": "1"})
            cluster = getattr(services, "cluster", None)
            if cluster is not None and not services.key_is_known(request.bearer()):
                await cluster.keys_caught_up()  # a key made a moment ago on another node
            check_known_key(request, services)  # from the headers: an unknown key's body is never read
        takes = route.query_names
        if takes is not None:
            request.takes = takes
            if request.query:  # (most requests have none: they pay nothing more)
                refuse_unknown_query(request, takes)
        coding = headers.get("content-encoding")
        if coding is not None and coding.strip().lower() not in ("", "identity") and _has_body(headers):
            # A compressed body read as JSON would be refused as "not valid JSON", which misleads.
            raise ApiError(VALIDATION_FAILED, f"Content-Encoding {quote(coding[:40])} is not read here: send the body as plain JSON")
        if came is not None:  # it all came with the head: nothing to wait for
            request.body = take_body(came, headers, services.limits.request_bytes_max, doors, incoming)
        else:
            with trio.move_on_after(services.settings.body_timeout_s) as reading:
                request.body = await read_body(receive, headers, services.limits.request_bytes_max, doors, incoming)
            if reading.cancelled_caught:
                incoming.timed_out = True
                raise ApiError("REQUEST_TIMEOUT", "the request body did not arrive in time", status=408, headers=dict(_CLOSE))
        answer = await _run(services, route, params, request, receive, gone)
        if answer is None:  # the client of a long poll went away: nothing to send
            return None
        if isinstance(answer, Reply):  # answered by another node
            status = answer.status
            return answer
        status, body = answer
        extra = request.answer_headers
        if status == 201 and route.doc is not None and route.doc.location is not None:
            extra = {**(extra or {}), "location": created_at(route.doc.location, params, body)}
        if status == 204:
            return _empty_reply(request.request_id, services.draining, extra)
        if isinstance(body, Raw):
            return _raw_reply(status, body, request.request_id, services.draining)
        return _json_reply(status, wire.dumps(body), dict(extra) if extra else None, request.request_id, services.draining)
    except ClientGone:
        status = CLIENT_GONE
        return None
    except KernelError as error:
        code = error.code
        if code == STALE_CLAIM and route is not None:  # a late write turned away: the console shows it
            telemetry.fenced.saw(route.pattern, params, error.message, services.kernel.clock.now_ms())
        reply = await _refused(services, request, error, receive, came is not None or incoming.ended, incoming)
        status = reply.status
        return reply
    except Exception:
        log.exception("request %s %s failed (%s)", method, raw_path, request.request_id)
        status, body, extra = envelope(KernelError(INTERNAL, "internal error"), request.request_id)
        code = INTERNAL
        return _json_reply(status, body, extra, request.request_id, services.draining)
    finally:
        doors.release(incoming.held)
        telemetry.end(method, route, status, started, request.request_id, code, params.get("space"))


def created_at(location: tuple[str, str], params: dict[str, str], body: Any) -> str:
    """The Location of what a 201 made: the path that reads it (`Doc.location`), its id taken from
    the answer (a typed view, or the wire form an Idempotency-Key's retry replays)."""
    template, field = location
    answer = body if isinstance(body, dict) else wire.encode(body)
    made = answer[field]
    assert isinstance(made, str), f"a 201's {field} is an id"
    return f"/v1/spaces/{quote_segment(params['space'])}" + template.format(quote_segment(made))


def refuse_unknown_query(request: Request, takes: frozenset[str]) -> None:
    """VALIDATION_FAILED naming the first query parameter the route does not take, as a body
    field the route does not read is (`fields.refuse_unknown`): a typo of a filter
    (`?olderThan=`) would otherwise be dropped in silence and the answer be unfiltered. A name
    given twice is taken once, with its last value."""
    for name in request.params():
        if name not in takes:
            raise unknown("query parameter", name, takes)


async def _refused(
    services: Runtime, request: Request, error: KernelError, receive: Callable[[], Awaitable[dict[str, Any]]], body_read: bool,
    incoming: BodyReading,
) -> Reply:
    """The envelope of a refusal; a body not read yet is read and dropped first (bounded), or the
    connection closes after the answer (`linger`: the rest is dropped while it goes out)."""
    status, answer_body, extra = envelope(error, request.request_id)
    if request.answer_headers:
        extra.update(request.answer_headers)
    reply = _json_reply(status, answer_body, extra, request.request_id, services.draining)
    if body_read:
        return reply
    headers = request.headers
    if headers.get("expect", "").lower() == "100-continue" and not incoming.held and _has_body(headers):
        # Refused before the client was told to send its body (it waits for 100 Continue):
        # answer now, and close, rather than wait for a body it should not send.
        reply.close = True
        return reply
    if await drain(receive, services.doors, incoming):  # refused before its body was read: read it, drop it
        return reply
    reply.close = reply.linger = True
    return reply


def _has_body(headers: dict[str, str]) -> bool:
    """Whether a request's head says a body follows (a Content-Length above 0, or chunks)."""
    return "transfer-encoding" in headers or (declared_length(headers) or 0) > 0


async def _run(services: Runtime, route: Route, params: dict[str, str], request: Request, receive: Any, gone: Any) -> Any:
    """Run the route's handler here, or at the partition's leader in a cluster; a long poll is
    withdrawn when its client goes away (then None). A leader's answer comes back as a `Reply`."""
    long_poll = route.long_poll
    waits = long_poll is True or bool(long_poll and long_poll(request))

    async def here() -> tuple[int, Any] | None:
        return await route.handler(services, request, **params)

    cluster = services.cluster
    number = None if cluster is None or route.public else partition_of_request(services.kernel, request.method, route.path, params)
    if cluster is None or number is None:
        return await (_unless_disconnected(here, receive, gone, services.doors) if waits else here())
    # A node of a cluster: the partition's leader answers (forward.py).
    path = request.raw_path + ("?" + request.query.decode("latin-1") if request.query else "")

    async def lead() -> Any:
        return await lead_or_forward(cluster, number, request.method, path, request.headers, request.body,
                                     services.settings.cluster_forward_wait_s, here)

    # A long poll whose client goes away is withdrawn, here or, forwarded, at the leader (the
    # forwarded request is cancelled, and its connection to the leader closed).
    answer = await (_unless_disconnected(lead, receive, gone, services.doors, forwarded=True) if waits else lead())
    if isinstance(answer, Forwarded):
        # Says the request went through another node: our SDKs then learn the map.
        headers = [*answer.headers, (FORWARDED_BY.encode(), cluster.node_id.encode())]
        return Reply(answer.status, headers, answer.body, services.draining)
    if answer is _STOPPED:
        error = ApiError(UNAVAILABLE, "this node is stopping: send the request again", headers={"retry-after": "1"})
        status, body, extra = envelope(error, request.request_id)
        return _json_reply(status, body, extra, request.request_id, True)
    return answer


# What a long poll passed on to another node answers when this node stops while it waits there.
_STOPPED = object()


async def _unless_disconnected(
    call: Callable[[], Awaitable[Any]], receive: Callable[[], Awaitable[dict[str, Any]]], gone: Any, doors: Any, forwarded: bool = False
) -> Any:
    """Run a long poll (`call`), cancelling it if the client disconnects first (then None).

    Under our connection the request's `gone` (`doors.Gone`) says so: the poll runs in this task
    under a cancel scope that `gone` cancels, watched from when the kernel parks it (`ON_PARK`),
    or from the start for a request passed on to another node (`forwarded`: its wait is not this
    kernel's). Such a request is also ended when this node stops (`Doors.stop`: `_STOPPED`), since
    the kernel's `end_waits` cannot reach it. Under another ASGI server, a second task reads
    `receive` for `http.disconnect`.
    """
    if gone is not None:
        if gone.closed:
            return None
        with trio.CancelScope() as waiting:
            gone.watch(waiting)
            if forwarded:
                if doors.stopping:
                    return _STOPPED
                gone.parked()
                doors.waits.add(waiting)
            parking = ON_PARK.set(gone.parked)  # the kernel says when the call starts to wait
            try:
                return await call()
            finally:
                ON_PARK.reset(parking)
                gone.unwatch()
                doors.waits.discard(waiting)
        return _STOPPED if forwarded and doors.stopping and not gone.closed else None
    answer: Any = None
    error: BaseException | None = None

    async def run(cancel_scope: trio.CancelScope) -> None:
        nonlocal answer, error
        try:
            answer = await call()
        except KernelError as caught:
            error = caught
        cancel_scope.cancel()

    async def watch(cancel_scope: trio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, nursery.cancel_scope)
        nursery.start_soon(watch, nursery.cancel_scope)
    if error is not None:
        raise error
    return answer
