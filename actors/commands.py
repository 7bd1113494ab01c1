"""Every kernel operation, declared once: its fields, its checks, and the actor it runs on.

A command is a frozen dataclass. Its fields say where each value comes from (the JSON body, the
path, or a draw from the kernel's seeded source) and which limits it must keep (`fields.py`); its
`check` holds whatever spans more than one field; its `actor` names the key whose actor
serializes it. Which pure transition it runs is the table in `transitions.py`. Nothing else is
sent to an actor: a command is data, so it can be logged, compared, replayed in a test, or sent to
another node later.

Reading the state to find an actor (a token's claim, a message's queue) happens in the caller's
task; the turn checks again, since the state may change before the turn runs.

Adding an operation: declare it here, add its transition to `transitions.py`, and its route to
`server/routes/`; the OpenAPI document and the API reference follow from those declarations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .errors import STALE_CLAIM, VALIDATION_FAILED, KernelError, quote
from .dead_letters import ACTION_MAX, AGE_S_MAX, DeadLetterFilter
from .fields import (
    BOOLEAN, INTEGER, JSON, MINOR, TEXT, TEXTS, TIMESTAMP, body, caller, check_space_id, check_text, drawn, path, query,
)
from .limits import Limits
from .mailboxes import MODES
from .requirements import parse_requirements
from .actor_keys import (
    KEYS_ACTOR, ActorKey, barrier_actor, barrier_name_actor, capacity_actor, claim_actor, events_actor, mailbox_ops_actor,
    mailboxes_actor, once_actor, queue_actor, run_actor, scope_actor, timers_actor,
)
from .scopes import CANCELLED, COMPLETED

__all__ = [
    "Command", "RegisterKey", "RevokeKey", "CreateScope", "EndScope", "CancelScope", "CompleteScope",
    "AcquireClaim", "RenewClaim", "ReleaseClaim", "ForceReleaseClaim", "CreateMailbox", "SendMessage", "Receive", "ReceiveMany",
    "CompleteDelivery", "NackDelivery", "RenewDelivery", "RequeueDeadLetters", "DeleteDeadLetters", "PurgeMailbox", "SubmitTask", "CancelTask", "JoinTask",
    "DetachTask", "FireTimer", "EnsureRun", "EnsureMailbox", "WaitTask", "AcquireOnce", "WaitOnce", "RenewOnce",
    "CompleteOnce", "FailOnce", "KEYS_ACTOR", "claim_actor", "scope_actor", "queue_actor", "mailboxes_actor",
    "mailbox_ops_actor",
    # -- capacity --
    "capacity_actor", "CreatePool", "AcquireGrant", "RenewGrant", "ReleaseGrant", "CreateAllowance", "Consume",
    "WaitAllowance", "CancelWaiter", "Cooldown", "CreateWorkLimit", "CreateBudget", "Reserve", "Settle", "Void", "Admit",
    "EnsurePool", "EnsureAllowance", "EnsureBudget", "WaitPool", "CancelPoolWaiter",
    # -- coordination --
    "CreateBarrier", "ArriveBarrier", "CreateTimer", "PollTimers", "AckTimer", "CancelTimer", "CreateGroup",
    "SubmitGroupTask", "JoinGroupTask", "GroupVerdict", "AcceptGroupTask", "RejectGroupTask", "EndGroupMembership",
    "CloseGroup", "SealGroup", "WatchEvents", "barrier_actor", "timers_actor", "events_actor",
    "EnsureTimer", "EnsureBarrier", "barrier_name_actor",
]

# A key's spaces are recorded with it; a key for every space is the admin key's job.
KEY_SPACES_MAX = 100


class Command:
    """Base of every command. Subclasses are `@dataclass(frozen=True, slots=True, kw_only=True)`."""

    __slots__ = ()

    def actor(self, state: Any) -> ActorKey:
        raise NotImplementedError

    def check(self, limits: Limits) -> None:
        """Checks that involve more than one field (each field's own limits are in `fields.py`)."""

    def wait_key(self) -> Any:
        """What a parked call of this command waits for, when two parked calls with equal keys
        find the same answer in the same state (a free claim, a deliverable message): after one
        of them ran again and still found nothing, the others need not run (`Partition`). None:
        each runs again."""
        return None


def _check_requirements(requirements: Any) -> None:
    """A task's requirements, checked as admission reads them (`requirements.py`)."""
    if requirements is not None:
        parse_requirements(requirements)


def _command(cls: type) -> type:
    return dataclass(frozen=True, slots=True, kw_only=True)(cls)


def _lease(required: bool = False, default: str | None = None) -> Any:
    return body("leaseSeconds", INTEGER, required=required, minimum="lease_s_min", maximum="lease_s_max", default=default)


def _reason(wire: str) -> Any:
    return body(wire, TEXT, required=False, length_min=0, length_max="reason_len_max")


# -- keys (not in any space: a key names the spaces it opens) --------------------------------------


@_command
class RegisterKey(Command):
    """Let the secret whose digest this is open `spaces`; only the digest is recorded."""

    key_digest: str
    spaces: frozenset
    name: str | None = body("name", required=False, length_max="name_len_max")
    key_id: str = drawn("ak_")

    def actor(self, state: Any) -> ActorKey:
        return KEYS_ACTOR

    def check(self, limits: Limits) -> None:
        if not self.spaces:
            raise KernelError(VALIDATION_FAILED, "a key opens at least one space")
        if len(self.spaces) > KEY_SPACES_MAX:
            raise KernelError(VALIDATION_FAILED, f"a key opens at most {KEY_SPACES_MAX} spaces")
        for space in self.spaces:
            check_space_id(space)


@_command
class RevokeKey(Command):
    key_id: str = path("key_id")

    def actor(self, state: Any) -> ActorKey:
        return KEYS_ACTOR


# -- scopes ------------------------------------------------------------------------------------


@_command
class CreateScope(Command):
    space: str = path("space")
    name: str | None = body("name", required=False, length_max="name_len_max")
    parent_id: str | None = body("parentId", required=False)
    deadline_ms: int | None = body("deadline", TIMESTAMP, required=False)
    child_limit: int | None = body("childLimit", INTEGER, required=False, minimum=0, maximum="child_limit_max")
    scope_id: str = drawn("sc_")

    def actor(self, state: Any) -> ActorKey:
        # A child is created in its parent's turn, so childLimit counts exactly.
        return scope_actor(self.space, self.parent_id if self.parent_id is not None else self.scope_id)


@_command
class EndScope(Command):
    """Cancel or complete a scope and its subtree; repeating the same end is harmless."""

    end: ClassVar[str]
    space: str = path("space")
    scope_id: str = path("scope_id")
    by: str | None = caller()

    def actor(self, state: Any) -> ActorKey:
        return scope_actor(self.space, self.scope_id)


@_command
class CancelScope(EndScope):
    end: ClassVar[str] = CANCELLED


@_command
class CompleteScope(EndScope):
    end: ClassVar[str] = COMPLETED


# -- claims ------------------------------------------------------------------------------------


@_command
class AcquireClaim(Command):
    """With `waitMs` (our extension), a held claim parks the request until the claim is free (in
    arrival order) or the wait ends, then CLAIM_HELD; without it, CLAIM_HELD at once."""

    space: str = path("space")
    scope_id: str = body("scopeId")
    key: str = body("key", length_max="claim_key_len_max")
    holder: str = body("holder", length_max="holder_len_max")
    session: str = body("holderSession", length_max="holder_len_max")
    lease_s: int = _lease(default="lease_s_default")
    wait_ms: int | None = body(
        "waitMs", INTEGER, required=False, minimum=0, description="wait for a held claim, capped at {wait_ms_max}"
    )
    token: str = drawn("token")

    def actor(self, state: Any) -> ActorKey:
        return claim_actor(self.space, self.scope_id, self.key)

    def wait_key(self) -> Any:
        return ("claim", self.scope_id, self.key)  # a parked acquire waits for the key to be free


def _claim_actor_of(state: Any, space: str, key: str, token: str) -> ActorKey:
    """The actor of the claim `token` names; the turn checks again that it is still current."""
    claim = state.space(space).claims.by_token(token)
    if claim is None or claim.key != key:
        raise KernelError(STALE_CLAIM, f"token is not the current one for claim {key!r}")
    return claim_actor(space, claim.scope_id, key)


@_command
class RenewClaim(Command):
    """Renew by token: the token names the claim, and the key in the path must match."""

    space: str = path("space")
    key: str = path("key")
    token: str = body("token")
    lease_s: int | None = _lease()

    def actor(self, state: Any) -> ActorKey:
        return _claim_actor_of(state, self.space, self.key, self.token)


@_command
class ReleaseClaim(Command):
    space: str = path("space")
    key: str = path("key")
    token: str = body("token")
    observation: Any = body("observation", JSON, required=False)

    def actor(self, state: Any) -> ActorKey:
        return _claim_actor_of(state, self.space, self.key, self.token)


@_command
class ForceReleaseClaim(Command):
    """An operator's release of a held claim, without its token (a holder that hangs, a stuck run):
    the key is free at once, the holder's token is refused from then on (STALE_CLAIM), and the
    next holder gets the next generation. The claim is named by run and key, as an acquire names it."""

    space: str = path("space")
    key: str = path("key")
    scope_id: str = body("scopeId")
    reason: str | None = _reason("reason")
    by: str | None = caller()

    def actor(self, state: Any) -> ActorKey:
        return claim_actor(self.space, self.scope_id, self.key)


# -- mailboxes and messages --------------------------------------------------------------------


@_command
class CreateMailbox(Command):
    space: str = path("space")
    name: str = body("name", length_max="name_len_max")
    mode: str | None = body("mode", required=False, description="WORK (the default) is the one mode served")
    backlog_limit: int | None = body("backlogLimit", INTEGER, required=False, minimum=1, maximum="backlog_limit_max")
    max_attempts: int | None = body("maxAttempts", INTEGER, required=False, minimum=1, maximum="attempts_max_max")
    mailbox_id: str = drawn("mb_")

    def actor(self, state: Any) -> ActorKey:
        return mailboxes_actor(self.space)

    def check(self, limits: Limits) -> None:
        if self.mode is not None and self.mode.upper() not in MODES:
            raise KernelError(
                VALIDATION_FAILED, f"mode {quote(self.mode)} is not supported; supported modes: {', '.join(MODES)}"
            )


def _message_queue(state: Any, space: str, message_id: str) -> ActorKey:
    message = state.space(space).messages.get(message_id)
    return queue_actor(space, message.mailbox_id, message.scope_id)


def _task_queue(state: Any, space: str, task_id: str) -> ActorKey:
    task = state.space(space).tasks.get(task_id)
    return queue_actor(space, task.mailbox_id, task.scope_id)


@_command
class SendMessage(Command):
    """A plain message; with a `workKey`, one message per key and payload for the key's window."""

    space: str = path("space")
    mailbox_id: str = path("mailbox_id")
    scope_id: str = body("scopeId")
    payload: Any = body("payload", JSON, required=False)
    work_key: str | None = body("workKey", required=False, length_max="work_key_len_max")
    deadline_ms: int | None = body("deadline", TIMESTAMP, required=False)
    message_id: str = drawn("ms_")

    def actor(self, state: Any) -> ActorKey:
        return queue_actor(self.space, self.mailbox_id, self.scope_id)


@_command
class Receive(Command):
    """Lease the oldest deliverable message; a long poll waits up to `wait_ms` (capped)."""

    space: str = path("space")
    mailbox_id: str = path("mailbox_id")
    scope_id: str = body("scopeId")
    holder: str = body("holder", length_max="holder_len_max")
    session: str = body("holderSession", length_max="holder_len_max")
    lease_s: int = _lease(default="lease_s_default")
    wait_ms: int | None = body("waitMs", INTEGER, required=False, minimum=0, description="capped at {wait_ms_max}")
    include_descendants: bool | None = body(
        "includeDescendants", BOOLEAN, required=False, description="admit tasks of the scope's descendants too (oldest first)"
    )
    token: str = drawn("delivery-token")

    def actor(self, state: Any) -> ActorKey:
        return queue_actor(self.space, self.mailbox_id, self.scope_id)

    def wait_key(self) -> Any:
        # A parked receive waits for a deliverable message of its queue, whoever asks.
        return ("receive", self.mailbox_id, self.scope_id, bool(self.include_descendants))


@_command
class ReceiveMany(Receive):
    """Lease up to `count` deliverable messages, oldest first, in one turn (a worker's prefetch);
    a long poll waits up to `wait_ms` for the first. Delivery i's token is the drawn one with `.i`
    after it, so each is distinct and as hard to guess."""

    count: int = body("maxMessages", INTEGER, minimum=1, maximum="receive_count_max", description="at most {receive_count_max}")


@_command
class CompleteDelivery(Command):
    space: str = path("space")
    message_id: str = path("message_id")
    token: str = body("token")
    result: Any = body("result", JSON, required=False)

    def actor(self, state: Any) -> ActorKey:
        return _message_queue(state, self.space, self.message_id)


@_command
class NackDelivery(Command):
    """`retry`: back on the queue after a backoff (its jitter drawn here). Else a dead letter."""

    space: str = path("space")
    message_id: str = path("message_id")
    token: str = body("token")
    retry: bool = body("retry", BOOLEAN)
    error: str | None = _reason("error")
    jitter: float = drawn("jitter")

    def actor(self, state: Any) -> ActorKey:
        return _message_queue(state, self.space, self.message_id)


@_command
class RenewDelivery(Command):
    space: str = path("space")
    message_id: str = path("message_id")
    token: str = body("token")
    lease_s: int | None = _lease()

    def actor(self, state: Any) -> ActorKey:
        return _message_queue(state, self.space, self.message_id)


@_command
class DeadLetterAction(Command):
    """Act on a mailbox's dead letters (`dead_letters.py`): those named by `messageIds`, or those a
    filter matches (`reason`, `olderThanSeconds`, `newerThanSeconds`), or `all` of them; with
    `dryRun`, only say how many it would act on."""

    space: str = path("space")
    mailbox_id: str = path("mailbox_id")
    message_ids: list | None = body("messageIds", TEXTS, required=False, items_max=ACTION_MAX)
    reason: str | None = body(
        "reason", TEXT, required=False, length_max="reason_len_max", description="dead letters whose reason contains this text"
    )
    older_than_s: int | None = body(
        "olderThanSeconds", INTEGER, required=False, minimum=0, maximum=AGE_S_MAX,
        description="dead letters that died at least this many seconds ago",
    )
    newer_than_s: int | None = body(
        "newerThanSeconds", INTEGER, required=False, minimum=0, maximum=AGE_S_MAX,
        description="dead letters that died at most this many seconds ago",
    )
    every: bool | None = body("all", BOOLEAN, required=False, description="every dead letter of the mailbox")
    dry_run: bool | None = body("dryRun", BOOLEAN, required=False, description="change nothing; answer what would change")
    by: str | None = caller()

    @property
    def where(self) -> DeadLetterFilter:
        return DeadLetterFilter(self.reason, self.older_than_s, self.newer_than_s)

    def actor(self, state: Any) -> ActorKey:
        return mailbox_ops_actor(self.space, self.mailbox_id)

    def check(self, limits: Limits) -> None:
        chosen = [self.message_ids is not None, not self.where.empty, bool(self.every)]
        if sum(chosen) != 1:
            raise KernelError(
                VALIDATION_FAILED,
                "name the dead letters one way: messageIds, or a filter (reason, olderThanSeconds, newerThanSeconds), "
                "or all: true",
            )


@_command
class RequeueDeadLetters(DeadLetterAction):
    # The new messages' ids: this, then "_" and their place in the request (0, 1, ...).
    id_base: str = drawn("ms_")


@_command
class DeleteDeadLetters(DeadLetterAction):
    pass


@_command
class PurgeMailbox(Command):
    """An operator's purge: the mailbox's messages waiting to be delivered (queued, or waiting out
    a retry's backoff) end now, in every run or in `scopeId`'s alone; a task's is CANCELLED, a
    plain message is dropped. Deliveries under way are left to finish. With `dryRun`, only say how
    many it would end."""

    space: str = path("space")
    mailbox_id: str = path("mailbox_id")
    scope_id: str | None = body("scopeId", required=False, description="only this run's messages")
    reason: str | None = _reason("reason")
    dry_run: bool | None = body("dryRun", BOOLEAN, required=False, description="change nothing; answer what would change")
    by: str | None = caller()

    def actor(self, state: Any) -> ActorKey:
        return mailbox_ops_actor(self.space, self.mailbox_id)


# -- tasks -------------------------------------------------------------------------------------


@_command
class SubmitTask(Command):
    """Create the task of (scope, key), or return the one it has (joining the subscriber)."""

    space: str = path("space")
    scope_id: str = body("scopeId")
    mailbox_id: str = body("mailboxId")
    key: str = body("taskKey", length_max="task_key_len_max")
    task_input: Any = body("input", JSON, required=False)
    deadline_ms: int | None = body("deadline", TIMESTAMP, required=False)
    subscriber_id: str | None = body("subscriberId", required=False, length_max="holder_len_max")
    # -- capacity --: what admission takes with the task (`admission.py`); recv never delivers it.
    requirements: Any = body(
        "requirements", JSON, required=False,
        description="an object of pools (name, units; at most 4), quotas (name, units; at most 4), budgets (name, reserveMinor; at most 2)",
    )
    # -- capacity --
    work_limit: str | None = body(
        "workLimit", required=False, length_max="name_len_max", description="the name (or id) of a work limit"
    )
    task_id: str = drawn("tk_")
    message_id: str = drawn("ms_")

    def actor(self, state: Any) -> ActorKey:
        return queue_actor(self.space, self.mailbox_id, self.scope_id)

    def check(self, limits: Limits) -> None:
        _check_requirements(self.requirements)  # -- capacity --


@_command
class CancelTask(Command):
    space: str = path("space")
    task_id: str = path("task_id")
    reason: str | None = _reason("reason")
    by: str | None = caller()

    def actor(self, state: Any) -> ActorKey:
        return _task_queue(state, self.space, self.task_id)


@_command
class JoinTask(Command):
    space: str = path("space")
    task_id: str = path("task_id")
    subscriber_id: str = body("subscriberId", length_max="holder_len_max")
    scope_id: str = body("scopeId")

    def actor(self, state: Any) -> ActorKey:
        return _task_queue(state, self.space, self.task_id)


@_command
class DetachTask(Command):
    space: str = path("space")
    task_id: str = path("task_id")
    subscriber_id: str = body("subscriberId", length_max="holder_len_max")

    def actor(self, state: Any) -> ActorKey:
        return _task_queue(state, self.space, self.task_id)


# -- by name, once, and waits on a task (what the 0.3.0 client adds) ----------------------------


@_command
class EnsureRun(Command):
    """Get or create the run (a root scope) of this name (`runs.py` says what a stopped run answers)."""

    space: str = path("space")
    name: str = path("name")
    deadline_ms: int | None = body("deadline", TIMESTAMP, required=False)
    scope_id: str = drawn("sc_")

    def actor(self, state: Any) -> ActorKey:
        return run_actor(self.space, self.name)

    def check(self, limits: Limits) -> None:
        check_text("name", self.name, limits.name_len_max)


@_command
class EnsureMailbox(Command):
    """Get or create the mailbox of this name; settings sent must match the mailbox's (else CONFLICT)."""

    # Requirements are resolved as a task's are (`admission.requirements_record`), for no task.
    task_id: ClassVar[None] = None
    space: str = path("space")
    name: str = path("name")
    max_attempts: int | None = body("maxAttempts", INTEGER, required=False, minimum=1, maximum="attempts_max_max")
    requirements: Any = body(
        "requirements", JSON, required=False,
        description="default requirements of its tasks that name none: pools (name, units; at most 4), quotas (name, units; at most 4), budgets (name, reserveMinor; at most 2)",
    )
    mailbox_id: str = drawn("mb_")

    def actor(self, state: Any) -> ActorKey:
        return mailboxes_actor(self.space)

    def check(self, limits: Limits) -> None:
        check_text("name", self.name, limits.name_len_max)
        _check_requirements(self.requirements)


@_command
class WaitTask(Command):
    """A task's view once it has ended, or when the wait ends (`GET /tasks/{id}?waitMs=`)."""

    space: str = path("space")
    task_id: str = path("task_id")
    wait_ms: int | None = query("waitMs", INTEGER, minimum=0, description="capped at {wait_ms_max}")

    def actor(self, state: Any) -> ActorKey:
        return _task_queue(state, self.space, self.task_id)


@_command
class AcquireOnce(Command):
    space: str = path("space")
    scope_id: str = body("scopeId")
    key: str = body("key", length_max="claim_key_len_max")
    holder: str = body("holder", length_max="holder_len_max")
    session: str = body("holderSession", length_max="holder_len_max")
    lease_s: int = _lease(default="lease_s_default")
    token: str = drawn("token")

    def actor(self, state: Any) -> ActorKey:
        return once_actor(self.space, self.scope_id, self.key)


@_command
class WaitOnce(Command):
    """The slot once it is not held (settled, or open again), or when the wait ends."""

    space: str = path("space")
    scope_id: str = query("scopeId", required=True)
    key: str = query("key", required=True)
    wait_ms: int | None = query("waitMs", INTEGER, minimum=0, description="capped at {wait_ms_max}")

    def actor(self, state: Any) -> ActorKey:
        return once_actor(self.space, self.scope_id, self.key)


@_command
class RenewOnce(Command):
    space: str = path("space")
    scope_id: str = body("scopeId")
    key: str = body("key")
    token: str = body("token")
    lease_s: int | None = _lease()

    def actor(self, state: Any) -> ActorKey:
        return once_actor(self.space, self.scope_id, self.key)


@_command
class CompleteOnce(Command):
    space: str = path("space")
    scope_id: str = body("scopeId")
    key: str = body("key")
    token: str = body("token")
    result: Any = body("result", JSON, required=False)

    def actor(self, state: Any) -> ActorKey:
        return once_actor(self.space, self.scope_id, self.key)


@_command
class FailOnce(Command):
    space: str = path("space")
    scope_id: str = body("scopeId")
    key: str = body("key")
    token: str = body("token")
    error: str | None = _reason("error")
    max_attempts: int = body("maxAttempts", INTEGER, required=False, minimum=1, maximum="attempts_max_max", default=3)

    def actor(self, state: Any) -> ActorKey:
        return once_actor(self.space, self.scope_id, self.key)
# -- capacity --
# Every command on a pool, an allowance, a work limit or a budget runs on the space's one capacity
# actor, so a name is created once and each decision sees every earlier one (docs/design-capacity.md).


class _Capacity(Command):
    __slots__ = ()

    def actor(self, state: Any) -> ActorKey:
        return capacity_actor(self.space)  # type: ignore[attr-defined]


@_command
class CreatePool(_Capacity):
    space: str = path("space")
    name: str = body("name", length_max="name_len_max")
    units: int = body("units", INTEGER, minimum=1, maximum="pool_units_max", description="the pool's capacity")
    pool_id: str = drawn("pm_")


@_command
class AcquireGrant(_Capacity):
    space: str = path("space")
    pool_id: str = path("permit_id")
    scope_id: str = body("scopeId")
    units: int = body("units", INTEGER, required=False, minimum=1, maximum="pool_units_max", default=1)
    holder: str = body("holder", length_max="holder_len_max")
    session: str = body("holderSession", length_max="holder_len_max")
    lease_s: int = _lease(default="lease_s_default")
    waiter_id: str | None = body(
        "waiterId", required=False, description="a waiter of this pool whose turn it is (SIGNALED); without it, nobody may be waiting"
    )
    grant_id: str = drawn("gr_")
    token: str = drawn("token")


@_command
class RenewGrant(_Capacity):
    space: str = path("space")
    grant_id: str = path("grant_id")
    token: str = body("token")
    lease_s: int | None = _lease()


@_command
class ReleaseGrant(_Capacity):
    space: str = path("space")
    grant_id: str = path("grant_id")
    token: str = body("token")
    observation: Any = body("observation", JSON, required=False)


@_command
class WaitPool(_Capacity):
    """Join the pool's line: SIGNALED when it is this waiter's turn, then acquire with its waiterId."""

    space: str = path("space")
    pool_id: str = path("permit_id")
    scope_id: str = body("scopeId")
    units: int = body("units", INTEGER, required=False, minimum=1, maximum="pool_units_max", default=1)
    holder: str = body("holder", length_max="holder_len_max")
    ttl_s: int | None = body(
        "ttlSeconds", INTEGER, required=False, minimum="waiter_ttl_s_min", maximum="waiter_ttl_s_max",
        description="how long it may wait (default {waiter_ttl_s_max} s)",
    )
    waiter_id: str = drawn("pw_")


@_command
class CancelPoolWaiter(_Capacity):
    space: str = path("space")
    waiter_id: str = path("waiter_id")


@_command
class EnsurePool(_Capacity):
    """The pool of this name: `{}` looks it up; with `units` it is created when missing, and must
    have those units when it exists (else CONFLICT)."""

    space: str = path("space")
    name: str = path("name")
    units: int | None = body("units", INTEGER, required=False, minimum=1, maximum="pool_units_max", description="the pool's capacity")
    pool_id: str = drawn("pm_")

    def check(self, limits: Limits) -> None:
        check_text("name", self.name, limits.name_len_max)


@_command
class EnsureAllowance(_Capacity):
    """The allowance of this name: `{}` looks it up; with both sizes it is created when missing,
    and must have them when it exists (else CONFLICT)."""

    space: str = path("space")
    name: str = path("name")
    units_limit: int | None = body("unitsLimit", INTEGER, required=False, minimum=1, maximum="allowance_units_max")
    window_s: int | None = body("windowSeconds", INTEGER, required=False, minimum=1, maximum="window_s_max")
    allowance_id: str = drawn("al_")

    def check(self, limits: Limits) -> None:
        check_text("name", self.name, limits.name_len_max)
        if (self.units_limit is None) != (self.window_s is None):
            raise KernelError(VALIDATION_FAILED, "declare an allowance with both unitsLimit and windowSeconds, or neither")


@_command
class EnsureBudget(_Capacity):
    """The budget of this name: `{}` looks it up; with `limitMinor` (currency USD and scale 2 unless
    given) it is created when missing, and must match when it exists (else CONFLICT)."""

    space: str = path("space")
    name: str = path("name")
    limit: int | None = body("limitMinor", MINOR, required=False)
    currency: str | None = body("currency", required=False, length_max="currency_len_max", description="default USD")
    scale: int | None = body("scale", INTEGER, required=False, minimum=0, maximum="budget_scale_max", description="fraction digits, default 2")
    budget_id: str = drawn("bg_")

    def check(self, limits: Limits) -> None:
        check_text("name", self.name, limits.name_len_max)
        if self.limit is None and (self.currency is not None or self.scale is not None):
            raise KernelError(VALIDATION_FAILED, "currency and scale are only taken with limitMinor")


@_command
class CreateAllowance(_Capacity):
    space: str = path("space")
    name: str = body("name", length_max="name_len_max")
    units_limit: int = body("unitsLimit", INTEGER, minimum=1, maximum="allowance_units_max")
    window_s: int = body("windowSeconds", INTEGER, minimum=1, maximum="window_s_max")
    allowance_id: str = drawn("al_")


@_command
class Consume(_Capacity):
    space: str = path("space")
    allowance_id: str = path("allowance_id")
    scope_id: str = body("scopeId")
    units: int = body("units", INTEGER, required=False, minimum=1, maximum="allowance_units_max", default=1)
    holder: str = body("holder", length_max="holder_len_max")
    consumption_id: str = drawn("cs_")


@_command
class WaitAllowance(_Capacity):
    """Register a durable waiter, granted first come, first served (at once if nothing is ahead)."""

    space: str = path("space")
    allowance_id: str = path("allowance_id")
    scope_id: str = body("scopeId")
    units: int = body("units", INTEGER, required=False, minimum=1, maximum="allowance_units_max", default=1)
    holder: str = body("holder", length_max="holder_len_max")
    ttl_s: int = body("ttlSeconds", INTEGER, minimum="waiter_ttl_s_min", maximum="waiter_ttl_s_max")
    waiter_id: str = drawn("aw_")


@_command
class CancelWaiter(_Capacity):
    space: str = path("space")
    waiter_id: str = path("waiter_id")


@_command
class Cooldown(_Capacity):
    space: str = path("space")
    allowance_id: str = path("allowance_id")
    seconds: int = body("seconds", INTEGER, minimum=1, maximum="cooldown_s_max")
    reason: str | None = _reason("reason")


@_command
class CreateWorkLimit(_Capacity):
    space: str = path("space")
    name: str = body("name", length_max="name_len_max")
    scope_id: str = body("scopeId")
    max_outstanding: int = body("maxOutstanding", INTEGER, minimum=1, maximum="backlog_limit_max")
    work_limit_id: str = drawn("wl_")


@_command
class CreateBudget(_Capacity):
    space: str = path("space")
    name: str = body("name", length_max="name_len_max")
    currency: str = body("currency", length_max="currency_len_max")
    scale: int = body("scale", INTEGER, minimum=0, maximum="budget_scale_max", description="fraction digits")
    limit: int = body("limitMinor", MINOR)
    budget_id: str = drawn("bg_")


@_command
class Reserve(_Capacity):
    space: str = path("space")
    budget_id: str = path("budget_id")
    scope_id: str = body("scopeId")
    holder: str = body("holder", length_max="holder_len_max")
    amount: int = body("amountMinor", MINOR)
    settle_by_ms: int | None = body("settleBy", TIMESTAMP, required=False, description="default: {settle_by_s_default} s from now")
    reservation_id: str = drawn("rs_")

    def check(self, limits: Limits) -> None:
        if self.amount == 0:
            raise KernelError(VALIDATION_FAILED, "amountMinor must be more than 0")


@_command
class Settle(_Capacity):
    space: str = path("space")
    budget_id: str = path("budget_id")
    reservation_id: str = body("reservationId")
    amount: int = body("amountMinor", MINOR)
    work_key: str = body("workKey", length_max="work_key_len_max")
    allow_overrun: bool | None = body(
        "allowOverrun", BOOLEAN, required=False,
        description="charge more than the reservation holds, up to what the budget can still cover",
    )


@_command
class Void(_Capacity):
    space: str = path("space")
    budget_id: str = path("budget_id")
    reservation_id: str = body("reservationId")
    work_key: str = body("workKey", length_max="work_key_len_max")


@_command
class Admit(Command):
    """Lease the oldest eligible task delivery with everything its requirements name (a long poll with waitMs)."""

    space: str = path("space")
    mailbox_id: str = body("mailboxId")
    scope_id: str = body("scopeId")
    holder: str = body("holder", length_max="holder_len_max")
    session: str = body("holderSession", length_max="holder_len_max")
    lease_s: int = _lease(default="lease_s_default")
    wait_ms: int | None = body("waitMs", INTEGER, required=False, minimum=0, description="capped at {wait_ms_max}")
    include_descendants: bool | None = body(
        "includeDescendants", BOOLEAN, required=False, description="admit tasks of the scope's descendants too (oldest first)"
    )
    token: str = drawn("delivery-token")

    def actor(self, state: Any) -> ActorKey:
        return queue_actor(self.space, self.mailbox_id, self.scope_id)


# -- timers ------------------------------------------------------------------------------------


@_command
class FireTimer(Command):
    """The supervisor's proposal that a timer is due; the turn checks it still is (`timers` in
    `space.py` maps each kind of timer to what it proposes)."""

    on: ActorKey
    tag: tuple
    marker: Any

    def actor(self, state: Any) -> ActorKey:
        return self.on


# -- coordination --
# Barriers, timers, task groups and the event log (`coordination.py`, `events.py`).


@_command
class CreateBarrier(Command):
    space: str = path("space")
    scope_id: str = body("scopeId")
    target: int = body("target", INTEGER, minimum=1, maximum="barrier_target_max")
    barrier_id: str = drawn("br_")

    def actor(self, state: Any) -> ActorKey:
        return barrier_actor(self.space, self.barrier_id)


@_command
class EnsureBarrier(Command):
    """The barrier of this name in the scope, created with `target` when it does not exist yet; one
    that exists must have that target (else CONFLICT)."""

    space: str = path("space")
    name: str = path("name")
    scope_id: str = body("scopeId")
    target: int = body("target", INTEGER, minimum=1, maximum="barrier_target_max")
    barrier_id: str = drawn("br_")

    def actor(self, state: Any) -> ActorKey:
        return barrier_name_actor(self.space, self.scope_id, self.name)

    def check(self, limits: Limits) -> None:
        check_text("name", self.name, limits.name_len_max)


@_command
class ArriveBarrier(Command):
    """Arrive once per arrival key; the arrival that makes `target` releases the barrier."""

    space: str = path("space")
    barrier_id: str = path("barrier_id")
    arrival_key: str = body("arrivalKey", length_max="claim_key_len_max")

    def actor(self, state: Any) -> ActorKey:
        return barrier_actor(self.space, self.barrier_id)


@_command
class CreateTimer(Command):
    """Arm a timer `afterSeconds` from now or `at` a time (exactly one of the two)."""

    space: str = path("space")
    scope_id: str = body("scopeId")
    after_s: int | None = body("afterSeconds", INTEGER, required=False, minimum=0, maximum="timer_after_s_max")
    at_ms: int | None = body("at", TIMESTAMP, required=False)
    timer_id: str = drawn("tm_")
    token: str = drawn("token")

    def actor(self, state: Any) -> ActorKey:
        return timers_actor(self.space, self.scope_id)

    def check(self, limits: Limits) -> None:
        if (self.after_s is None) == (self.at_ms is None):
            raise KernelError(VALIDATION_FAILED, "give exactly one of 'afterSeconds' and 'at'")


@_command
class EnsureTimer(Command):
    """The timer of this name in the scope, armed `afterSeconds` from now or `at` a time when it
    does not exist yet (exactly one of the two); one that exists is answered as it is."""

    space: str = path("space")
    name: str = path("name")
    scope_id: str = body("scopeId")
    after_s: int | None = body("afterSeconds", INTEGER, required=False, minimum=0, maximum="timer_after_s_max")
    at_ms: int | None = body("at", TIMESTAMP, required=False)
    timer_id: str = drawn("tm_")
    token: str = drawn("token")

    def actor(self, state: Any) -> ActorKey:
        return timers_actor(self.space, self.scope_id)

    def check(self, limits: Limits) -> None:
        check_text("name", self.name, limits.name_len_max)
        if (self.after_s is None) == (self.at_ms is None):
            raise KernelError(VALIDATION_FAILED, "give exactly one of 'afterSeconds' and 'at'")


@_command
class PollTimers(Command):
    """List the fired, unacked timers of a scope with their tokens (harmless to repeat)."""

    space: str = path("space")
    scope_id: str = body("scopeId")
    timer_id: str | None = body("timerId", required=False, description="only this timer (an extension of this server)")
    wait_ms: int | None = body("waitMs", INTEGER, required=False, minimum=0, description="hold an empty listing up to this long, capped at {wait_ms_max}")

    def actor(self, state: Any) -> ActorKey:
        return timers_actor(self.space, self.scope_id)


def _timer_actor_of(state: Any, space: str, timer_id: str) -> ActorKey:
    return timers_actor(space, state.space(space).coordination.timers.get(timer_id).scope_id)


@_command
class AckTimer(Command):
    space: str = path("space")
    timer_id: str = path("timer_id")
    token: str = body("token")

    def actor(self, state: Any) -> ActorKey:
        return _timer_actor_of(state, self.space, self.timer_id)


@_command
class CancelTimer(Command):
    space: str = path("space")
    timer_id: str = path("timer_id")

    def actor(self, state: Any) -> ActorKey:
        return _timer_actor_of(state, self.space, self.timer_id)


@_command
class CreateGroup(Command):
    """A task group and its gate scope (a child of `parentScopeId`, or a root)."""

    space: str = path("space")
    mailbox_id: str = body("mailboxId")
    condition: str = body("condition", description="ALL_TERMINAL, N_ACCEPTED (with threshold) or FIRST_ACCEPTED")
    threshold: int | None = body("threshold", INTEGER, required=False, minimum=1, maximum="group_members_max")
    expected_members: int | None = body("expectedMembers", INTEGER, required=False, minimum=1, maximum="group_members_max")
    deadline_ms: int | None = body("deadline", TIMESTAMP, required=False)
    parent_scope_id: str | None = body("parentScopeId", required=False)
    group_id: str = drawn("tg_")
    scope_id: str = drawn("sc_")

    def actor(self, state: Any) -> ActorKey:
        return scope_actor(self.space, self.parent_scope_id if self.parent_scope_id is not None else self.scope_id)


def _group_queue(state: Any, space: str, group_id: str) -> ActorKey:
    """A group runs on its queue's actor: its members are that queue's tasks."""
    group = state.space(space).coordination.groups.get(group_id)
    return queue_actor(space, group.mailbox_id, group.scope_id)


@_command
class SubmitGroupTask(Command):
    space: str = path("space")
    group_id: str = path("group_id")
    key: str = body("taskKey", length_max="task_key_len_max")
    task_input: Any = body("input", JSON, required=False)
    deadline_ms: int | None = body("deadline", TIMESTAMP, required=False)
    # What admission takes with the member, as for `POST /tasks` (else its mailbox's defaults).
    requirements: Any = body(
        "requirements", JSON, required=False,
        description="an object of pools (name, units; at most 4), quotas (name, units; at most 4), budgets (name, reserveMinor; at most 2)",
    )
    task_id: str = drawn("tk_")
    message_id: str = drawn("ms_")

    def actor(self, state: Any) -> ActorKey:
        return _group_queue(state, self.space, self.group_id)

    def check(self, limits: Limits) -> None:
        _check_requirements(self.requirements)


@_command
class JoinGroupTask(Command):
    """Make an outside task a member (only while the group is open)."""

    space: str = path("space")
    group_id: str = path("group_id")
    task_id: str = body("taskId")

    def actor(self, state: Any) -> ActorKey:
        return _group_queue(state, self.space, self.group_id)


@_command
class GroupVerdict(Command):
    accept: ClassVar[bool]
    space: str = path("space")
    group_id: str = path("group_id")
    task_id: str = path("task_id")

    def actor(self, state: Any) -> ActorKey:
        return _group_queue(state, self.space, self.group_id)


@_command
class AcceptGroupTask(GroupVerdict):
    accept: ClassVar[bool] = True


@_command
class RejectGroupTask(GroupVerdict):
    accept: ClassVar[bool] = False


@_command
class EndGroupMembership(Command):
    """Seal the group: no member joins any more. `close` is harmless to repeat; `seal` refuses a
    finalized group."""

    strict: ClassVar[bool]
    space: str = path("space")
    group_id: str = path("group_id")

    def actor(self, state: Any) -> ActorKey:
        return _group_queue(state, self.space, self.group_id)


@_command
class CloseGroup(EndGroupMembership):
    strict: ClassVar[bool] = False


@_command
class SealGroup(EndGroupMembership):
    strict: ClassVar[bool] = True


@_command
class WatchEvents(Command):
    """A page of a space's events after a cursor; with `wait_ms`, an empty page waits for events.

    Built by the route from the query string (`server/routes/coordination.py`), not from a body.
    """

    space: str
    after: int | None
    limit: int
    types: frozenset | None = None
    aggregate: tuple | None = None
    scope_id: str | None = None
    wait_ms: int | None = None

    def actor(self, state: Any) -> ActorKey:
        return events_actor(self.space)
