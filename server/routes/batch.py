"""Batches: many commands of one space in one request, each with its own answer (our extension).

`POST /v1/spaces/{space}/batch` carries `operations`, each a command route of the space as it
would be sent alone: its `method`, its `path` below `/v1/spaces/{space}` (percent-encoded as in a
request), its `body`, and an `idempotencyKey` of its own; any other field is refused, naming it.
The answer holds one result per operation, in the same order: `{"status", "body"}` as the route
alone would answer, `{"status"}` for a 204, or `{"status", "error"}` with the error envelope's
fields (and `retryAfter`, in seconds, where the route alone would send `Retry-After`). A client that holds many leases renews
them all in one request this way, and one whose agents release, complete and submit at the same
moment sends all of it at once.

What a batch is, and is not:

- **Independent commands.** Each operation is read, checked and run as the same request alone
  would be; one that is refused changes nothing for the others. It is not a transaction (as in
  SQS's `SendMessageBatch` or Graph's JSON batching): there is no all-or-nothing, and each
  answer must be read.
- **In order per key.** The commands are handed to their keys' actors in the order given, before
  any of them runs, so two operations on one key (a release, then an acquire of it) run in that
  order; operations on different keys run in no particular order.
- **One group commit.** Their turns run in one pass of the kernel's scheduler, so their records
  reach the journal together and go out in one write (and one fsync under `--fsync always`),
  instead of one per request. The batch is answered once every one of them is durable.
- **No waits.** A long poll would hold every other answer back: an operation with `waitMs` is
  refused on its own (send a long poll alone); a receive without one answers 204 at once.
- **Bounded.** At most `batch_operations_max` operations (1,000 by default), and the body is
  bounded as any body is (`request_bytes_max`, 413 above). Its answer is bounded too: the
  receives of a batch lease at most `batch_deliveries_max` deliveries together (100 by default:
  one full receive of many), counted at their largest against `batch_answer_bytes_max` (each
  delivery's payload at payload_bytes_max, and its other fields): a receive past either bound is
  refused alone, before anything runs, naming the setting. Receives are the operations whose
  answers carry what the request did not (stored payloads): without the bounds, a 100 KB batch of
  recv-many asked a 10 MB answer of the server, made in one piece.
- **Idempotent per operation.** An operation's `idempotencyKey` makes a retry of the same
  operation (same method, path and body, sent in a batch again) answer as it did the first time;
  the batch request's own `Idempotency-Key` header is not used.

Only the routes of a space that run one kernel command can be sent in a batch (every route
declared without a handler of its own, and acquire; `api.endpoint`), and only with a key that
could send them alone: the batch is authorized for its space once.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import outcome as trio_outcome

from ...actors.commands import Receive, ReceiveMany
from ...actors.errors import STALE_CLAIM, VALIDATION_FAILED, KernelError
from ...actors.fields import OBJECTS, Spec, takes_caller, unknown
from ...actors.kernel import EMPTY, Idem
from ..api import Doc, Reply, endpoint
from ..errors import ApiError, status_of
from ..http import Request, Route, Router
from ..runtime import Runtime
from ..views import BatchResultView, BatchView, ErrorView

router = Router()

SPACE_PREFIX = ("v1", "spaces", "{space}")
G = "Batches"

_OPERATIONS: Router | None = None


def operations_router() -> Router:
    """The routes a batch may carry, by their path below the space (made once, from every route)."""
    global _OPERATIONS
    if _OPERATIONS is None:
        from . import ROUTER  # the routes' package imports this module

        operations = Router()
        for route in ROUTER.routes:
            if route.batch is not None and route.pattern[:3] == SPACE_PREFIX:
                relative = "/" + "/".join(route.pattern[3:])
                operations.add(route.method, relative, route.handler, doc=route.doc, batch=route.batch)
        _OPERATIONS = operations
    return _OPERATIONS


class _Refused(Exception):
    def __init__(self, error: KernelError) -> None:
        self.error = error


async def batch(services: Runtime, request: Request, space: str) -> tuple[int, BatchView]:
    services.authorize(request, space)
    kernel = services.kernel
    data = request.json().data
    if not data.keys() <= {"operations"}:  # as every route refuses a field it does not read
        raise unknown("field", next(name for name in data if name != "operations"), ("operations",))
    operations = data.get("operations")
    limit = services.limits.batch_operations_max
    if not isinstance(operations, list) or not operations:
        raise ApiError(VALIDATION_FAILED, "operations must be a non-empty list of operations")
    if len(operations) > limit:
        raise ApiError(VALIDATION_FAILED, f"a batch carries at most {limit} operations, not {len(operations)} (batch_operations_max)")
    results: list[BatchResultView | None] = [None] * len(operations)
    commands: list[tuple[Any, Idem | None]] = []
    places: list[tuple[int, Route, dict[str, str]]] = []
    answer = _AnswerBound(services)
    for index, operation in enumerate(operations):
        try:
            route, params, command, idem = _read(services, request, space, index, operation)
            answer.take(index, command)
        except KernelError as error:
            results[index] = _refusal(services, request, error, None, None)
            continue
        commands.append((command, idem))
        places.append((index, route, params))
    if commands:
        answers = await kernel.submit_all(space, commands)
        for (index, route, params), done in zip(places, answers):
            if isinstance(done, trio_outcome.Error):
                failure = done.error
                if not isinstance(failure, KernelError):
                    raise failure
                results[index] = _refusal(services, request, failure, route, params)
                continue
            assert isinstance(done, trio_outcome.Value), "each answer of a batch is a Value or an Error"
            reply = done.value
            if reply is EMPTY:
                results[index] = BatchResultView(204)
            else:
                results[index] = BatchResultView(route.batch.status_of(reply), reply)
    assert all(result is not None for result in results), "every operation of a batch has its result"
    return 200, BatchView(tuple(result for result in results if result is not None))


class _AnswerBound:
    """What the receives of one batch may add to its answer: at most `batch_deliveries_max`
    deliveries together, each counted at its largest against `batch_answer_bytes_max`."""

    __slots__ = ("deliveries", "deliveries_max", "bytes_max", "delivery_bytes_max")

    def __init__(self, services: Runtime) -> None:
        settings, limits = services.settings, services.limits
        self.deliveries = 0
        self.deliveries_max = settings.batch_deliveries_max
        self.bytes_max = settings.batch_answer_bytes_max
        # A delivery at its largest: its payload, the caller's strings it repeats (holder, session,
        # task and work keys), and the rest of its fields (ids, token, times, counts).
        self.delivery_bytes_max = (limits.payload_bytes_max + 2 * limits.holder_len_max + limits.task_key_len_max
                                   + limits.work_key_len_max + DELIVERY_FIELDS_BYTES)

    def take(self, index: int, command: Any) -> None:
        """Count the deliveries `command` may lease, or refuse it (and count nothing) past a bound."""
        if not isinstance(command, Receive):
            return
        asked = command.count if isinstance(command, ReceiveMany) else 1
        where = f"operations[{index}]"
        if self.deliveries + asked > self.deliveries_max:
            raise ApiError(VALIDATION_FAILED, (
                f"{where}: a batch's receives lease at most {self.deliveries_max} deliveries together "
                f"(batch_deliveries_max); this one asks for {asked} after {self.deliveries}: send it in another request"))
        largest = (self.deliveries + asked) * self.delivery_bytes_max
        if largest > self.bytes_max:
            raise ApiError(VALIDATION_FAILED, (
                f"{where}: a batch's answer holds at most {self.bytes_max} bytes of deliveries (batch_answer_bytes_max); "
                f"with this one's {asked}, its {self.deliveries + asked} deliveries could reach {largest} bytes: "
                "send it in another request"))
        self.deliveries += asked


# What an operation of a batch may carry: any other field is refused, naming it.
OPERATION_FIELDS = frozenset({"method", "path", "body", "idempotencyKey"})

# A delivery's fields other than its payload and the caller's strings, at their largest (bytes of JSON).
DELIVERY_FIELDS_BYTES = 1024


def _read(services: Runtime, request: Request, space: str, index: int, operation: Any) -> tuple[Route, dict[str, str], Any, Idem | None]:
    """The route, path parameters, command and Idempotency-Key of one operation, or its refusal."""
    where = f"operations[{index}]"
    if not isinstance(operation, dict):
        raise ApiError(VALIDATION_FAILED, f"{where} must be an object with method, path and body")
    if not operation.keys() <= OPERATION_FIELDS:
        # As a field a route does not read is refused: a mistyped `idempotencyKey` dropped in
        # silence would leave the operation without the replay its sender counts on.
        name = next(name for name in operation if name not in OPERATION_FIELDS)
        raise ApiError(VALIDATION_FAILED, f"{where}: {unknown('field', name, OPERATION_FIELDS).message}")
    method, path = operation.get("method", "POST"), operation.get("path")
    if not isinstance(method, str) or not isinstance(path, str) or not path.startswith("/"):
        raise ApiError(VALIDATION_FAILED, f"{where} needs a method and a path below /v1/spaces/{{space}} (starting with /)")
    body = operation.get("body")
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise ApiError(VALIDATION_FAILED, f"{where}.body must be a JSON object")
    try:
        route, params = operations_router().match(method, path)
    except ApiError as error:
        if error.code == VALIDATION_FAILED:
            raise
        raise ApiError(
            VALIDATION_FAILED, f"{where}: {method} {path[:200]} is not a command of a space that a batch can carry"
        ) from None
    params["space"] = space
    if takes_caller(route.batch.command):
        params["caller"] = services.caller(request)  # its record says who sent it, as alone
    kernel = services.kernel
    command = kernel.parse(route.batch.command, body, params)
    if getattr(command, "wait_ms", None):
        raise ApiError(VALIDATION_FAILED, f"{where}: waitMs is not taken in a batch (a long poll would hold every answer); send it alone")
    key = operation.get("idempotencyKey")
    idem = None
    if key is not None:
        length_max = services.limits.idempotency_key_len_max
        if not isinstance(key, str) or not 1 <= len(key) <= length_max or not key.isprintable():
            raise ApiError(VALIDATION_FAILED, f"{where}.idempotencyKey must be 1-{length_max} printable characters")
        idem = Idem(space, key, fingerprint(method, f"/v1/spaces/{space}{path}", body))
    return route, params, command, idem


def fingerprint(method: str, path: str, body: dict[str, Any]) -> str:
    """What an operation's idempotencyKey is checked against: its method, whole path and body
    (as orjson writes it: the same for the same operation sent again)."""
    return hashlib.blake2b(b"%s %s\n%s" % (method.encode(), path.encode(), orjson.dumps(body)), digest_size=16).hexdigest()


def _refusal(services: Runtime, request: Request, error: KernelError, route: Route | None, params: dict[str, str] | None) -> BatchResultView:
    """One operation's refusal: its status and the error envelope's fields."""
    status = (error.status if isinstance(error, ApiError) else None) or status_of(error.code)
    refused = ErrorView(error.code, error.message, request.request_id, error.details or None)
    retry_after = None if error.retry_after_s is None else round(error.retry_after_s, 3)
    result = BatchResultView(status, error=refused, retry_after=retry_after)
    if error.code == STALE_CLAIM and route is not None and params is not None:  # a late write turned away
        services.telemetry.fenced.saw((*SPACE_PREFIX, *route.pattern), params, error.message, services.kernel.clock.now_ms())
    return result



endpoint(router, "POST", "/v1/spaces/{space}/batch", Doc(
    "Run many commands of the space, each with its own answer, in one group commit (our extension)",
    (Reply(200, "BatchResults", "One result per operation, in order"),),
    body=(Spec(
        "operations", OBJECTS, minimum=1, maximum="batch_operations_max",
        description="each an object of method (default POST), path (below /v1/spaces/{{space}}), body and "
        "idempotencyKey, and no other field: a command route of the space, without waitMs; run in order per key; the receives lease at "
        "most batch_deliveries_max deliveries together, within batch_answer_bytes_max (a receive past either is refused alone)",
    ),),
    errors=("400", "404"), group=G,
), batch, settle=False)
