"""Routes declared once: method, path, request fields, response shape, error codes.

A route is declared with `endpoint(...)` on a `Router`. A route that runs a kernel command names
the command class and needs no handler of its own: the request's body and path are parsed into the
command (every field checked by its declaration, `actors/fields.py`), the key is checked against
the space, and the command is submitted with the request's Idempotency-Key. Reads and the admin
routes give a handler. Either way the declaration carries what the OpenAPI document
(`openapi.py`) and the API reference (`apidoc.py`) say about the route, so the router, the document
and the docs cannot drift apart: all three are made from the same list. The query parameters a
route declares are also all it takes: a request to the API (`/v1/...`) with any other is refused
with 400 naming it, as a body field no command reads is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from ..actors.errors import KernelError
from ..actors.fields import Spec, query_fields, takes_caller
from ..actors.kernel import EMPTY
from ..actors.limits import Limits
from .http import Handler, Request, Router
from .runtime import Runtime
from .services import ReadServices

__all__ = ["Doc", "Reply", "endpoint", "command_handler", "endpoint_and_dot_segments", "query_names", "API_PREFIX", "BatchOperation", "NO_CONTENT", "OPENAPI_PATH", "WAIT_CAPPED_HEADER", "say_if_capped"]

# The API's routes: each takes the query parameters it declares and no other (`query_names`).
API_PREFIX = "/v1/"
# Where the OpenAPI document made from these declarations is served.
OPENAPI_PATH = "/v1/openapi.json"
# On the answer to a long poll whose waitMs was over the server's cap: the wait it was held at most.
WAIT_CAPPED_HEADER = "runstate-wait-capped-ms"


@dataclass(frozen=True, slots=True)
class Reply:
    """One documented answer: its status, the component schema (or an inline schema), a description."""

    status: int
    schema: str | dict[str, Any] | None
    description: str = "OK"
    content_type: str = "application/json"
    # The headers it carries, by name: (the component in `#/components/headers`, whether always).
    headers: tuple[tuple[str, str, bool], ...] = ()


NO_CONTENT = None  # a Reply schema for an answer without a body (a long poll's 204)


@dataclass(frozen=True, slots=True)
class Doc:
    """What a route declares besides its method, path and handler."""

    summary: str
    replies: tuple[Reply, ...]
    command: type | None = None
    # The request body's fields for a route that is not a command (`actors.fields.Spec`s).
    body: tuple[Spec, ...] | None = None
    body_required: bool = True
    query: tuple[str, ...] = ()
    # Error statuses besides those every keyed route can answer (bad key, bad path, 413, 503).
    errors: tuple[str, ...] = ()
    # Whether the route takes an Idempotency-Key (mutations of a space do).
    idempotent: bool = False
    group: str = ""
    # An operator's action: the admin key may call it in any space, and its record says who did.
    operator: bool = False
    # A public route (outside a space) that still takes a key (`Authorization: Bearer`): any valid one.
    takes_key: bool = False
    # A public route that answers loopback without a key and asks every other address for the
    # admin key (`/metrics`, unless `metrics_public` is set): a key is optional in the document.
    admin_key_off_loopback: bool = False
    # Where what a 201 made is read, for its Location: the path below the space with `{}` for the
    # answer's field named second (`("/scopes/{}", "id")`); None where nothing reads it alone.
    location: tuple[str, str] | None = None


# The status of a command's answer, when it depends on the answer (201 created, 200 replayed).
StatusOf = Callable[[Any], int]


def endpoint(
    router: Router,
    method: str,
    pattern: str,
    doc: Doc,
    handler: Handler | None = None,
    *,
    status: int | StatusOf = 200,
    long_poll: Any = False,
    public: bool = False,
    batchable: bool | None = None,
    settle: bool = True,
    fixed: dict[str, str] | None = None,
) -> None:
    """Declare a route. Without `handler`, `doc.command` is run (see the module docstring).

    `fixed` gives path parameters the route's path does not carry: a route that stands for
    another with one of its segments fixed (a key or name the client's path lost,
    `endpoint_and_dot_segments`).

    A command route of a space may also be sent as one operation of a batch
    (`routes/batch.py`), without a wait: every route declared without a handler is, and one
    with a handler of its own only when it says `batchable=True` (its command run as it is), but
    never an operator's action (`Doc.operator`).
    A handler that answers only what kernel commands answered (each turn answers once durable)
    says `settle=False`: it need not wait for the records of others (`_settled`)."""
    if batchable is None:
        batchable = handler is None
    batch = None
    if batchable and doc.command is not None and doc.idempotent and not public and not doc.operator:
        batch = BatchOperation(doc.command, status)  # (an operator's action is always sent alone)
    if handler is None:
        assert doc.command is not None, f"{method} {pattern}: a route needs a handler or a command"
        assert "{space}" in pattern, f"{method} {pattern}: a command runs in a space, which its path names"
        handler = _command_handler(doc.command, status, doc.operator, fixed or {})
    elif not public and settle:
        handler = _settled(handler)
    takes = query_names(doc) if pattern.startswith(API_PREFIX) else None
    router.add(method, pattern, handler, long_poll=long_poll, public=public, doc=doc, batch=batch, query_names=takes)


def endpoint_and_dot_segments(router: Router, method: str, pattern: str, doc: Doc, param: str, **options: Any) -> None:
    """Declare a command route with `{param}` in its path, and the paths its request takes when
    `{param}` is `.` or `..`.

    A client that percent-encodes a name or key for its path segment as it is (the official
    clients, ours for a name) leaves `.` and `..` unencoded, and its HTTP library then removes them
    as dot segments (RFC 3986 5.2.4): `.` goes, `..` goes with the segment before it. So
    `PUT /runs/.` arrives as `PUT /runs` and `POST /claims/../renew` as `POST /renew`. Those paths
    are served too, the parameter fixed to what was dropped; each must name no other route."""
    endpoint(router, method, pattern, doc, **options)
    segments = pattern.split("/")
    at = segments.index("{" + param + "}")
    assert not segments[at - 1].startswith("{"), f"{pattern}: `..` would drop a parameter"
    for value, dropped in ((".", 1), ("..", 2)):
        path = "/".join(segments[: at + 1 - dropped] + segments[at + 1 :])
        summary = f"{doc.summary}, for the {param} `{value}` (the path once the client drops it as a dot segment)"
        endpoint(
            router, method, path, replace(doc, summary=summary), **options, fixed={param: value}, batchable=False
        )


def query_names(doc: Doc) -> frozenset[str]:
    """The query parameters a route takes: those it declares (`Doc.query`) and its command's
    query fields. The OpenAPI document lists the same; a request with any other is refused
    (`http.refuse_unknown_query`), and a test holds them equal to what the handler reads."""
    names = frozenset(doc.query)
    if doc.command is not None:
        names |= {spec.wire for spec in query_fields(doc.command)}
    return names


@dataclass(frozen=True, slots=True)
class BatchOperation:
    """How a route runs as an operation of a batch: its command, and the status of its answer."""

    command: type
    status: int | Callable[[Any], int]

    def status_of(self, reply: Any) -> int:
        return self.status(reply) if callable(self.status) else self.status


def _settled(handler: Handler) -> Handler:
    """`handler`, answering only once everything it could have read is durable.

    A route with a handler of its own reads the state straight (a view, a list, a 404): what it
    read may include records appended but not yet durable, which a crash could take back, so its
    answer, success or refusal, waits for them (nothing to wait for, usually). Commands need no
    such wrapper: their turn answers the same way (`Kernel._answer`)."""

    async def run(services: ReadServices, request: Request, **params: str) -> tuple[int, Any]:
        try:
            answer = await handler(services, request, **params)
        except KernelError:
            await services.kernel.settled(params.get("space"))
            raise
        await services.kernel.settled(params.get("space"))
        return answer

    run.__name__ = run.__qualname__ = getattr(handler, "__name__", "handler")
    run.__wrapped__ = handler  # type: ignore[attr-defined]  # a function takes any attribute; `inspect.unwrap` reads this one
    return run


def say_if_capped(request: Request, limits: Limits, wait_ms: int | None) -> None:
    """A wait asked for past `wait_ms_max` is held that long at most: the answer says so (in
    WAIT_CAPPED_HEADER), so that a caller knows to ask again rather than take the answer for its
    whole wait. Every long poll's route calls it with the wait its request asked for."""
    if wait_ms is not None and wait_ms > limits.wait_ms_max:
        request.answer_headers = {**(request.answer_headers or {}), WAIT_CAPPED_HEADER: str(limits.wait_ms_max)}


