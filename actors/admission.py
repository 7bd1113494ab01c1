"""Admission: a task delivered together with everything its `requirements` name, all or nothing.

A task submitted with `requirements` (pool units, quota units, budget amounts, by name) is never
handed out by `recv`; `admit` on its queue leases it in one turn together with:
- pool grants that share the delivery's lease: held exactly while the delivery is (renewed by the
  delivery's renewals, given back when it completes, is nacked, or its lease runs out);
- quota consumptions, in the current window;
- budget reservations, until settled, voided, or the default settle-by passes.
Either all fit now and all are recorded in one batch, or nothing is taken: no partial hold, so two
tasks with overlapping requirements cannot deadlock. The turn runs on the queue's actor and reads
the space's capacity tables directly: a turn is synchronous and runs alone, so what it reads
cannot change under it (see docs/design-capacity.md).

The ordering rule: the queue is looked at oldest first, and a task that does not fit yet reserves
every resource it names against the tasks behind it. A later task that needs none of those may go
ahead; one that needs any of them waits. So a large task waiting for many units is never overtaken
forever by small ones: once it is the oldest waiting for a resource, only it can take that
resource next. (A task whose budget amount is more than the budget can ever give back reserves
nothing: it would block the queue forever.)

A parked `admit` (waitMs) is woken when capacity frees: `CapacityCommands.wakeups` holds the
queues waiting, and every change that gives capacity back pokes them (`FREEING`); a quota's next
window or a cooldown's end arms a timer that pokes them too. A task's requirements are resolved
when it is submitted (`requirements.py`) and kept with the capacity part; the admission's
declaration (`ADMISSION`) is at the end.

Timers (on the capacity actor):
    ("admission-wake", due_ms)   -   a quota window began or a cooldown ended: parked admissions look again

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

import heapq
from typing import Any, Iterator, NamedTuple

from .actor_keys import ActorKey, capacity_actor, queue_actor
from .budgets import RESERVATION_ENDED, settle_by_timer
from .deliveries import decide_lease
from .fields import BOOLEAN, INTEGER, body, drawn, path
from .messages import DELIVERY_COMPLETED, DELIVERY_DEAD, DELIVERY_REQUEUED
from .outcome import Outcome, Space, Timer, State, TimerIdent, TimerMarker
from .pools import GRANT_ACQUIRED, GRANT_EXPIRED, GRANT_RELEASED, PERMIT_WAITER_ENDED
from .primitive import NOT_COUNTED, Command, Primitive, command, lease_field, timer_kind
from .quotas import ALLOWANCE_COOLDOWN_RECORD, ALLOWANCE_REFUNDED, WAITER_ENDED
from .requirements import TASK_REQUIREMENTS
from .scopes import SCOPE_ENDED
from .tasks import TASK_CREATED, TASK_ENDED
from .shapes import DurationMs, EpochMs, Json, Record

__all__ = ["Admit", "admit", "FREEING", "WAKE_TIMER", "ADMISSION", "AdmissionView", "AdmittedGrantView", "AdmittedConsumptionView"]

WAKE_TIMER = timer_kind("admission-wake")

# Records that give capacity back: parked admissions look again after any of them. (A task
# created wakes those that include descendants: they wait on queues not their own.)
FREEING = frozenset({
    GRANT_RELEASED, GRANT_EXPIRED, SCOPE_ENDED, DELIVERY_COMPLETED, DELIVERY_REQUEUED, DELIVERY_DEAD,
    TASK_ENDED, RESERVATION_ENDED, WAITER_ENDED, ALLOWANCE_COOLDOWN_RECORD, ALLOWANCE_REFUNDED, PERMIT_WAITER_ENDED,
})


@command
class Admit(Command):
    """Lease the oldest eligible task delivery with everything its requirements name (a long poll with waitMs)."""

    space: str = path("space")
    mailbox_id: str = body("mailboxId")
    scope_id: str = body("scopeId")
    holder: str = body("holder", length_max="holder_len_max")
    session: str = body("holderSession", length_max="holder_len_max")
    lease_s: int = lease_field(default="lease_s_default")
    wait_ms: int | None = body("waitMs", INTEGER, required=False, minimum=0, description="capped at {wait_ms_max}")
    include_descendants: bool | None = body(
        "includeDescendants", BOOLEAN, required=False, description="admit tasks of the scope's descendants too (oldest first)"
    )
    token: str = drawn("delivery-token")

    def actor(self, state: State) -> ActorKey:
        return queue_actor(self.space, self.mailbox_id, self.scope_id)


def _lacking(space: Space, needs: Record, now_ms: int) -> tuple[set[str], list[int], bool]:
    """What of `needs` does not fit now: resource ids, times a quota could fit again, and whether
    it could never fit (a budget amount beyond what the budget can ever give back)."""
    part = space.capacity
    lacking: set[str] = set()
    wake_ms: list[int] = []
    never = False
    for pool_id, units in needs["pools"]:
        # Waiters in the pool's line come first (`pools.py`): admission does not overtake them.
        if units > part.pools.room(part.pools.get(pool_id), now_ms):
            lacking.add(pool_id)
    for allowance_id, units in needs["quotas"]:
        allowance = part.allowances.get(allowance_id)
        if allowance.cooling_at(now_ms):
            lacking.add(allowance_id)
            wake_ms.append(allowance.cooldown_until_ms)
        elif units > allowance.remaining_at(now_ms) or part.allowances.waiting_at(allowance, now_ms):
            lacking.add(allowance_id)
            wake_ms.append(allowance.window_at(now_ms) + allowance.window_ms)
    for budget_id, amount in needs["budgets"]:
        budget = part.budgets.get(budget_id)
        if int(amount) > budget.available:
            lacking.add(budget_id)
            never = never or int(amount) > budget.limit - budget.spent
    return lacking, wake_ms, never


def _resources(needs: Record) -> set[str]:
    return {entry[0] for kind in ("pools", "quotas", "budgets") for entry in needs[kind]}


def admit(space: Space, command: Admit, now_ms: int) -> Outcome:
    """Lease the oldest eligible delivery of the queue with everything its task requires, or
    nothing (`empty`: a long poll parks until capacity frees)."""
    work, part = space.work, space.capacity
    mailbox_id, scope_id = command.mailbox_id, command.scope_id
    defaults = work.mailboxes.get(mailbox_id).requirements  # for a task that names none (`mailboxes.py`)
    work.scopes.require_active(scope_id, now_ms)
    blocked: set[str] = set()
    wake_ms: list[int] = []
    chosen = None
    for message in _candidates(space, command, now_ms):
        needs = None if message.task_id is None else part.requirements.get(message.task_id, defaults)
        if needs is None:
            chosen = message
            break
        lacking, wakes, never = _lacking(space, needs, now_ms)
        wants = _resources(needs)
        if not lacking and not wants & blocked:
            chosen = (message, needs)
            break
        wake_ms.extend(wakes)
        if not never:
            blocked |= wants
    if chosen is None:
        (part.subtree_wakeups if command.include_descendants else part.wakeups).add(queue_actor(space.id, mailbox_id, scope_id))
        actor = capacity_actor(space.id)
        return Outcome(empty=True, timers=[Timer(due, actor, (WAKE_TIMER, due), None) for due in sorted(set(wake_ms))])
    message, needs = chosen if isinstance(chosen, tuple) else (chosen, None)
    return _admitted(space, command, message, needs, now_ms)


def _candidates(space: Space, command: Admit, now_ms: int) -> Iterator[Any]:
    """The deliverable messages of the queue, oldest first; with includeDescendants, of the same
    mailbox in every active scope of the subtree too, merged by age (`seq` orders the space)."""
    messages = space.work.messages
    if not command.include_descendants:
        return messages.deliverable(command.mailbox_id, command.scope_id, now_ms)
    tree = space.scopes
    scopes = [s for s in tree.subtree(command.scope_id) if tree.effective(tree.get(s), now_ms) == "ACTIVE"]
    return heapq.merge(*(messages.deliverable(command.mailbox_id, s, now_ms) for s in scopes), key=lambda message: message.seq)


# An admission's answer is a named tuple, as a claim's is; the shell names and formats it on the
# wire (`server/wire/admission.py`).


class AdmittedGrantView(NamedTuple):
    """A pool grant an admission took: held while the delivery's lease is (its end, `expires_ms`)."""

    grant_id: str
    pool_id: str
    name: str
    units: int
    expires_ms: EpochMs


