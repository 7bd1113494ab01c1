"""Shared tasks and work queues for `runstate mcp`: submit, take, complete, fail, result.

A queue is a `WORK` mailbox, made on first use by whoever names it (`submit` or `take`), so a
worker may wait for work before anything was submitted. `submit` is the SDK's: one task per key
in the run, the same input joins it, other input is refused.

A taken task is a delivery held for the model: received with a lease of `lease_seconds` and kept
renewed in the background by the client's renewal loop (`delivery.keep_renewed()`, as `consume()`
keeps a handler's delivery) until the model completes or fails it (`complete`, `retry(reason)`,
`reject(reason)`), the session ends (it is put back at once), the process dies (the server
requeues it when the lease runs out, attempt + 1), or it is lost (reported once, by the next
answer). A result is recorded as the task's outcome as it is: `complete` sends
`{"payload": result}`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from ..errors import LeaseLostError, ScopeCancelledError, ValidationError, WaitTimeoutError
from ..mailboxes import REASON_LEN_MAX, Delivery, MailboxRef
from ..tasks import TERMINAL_STATES
from ._session import LIST_MAX, LIST_READ_MAX, Refusal, check_seconds, stamp

if TYPE_CHECKING:
    from ._session import HolderSession

__all__ = ["Work", "Taken", "REASON_LEN_MAX", "TASKS_SCANNED_MAX"]

# `result` of a key this session did not submit looks among the run's newest tasks, this many.
TASKS_SCANNED_MAX = LIST_READ_MAX


class Taken:
    """A task (or a plain message) this session took: its delivery, kept renewed while it is held."""

    __slots__ = ("delivery", "queue", "key", "lease_seconds")

    def __init__(self, delivery: Delivery, queue: str, key: str | None, lease_seconds: int) -> None:
        self.delivery = delivery
        self.queue = queue
        self.key = key
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

    async def _queue(self, name: str) -> MailboxRef:
        mailbox = self._queues.get(name)
        if mailbox is None:
            run = await self.session.run()
            row = await self.session.rs.mailboxes.ensure(name, mode="WORK")
            mailbox = self._queues[name] = run.mailbox_by_id(row["id"])
        return mailbox

    # -- producers ---------------------------------------------------------------------------------

    async def submit(self, queue: str, input: Any, key: str) -> dict[str, Any]:
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
        page = await run.tasks(limit=TASKS_SCANNED_MAX)
        return next((row["id"] for row in page["tasks"] if row.get("taskKey") == key), None)

    # -- workers -----------------------------------------------------------------------------------

    async def take(self, queue: str, wait_seconds: float, lease_seconds: int | None) -> dict[str, Any]:
        wait_s = check_seconds("wait_seconds", wait_seconds)
        lease_s = self.session.lease_seconds if lease_seconds is None else lease_seconds
        mailbox = await self._queue(queue)
        began = anyio.current_time()
        # As many long polls as the wait takes; None once it has passed (or the server ended it early,
        # as one that shuts down does: the answer says how long it was, not how long was asked).
        delivery = await mailbox.receive(wait_ms=round(wait_s * 1000), lease_seconds=lease_s)
        if delivery is None:
            waited_s = min(wait_s, round(anyio.current_time() - began, 1)) if wait_s else 0
            return {"task": None, "queue": queue, "waited_seconds": waited_s,
                    "message": f"nothing to take on queue {queue}" + (f" after waiting {waited_s:g} s" if waited_s else "")}
        taken = self._keep(delivery, queue, lease_s)
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
        delivery.keep_renewed()
        taken = Taken(delivery, queue, None, lease_s)
        stale = self.taken.get(taken.id)
        if stale is not None:  # the server gave it out again: the lease this session had is gone
            self._drop(stale)
            self._lost.append(_task_loss(stale))
        self.taken[taken.id] = taken
        return taken

    def _drop(self, taken: Taken) -> None:
        """No longer held: stop renewing it (settled or given back, which stops it anyway; lost)."""
        if self.taken.get(taken.id) is taken:
            del self.taken[taken.id]
        taken.delivery.stop_renewing()

    def _held(self, task: str) -> Taken:
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
        try:
            await (taken.delivery.retry(reason) if retry else taken.delivery.reject(reason))
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
        await delivery.retry(f"the MCP session of {holder} ended")
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
