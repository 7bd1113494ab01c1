"""Queues: work handed to worker processes. One definition serves both sides: producers call it
(or `send`/`gather`), workers run `serve()`.

- A **job** is a task of the run in the queue's mailbox, keyed by its input (`runstate._keys`):
  sending the same input twice in a run gives the same job and one result.
- The **producer** side: `review(doc)` sends and waits for the result (`TaskFailedError` when the
  job fails, `StoppedError` when the run stops first); `review.send(doc)` gives a `Job` whose
  `result()` waits; `review.gather(docs, need=, accept=)` sends them as one group and returns the
  accepted results once `need` of them are in (`TaskFailedError` once it can no longer get there).
- The **worker** side: `serve()` runs the handlers of every queue defined with one, on jobs
  admitted with what the queue's `slots`, `limit` and `budget` need (the mailbox's default
  requirements, declared by the workers), from the run and its child runs. It is this SDK's
  consume loop (`runstate._consume`): leases kept through outages, a lost job's handler told
  (cancelled, or its `context().signal` set), settlements sent until the lease ends, and a stop of
  the run ending every handler at once. A handler's return completes the job with
  `{"payload": result}`; a raise puts it back with the error (`Type: message`) until its attempts
  are used; a result over 64 KiB fails the job with that said.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import math
import types
from typing import Any, Callable, Iterable, Mapping, Sequence, Union, cast

import anyio
import anyio.to_thread

from . import _runtime
from ._docs import async_forms
from ._bound import (
    RunBinding, RunContext, check_count, deadline_after, error_message, in_async_context, set_context, until_set,
    use_context,
)
from ._budget import settle_reservation, void_reservation
from ._consume import STOPPED, Consumer, give_back, report_lost
from ._grace import let_finish
from ._keys import check_name, work_key
from ._observe import until_flag
from ._signal import AnyOf, Flag, call_soon_from_any_thread
from ._units import Duration, lease_seconds, to_minor
from .errors import (
    ConfigError, LeaseLostError, ResultTooLargeError, ScopeCancelledError, StoppedError, TaskFailedError,
    WaitTimeoutError,
)
from .mailboxes import Delivery

__all__ = ["QueueImpl", "Queue", "Job", "serve", "outcome_of", "ResourceRef", "StopWhen"]

# A resource a queue's jobs hold: its name, or {"name": ..., "units": ...}.
ResourceRef = Union[str, Mapping[str, Any]]

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"})
# How long one wait for a job's end is held by the server.
WAIT_MS = 25_000
GROUP_MEMBERS_MAX = 100
DRAIN_S = 30.0
ADMIT_WAIT_MS = 20_000
HANDLER_ERROR = "handler_error: "


def _resource(ref: ResourceRef | None) -> dict[str, Any] | None:
    if ref is None:
        return None
    if isinstance(ref, str):
        found = {"name": ref, "units": 1}
    elif isinstance(ref, Mapping):
        found = {"name": ref.get("name"), "units": 1 if ref.get("units") is None else ref.get("units")}
    else:
        raise ConfigError("slots and limit take a name or {'name': ..., 'units': ...}")
    check_name(found["name"], "resource")
    check_count(found["units"], "units")
    return found


def outcome_of(task: Mapping[str, Any]) -> Any:
    """A job's result from its task view, or the error that says why there is none."""
    state, reason, job_id = task["state"], task.get("outcomeReason"), task["id"]
    if state == "SUCCEEDED":
        return task.get("outcome")
    if state == "CANCELLED":
        if reason == "scope_cancelled":
            raise StoppedError("the run stopped before the job finished")
        raise TaskFailedError(f"job {job_id} was cancelled", job_id=job_id, reason=reason or "cancelled")
    if state == "EXPIRED":
        raise TaskFailedError(f"job {job_id} passed its deadline", job_id=job_id, reason=reason or "expired")
    reason = reason or "failed"
    raise TaskFailedError(reason.removeprefix(HANDLER_ERROR), job_id=job_id, reason=reason)


