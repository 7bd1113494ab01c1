"""One space: its scopes, claims, mailboxes, messages and tasks, and the commands that cross between them.

Each command method checks, decides the records, applies them through `apply` (the same code replay
runs) and returns an `Outcome` with the reply, the records, the timers to arm and the actors to
poke. Cross-table effects live here and nowhere else: ending a scope ends its subtree, which frees
its claims in the same record, so no crash can leave a claim held in an ended scope, and cancels
the tasks waiting in its queues (the queue and task commands are in `work.py`).

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from .boot import BootInfo
from .claims import ClaimTable
from .errors import VALIDATION_FAILED, KernelError
from .limits import Limits
from .mailboxes import MailboxTable
from .messages import MessageTable
from .outcome import Outcome, Timer
from .scopes import ACTIVE, EXPIRED, ScopeTree
from .tasks import TaskTable
from .timestamps import format_ms
from .usage import Usage
from .work import WORK_APPLY, WorkCommands, mailboxes_actor, queue_actor

__all__ = ["SpaceState", "RECORD_TYPES", "claim_actor", "scope_actor", "queue_actor", "mailboxes_actor"]


def claim_actor(space: str, scope_id: str, key: str) -> tuple:
    return ("claim", space, scope_id, key)


def scope_actor(space: str, scope_id: str) -> tuple:
    return ("scope", space, scope_id)


class SpaceState(WorkCommands):
    __slots__ = ("id", "limits", "boot", "scopes", "claims", "mailboxes", "messages", "tasks", "usage")

    def __init__(self, space_id: str, limits: Limits, boot: BootInfo | None = None) -> None:
        self.id = space_id
        self.limits = limits
        self.boot = boot if boot is not None else BootInfo()  # shared by all spaces of a state
        self.scopes = ScopeTree(limits)
        self.claims = ClaimTable()
        self.mailboxes = MailboxTable(limits)
        self.messages = MessageTable(limits, self.mailboxes)
        self.tasks = TaskTable(limits)
        self.usage = Usage(self.claims)

    def _commit(self, outcome: Outcome, *records: dict) -> Outcome:
        for record in records:
            record["space"] = self.id
            self.apply(record)
            outcome.records.append(record)
        return outcome

    # -- scopes ---------------------------------------------------------------------------------

    def create_scope(
        self,
        scope_id: str,
        name: str | None,
        parent_id: str | None,
        deadline_ms: int | None,
        child_limit: int | None,
        now_ms: int,
    ) -> Outcome:
        record = self.scopes.decide_create(scope_id, name, parent_id, deadline_ms, child_limit, now_ms)
        outcome = self._commit(Outcome(), record)
        scope = self.scopes.get(scope_id)
        if deadline_ms is not None:
            outcome.timers.append(Timer(deadline_ms, scope_actor(self.id, scope_id), "deadline", None))
        outcome.reply = self.scopes.view(scope, now_ms)
        return outcome

    def end_scope(self, scope_id: str, state: str, now_ms: int) -> Outcome:
        """Cancel or complete a scope; repeating the same end is harmless."""
        record = self.scopes.decide_end(scope_id, state, now_ms)
        outcome = Outcome() if record is None else self._end_scope_commit(record)
        outcome.reply = self.scopes.view(self.scopes.get(scope_id), now_ms)
        return outcome

    def expire_scope(self, scope_id: str, now_ms: int) -> Outcome:
        """The supervisor's proposal: record EXPIRED if the deadline has passed on an active scope."""
        scope = self.scopes.get(scope_id)
        if scope.stored_state != ACTIVE or scope.deadline_ms is None or now_ms < scope.deadline_ms:
            return Outcome()
        return self._end_scope_commit(self.scopes.decide_end(scope_id, EXPIRED, now_ms))

    def _end_scope_commit(self, record: dict) -> Outcome:
        """Record a scope's end; wake the receivers parked in its subtree, time its ended tasks."""
        subtree = self.scopes.subtree(record["id"])
        waiting = self.messages.waiting_in_scopes(subtree)
        outcome = self._commit(Outcome(), record)
        outcome.pokes.extend(self.queue_actors(subtree))
        for message in waiting:
            if message.task_id is not None:
                outcome.timers.extend(self._task_timers(self.tasks.get(message.task_id)))
        return outcome

    # -- claims ---------------------------------------------------------------------------------

    def acquire_claim(
        self,
        scope_id: str,
        key: str,
        holder: str,
        session: str,
        lease_ms: int,
        token: str,
        now_ms: int,
    ) -> Outcome:
        self.scopes.require_active(scope_id, now_ms)
        records = self.claims.decide_acquire(
            scope_id, key, holder, session, lease_ms, token, now_ms, self.boot.generation_floor
        )
        outcome = self._commit(Outcome(), *records)
        claim = self.claims.get(scope_id, key)
        outcome.timers.append(self._lease_timer(claim.scope_id, claim.key, claim.token, claim.expires_ms))
        outcome.reply = self.claims.view(claim)
        return outcome

    def renew_claim(self, key: str, token: str, lease_ms: int | None, now_ms: int) -> Outcome:
        record = self.claims.decide_renew(key, token, lease_ms, now_ms)
        outcome = self._commit(Outcome(), record)
        claim = self.claims.by_token(token)
        outcome.timers.append(self._lease_timer(claim.scope_id, claim.key, token, claim.expires_ms))
        outcome.reply = self.claims.view(claim)
        return outcome

    def release_claim(self, key: str, token: str, observation: Any, now_ms: int) -> Outcome:
        claim = self.claims.current(key, token, now_ms)
        reply = self.claims.view(claim)
        outcome = self._commit(Outcome(), self.claims.decide_release(key, token, observation, now_ms))
        reply.update(token=None, released=True, releasedAt=format_ms(now_ms))
        outcome.reply = reply
        return outcome

    def expire_claim(self, token: str, now_ms: int) -> Outcome:
        record = self.claims.decide_expire(token, now_ms)
        return Outcome() if record is None else self._commit(Outcome(), record)

    def _lease_timer(self, scope_id: str, key: str, token: str, expires_ms: int) -> Timer:
        return Timer(expires_ms, claim_actor(self.id, scope_id, key), "lease", token)

    # -- timers ---------------------------------------------------------------------------------

    def on_timer(self, actor: tuple, tag: Any, marker: Any, now_ms: int) -> Outcome:
        kind = actor[0]
        if kind == "claim":
            return self.expire_claim(marker, now_ms)
        if kind == "scope":
            return self.expire_scope(actor[2], now_ms)
        if kind == "queue":
            return self.on_queue_timer(tag, marker, now_ms)
        raise KernelError(VALIDATION_FAILED, f"no timer of kind {kind!r}")

    def timers(self) -> Iterator[Timer]:
        """Every timer the current state needs: after a recovery the kernel arms these."""
        for scope in self.scopes.all():
            if scope.stored_state == ACTIVE and scope.deadline_ms is not None:
                yield Timer(scope.deadline_ms, scope_actor(self.id, scope.id), "deadline", None)
        for claim in self.claims.held():
            yield self._lease_timer(claim.scope_id, claim.key, claim.token, claim.expires_ms)
        yield from self.work_timers()

    # -- restarts and images -----------------------------------------------------------------------

    def restart(self, newest_ms: int, now_ms: int) -> Outcome:
        """After a recovery: the claim expiries and grace renewals of `ClaimTable.decide_restart`,
        and the same rule for delivery leases (`WorkCommands.restart_deliveries`)."""
        grace_ms, spread_ms = self.limits.restart_grace_s * 1000, self.limits.restart_spread_s * 1000
        records = self.claims.decide_restart(newest_ms, now_ms, grace_ms, spread_ms)
        outcome = self._commit(Outcome(), *records)
        deliveries = self.restart_deliveries(newest_ms, grace_ms, spread_ms, now_ms)
        outcome.records.extend(deliveries.records)
        outcome.timers.extend(deliveries.timers)
        return outcome

    def image(self) -> Iterator[dict]:
        """Records that rebuild this space exactly: its scopes, its claims, then its mailboxes,
        messages and tasks (scopes first: the queues live in them), and last its usage counters."""
        for record in self.scopes.image():
            record["space"] = self.id
            yield record
        for record in self.claims.image():
            record["space"] = self.id
            yield record
        for record in self.work_image():
            record["space"] = self.id
            yield record
        usage = self.usage
        if usage.operations or usage.free or usage.events or usage.takeovers:
            yield usage.image(self.id)  # last: it sets the counters outright

    def is_empty(self) -> bool:
        """Nothing recorded here (a space is made on first use, reads included)."""
        return not len(self.scopes) and not len(self.claims) and self.work_is_empty()

    # -- applying -------------------------------------------------------------------------------

    def apply(self, record: dict) -> None:
        self.usage.count(record)
        _APPLY[record["type"]](self, record)

    def _apply_scope_ended(self, record: dict) -> None:
        self.scopes.apply_ended(record)
        subtree = self.scopes.subtree(record["id"])
        self.claims.drop_scopes(subtree)
        self._cascade_scope_ended(subtree, record["state"], record["at_ms"])


_APPLY: dict[str, Callable[[SpaceState, dict], Any]] = {
    "scope.created": lambda space, record: space.scopes.apply_created(record),
    "scope.ended": SpaceState._apply_scope_ended,
    "claim.acquired": lambda space, record: space.claims.apply_acquired(record),
    "claim.renewed": lambda space, record: space.claims.apply_renewed(record),
    "claim.released": lambda space, record: space.claims.apply_ended(record),
    "claim.expired": lambda space, record: space.claims.apply_ended(record),
    # Image-only records: a snapshot's way of saying "this is how it stands".
    "scope.image": lambda space, record: space.scopes.apply_image(record),
    "claim.image": lambda space, record: space.claims.apply_image(record),
    # Mailboxes, messages and tasks, image records included.
    **WORK_APPLY,
    "usage.image": lambda space, record: space.usage.apply_image(record),
}

RECORD_TYPES = frozenset(_APPLY)