class AdmittedConsumptionView(NamedTuple):
    """Quota units an admission consumed, in the window beginning at `window_start_ms`."""

    consumption_id: str
    allowance_id: str
    name: str
    units: int
    window_start_ms: EpochMs


class AdmissionView(NamedTuple):
    """What `admit` answers: the task's delivery (its payload, attempt, token and lease) and what
    was taken with it: grants, consumptions, and the ids of budget reservations."""

    task_id: str | None
    task_key: str | None
    message_id: str
    scope_id: str
    payload: Json
    attempt: int
    token: str
    expires_ms: EpochMs
    lease_ms: DurationMs
    grants: tuple[AdmittedGrantView, ...]
    consumptions: tuple[AdmittedConsumptionView, ...]
    reservations: tuple[str, ...]


def _admitted(space: Space, command: Admit, message: Any, needs: Record | None, now_ms: int) -> Outcome:
    work, part = space.work, space.capacity
    lease_ms, token = command.lease_s * 1000, command.token
    records = [decide_lease(message, token, command.holder, command.session, lease_ms, now_ms)]
    attempt = message.attempts + 1
    stem = f"{message.id.removeprefix('ms_')}_{attempt}"
    grants, consumptions, reservations = [], [], []
    settle_by_ms = now_ms + part.limits.settle_by_s_default * 1000
    if needs is not None:
        for index, (pool_id, units) in enumerate(needs["pools"]):
            records.extend(part.pools.decide_ended(part.pools.get(pool_id), now_ms))
            records.append({
                "type": GRANT_ACQUIRED, "id": f"gr_{stem}_{index}", "pool_id": pool_id, "scope_id": message.scope_id,
                "units": units, "token": token, "holder": command.holder, "session": command.session,
                "lease_ms": lease_ms, "expires_ms": now_ms + lease_ms, "at_ms": now_ms, "message_id": message.id,
            })
            grants.append((f"gr_{stem}_{index}", pool_id, units))
        for index, (allowance_id, units) in enumerate(needs["quotas"]):
            allowance = part.allowances.get(allowance_id)
            record = part.allowances.decide_consume(allowance, f"cs_{stem}_{index}", message.scope_id, command.holder, units, now_ms)
            records.append(record)
            consumptions.append((record["consumption_id"], allowance, units, record["window_start_ms"]))
        for index, (budget_id, amount) in enumerate(needs["budgets"]):
            budget = part.budgets.get(budget_id)
            record = part.budgets.decide_reserve(
                budget, f"rs_{stem}_{index}", message.scope_id, command.holder, int(amount), settle_by_ms, now_ms
            )
            records.append(record)
            reservations.append(record["id"])
    outcome = space.commit(Outcome(), *records)
    outcome.timers.extend(work.message_timers(message))
    outcome.timers.extend(settle_by_timer(part, reservation_id, settle_by_ms) for reservation_id in reservations)
    assert message.token == token and message.attempts == attempt, "the admission leased the delivery"
    outcome.reply = AdmissionView(
        message.task_id, None if message.task_id is None else space.tasks.get(message.task_id).key, message.id,
        message.scope_id, message.payload, message.attempts, token, message.expires_ms, lease_ms,
        tuple(AdmittedGrantView(grant_id, pool_id, part.pools.get(pool_id).name, units, message.expires_ms) for grant_id, pool_id, units in grants),
        tuple(AdmittedConsumptionView(cid, allowance.id, allowance.name, units, window_ms) for cid, allowance, units, window_ms in consumptions),
        tuple(reservations),
    )
    return outcome


