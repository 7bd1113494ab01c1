"""The blocking twins of claims, mailboxes, deliveries and tasks (see `runstate.blocking`).

Each class wraps its async twin and runs each method on the client's loop (`Loop.run`): a
`BlockingClaim` gives `BlockingLease`s, a `BlockingMailbox` gives `BlockingTicket`s and
`BlockingDelivery`s, and its `admit()` a `BlockingAdmittedWork`. `runstate.blocking` exports them.
"""

from __future__ import annotations

import datetime
import functools
import threading
from typing import Any, Callable, Literal, NotRequired, TypedDict, TypeVar

from ._docs import twin_of
from ._loop import Loop
from ._runtime import is_async_callable
from .capacity import AdmittedWork
from .claims import DEFAULT_LEASE_SECONDS, DEFAULT_TIMEOUT_MS, ClaimLease, ClaimRef
from .mailboxes import DEFAULT_CONSUME_WAIT_MS, RECEIVE_LEASE_SECONDS, Delivery, MailboxRef, StopFlag
from .tasks import DEFAULT_POLL_MS, TaskTicket
from .tasks import DEFAULT_TIMEOUT_MS as TASK_TIMEOUT_MS
from .types import ClaimView, MessageView, TaskResult, TaskView

__all__ = [
    "BlockingLease", "BlockingAcquireAttempt", "BlockingClaim", "BlockingDelivery", "BlockingTicket", "BlockingMailbox",
    "BlockingAdmittedWork",
]

T = TypeVar("T")


@twin_of(ClaimLease)
class BlockingLease:
    """A held claim (see `ClaimLease`): `key`, `generation`, `expires_at`, `lease_seconds`,
    `is_lost` and `lost_error` read as there; `lost_event` is a `threading.Event` here."""

    def __init__(self, lease: ClaimLease, loop: Loop) -> None:
        self._lease = lease
        self._loop = loop
        self.lost_event = threading.Event()
        loop.loop.call_soon_threadsafe(lease._when_lost, self.lost_event.set)

    def __repr__(self) -> str:
        return f"<blocking {self._lease!r}>"

    @property
    def key(self) -> str:
        return self._lease.key

    @property
    def generation(self) -> int:
        generation: int = self._lease.generation
        return generation

    @property
    def expires_at(self) -> datetime.datetime:
        return self._lease.expires_at

    @property
    def lease_seconds(self) -> int:
        return self._lease.lease_seconds

    @property
    def is_lost(self) -> bool:
        return self._lease.is_lost

    @property
    def lost_error(self) -> BaseException | None:
        return self._lease.lost_error

    def token(self) -> str:
        return self._lease.token()

    def raise_if_lost(self) -> None:
        self._lease.raise_if_lost()

    def renew(self, lease_seconds: int | None = None) -> None:
        self._loop.run(self._lease.renew(lease_seconds))

    def release(self, observation: Any = None) -> None:
        self._loop.run(self._lease.release(observation))

    def close(self) -> None:
        """Stop renewing without releasing (see `ClaimLease.aclose`)."""
        self._loop.run(self._lease.aclose())

    def __enter__(self) -> BlockingLease:
        return self

    def __exit__(self, *exc_info: object) -> None:
        # As `ClaimLease.__aexit__`: a block that ended normally learns at the release whether the
        # lease lasted, and a release refused as stale raises `LeaseLostError`.
        exc_type = exc_info[0]
        if exc_type is not None:
            interrupted = isinstance(exc_type, type) and not issubclass(exc_type, Exception)
            self._loop.run(self._lease._release_quietly(cancelled=interrupted))
            return
        self._loop.run(self._lease._release_checked())


class BlockingAcquireAttempt(TypedDict):
    """`claim.try_acquire()`: `{"kind": "acquired", "lease": lease}` or `{"kind": "busy"}`
    (`kind` says which; `lease`, a `BlockingLease`, is there when it is `acquired`)."""

    kind: Literal["acquired", "busy"]
    lease: NotRequired[BlockingLease]


