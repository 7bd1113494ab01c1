"""Pools (permits) inside a space, declared: create, acquire, renew and release grants, the pools' lines.

The table, its records and the rules of the line are `pools.py`; these commands run on the
space's capacity actor (`capacity.py`), and this primitive makes the capacity part the other
capacity primitives share. A grant is held under a lease (`leases.py`); one taken at admission is
attached to its delivery's lease instead and ends with it, so units come back in another actor's
turn: the lines are then moved by a timer on the capacity actor (only it signals waiters).

Timers (tags on the capacity actor, each proposing a change the turn checks again):
    ("grant-lease", grant_id)   marker token   a grant's lease ran out: its units go back
    ("pool-waiter", waiter_id)  -              a waiter's TTL or turn ran out: EXPIRED, the line moves
    ("pool-serve", pool_id)     -              units came back outside this actor: move the line

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from . import capacity
from .capacity import CapacityCommand, CapacityCommands
from .errors import CONFLICT, NOT_FOUND, KernelError
from .fields import INTEGER, JSON, body, check_text, drawn, path
from .leases import LeaseKind
from .limits import Limits
from .messages import DELIVERY_COMPLETED, DELIVERY_DEAD, DELIVERY_REQUEUED, LEASED
from .outcome import Outcome, Timer, Space, TimerMarker
from .pools import (
    GRANT_ACQUIRED, GRANT_EXPIRED, GRANT_RELEASED, GRANT_RENEWED, PERMIT_WAITER_ADDED, PERMIT_WAITER_ENDED,
    PERMIT_WAITER_IMAGE, PERMIT_WAITER_SIGNALED, POOL_CREATED, POOL_IMAGE, SIGNALED, WAITING, Grant, Pool, PoolTable,
)
from .primitive import EVENT, FREE_OPERATION, NOT_COUNTED, OPERATION, Primitive, command, event, free, lease_field, operation, timer_kind
from .scopes import SCOPE_ENDED
from .tasks import TASK_ENDED
from .shapes import Record

__all__ = [
    "CreatePool", "EnsurePool", "AcquireGrant", "RenewGrant", "ReleaseGrant", "WaitPool", "CancelPoolWaiter", "POOLS",
    "GRANT_TIMER", "GRANT_LEASE",
]

GRANT_TIMER = timer_kind("grant-lease")
POOL_WAITER_TIMER = timer_kind("pool-waiter")
POOL_SERVE_TIMER = timer_kind("pool-serve")
GRANT_LEASE = "grant"  # the kind of lease a pool grant is held under, in the lease table

# The records that may give pool units back outside the capacity actor (a delivery holding
# admission grants ended): the pools' lines are moved by a timer on that actor.
POOL_FREEING = frozenset({SCOPE_ENDED, DELIVERY_COMPLETED, DELIVERY_REQUEUED, DELIVERY_DEAD, TASK_ENDED})


# -- commands ----------------------------------------------------------------------------------


@command
class CreatePool(CapacityCommand):
    space: str = path("space")
    name: str = body("name", length_max="name_len_max")
    units: int = body("units", INTEGER, minimum=1, maximum="pool_units_max", description="the pool's capacity")
    pool_id: str = drawn("pm_")


@command
class EnsurePool(CapacityCommand):
    """The pool of this name: `{}` looks it up; with `units` it is created when missing, and must
    have those units when it exists (else CONFLICT)."""

    space: str = path("space")
    name: str = path("name")
    units: int | None = body("units", INTEGER, required=False, minimum=1, maximum="pool_units_max", description="the pool's capacity")
    pool_id: str = drawn("pm_")

    def check(self, limits: Limits) -> None:
        check_text("name", self.name, limits.name_len_max)


@command
class AcquireGrant(CapacityCommand):
    space: str = path("space")
    pool_id: str = path("permit_id")
    scope_id: str = body("scopeId")
    units: int = body("units", INTEGER, required=False, minimum=1, maximum="pool_units_max", default=1)
    holder: str = body("holder", length_max="holder_len_max")
    session: str = body("holderSession", length_max="holder_len_max")
    lease_s: int = lease_field(default="lease_s_default")
    waiter_id: str | None = body(
        "waiterId", required=False, description="a waiter of this pool whose turn it is (SIGNALED); without it, nobody may be waiting"
    )
    grant_id: str = drawn("gr_")
    token: str = drawn("token")


@command
class RenewGrant(CapacityCommand):
    space: str = path("space")
    grant_id: str = path("grant_id")
    token: str = body("token")
    lease_s: int | None = lease_field()


@command
class ReleaseGrant(CapacityCommand):
    space: str = path("space")
    grant_id: str = path("grant_id")
    token: str = body("token")
    observation: Any = body("observation", JSON, required=False)


@command
class WaitPool(CapacityCommand):
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


@command
class CancelPoolWaiter(CapacityCommand):
    space: str = path("space")
    waiter_id: str = path("waiter_id")


# -- transitions (of the capacity part) ------------------------------------------------------------


def create(part: CapacityCommands, command: CreatePool | EnsurePool, now_ms: int) -> Outcome:
    pools: PoolTable = part.pools
    assert command.units is not None
    outcome = part.commit(Outcome(), pools.decide_create(command.pool_id, command.name, command.units, now_ms))
    outcome.reply = pools.view(pools.get(command.pool_id), now_ms)
    return outcome


def ensure(part: CapacityCommands, command: EnsurePool, now_ms: int) -> Outcome:
    """`PUT /permits/by-name/{name}`: look up, create, or check the pool of this name."""
    pool = part.pools.named(command.name)
    if pool is None:
        if command.units is None:
            raise KernelError(NOT_FOUND, f"permit pool {command.name!r} not found (send units to create it)")
        return create(part, command, now_ms)
    if command.units is not None and command.units != pool.units_total:
        raise KernelError(
            CONFLICT, f"permit pool {pool.name!r} has {pool.units_total} units, not {command.units}",
            details={"id": pool.id, "units": pool.units_total},
        )
    return Outcome(reply=part.pools.view(pool, now_ms))


def acquire(part: CapacityCommands, command: AcquireGrant, now_ms: int) -> Outcome:
    part.scopes.require_active(command.scope_id, now_ms)
    pools: PoolTable = part.pools
    pool = pools.get(command.pool_id)
    # The line moves first (a waiter whose turn came is signaled), and the acquire is decided as
    # after that move; both are committed only once nothing refuses (a turn that raises must not
    # have changed the state).
    served = pools.decide_serve(pool, part.limits.pool_turn_s * 1000, now_ms)
    records = pools.decide_acquire(
        command.pool_id, command.grant_id, command.scope_id, command.units, command.token, command.holder,
        command.session, command.lease_s * 1000, now_ms, command.waiter_id, tuple(served),
    )
    outcome = _waiter_timers(part, part.commit(Outcome(), *served))
    part.commit(outcome, *records)
    grant = pools.grant(command.grant_id)
    assert grant is not None and grant.token == command.token, "an acquire leaves its grant held with its token"
    outcome.timers.append(_grant_timer(part, grant))
    if command.waiter_id is None:
        outcome.reply = pools.grant_view(grant, pool)
    else:
        outcome.reply = pools.turn_grant_view(grant, pool, command.waiter_id)
    return outcome


def renew(part: CapacityCommands, command: RenewGrant, now_ms: int) -> Outcome:
    pools: PoolTable = part.pools
    lease_ms = None if command.lease_s is None else command.lease_s * 1000
    outcome = part.commit(Outcome(), pools.decide_renew(command.grant_id, command.token, lease_ms, now_ms))
    grant = pools.grant(command.grant_id)
    assert grant is not None
    outcome.timers.append(_grant_timer(part, grant))
    outcome.reply = pools.grant_view(grant, pools.get(grant.pool_id))
    return outcome


def release(part: CapacityCommands, command: ReleaseGrant, now_ms: int) -> Outcome:
    pools: PoolTable = part.pools
    grant = pools.current(command.grant_id, command.token, now_ms)
    reply = pools.released_grant_view(grant, pools.get(grant.pool_id), now_ms)
    outcome = part.commit(Outcome(), pools.decide_release(command.grant_id, command.token, command.observation, now_ms))
    assert pools.grant(command.grant_id) is None, "a released grant must not stay valid"
    _serve_line(part, outcome, pools.get(grant.pool_id), now_ms)
    outcome.reply = reply
    return outcome


def wait(part: CapacityCommands, command: WaitPool, now_ms: int) -> Outcome:
    part.scopes.require_active(command.scope_id, now_ms)
    pools: PoolTable = part.pools
    pool = pools.get(command.pool_id)
    ttl_s = part.limits.waiter_ttl_s_max if command.ttl_s is None else command.ttl_s
    part.check_entities(1)
    record = pools.decide_wait(pool, command.waiter_id, command.scope_id, command.holder, command.units, ttl_s * 1000, now_ms)
    outcome = part.commit(Outcome(), record)
    # Signaled at once when nothing is ahead and its units are free.
    _serve_line(part, outcome, pool, now_ms)
    waiter = pools.waiter(command.waiter_id)
    if waiter.state != SIGNALED:
        outcome.timers.append(Timer(waiter.due_ms, part.actor, (POOL_WAITER_TIMER, waiter.id), None))
    outcome.reply = pools.waiter_view(waiter)
    return outcome


def cancel_waiter(part: CapacityCommands, command: CancelPoolWaiter, now_ms: int) -> Outcome:
    pools: PoolTable = part.pools
    waiter = pools.waiter(command.waiter_id)
    record = pools.decide_cancel(waiter, now_ms)
    outcome = Outcome()
    if record is not None:
        part.commit(outcome, record)
        # It may have been the head, or held units back: those behind it may fit now.
        _serve_line(part, outcome, pools.get(waiter.pool_id), now_ms)
    outcome.reply = pools.waiter_view(waiter)
    return outcome


# -- the line of a pool (`pools.py`: what 0.3.0's slots() waits in) --------------------------------


def _serve_line(part: CapacityCommands, outcome: Outcome, pool: Pool | None, now_ms: int) -> Outcome:
    """Move the line of `pool` at the end of `outcome` (units may have come back)."""
    if pool is None or not pool.line:
        return outcome
    part.commit(outcome, *part.pools.decide_serve(pool, part.limits.pool_turn_s * 1000, now_ms))
    return _waiter_timers(part, outcome)


def _waiter_timers(part: CapacityCommands, outcome: Outcome) -> Outcome:
    """The timer of every waiter signaled in `outcome` (its turn's end; a WAITING one has its TTL's)."""
    for record in outcome.records:
        if record["type"] == PERMIT_WAITER_SIGNALED:
            outcome.timers.append(Timer(record["turn_ends_ms"], part.actor, (POOL_WAITER_TIMER, record["id"]), None))
    return outcome


def _grant_timer(part: CapacityCommands, grant: Grant) -> Timer:
    return Timer(grant.expires_ms, part.actor, (GRANT_TIMER, grant.id), grant.token)


def serve_timers(part: CapacityCommands, at_ms: int) -> Iterator[Timer]:
    """A move of every line at `at_ms`: units came back in another actor's turn (a delivery
    holding admission grants ended), and only this actor signals waiters."""
    for pool in part.pools.all():
        if pool.line:
            yield Timer(at_ms, part.actor, (POOL_SERVE_TIMER, pool.id), None)


def on_grant_timer(part: CapacityCommands, grant_id: str, token: Any, now_ms: int) -> Outcome:
    pools: PoolTable = part.pools
    record = pools.decide_expire(grant_id, token, now_ms)
    if record is None:
        return Outcome()
    grant = pools.grant(grant_id)
    assert grant is not None, "a grant just expired is still known"
    pool = pools.get(grant.pool_id)
    return _serve_line(part, part.commit(Outcome(), record), pool, now_ms)


def on_waiter_timer(part: CapacityCommands, waiter_id: str, _: TimerMarker, now_ms: int) -> Outcome:
    """A waiter's TTL or turn may have run out: the line moves (which ends it if so)."""
    waiter = part.pools.waiter(waiter_id)
    if waiter.state not in (WAITING, SIGNALED):
        return Outcome()
    return _serve_line(part, Outcome(), part.pools.get(waiter.pool_id), now_ms)