class _AdmittedJob(Delivery):
    """A delivery taken by admission, with what came with it (its reservations, its task key)."""

    def __init__(self, client: Any, admitted: Mapping[str, Any], run_id: str, lease_s: int, sent_at: float) -> None:
        raw = {
            "message": {
                "id": admitted["messageId"], "scopeId": admitted.get("scopeId") or run_id, "payload": admitted.get("payload"),
                "attempt": admitted.get("attempt", 1), "taskId": admitted.get("taskId"),
            },
            "token": admitted["token"],
        }
        super().__init__(client._ctx, raw, lease_seconds=lease_s, sent_at=sent_at)
        self.task_key: str | None = admitted.get("taskKey")
        self.reservations: list[str] = list(admitted.get("reservations") or [])


class QueueImpl:
    """One queue definition: its name, its options, its handler (for workers)."""

    def __init__(
        self,
        binding: RunBinding,
        name: str,
        handler: Callable[[Any], Any] | None,
        *,
        slots: ResourceRef | None = None,
        limit: ResourceRef | None = None,
        budget: Mapping[str, Any] | None = None,
        attempts: int | None = None,
        lease: Duration | None = None,
        concurrency: int | None = None,
        key: Callable[[Any], str] | None = None,
    ) -> None:
        self.binding = binding
        self.name = check_name(name, "queue")
        self.handler = handler
        self.options: dict[str, Any] = {
            "slots": slots, "limit": limit, "budget": budget, "attempts": attempts, "lease": lease,
            "concurrency": concurrency, "key": key,
        }
        self.attempts = check_count(5 if attempts is None else attempts, "attempts", 1, 100)
        # Workers (and a producer that says so) declare the queue's attempts; others only look it up.
        self.declares_attempts = handler is not None or attempts is not None
        self.lease_s = lease_seconds(lease)
        self.concurrency = check_count(1 if concurrency is None else concurrency, "concurrency")
        self.slots = _resource(slots)
        self.limit = _resource(limit)
        self.key = key
        if budget is not None:
            if not isinstance(budget, Mapping) or budget.get("reserve") is None:
                raise ConfigError("budget takes {'name': ..., 'reserve': ..., 'cost': ...}")
            check_name(budget.get("name"), "budget")
        self.budget = budget
        self.is_async = handler is not None and _runtime.is_async_callable(handler)

    @property
    def servable(self) -> bool:
        return self.handler is not None

    async def mailbox_id(self) -> str:
        settings: dict[str, Any] = {}
        if self.declares_attempts:
            settings["maxAttempts"] = self.attempts
        if self.servable:
            requirements = await self.requirements()
            if requirements is not None:
                settings["requirements"] = requirements
        found = await self.binding.shared.resources.ensure(self.binding, "mailboxes", self.name, settings or None)
        mailbox_id: str = found["id"]
        return mailbox_id

    async def budget_info(self) -> dict[str, Any] | None:
        if self.budget is None:
            return None
        found: dict[str, Any] = await self.binding.shared.resources.ensure(self.binding, "budgets", self.budget["name"], None)
        return found

    async def requirements(self) -> dict[str, Any] | None:
        budget = await self.budget_info()
        if self.slots is None and self.limit is None and budget is None:
            return None
        needs: dict[str, Any] = {}
        if self.slots is not None:
            needs["pools"] = [self.slots]
        if self.limit is not None:
            needs["quotas"] = [self.limit]
        if budget is not None and self.budget is not None:
            needs["budgets"] = [{"name": budget["name"], "reserveMinor": to_minor(self.budget["reserve"], budget["scale"], "reserve")}]
        return needs

    def task_key(self, input: Any) -> str:  # noqa: A002 - 0.3.0's name
        return work_key(self.name, [input], self.key)

    async def send(self, input: Any) -> "Job":  # noqa: A002
        async def body() -> Job:
            run = await self.binding.run()
            task = {
                "scopeId": run.id, "mailboxId": await self.mailbox_id(), "taskKey": self.task_key(input),
                "requirements": await self.requirements(),
            }
            answer = await self.binding.call("POST", "/tasks", body={**task, "input": input})
            return Job(self, answer["taskId"])

        return await self.binding.track(body)

    async def wait_terminal(self, job_id: str, deadline: float) -> dict[str, Any]:
        while True:
            left = deadline - anyio.current_time()
            if left <= 0:
                raise WaitTimeoutError(f"job {job_id} is still running")
            wait_ms = WAIT_MS if math.isinf(left) else min(WAIT_MS, max(0, int(left * 1000)))
            task: dict[str, Any] = await until_set(
                self.binding.signal, self.binding.call("GET", f"/tasks/{job_id}", query={"waitMs": wait_ms}, wait_ms=wait_ms)
            )
            if task["state"] in TERMINAL:
                return task

    async def result(self, job_id: str, timeout: Duration | None = None) -> Any:
        deadline = deadline_after(timeout, None)

        async def body() -> Any:
            return outcome_of(await self.wait_terminal(job_id, deadline))

        return await self.binding.track(body)

    async def call(self, input: Any) -> Any:  # noqa: A002
        job = await self.send(input)
        return await self.result(job.id)

    async def gather(
        self,
        inputs: Iterable[Any],
        *,
        need: str | int = "all",
        accept: Callable[[Any, Any], Any] | None = None,
        timeout: Duration | None = None,
    ) -> list[Any]:
        items = list(inputs)
        if not items:
            return []
        if len(items) > GROUP_MEMBERS_MAX:
            raise ConfigError(f"gather takes at most {GROUP_MEMBERS_MAX} inputs at a time")
        if need != "all" and (isinstance(need, bool) or not isinstance(need, int) or not 1 <= need <= len(items)):
            raise ConfigError(f"need must be 'all' or a whole number from 1 to {len(items)}")
        deadline = deadline_after(timeout, None)

        async def body() -> list[Any]:
            return await _Gather(self, items, need, accept, deadline).run()

        return await self.binding.track(body)

    # -- serving --

    async def work(self, job: _AdmittedJob) -> None:
        """One admitted job: its handler under the job's lease, then its settlement and costs."""
        binding = self.binding
        budget = await self.budget_info()
        run = await binding.run()
        lost = Flag()
        job._when_lost(lambda: lost.abort(job.lost_error))
        context = RunContext(run=run, signal=AnyOf([lost, binding.signal]), attempt=job.attempt, key=job.task_key)
        failure: Exception | None = None
        result: Any = None
        with anyio.CancelScope() as working:
            unsubscribe = job._when_lost(working.cancel)
            try:
                result = await self._invoke(job.data, context)
            except Exception as err:
                failure = err
            finally:
                unsubscribe()
        if job._lost or (failure is None and job.is_lost):
            await self._release_budget(budget, job)
            await report_lost(None, job)
            return
        if failure is not None:
            await self._release_budget(budget, job)
            await give_back(job, retry=True, error=error_message(failure))
            return
        try:
            await job.complete({"payload": result})
        except ResultTooLargeError:
            await self._release_budget(budget, job)
            await give_back(job, retry=False, error=f"{self.name} returned a result over 64 KB")
            return
        except Exception as err:
            await self._release_budget(budget, job)
            if not isinstance(err, (LeaseLostError, StoppedError)):
                _runtime.log.warning("%s: could not complete job %s (%s); it is handed on when its lease runs out",
                                     self.name, job.task_id, err)
            return
        await self._settle_budget(budget, job, result)

    async def _invoke(self, payload: Any, context: RunContext) -> Any:
        assert self.handler is not None
        if self.is_async:
            with use_context(context):
                return await self.handler(payload)
        # A plain handler runs in a worker thread that sees the job's context.
        thread_context = contextvars.copy_context()
        thread_context.run(set_context, context)
        call = functools.partial(thread_context.run, self.handler, payload)
        result = await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
        if inspect.isawaitable(result):
            with use_context(context):
                result = await result
        return result

    async def _release_budget(self, budget: dict[str, Any] | None, job: _AdmittedJob) -> None:
        if budget is None:
            return
        for reservation_id in job.reservations:
            try:
                await void_reservation(self.binding, budget, reservation_id)
            except Exception as err:
                _runtime.log.warning("%s: could not give back reservation %s (%s)", self.name, reservation_id, err)

    async def _settle_budget(self, budget: dict[str, Any] | None, job: _AdmittedJob, result: Any) -> None:
        if budget is None or self.budget is None:
            return
        reserve = to_minor(self.budget["reserve"], budget["scale"], "reserve")
        cost_minor = reserve
        cost = self.budget.get("cost")
        if cost is not None:
            try:
                cost_minor = to_minor(cost(result), budget["scale"], "cost")
            except Exception as err:  # a broken cost function charges the whole reserve, never nothing
                _runtime.log.warning("%s: cost() failed (%s); charging the reserve", self.name, err)
        for reservation_id in job.reservations:
            try:
                await settle_reservation(self.binding, budget, reservation_id, cost_minor)
            except Exception as err:
                _runtime.log.warning("%s: could not settle reservation %s (%s)", self.name, reservation_id, err)

    def consumer(self, run_id: str, concurrency: int, stop: Any) -> Consumer:
        binding = self.binding
        client = binding.client()
        mailbox: dict[str, str] = {}

        async def take(wait_ms: int, stop: Any) -> Any:
            if "id" not in mailbox:
                mailbox["id"] = await self.mailbox_id()
            body = {
                "scopeId": run_id, "mailboxId": mailbox["id"], "holder": client.holder, "holderSession": client.session,
                "leaseSeconds": self.lease_s, "waitMs": wait_ms if wait_ms > 0 else None, "includeDescendants": True,
            }

            async def put_back(admitted: Any) -> None:
                if admitted is not None:  # what was taken with it goes back with it
                    job = _AdmittedJob(client, admitted, run_id, self.lease_s, anyio.current_time())
                    await give_back(job, retry=True, unhandled=True)

            # A look without a wait first, which neither a stop nor a cancellation cuts: the server
            # admits even to a request whose connection was cut, and the job would stay leased to
            # no one until its lease ran out, an attempt spent. What it admitted after a
            # cancellation is put back at once (`let_finish`). Only a wait for work is cut.
            sent = anyio.current_time()
            look = {**body, "waitMs": None}
            admitted = await let_finish(lambda: binding.call("POST", "/tasks/admit", body=look), put_back)
            if admitted is None and wait_ms > 0:
                if stop.is_set():
                    return STOPPED
                admitting = binding.call("POST", "/tasks/admit", body=body, wait_ms=wait_ms)
                if isinstance(stop, StopWhen) and stop.never:
                    admitted = await admitting
                else:
                    stopped, admitted = await until_flag(stop, admitting)
                    if stopped:
                        return STOPPED
                sent = anyio.current_time()  # a held admission leases as it answers
            if admitted is None:
                return None
            return _AdmittedJob(client, admitted, run_id, self.lease_s, sent)

        async def work(delivery: Delivery) -> None:
            assert isinstance(delivery, _AdmittedJob)
            await self.work(delivery)

        return Consumer(
            client._ctx, f"serve({self.name!r})", run_id, take, work,
            concurrency=concurrency, lease_seconds=self.lease_s, poll_ms=250, wait_ms=ADMIT_WAIT_MS,
            shutdown_timeout=DRAIN_S, stop=stop, on_error=None, give_up_after_s=None,
        )