@twin_of(ClaimRef)
class BlockingClaim:
    """A claim key in a scope (see `ClaimRef`): its `key` and `scope_id`."""

    def __init__(self, ref: ClaimRef, loop: Loop) -> None:
        self._ref = ref
        self._loop = loop

    def __repr__(self) -> str:
        return f"<blocking {self._ref!r}>"

    @property
    def key(self) -> str:
        return self._ref.key

    @property
    def scope_id(self) -> str:
        return self._ref.scope_id

    def acquire(
        self, *, lease_seconds: int = DEFAULT_LEASE_SECONDS, wait: bool = False, timeout_ms: int = DEFAULT_TIMEOUT_MS
    ) -> BlockingLease:
        lease = self._loop.run(self._ref.acquire(lease_seconds=lease_seconds, wait=wait, timeout_ms=timeout_ms))
        return BlockingLease(lease, self._loop)

    def try_acquire(
        self, *, lease_seconds: int = DEFAULT_LEASE_SECONDS, wait: bool = False, timeout_ms: int = DEFAULT_TIMEOUT_MS
    ) -> BlockingAcquireAttempt:
        attempt = self._loop.run(self._ref.try_acquire(lease_seconds=lease_seconds, wait=wait, timeout_ms=timeout_ms))
        if "lease" in attempt:
            return BlockingAcquireAttempt(kind="acquired", lease=BlockingLease(attempt["lease"], self._loop))
        return BlockingAcquireAttempt(kind="busy")

    def force_release(self, reason: str | None = None) -> ClaimView:
        return self._loop.run(self._ref.force_release(reason))

    def run(
        self,
        fn: Callable[[BlockingLease], T],
        *,
        wait: bool = False,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
    ) -> T:
        """Acquire, return `fn(lease)` (run in a worker thread) while renewed, release on the way out."""
        loop = self._loop

        def in_thread(lease: ClaimLease) -> T:
            return fn(BlockingLease(lease, loop))

        result: T = loop.run(self._ref.run(in_thread, wait=wait, timeout_ms=timeout_ms, lease_seconds=lease_seconds))
        return result


@twin_of(Delivery)
class BlockingDelivery:
    """One leased message (see `Delivery`): `id`, `data`, `attempt`, `scope_id`, `deadline`,
    `task_id`, `expires_at`, `settled`, `is_lost` and `lost_error` read as there."""

    def __init__(self, delivery: Delivery, loop: Loop) -> None:
        self._delivery = delivery
        self._loop = loop

    def __repr__(self) -> str:
        return f"<blocking {self._delivery!r}>"

    @property
    def id(self) -> str:
        return self._delivery.id

    @property
    def data(self) -> Any:
        return self._delivery.data

    @property
    def attempt(self) -> int:
        return self._delivery.attempt

    @property
    def scope_id(self) -> str:
        return self._delivery.scope_id

    @property
    def deadline(self) -> str | None:
        return self._delivery.deadline

    @property
    def task_id(self) -> str | None:
        return self._delivery.task_id

    @property
    def expires_at(self) -> datetime.datetime | None:
        return self._delivery.expires_at

    @property
    def settled(self) -> bool:
        return self._delivery.settled

    @property
    def is_lost(self) -> bool:
        return self._delivery.is_lost

    @property
    def lost_error(self) -> BaseException | None:
        return self._delivery.lost_error

    def raise_if_lost(self) -> None:
        self._delivery.raise_if_lost()

    def complete(self, result: Any = None) -> None:
        self._loop.run(self._delivery.complete(result))

    def retry(self, reason: str | None = None) -> None:
        self._loop.run(self._delivery.retry(reason))

    def reject(self, reason: str | None = None) -> None:
        self._loop.run(self._delivery.reject(reason))

    def renew(self, lease_seconds: int | None = None) -> None:
        self._loop.run(self._delivery.renew(lease_seconds))

    def keep_renewed(self) -> None:
        self._loop.run(_on_loop(self._delivery.keep_renewed))

    def stop_renewing(self) -> None:
        self._loop.run(_on_loop(self._delivery.stop_renewing))


async def _on_loop(action: Callable[[], None]) -> None:
    """A plain method of an async handle, run on the client's loop (where its lease's clock and
    renewals live)."""
    action()


@twin_of(TaskTicket)
class BlockingTicket:
    """A handle on one shared task (see `TaskTicket`): its `id` and `scope_id`."""

    def __init__(self, ticket: TaskTicket, loop: Loop) -> None:
        self._ticket = ticket
        self._loop = loop

    def __repr__(self) -> str:
        return f"<blocking {self._ticket!r}>"

    @property
    def id(self) -> str:
        return self._ticket.id

    @property
    def scope_id(self) -> str | None:
        return self._ticket.scope_id

    def status(self) -> TaskView:
        return self._loop.run(self._ticket.status())

    def result(self, *, timeout_ms: int = TASK_TIMEOUT_MS, poll_ms: int = DEFAULT_POLL_MS) -> TaskResult:
        return self._loop.run(self._ticket.result(timeout_ms=timeout_ms, poll_ms=poll_ms))

    def await_admission(self, *, timeout_ms: int = TASK_TIMEOUT_MS, poll_ms: int = DEFAULT_POLL_MS) -> TaskView:
        return self._loop.run(self._ticket.await_admission(timeout_ms=timeout_ms, poll_ms=poll_ms))

    def cancel(self, reason: str | None = None) -> dict[str, Any]:
        return self._loop.run(self._ticket.cancel(reason))

    def join(self, subscriber_id: str, scope_id: str | None = None) -> dict[str, Any]:
        return self._loop.run(self._ticket.join(subscriber_id, scope_id))

    def detach(self, subscriber_id: str) -> dict[str, Any]:
        return self._loop.run(self._ticket.detach(subscriber_id))