def on_serve_timer(part: CapacityCommands, pool_id: str, _: TimerMarker, now_ms: int) -> Outcome:
    return _serve_line(part, Outcome(), part.pools.get(pool_id), now_ms)


# -- restarts, the lease table, recovery ------------------------------------------------------------


def _restart(space: Space, now_ms: int, grace_ms: int) -> Outcome:
    """After a recovery: signaled waiters' turns get the grace (`PoolTable.decide_turn_grace`);
    the grants' leases get the lease rule with every other lease of the space (`lease_kind`)."""
    part = space.capacity
    return _waiter_timers(part, part.commit(Outcome(), *part.pools.decide_turn_grace(now_ms, grace_ms)))


def lease_kind(space: Space) -> LeaseKind:
    part: CapacityCommands = space.capacity
    pools: PoolTable = part.pools

    def ended(grant: Grant, now_ms: int) -> Record:
        assert grant.token is not None, "the lease table holds held grants only"
        record = pools.decide_expire(grant.id, grant.token, now_ms)
        assert record is not None, "only an ended lease is expired"
        return record

    def timers(grant: Grant) -> list[Timer]:
        return [_grant_timer(part, grant)] if pools.grant(grant.id) is grant else []

    return LeaseKind(GRANT_LEASE, pools.held_leases, ended, PoolTable.renewed_record, space.commit, timers)