class _Gather:
    """One gather: a task group of the inputs, each member's verdict, the results accepted."""

    def __init__(
        self, queue: QueueImpl, items: list[Any], need: str | int, accept: Callable[[Any, Any], Any] | None, deadline: float
    ) -> None:
        self.queue = queue
        self.items = items
        self.target = len(items) if need == "all" else int(need)
        self.need = need
        self.accept = accept
        self.deadline = deadline
        self.accepted: list[Any] = []
        self.failures: list[str] = []
        self.decided = 0
        self.error: BaseException | None = None
        self.finished = anyio.Event()

    async def run(self) -> list[Any]:
        queue, binding = self.queue, self.queue.binding
        run = await binding.run()
        mailbox_id = await queue.mailbox_id()
        requirements = await queue.requirements()
        condition = "ALL_TERMINAL" if self.need == "all" else "FIRST_ACCEPTED" if self.need == 1 else "N_ACCEPTED"
        group = await binding.call("POST", "/task-groups", body={
            "parentScopeId": run.id, "mailboxId": mailbox_id, "condition": condition,
            "threshold": self.need if condition == "N_ACCEPTED" else None, "expectedMembers": len(self.items),
        })
        group_id = group["groupId"]
        try:
            members = []
            for item in self.items:
                body = {"taskKey": queue.task_key(item), "requirements": requirements, "input": item}
                member = await binding.call("POST", f"/task-groups/{group_id}/tasks", body=body)
                members.append((member["taskId"], item))
            async with anyio.create_task_group() as watching:
                for member_id, item in members:
                    watching.start_soon(self._watch, group_id, member_id, item, len(members))
                await self.finished.wait()
                watching.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                try:  # the group's gate scope: what is still queued or running in it stops
                    await binding.call("POST", f"/scopes/{group['scopeId']}/cancel", body={})
                except Exception as err:
                    _runtime.log.warning("gather %s: could not stop what is left of its group (%s)", group_id, err)
        if self.error is not None:
            raise self.error
        return self.accepted if self.need == "all" else self.accepted[: self.target]

    def _finish(self, error: BaseException | None = None) -> None:
        if not self.finished.is_set():
            self.error = error
            self.finished.set()

    async def _watch(self, group_id: str, member_id: str, item: Any, members: int) -> None:
        binding = self.queue.binding
        try:
            task = await self.queue.wait_terminal(member_id, self.deadline)
            if self.finished.is_set():
                return
            ok = False
            if task["state"] == "SUCCEEDED":
                result = task.get("outcome")
                verdict = True if self.accept is None else self.accept(result, item)
                if inspect.isawaitable(verdict):
                    verdict = await verdict
                ok = bool(verdict)
                if ok and not self.finished.is_set():
                    self.accepted.append(result)
            else:
                self.failures.append(task.get("outcomeReason") or str(task["state"]).lower())
            try:
                await binding.call("POST", f"/task-groups/{group_id}/tasks/{member_id}/{'accept' if ok else 'reject'}", body={})
            except Exception as err:
                _runtime.log.debug("gather %s: verdict on %s not recorded: %s", group_id, member_id, err)
            self.decided += 1
            self._check(members)
        except Exception as err:
            self._finish(err)

    def _check(self, members: int) -> None:
        accepted, target, left = len(self.accepted), self.target, members - self.decided
        if self.need != "all" and accepted >= target:
            self._finish()
        elif left == 0:
            if self.need == "all" or accepted >= target:
                self._finish()
            else:
                reason = self.failures[0] if self.failures else "not enough results were accepted"
                self._finish(TaskFailedError(f"gather got {accepted} of the {target} results it needed", reason=reason))
        elif self.need != "all" and accepted + left < target:
            reason = self.failures[0] if self.failures else "too many results were rejected"
            self._finish(TaskFailedError(f"gather can no longer reach {target} accepted results", reason=reason))