@twin_of(MailboxRef)
class BlockingMailbox:
    """A queue bound to a scope (see `MailboxRef`): its `scope_id` and `name`."""

    def __init__(self, ref: MailboxRef, loop: Loop) -> None:
        self._ref = ref
        self._loop = loop

    def __repr__(self) -> str:
        return f"<blocking {self._ref!r}>"

    @property
    def scope_id(self) -> str:
        return self._ref.scope_id

    @property
    def name(self) -> str | None:
        return self._ref.name

    def resolve_id(self) -> str:
        return self._loop.run(self._ref.resolve_id())

    def submit(
        self,
        input: Any,
        *,
        key: str,
        subscriber_id: str | None = None,
        deadline: str | None = None,
        requirements: dict[str, Any] | None = None,
        work_limit: str | None = None,
    ) -> BlockingTicket:
        ticket = self._loop.run(
            self._ref.submit(
                input, key=key, subscriber_id=subscriber_id, deadline=deadline,
                requirements=requirements, work_limit=work_limit,
            )
        )
        return BlockingTicket(ticket, self._loop)

    def send(self, data: Any, *, work_key: str | None = None, deadline: str | None = None) -> MessageView:
        return self._loop.run(self._ref.send(data, work_key=work_key, deadline=deadline))

    def admit(self, *, lease_seconds: int = 30, wait_ms: int = 0) -> BlockingAdmittedWork | None:
        """The oldest task delivery whose requirements all fit, taken with them (see
        `MailboxRef.admit`), or None when nothing can be admitted within `wait_ms`."""
        admitted = self._loop.run(self._ref.admit(lease_seconds=lease_seconds, wait_ms=wait_ms))
        return None if admitted is None else BlockingAdmittedWork(admitted, self._loop)

    def receive(self, *, wait_ms: int = 0, lease_seconds: int = RECEIVE_LEASE_SECONDS) -> BlockingDelivery | None:
        delivery = self._loop.run(self._ref.receive(wait_ms=wait_ms, lease_seconds=lease_seconds))
        return None if delivery is None else BlockingDelivery(delivery, self._loop)

    def consume(
        self,
        handler: Callable[[Any, BlockingDelivery], Any],
        *,
        concurrency: int = 1,
        lease_seconds: int = 30,
        poll_ms: int = 250,
        wait_ms: int = DEFAULT_CONSUME_WAIT_MS,
        shutdown_timeout: float = 30.0,
        stop_event: StopFlag | None = None,
        on_error: Callable[[BaseException, BlockingDelivery | None], Any] | None = None,
        give_up_after_s: float | None = None,
        prefetch: int = 1,
    ) -> None:
        """Run `handler(data, delivery)` in worker threads until stopped (see `MailboxRef.consume`)."""
        loop = self._loop

        @functools.wraps(handler)  # consume() knows the handler by what it wraps (its warnings)
        def in_thread(data: Any, delivery: Delivery) -> Any:
            return handler(data, BlockingDelivery(delivery, loop))

        def report(err: BaseException, delivery: Delivery | None) -> Any:
            # Called on the client's loop: it may log or count, not make blocking calls.
            return on_error(err, None if delivery is None else BlockingDelivery(delivery, loop)) if on_error else None

        if is_async_callable(handler):
            raise TypeError("the blocking client's consume() takes a plain function; use AsyncRunstate for async handlers")
        loop.run(
            self._ref.consume(
                in_thread, concurrency=concurrency, lease_seconds=lease_seconds, poll_ms=poll_ms, wait_ms=wait_ms,
                shutdown_timeout=shutdown_timeout, stop_event=stop_event,
                on_error=report if on_error is not None else None, give_up_after_s=give_up_after_s,
                prefetch=prefetch,
            )
        )


@twin_of(AdmittedWork)
class BlockingAdmittedWork:
    """An admitted task delivery and what was taken with it (see `AdmittedWork`): `task` (a
    `BlockingTicket`, or None for a plain message), `delivery` (a `BlockingDelivery`),
    `resources` (`grants`, `consumptions`, `reservations`) and `attempt`. The grants share the
    delivery's lease: renew the delivery and they stay held; settle it and they are given back."""

    def __init__(self, admitted: AdmittedWork, loop: Loop) -> None:
        self.task: BlockingTicket | None = None if admitted.task is None else BlockingTicket(admitted.task, loop)
        self.delivery = BlockingDelivery(admitted.delivery, loop)
        self.resources: dict[str, Any] = admitted.resources
        self.attempt: int = admitted.attempt

    def __repr__(self) -> str:
        task = None if self.task is None else self.task.id
        return f"<blocking AdmittedWork(task={task!r}, attempt={self.attempt})>"