def _deadlines(space: Space) -> Iterator[Timer]:
    part: CapacityCommands = space.capacity
    for grant in part.pools.grants():
        if grant.message_id is None:  # one taken at admission ends with its delivery
            yield _grant_timer(part, grant)
    for waiter in part.pools.waiters():
        if waiter.state in (WAITING, SIGNALED):
            yield Timer(waiter.due_ms, part.actor, (POOL_WAITER_TIMER, waiter.id), None)
    # Due at once after a recovery: units may have come back while nobody moved the line.
    yield from serve_timers(part, 0)


def _committed(space: Space, outcome: Outcome, records: tuple[Record, ...]) -> None:
    """Pool units given back by a delivery's end (in another actor's turn) move the pools' lines."""
    part = space.capacity
    if not part.pools.made:
        return
    freed = [record["at_ms"] for record in records if record["type"] in POOL_FREEING]
    if freed:
        outcome.timers.extend(serve_timers(part, freed[-1]))


def _scope_ending(space: Space, subtree: list[str]) -> Callable[[Outcome, int], None]:
    """A scope's end may remove the head of a line: those behind it may fit now."""
    return lambda outcome, at_ms: outcome.timers.extend(serve_timers(space.capacity, at_ms))


def _scope_ended(space: Space, subtree: list[str], state: str, at_ms: int) -> None:
    """Applied with `scope.ended`: grants of the subtree give their units back, its waiters are CANCELLED."""
    pools: PoolTable = space.capacity.pools
    pools.drop_scopes(subtree)
    pools.end_in_scopes(subtree, at_ms)