def on_wake_timer(space: Space, _: TimerIdent, __: TimerMarker, now_ms: int) -> Outcome:
    """A quota window began or a cooldown ended: parked admissions look again."""
    return Outcome(pokes=space.capacity.take_wakeups())


def _committed(space: Space, outcome: Outcome, records: tuple[Record, ...]) -> None:
    """Capacity given back wakes the admissions parked for it (a new task, those that admit from
    descendant scopes)."""
    part = space.capacity
    if not (part.wakeups or part.subtree_wakeups):
        return
    if any(record["type"] in FREEING for record in records):
        outcome.pokes.extend(part.take_wakeups())
    if part.subtree_wakeups and any(record["type"] == TASK_CREATED for record in records):
        outcome.pokes.extend(part.take_subtree_wakeups())


def _apply_requirements(requirements: Record, record: Record) -> None:
    assert record["task_id"] not in requirements, "a task's requirements are recorded once"
    requirements[record["task_id"]] = {"pools": record["pools"], "quotas": record["quotas"], "budgets": record["budgets"]}


def _image(space: Space) -> Iterator[Record]:
    for task_id, needs in space.capacity.requirements.items():
        yield {"type": TASK_REQUIREMENTS, "task_id": task_id, **needs, "at_ms": 0}


def _scopes_removed(space: Space, scope_ids: frozenset[str]) -> None:
    """Ended runs removed (`runs.py`), after their tasks: the requirements of those tasks leave."""
    requirements, tasks = space.capacity.requirements, space.tasks
    for task_id in [task_id for task_id in requirements if tasks.find(task_id) is None]:
        del requirements[task_id]


def _make(space: Space) -> None:
    # Whether a task waits for admission (it has requirements): `recv` never delivers it.
    space.work.needs_admission = space.capacity.needs_admission


ADMISSION = Primitive(
    "admission",
    make=_make,
    commands={Admit: ("", admit)},
    records={TASK_REQUIREMENTS: ("task_id", "pools", "quotas", "budgets", "at_ms")},
    apply={TASK_REQUIREMENTS: ("capacity.requirements", _apply_requirements)},
    usage={TASK_REQUIREMENTS: NOT_COUNTED},  # counted with the submit it belongs to
    timers={WAKE_TIMER: ("", on_wake_timer)},
    image=_image,
    is_empty=lambda space: not space.capacity.requirements,
    scopes_removed=_scopes_removed,
    committed=_committed,
    committed_on=FREEING | {TASK_CREATED},
)