@async_forms
class Job:
    """A submitted job; `id` is its task's id."""

    def __init__(self, queue: QueueImpl, job_id: str) -> None:
        self._queue = queue
        self.id = job_id

    def result(self, timeout: Duration | None = None) -> Any:
        """Wait for the job to end; without a timeout, until it does or the run stops."""
        return self._queue.binding.shared.run_blocking(self._queue.result(self.id, timeout))

    async def aresult(self, timeout: Duration | None = None) -> Any:
        return await self._queue.result(self.id, timeout)

    def __repr__(self) -> str:
        return f"<Job {self.id} in {self._queue.name}>"


@async_forms
class Queue:
    """A queue of work for worker processes (see the module docstring).

    Calling it with an input sends the job and waits for its result: a blocking call when the
    handler is a plain function, a coroutine when it is `async def`. A producer-only queue (no
    handler) blocks in plain code and returns a coroutine where an event loop runs; `acall` is
    always async. Calling a producer-only queue with a function makes it that queue's handler:
    `@runstate.queue("review")`.

    So a queue whose handler is `async def` gives an awaitable from plain code too, as 0.3.0's
    does (that is what lets `asyncio.run(review(doc))` work): await it in a coroutine, or call
    `review.send(doc).result()` from plain code. One that is never awaited is named in Python's
    "never awaited" warning with that advice.
    """

    def __init__(self, impl: QueueImpl, register: Callable[[QueueImpl], None]) -> None:
        self._impl = impl
        self._register = register

    @property
    def name(self) -> str:
        """The queue's name (its mailbox in the space)."""
        return self._impl.name

    @property
    def servable(self) -> bool:
        """True when it has a handler, so `serve()` runs its jobs; False for a producer-only queue."""
        return self._impl.servable

    def __call__(self, input: Any) -> Any:  # noqa: A002
        impl = self._impl
        if not impl.servable and callable(input) and not isinstance(input, (str, bytes, Mapping, list, tuple)):
            return self._with_handler(input)
        if impl.is_async or (not impl.servable and in_async_context()):
            call = impl.call(input)
            if impl.is_async and not in_async_context():
                # From plain code, the awaitable is most often a mistake (a missing `await`), though
                # `asyncio.run(review(doc))` is not: name the way out in Python's own warning.
                cast("types.CoroutineType[Any, Any, Any]", call).__qualname__ = (
                    f"{impl.name}(...): a queue with an async def handler gives an awaitable; await it in a "
                    f"coroutine, or call {impl.name}.send(x).result() from plain code. The call"
                )
            return call
        return impl.binding.shared.run_blocking(impl.call(input))

    def _with_handler(self, handler: Callable[[Any], Any]) -> "Queue":
        impl = QueueImpl(self._impl.binding, self._impl.name, handler, **self._impl.options)
        self._register(impl)
        queue = Queue(impl, self._register)
        functools.update_wrapper(queue, handler, updated=())
        return queue

    async def acall(self, input: Any) -> Any:  # noqa: A002
        """Send and wait for the result."""
        return await self._impl.call(input)

    def send(self, input: Any) -> Job:  # noqa: A002
        """Send only; returns the job."""
        return self._impl.binding.shared.run_blocking(self._impl.send(input))

    async def asend(self, input: Any) -> Job:  # noqa: A002
        return await self._impl.send(input)

    def gather(
        self, inputs: Iterable[Any], *, need: str | int = "all", accept: Callable[[Any, Any], Any] | None = None,
        timeout: Duration | None = None,
    ) -> list[Any]:
        """Send every input as one group; the accepted results once `need` of them are in."""
        return self._impl.binding.shared.run_blocking(self._impl.gather(inputs, need=need, accept=accept, timeout=timeout))

    async def agather(
        self, inputs: Iterable[Any], *, need: str | int = "all", accept: Callable[[Any, Any], Any] | None = None,
        timeout: Duration | None = None,
    ) -> list[Any]:
        return await self._impl.gather(inputs, need=need, accept=accept, timeout=timeout)

    def __repr__(self) -> str:
        return f"<Queue {self._impl.name} ({'handler' if self._impl.servable else 'producer-only'})>"