def command_handler(command_class: type, status: int | StatusOf) -> Handler:
    """The handler `endpoint` makes for a command route: for a route that reads something of the
    request first (a header) and then runs its command as any command route does."""
    return _command_handler(command_class, status)


def _command_handler(
    command_class: type, status: int | StatusOf, operator: bool = False, given: dict[str, str] | None = None
) -> Handler:
    if callable(status):
        status_of, fixed = status, 0
    else:
        status_of, fixed = None, status
    records_caller = takes_caller(command_class)

    async def run(services: Runtime, request: Request, **params: str) -> tuple[int, Any]:
        if given:
            params.update(given)
        space = params["space"]  # (a command route's path names its space: `endpoint`)
        services.authorize(request, space, operator=operator)
        if records_caller:
            params["caller"] = services.caller(request)
        kernel = services.kernel
        command = kernel.parse(command_class, request.json().for_command(command_class, kernel.limits), params, request.param)
        wait_ms = getattr(command, "wait_ms", None)
        say_if_capped(request, kernel.limits, wait_ms)
        reply = await kernel.submit(command, idem=request.idem(space), wait_ms=wait_ms)
        if reply is EMPTY:
            return 204, None
        return (status_of(reply) if status_of is not None else fixed), reply

    run.__name__ = run.__qualname__ = command_class.__name__
    return run

