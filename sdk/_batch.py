"""Many calls in one request: the batch route, and the coalescing of calls made at the same time.

The server's `POST /v1/spaces/{space}/batch` (our extension) runs commands of one space as
independent operations: each is answered as the same request alone would be (its status and
body, or its error), in order per key, and their records go out in one group commit. Two users
of it here:

- the **renewals** of a client (`runstate._renewal.Renewals`) send every lease that is due in one
  batch (`send_batch`);
- the **coalescer** (`Coalescer`): calls of one client that may be batched (releases, renewals,
  settlements, submits, sends, acquires without a wait) go out at once when nothing else of that
  client (and space) is on its way, exactly as before; calls made while a request is on its way
  wait for it and then go out together, as one batch. Sequential code sends what it always sent;
  a swarm of agents sharing one client sends a few large requests instead of many small ones,
  with no timer and no delay added to a lone call (group commit, on this side of the wire).

Each call keeps its own answer and its own error, its own idempotency key (an operation's key
replays its first answer in a batch, as a request's does alone), and its own cancellation: a call
cancelled while it waits to be sent is taken out of the queue. A call sent again with the same
idempotency key (a settlement through an outage) goes out in the form it first went out in, so
the server compares like with like. A server without the batch route (an older one) is sent each
call alone, and the client remembers that.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any, Mapping

import anyio

from . import _runtime
from ._request import Reply, details_of, new_idempotency_key, parse_retry_after
from .errors import NotFoundError, UnavailableError, map_error

if TYPE_CHECKING:
    from ._request import Requester

__all__ = ["Operation", "Coalescer", "send_batch", "BATCH_OPERATIONS_MAX", "BATCH_BYTES_MAX"]

# At most this many operations, and about this many bytes of bodies, go in one batch (the
# server's defaults are 1,000 operations and 1 MiB a request).
BATCH_OPERATIONS_MAX = 500
BATCH_BYTES_MAX = 512 * 1024
# How many idempotency keys the coalescer remembers the form of (alone or in a batch).
FORMS_REMEMBERED_MAX = 4096
# What the wire answers for a route the server does not have.
_NO_ROUTE = "no such route"


class Operation:
    """One call as an operation of a batch: its method, its path below the space, its body (top-level
    `None`s left out, as alone), and its idempotency key."""

    __slots__ = ("method", "suffix", "body", "key", "size")

    def __init__(self, method: str, suffix: str, body: Mapping[str, Any] | None, key: str) -> None:
        self.method = method
        self.suffix = suffix
        self.body = None if body is None else {name: value for name, value in body.items() if value is not None}
        self.key = key
        self.size = 0

    def wire(self) -> dict[str, Any]:
        operation: dict[str, Any] = {"method": self.method, "path": self.suffix, "idempotencyKey": self.key}
        if self.body is not None:
            operation["body"] = self.body
        return operation


def batch_unsupported(error: BaseException) -> bool:
    """The server has no batch route (it answered the route itself as unknown)."""
    return isinstance(error, NotFoundError) and error.message.startswith(_NO_ROUTE)


async def send_batch(requester: Requester, space_path: str, operations: list[Operation]) -> list[Reply | BaseException]:
    """One batch request: each operation's `Reply`, or the error it was answered with (an
    exception, not raised), in order. An error of the whole request (the server unreachable, a
    bad key, a server without the route) is raised."""
    reply = await requester.call("POST", f"{space_path}/batch", body={"operations": [op.wire() for op in operations]})
    results = reply.body.get("results") if isinstance(reply.body, dict) else None
    if not isinstance(results, list) or len(results) != len(operations):
        raise UnavailableError("UNAVAILABLE", reply.status, f"the batch answer holds no result per operation: {str(reply.body)[:200]}")
    answers: list[Reply | BaseException] = []
    for result in results:
        status = result.get("status") if isinstance(result, dict) else None
        if not isinstance(status, int):
            answers.append(UnavailableError("UNAVAILABLE", reply.status, f"a batch result without a status: {str(result)[:200]}"))
        elif status < 400:
            answers.append(Reply(status, None if status == 204 else result.get("body", {})))
        else:
            envelope = result.get("error") if isinstance(result.get("error"), dict) else {}
            retry_after = result.get("retryAfter")
            answers.append(map_error(
                str(envelope.get("code") or "UNAVAILABLE"), status, str(envelope.get("message") or f"refused with {status}"),
                envelope.get("requestId"), parse_retry_after(None if retry_after is None else str(retry_after)),
                details_of(envelope.get("details")),
            ))
    return answers


def copy_error(error: BaseException) -> BaseException:
    """A twin of `error` for another caller to raise: one exception object raised by several
    tasks would have its traceback written over by each."""
    twin = type(error).__new__(type(error))
    twin.__dict__.update(error.__dict__)
    twin.args = error.args
    twin.__cause__ = error.__cause__
    twin.__suppress_context__ = error.__suppress_context__
    return twin


class _Waiting:
    """A call in a lane: its operation, and its answer once it has one."""

    __slots__ = ("operation", "done", "answer", "taken")

    def __init__(self, operation: Operation) -> None:
        self.operation = operation
        self.done = anyio.Event()
        self.answer: Reply | BaseException | None = None
        self.taken = False

    def settle(self, answer: Reply | BaseException) -> None:
        self.answer = answer
        self.done.set()


class _Lane:
    """The calls of one client to one space: at most one request of them on its way at a time."""

    __slots__ = ("space_path", "queue", "busy", "sender")

    def __init__(self, space_path: str) -> None:
        self.space_path = space_path
        self.queue: deque[_Waiting] = deque()
        self.busy = 0  # requests of this lane on their way
        self.sender: Any = None


class Coalescer:
    """The lanes of one client (`Requester`): see the module docstring."""

    def __init__(self, requester: Requester) -> None:
        self._requester = requester
        self._lanes: dict[str, _Lane] = {}
        # Idempotency key -> whether its call went out in a batch, for the calls sent again.
        self._forms: OrderedDict[str, bool] = OrderedDict()
        self.unsupported = False
        self.closed = False
        # What went out, for a look from tests and the bench: requests, and calls in batches.
        self.batches = 0
        self.batched_calls = 0

    def busy(self, space_path: str) -> bool:
        """Whether a call to this space now would wait for a request on its way (and so go out in
        a batch with others): a caller with a choice of requests picks the batched one then."""
        lane = self._lanes.get(space_path)
        return lane is not None and bool(lane.busy or lane.queue) and not (self.unsupported or self.closed)

    async def call(
        self, space_path: str, method: str, suffix: str, body: Mapping[str, Any] | None, key: str | None
    ) -> Reply:
        """One call, alone or in a batch; `key` is the caller's idempotency key when it may send
        the call again (then its form is remembered), None for a fresh one."""
        form = None if key is None else self._forms.get(key)
        if key is None:
            key = new_idempotency_key()
        else:
            self._remember(key, form is True)
        if self.unsupported or self.closed or form is False:
            return await self._alone(space_path, method, suffix, body, key)
        lane = self._lanes.get(space_path)
        if lane is None:
            lane = self._lanes[space_path] = _Lane(space_path)
        if form is None and not lane.busy and not lane.queue:
            lane.busy += 1
            try:
                return await self._alone(space_path, method, suffix, body, key)
            finally:
                lane.busy -= 1
                self._wake(lane)
        waiting = _Waiting(Operation(method, suffix, body, key))
        lane.queue.append(waiting)
        self._wake(lane)
        try:
            await waiting.done.wait()
        except BaseException:
            if not waiting.taken:
                lane.queue.remove(waiting)
            raise
        answer = waiting.answer
        if isinstance(answer, BaseException):
            raise answer
        assert answer is not None, "a call is answered once it is done"
        return answer

    async def _alone(self, space_path: str, method: str, suffix: str, body: Mapping[str, Any] | None, key: str) -> Reply:
        return await self._requester.call(method, space_path + suffix, body=body, idempotency_key=key)

    def _remember(self, key: str, batched: bool) -> None:
        forms = self._forms
        forms[key] = batched
        if len(forms) > FORMS_REMEMBERED_MAX:
            forms.popitem(last=False)

    def _wake(self, lane: _Lane) -> None:
        """Start the lane's sender when calls wait and nothing of the lane is on its way."""
        if lane.queue and not lane.busy and lane.sender is None:
            lane.sender = _runtime.spawn_background(self._send_queued, lane, name=f"runstate-batch:{lane.space_path}")

    async def _send_queued(self, lane: _Lane) -> None:
        try:
            while lane.queue and not lane.busy:
                taken = self._take(lane)
                lane.busy += 1
                try:
                    await self._send(lane.space_path, taken)
                finally:
                    lane.busy -= 1
        finally:
            lane.sender = None
            if lane.queue and not lane.busy:
                self._wake(lane)

    def _take(self, lane: _Lane) -> list[_Waiting]:
        taken: list[_Waiting] = []
        size = 0
        queue = lane.queue
        while queue and len(taken) < BATCH_OPERATIONS_MAX:
            waiting = queue[0]
            if taken and size + _size(waiting.operation) > BATCH_BYTES_MAX:
                break
            queue.popleft()
            waiting.taken = True
            size += _size(waiting.operation)
            taken.append(waiting)
        return taken

    async def _send(self, space_path: str, taken: list[_Waiting]) -> None:
        if len(taken) == 1 and self._forms.get(taken[0].operation.key) is not True:
            operation = taken[0].operation
            try:
                taken[0].settle(await self._alone(space_path, operation.method, operation.suffix, operation.body, operation.key))
            except Exception as error:
                taken[0].settle(error)
            except BaseException as error:  # cancelled (the client closed): the caller is told
                taken[0].settle(UnavailableError("UNAVAILABLE", 0, f"the call was not sent: {type(error).__name__}"))
                raise
            return
        operations = [waiting.operation for waiting in taken]
        forms = self._forms
        for operation in operations:
            if operation.key in forms:
                forms[operation.key] = True
        try:
            answers = await send_batch(self._requester, space_path, operations)
        except Exception as error:
            if batch_unsupported(error):
                self.unsupported = True
                _runtime.log.info("the server at %s has no batch route: calls go one by one", self._requester.base_url)
                for operation in operations:
                    if operation.key in forms:
                        forms[operation.key] = False
                await self._one_by_one(space_path, taken)
                return
            for waiting in taken:
                waiting.settle(copy_error(error))
            return
        except BaseException as error:
            for waiting in taken:
                waiting.settle(UnavailableError("UNAVAILABLE", 0, f"the call was not sent: {type(error).__name__}"))
            raise
        self.batches += 1
        self.batched_calls += len(taken)
        for waiting, answer in zip(taken, answers):
            waiting.settle(answer)

    async def _one_by_one(self, space_path: str, taken: list[_Waiting]) -> None:
        async def one(waiting: _Waiting) -> None:
            operation = waiting.operation
            try:
                waiting.settle(await self._alone(space_path, operation.method, operation.suffix, operation.body, operation.key))
            except Exception as error:
                waiting.settle(error)

        async with anyio.create_task_group() as group:
            for waiting in taken:
                group.start_soon(one, waiting)

    def close(self) -> None:
        """Send nothing more in batches (the client is closing); calls go alone from here on."""
        self.closed = True
        for lane in self._lanes.values():
            if lane.sender is not None:
                lane.sender.cancel()


def _size(operation: Operation) -> int:
    """About how many bytes an operation takes in a batch (its body's values, roughly)."""
    if not operation.size:
        operation.size = 64 + len(operation.suffix) + (0 if operation.body is None else len(repr(operation.body)))
    return operation.size