class StopWhen:
    """A stop flag set by any of several flags (anything with `is_set()`)."""

    def __init__(self, *flags: Any) -> None:
        self._flags = [flag for flag in flags if flag is not None]

    @property
    def never(self) -> bool:
        """True when there is no flag to watch (nothing but the run's end stops it)."""
        return not self._flags

    def is_set(self) -> bool:
        return any(flag.is_set() for flag in self._flags)


async def serve(
    binding: RunBinding,
    defined: Iterable[QueueImpl],
    *,
    concurrency: int | None = None,
    queues: Sequence[Queue] | None = None,
    signal: Any = None,
) -> None:
    """Run the handlers of the chosen queues until the run stops (then at once), `signal` is set
    (then after the running jobs drain, at most 30 s) or the task is cancelled."""
    if queues is None:
        chosen = [impl for impl in defined if impl.servable]
    else:
        chosen = []
        for queue in queues:
            impl = queue._impl if isinstance(queue, Queue) else None
            if impl is None or not impl.servable:
                raise ConfigError("serve() was given a queue without a handler")
            chosen.append(impl)
    if not chosen:
        raise ConfigError("serve() found no queues with handlers; define one with @runstate.queue(name)")
    if concurrency is not None:
        check_count(concurrency, "concurrency")
    binding.throw_if_stopped()

    async def serve_one(impl: QueueImpl) -> None:
        run = await impl.binding.run()  # each queue serves the run of the client it was defined on
        consumer = impl.consumer(run.id, concurrency or impl.concurrency, StopWhen(signal))
        stopped = ScopeCancelledError("SCOPE_CANCELLED", 409, f"run {run.name} has stopped")
        remove = impl.binding.signal.add_callback(call_soon_from_any_thread(lambda: consumer.end_run(stopped)))
        try:
            await consumer.run()
        finally:
            remove()

    async def serve_all() -> None:
        async with anyio.create_task_group() as group:
            for impl in chosen:
                group.start_soon(serve_one, impl)

    try:
        await binding.track(serve_all)
    except BaseExceptionGroup as errors:
        single = _runtime.single_error(errors)
        if single is errors:
            raise
        raise single from None
