"""Shared tasks and work queues for `runstate mcp`: submit, take, complete, fail, result.

A queue is a `WORK` mailbox, made on first use by whoever names it (`submit` or `take`), so a
worker may wait for work before anything was submitted. `submit` is the SDK's: one task per key
in the run, the same input joins it, other input is refused.

A taken task is a delivery held for the model: leased for `lease_seconds` and kept alive by the
client's renewal loop exactly as `consume()` keeps a handler's delivery (`Kept`, added to the
client's `Renewals`), until the model completes or fails it, the session ends (it is put back at
once), the process dies (the server requeues it when the lease runs out, attempt + 1), or it is
lost (reported once, by the next answer). A result is recorded as the task's outcome as it is:
`complete` sends `{"payload": result}`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from .._checks import KEY_LEN_MAX, check_lease_seconds, check_text
from .._context import Context
from .._renewal import Kept
from ..errors import LeaseLostError, ScopeCancelledError, ValidationError, WaitTimeoutError
from ..mailboxes import RECV_WAIT_MS_MAX, Delivery, MailboxRef
from ..tasks import TERMINAL_STATES
from ._session import LIST_MAX, Refusal, check_seconds, stamp

if TYPE_CHECKING:
    from ._session import HolderSession

__all__ = ["Work", "Taken", "REASON_LEN_MAX", "TASKS_SCANNED_MAX"]

# The longest reason `fail` records (the server keeps up to 2000 characters).
REASON_LEN_MAX = 2000
# `result` of a key this session did not submit looks among the run's newest tasks, this many.
TASKS_SCANNED_MAX = 1000
# An answer that came back quicker than this share of the asked wait was not held by the server
# (it shuts down, or holds no long polls): the take ends there rather than asking in a loop.
HELD_FRACTION = 0.9


class Taken:
    """A task (or a plain message) this session took: its delivery and its place in the renewals."""

    __slots__ = ("delivery", "queue", "key", "kept", "lease_seconds")

    def __init__(self, delivery: Delivery, queue: str, key: str | None, kept: Kept, lease_seconds: int) -> None:
        self.delivery = delivery
        self.queue = queue
        self.key = key
        self.kept = kept
        self.lease_seconds = lease_seconds

    @property
    def id(self) -> str:
        """What the model names it by: the task's id, or a plain message's."""
        return self.delivery.task_id or self.delivery.id

    def view(self) -> dict[str, Any]:
        delivery = self.delivery
        return {
            "task": self.id, "key": self.key, "queue": self.queue, "attempt": delivery.attempt,
            "lease_seconds": self.lease_seconds, "lease_ends_at": stamp(delivery.expires_at),
        }


class Work:
    """The tasks side of one holder session."""

    def __init__(self, session: HolderSession) -> None:
        self.session = session
        self.taken: dict[str, Taken] = {}
        # Queue name -> its mailbox in the run (made on first use, then cached).
        self._queues: dict[str, MailboxRef] = {}
        # Task key -> task id, for the keys this session submitted.
        self._submitted: dict[str, str] = {}
        # Tasks lost since the last answer (`take_losses`).
        self._lost: list[dict[str, Any]] = []

    @property
    def _ctx(self) -> Context:
        # The client's own request layer and renewals: this module keeps deliveries as the SDK's
        # consume() does, from inside the SDK.
        return self.session.rs._ctx

    async def _queue(self, name: str) -> MailboxRef:
        check_text("queue", name, KEY_LEN_MAX)
        mailbox = self._queues.get(name)
        if mailbox is None:
            run = await self.session.run()
            row = await self.session.rs.mailboxes.ensure(name, mode="WORK")
            mailbox = self._queues[name] = run.mailbox_by_id(row["id"])
        return mailbox

    # -- producers ---------------------------------------------------------------------------------

    async def submit(self, queue: str, input: Any, key: str) -> dict[str, Any]:
        check_text("key", key, KEY_LEN_MAX)
        mailbox = await self._queue(queue)
        ticket = await mailbox.submit(input, key=key, subscriber_id=self.session.holder)
        self._submitted[key] = ticket.id
        view = await ticket.status()
        state = view["state"]
        answer = {"task": ticket.id, "key": key, "queue": queue, "state": state, "attempt": view["attempt"]}
        if state in TERMINAL_STATES:
            return {**answer, "result": view.get("outcome"), "reason": view.get("outcomeReason"),
                    "message": f"the task of {key} had already ended {state}: its result is here, nothing runs again"}
        return {**answer, "message": f"task {ticket.id} ({key}) is on queue {queue}: read it with result"}

    async def result(self, key: str, wait_seconds: float) -> dict[str, Any]:
        check_text("key", key, KEY_LEN_MAX)
        wait_s = check_seconds("wait_seconds", wait_seconds)
        run = await self.session.run()
        task_id = self._submitted.get(key) or await self._find(key)
        if task_id is None:
            raise Refusal(
                f"no task has the key {key} in run {self.session.run_name} (among its newest {TASKS_SCANNED_MAX} "
                "tasks): submit it first"
            )
        ticket = run.task(task_id)
        if wait_s:
            try:
                await ticket.result(timeout_ms=round(wait_s * 1000))
            except WaitTimeoutError:
                pass  # answered below as it stands
        view = await ticket.status()
        state = view["state"]
        answer: dict[str, Any] = {
            "task": task_id, "key": key, "state": state, "attempt": view["attempt"], "finished": state in TERMINAL_STATES,
            "result": view.get("outcome"), "reason": view.get("outcomeReason"),
        }
        if view.get("tombstoned"):
            answer["tombstoned"] = True
            answer["message"] = "the task ended and its result is no longer kept (retention ran out)"
        elif state not in TERMINAL_STATES:
            answer["message"] = f"not finished yet ({state}): call result again with wait_seconds to wait for it"
        return answer

    async def _find(self, key: str) -> str | None:
        run = await self.session.run()
        body = (await self._ctx.call("GET", f"/scopes/{run.id}/tasks", query={"limit": TASKS_SCANNED_MAX})).body
        return next((row["id"] for row in body["tasks"] if row.get("taskKey") == key), None)

    # -- workers -----------------------------------------------------------------------------------

    async def take(self, queue: str, wait_seconds: float, lease_seconds: int | None) -> dict[str, Any]:
        wait_s = check_seconds("wait_seconds", wait_seconds)
        lease_s = check_lease_seconds(self.session.lease_seconds if lease_seconds is None else lease_seconds, "lease_seconds")
        mailbox = await self._queue(queue)
        deadline = anyio.current_time() + wait_s
        while True:
            left_ms = max(0, round((deadline - anyio.current_time()) * 1000))
            asked_ms = min(left_ms, RECV_WAIT_MS_MAX)
            sent = anyio.current_time()
            raw = await mailbox._recv(lease_s, asked_ms)
            if raw is not None:
                break
            held_ms = (anyio.current_time() - sent) * 1000
            if left_ms <= RECV_WAIT_MS_MAX or held_ms < asked_ms * HELD_FRACTION:
                return {"task": None, "queue": queue, "waited_seconds": wait_s,
                        "message": f"nothing to take on queue {queue}" + (f" after waiting {wait_s:g} s" if wait_s else "")}
        # A held recv leases as it answers; one not held, when it was sent.
        began = sent if asked_ms <= 0 else anyio.current_time()
        taken = self._keep(Delivery(self._ctx, raw, lease_seconds=lease_s, sent_at=began), queue, lease_s)
        if taken.delivery.task_id is not None:
            try:
                taken.key = (await self.session.rs.scope(taken.delivery.scope_id).task(taken.delivery.task_id).status())["taskKey"]
            except Exception:
                pass  # the task is held all the same; its key is only a courtesy
        return {
            **taken.view(), "input": taken.delivery.data,
            "message": f"{taken.id} is yours until you complete or fail it; its lease is renewed in the background "
            "while this session lives",
        }

    def _keep(self, delivery: Delivery, queue: str, lease_s: int) -> Taken:
        clock = delivery._clock
        assert clock is not None, "a taken delivery knows its lease"
        kept = Kept(self._ctx, clock, delivery._renewal_request, delivery._renewal_reply, delivery._mark_lost, f"delivery {delivery.id}")
        self._ctx.holdings.renewals.add(kept)
        taken = Taken(delivery, queue, None, kept, lease_s)
        stale = self.taken.get(taken.id)
        if stale is not None:  # the server gave it out again: the lease this session had is gone
            self._drop(stale)
            self._lost.append(_task_loss(stale))
        self.taken[taken.id] = taken
        return taken

    def _drop(self, taken: Taken) -> None:
        """No longer held: stop renewing it (settled, lost, or given back)."""
        self.taken.pop(taken.id, None)
        self._ctx.holdings.renewals.remove(taken.kept)

    def _held(self, task: str) -> Taken:
        check_text("task", task, KEY_LEN_MAX)
        taken = self.taken.get(task)
        if taken is None:
            held = ", ".join(sorted(self.taken)) or "none"
            raise Refusal(f"you do not hold task {task} (you hold {held}): take it first")
        if taken.delivery.is_lost:
            raise Refusal(f"task {task} was lost before this call: {_loss_why(taken)}")
        return taken

    async def complete(self, task: str, result: Any) -> dict[str, Any]:
        taken = self._held(task)
        try:
            await taken.delivery.complete(result={"payload": result})
        except (LeaseLostError, ScopeCancelledError) as err:
            self._drop(taken)
            raise Refusal(f"task {task} is no longer yours ({err}): its result was not recorded") from err
        except ValidationError as err:
            raise Refusal(f"the result was refused ({err}); the task is still yours: complete it with a smaller "
                          "result, or fail it") from err
        self._drop(taken)
        return {"completed": True, "task": taken.id, "key": taken.key, "state": "SUCCEEDED",
                "message": f"{taken.id} succeeded; its result is recorded for every caller of its key"}

    async def fail(self, task: str, reason: str, retry: bool) -> dict[str, Any]:
        taken = self._held(task)
        check_text("reason", reason, REASON_LEN_MAX)
        try:
            await taken.delivery._nack(retry=retry, error=reason)
        except (LeaseLostError, ScopeCancelledError) as err:
            self._drop(taken)
            raise Refusal(f"task {task} is no longer yours ({err}): nothing was recorded") from err
        self._drop(taken)
        answer: dict[str, Any] = {"failed": True, "task": taken.id, "key": taken.key, "retry": retry}
        if taken.delivery.task_id is None:
            return {**answer, "message": "the message is back on its queue" if retry else "the message is dead-lettered"}
        view = await self.session.rs.scope(taken.delivery.scope_id).task(taken.delivery.task_id).status()
        answer["state"] = view["state"]
        if view["state"] in TERMINAL_STATES:
            used = " (its attempts are used up)" if retry else ""
            answer["message"] = f"{taken.id} ended {view['state']}{used}: {view.get('outcomeReason') or reason}"
        else:
            answer["message"] = f"{taken.id} is back on queue {taken.queue}: another take gets it after a backoff, as attempt {taken.delivery.attempt + 1}"
        return answer

    # -- the session's holdings --------------------------------------------------------------------

    def held(self) -> list[dict[str, Any]]:
        return [taken.view() for taken in list(self.taken.values())[:LIST_MAX]]

    async def take_losses(self) -> list[dict[str, Any]]:
        for taken in list(self.taken.values()):
            if taken.delivery.is_lost:
                self._drop(taken)
                self._lost.append(_task_loss(taken))
        lost, self._lost = self._lost, []
        return lost

    def give_back_all(self, group: anyio.abc.TaskGroup) -> None:
        """Put back every task held (the session ends): another worker takes it after the queue's retry
        backoff (a second for a first attempt) instead of after its lease."""
        for taken in list(self.taken.values()):
            self._drop(taken)
            group.start_soon(_give_back, taken.delivery, self.session.holder)


async def _give_back(delivery: Delivery, holder: str) -> None:
    try:
        await delivery._nack(retry=True, error=f"the MCP session of {holder} ended")
    except Exception:
        pass  # its lease runs out on the server, which hands it on then


def _task_loss(taken: Taken) -> dict[str, Any]:
    why = _loss_why(taken)
    return {
        "kind": "task", "task": taken.id, "key": taken.key, "queue": taken.queue, "why": why,
        "message": f"you no longer hold task {taken.id}: {why}. It goes to another worker; do not complete it "
        "(a late result is refused).",
    }


def _loss_why(taken: Taken) -> str:
    error = taken.delivery.lost_error
    return str(error) if error is not None else "its lease ran out before a renewal got through"