def _make(space: Space) -> None:
    part = capacity.make(space)  # the capacity part, shared with quotas, budgets and work limits
    part.pools = PoolTable(space.limits.pools_max, space.limits.waiters_max)
    messages = space.messages

    def delivery_held(message_id: str, token: str, now_ms: int) -> bool:
        message = messages.find(message_id)
        return message is not None and message.state == LEASED and message.token == token and now_ms < message.expires_ms

    part.pools.delivery_held = delivery_held


_ON = "capacity"

POOLS = Primitive(
    "pools",
    make=_make,
    state=("capacity",),
    commands={
        CreatePool: (_ON, create),
        EnsurePool: (_ON, ensure),
        AcquireGrant: (_ON, acquire),
        RenewGrant: (_ON, renew),
        ReleaseGrant: (_ON, release),
        WaitPool: (_ON, wait),
        CancelPoolWaiter: (_ON, cancel_waiter),
    },
    records={
        POOL_CREATED: ("id", "name", "units", "at_ms"),
        # An admission's grant names the delivery whose lease it shares.
        GRANT_ACQUIRED: ("id", "pool_id", "scope_id", "units", "token", "holder", "session", "lease_ms", "expires_ms", "at_ms", "message_id?"),
        GRANT_RENEWED: ("id", "lease_ms", "expires_ms", "at_ms", "graced?"),
        # A release may carry the caller's observation, kept as given (as a claim's release keeps one).
        GRANT_RELEASED: ("id", "at_ms", "observation?"),
        GRANT_EXPIRED: ("id", "at_ms"),
        POOL_IMAGE: ("id", "name", "units", "created_ms", "grants"),
        # The line of a pool (what `slots()` waits in).
        PERMIT_WAITER_ADDED: ("id", "pool_id", "scope_id", "holder", "units", "expires_ms", "at_ms"),
        PERMIT_WAITER_SIGNALED: ("id", "turn_ends_ms", "at_ms"),
        PERMIT_WAITER_ENDED: ("id", "state", "grant_id", "at_ms"),
        PERMIT_WAITER_IMAGE: (
            "id", "pool_id", "scope_id", "holder", "units", "expires_ms", "state", "signaled_ms", "turn_ends_ms", "grant_id",
            "created_ms", "ended_ms",
        ),
    },
    apply={
        POOL_CREATED: ("capacity.pools", "apply_created"),
        GRANT_ACQUIRED: ("capacity.pools", "apply_acquired"),
        GRANT_RENEWED: ("capacity.pools", "apply_renewed"),
        GRANT_RELEASED: ("capacity.pools", "apply_ended"),
        GRANT_EXPIRED: ("capacity.pools", "apply_ended"),
        POOL_IMAGE: ("capacity.pools", "apply_image"),
        PERMIT_WAITER_ADDED: ("capacity.pools", "apply_waiter_added"),
        PERMIT_WAITER_SIGNALED: ("capacity.pools", "apply_waiter_signaled"),
        PERMIT_WAITER_ENDED: ("capacity.pools", "apply_waiter_ended"),
        PERMIT_WAITER_IMAGE: ("capacity.pools", "apply_waiter_image"),
    },
    usage={
        POOL_CREATED: operation("pools.create"),
        GRANT_ACQUIRED: operation("pools.acquire"),
        GRANT_RELEASED: operation("pools.release"),
        GRANT_RENEWED: free("pools.renew"),
        GRANT_EXPIRED: event("pools.expire"),
        PERMIT_WAITER_ADDED: operation("pools.wait"),
        PERMIT_WAITER_SIGNALED: event("pools.signal"),
        # A waiter's grant is part of its acquire (the operation is `grant.acquired`).
        PERMIT_WAITER_ENDED: lambda record: {
            "CANCELLED": (OPERATION, "pools.cancel_wait"), "GRANTED": (FREE_OPERATION, "pools.take_turn"),
        }.get(record["state"], (EVENT, "pools.wait_expire")),
        POOL_IMAGE: NOT_COUNTED,
        PERMIT_WAITER_IMAGE: NOT_COUNTED,
    },
    timers={
        GRANT_TIMER: (_ON, on_grant_timer),
        POOL_WAITER_TIMER: (_ON, on_waiter_timer),
        POOL_SERVE_TIMER: (_ON, on_serve_timer),
    },
    leases=lease_kind,
    restart=_restart,
    deadlines=_deadlines,
    image=lambda space: space.capacity.pools.image(),
    is_empty=lambda space: not len(space.capacity.pools),
    entities=lambda space: space.capacity.pools.waiters_kept(),
    scope_ended=_scope_ended,
    scope_ending=_scope_ending,
    committed=_committed,
    committed_on=POOL_FREEING,
)
