"""Pools (permits): a named number of units, handed out in grants under a fenced lease.

A pool has `units_total` units. A grant holds `units` of them for a scope until its lease ends
(`expires_ms`), it is released, or its scope ends. Units in use are the sum over grants whose
lease has not ended, so they never exceed the total: an acquire that would go over is refused
with CAPACITY_UNAVAILABLE (and a Retry-After of when the soonest lease ends), and an acquire for
more units than the pool has at all is a 400, since it could never succeed.

Waiters (what the 0.3.0 client's `slots()` waits in): a durable FIFO line per pool. A waiter is
WAITING until it is its turn: the head of the line is SIGNALED as soon as its units fit, and the
units are held back for it while it comes to take them (`acquire` with its `waiterId`) within
`pool_turn_s`. Nobody overtakes the line: an acquire without a waiter id, or by a waiter still
WAITING, is CAPACITY_UNAVAILABLE while anyone waits, and a waiter behind the head is signaled only
once the head's units are held. So a big request is never starved by a stream of small ones; the
price is that units may stay free while the head waits for enough of them. A waiter ends GRANTED
(its grant id kept), CANCELLED, or EXPIRED (its TTL ran out while WAITING, or its turn passed while
SIGNALED: a crashed head holds the line up for one turn at most). `decide_serve` moves the line:
an acquire is decided as after that move, a release, a cancel or a new waiter moves it after
itself, and timers move it when units come back or a turn or TTL ends.

Renew and release name the grant by its id and its token; a token that is not the grant's current
one, or a lease that has ended, is STALE_CLAIM, as for claims. A lease past its end counts as
ended in every decision even before its expiry is recorded, so nothing depends on when the
supervisor gets to run.

Pure: no IO, no clock reads; every method takes `now_ms`.
"""

from __future__ import annotations

from typing import Callable, Iterator, Literal, NamedTuple, cast

from .caps import full
from .errors import CONFLICT, NOT_FOUND, STALE_CLAIM, VALIDATION_FAILED, KernelError
from .leases import hold, release, renewal, renewed, restore
from .primitive import record_type
from .shapes import DurationMs, EpochMs, Record

__all__ = [
    "Pool", "Grant", "PoolWaiter", "PoolTable", "CAPACITY_UNAVAILABLE", "SIGNALED", "WAITING",
    "PoolView", "GrantView", "TurnGrantView", "ReleasedGrantView", "PoolWaiterView", "PoolUnavailableView", "PoolWaiterState",
    "GRANT_ACQUIRED", "GRANT_EXPIRED", "GRANT_RELEASED", "GRANT_RENEWED", "PERMIT_WAITER_ADDED",
    "PERMIT_WAITER_ENDED", "PERMIT_WAITER_IMAGE", "PERMIT_WAITER_SIGNALED", "POOL_CREATED", "POOL_IMAGE",
]

# The record types this module decides and applies (the journal's spelling of each).
GRANT_ACQUIRED = record_type("grant.acquired")
GRANT_EXPIRED = record_type("grant.expired")
GRANT_RELEASED = record_type("grant.released")
GRANT_RENEWED = record_type("grant.renewed")
PERMIT_WAITER_ADDED = record_type("permit_waiter.added")
PERMIT_WAITER_ENDED = record_type("permit_waiter.ended")
PERMIT_WAITER_IMAGE = record_type("permit_waiter.image")
PERMIT_WAITER_SIGNALED = record_type("permit_waiter.signaled")
POOL_CREATED = record_type("pool.created")
POOL_IMAGE = record_type("pool.image")

CAPACITY_UNAVAILABLE = "CAPACITY_UNAVAILABLE"

WAITING, SIGNALED, GRANTED, CANCELLED, EXPIRED = "WAITING", "SIGNALED", "GRANTED", "CANCELLED", "EXPIRED"
PoolWaiterState = Literal["WAITING", "SIGNALED", "GRANTED", "CANCELLED", "EXPIRED"]
# A line with nobody signaled and no lease to wait for: the Retry-After of CAPACITY_UNAVAILABLE.
RETRY_AFTER_S = 1.0

# A pool's views are named tuples, as a claim's are (one allocation each). The grant variants
# repeat the fields of `GrantView` first, in its order, then their own. The shell names and
# formats them on the wire (`server/wire/pools.py`); the kernel knows nothing of that.


class PoolView(NamedTuple):
    """A pool as it stands: its capacity (`units_total`, and again as `units`, which 0.3.0's
    by-name answer reads), the units held by grants whose lease has not ended, the rest, and how
    many wait in its line."""

    id: str
    name: str
    units_total: int
    units: int
    units_in_use: int
    units_available: int
    waiting: int
    created_ms: EpochMs


class GrantView(NamedTuple):
    """A grant as its holder is shown it: `units` of the pool `pool_id` (named `name`) for a
    scope, under a lease of `lease_ms` that ends at `expires_ms` unless renewed; `token` None
    where it is withheld (a release's answer)."""

    grant_id: str
    pool_id: str
    name: str
    scope_id: str
    units: int
    token: str | None
    holder: str
    session: str
    lease_ms: DurationMs
    expires_ms: EpochMs
    acquired_ms: EpochMs


class TurnGrantView(NamedTuple):
    """A grant taken on a waiter's turn: as `GrantView`, then the waiter's id."""

    grant_id: str
    pool_id: str
    name: str
    scope_id: str
    units: int
    token: str | None
    holder: str
    session: str
    lease_ms: DurationMs
    expires_ms: EpochMs
    acquired_ms: EpochMs
    waiter_id: str


class ReleasedGrantView(NamedTuple):
    """A grant as its release left it: as `GrantView`, its token withheld (None), `released`
    (always true), at `released_ms`."""

    grant_id: str
    pool_id: str
    name: str
    scope_id: str
    units: int
    token: str | None  # None: withheld
    holder: str
    session: str
    lease_ms: DurationMs
    expires_ms: EpochMs
    acquired_ms: EpochMs
    released: bool
    released_ms: EpochMs


class PoolWaiterView(NamedTuple):
    """A waiter in a pool's line, as 0.3.0's slots() polls it: its place in the line (1 = the
    head) while in it, when its turn began (kept after it ends) and, while SIGNALED, when its turn
    ends; the grant it took once GRANTED; `expires_ms` its TTL while WAITING."""

    waiter_id: str
    pool_id: str
    name: str
    scope_id: str
    holder: str
    units: int
    state: PoolWaiterState
    position: int | None
    signaled_ms: EpochMs | None
    turn_ends_ms: EpochMs | None
    grant_id: str | None
    expires_ms: EpochMs
    created_ms: EpochMs
    ended_ms: EpochMs | None


class PoolUnavailableView(NamedTuple):
    """CAPACITY_UNAVAILABLE's details for a pool: the units free and in all, and how many wait."""

    units_available: int
    units_total: int
    waiting: int


class Grant:
    __slots__ = ("id", "pool_id", "scope_id", "units", "token", "holder", "session", "lease_ms", "expires_ms", "acquired_ms", "message_id",
                 "graced")

    def __init__(self, record: Record) -> None:
        """A grant as an acquiring record or an image states it; its lease is `leases.py`'s to set
        (`hold` for a new grant, `restore` for one in an image)."""
        self.id: str = record["id"]
        self.pool_id: str = record["pool_id"]
        self.scope_id: str = record["scope_id"]
        self.units: int = record["units"]
        assert self.units > 0, "a grant holds at least one unit"
        self.acquired_ms: int = record["at_ms"]
        # Taken at admission: held exactly while that delivery's lease (this token) is.
        self.message_id: str | None = record.get("message_id")
        self.token: str | None = None
        self.holder: str | None = None
        self.session: str | None = None
        self.lease_ms = 0
        self.expires_ms = 0
        # A restart gave the lease its grace and its holder has not renewed since.
        self.graced = False

    def image(self) -> Record:
        image = {
            "id": self.id, "pool_id": self.pool_id, "scope_id": self.scope_id, "units": self.units,
            "token": self.token, "holder": self.holder, "session": self.session, "lease_ms": self.lease_ms,
            "expires_ms": self.expires_ms, "at_ms": self.acquired_ms, "message_id": self.message_id,
        }
        if self.graced:
            image["graced"] = True
        return image


class PoolWaiter:
    __slots__ = (
        "id", "pool_id", "scope_id", "holder", "units", "expires_ms", "state", "signaled_ms", "turn_ends_ms", "grant_id",
        "created_ms", "ended_ms",
    )

    def __init__(self, record: Record) -> None:
        self.id: str = record["id"]
        self.pool_id: str = record["pool_id"]
        self.scope_id: str = record["scope_id"]
        self.holder: str = record["holder"]
        self.units: int = record["units"]
        self.expires_ms: int = record["expires_ms"]  # its TTL, while WAITING
        self.state: str = record.get("state", WAITING)
        self.signaled_ms: int | None = record.get("signaled_ms")  # when its turn began (kept after it ends)
        self.turn_ends_ms: int | None = record.get("turn_ends_ms")  # while SIGNALED
        self.grant_id: str | None = record.get("grant_id")
        self.created_ms: int = record["created_ms"] if "created_ms" in record else record.get("at_ms", 0)
        self.ended_ms: int | None = record.get("ended_ms")

    @property
    def due_ms(self) -> int:
        """When it ends unless something happens first: its turn's end when signaled, else its TTL."""
        return self.turn_ends_ms if self.state == SIGNALED and self.turn_ends_ms is not None else self.expires_ms

    def image(self) -> Record:
        return {
            "type": PERMIT_WAITER_IMAGE, "id": self.id, "pool_id": self.pool_id, "scope_id": self.scope_id,
            "holder": self.holder, "units": self.units, "expires_ms": self.expires_ms, "state": self.state,
            "signaled_ms": self.signaled_ms, "turn_ends_ms": self.turn_ends_ms, "grant_id": self.grant_id, "created_ms": self.created_ms, "ended_ms": self.ended_ms,
        }


class Pool:
    __slots__ = ("id", "name", "units_total", "created_ms", "grants", "line")

    def __init__(self, pool_id: str, name: str, units_total: int, created_ms: int) -> None:
        self.id = pool_id
        self.name = name
        self.units_total = units_total
        self.created_ms = created_ms
        # Grants not yet released or recorded as expired (some may have ended unrecorded).
        self.grants: dict[str, Grant] = {}
        # Waiter ids WAITING or SIGNALED, in the order they came (the head first).
        self.line: list[str] = []


class PoolTable:
    """The pools of one space, by id and by name, and their live grants by id."""

    __slots__ = ("_pools", "_by_name", "_grants", "_waiters", "_ended_count", "pools_max", "waiters_max", "delivery_held", "made")

    def __init__(self, pools_max: int, waiters_max: int = 10_000) -> None:
        self._pools: dict[str, Pool] = {}
        # Whether any pool was made here (pools are never removed): the space looks for pool
        # lines to move after a record only then.
        self.made = False
        self._by_name: dict[str, Pool] = {}
        self._grants: dict[str, Grant] = {}
        # Waiters in the order they joined; ended ones are kept (a client reads how its waiter
        # ended) until more than `waiters_max` have ended, then the oldest ended go first.
        self._waiters: dict[str, PoolWaiter] = {}
        self._ended_count = 0
        self.pools_max = pools_max
        self.waiters_max = waiters_max  # in one pool's line
        # Whether a delivery (message id, token) still holds its lease at a time; the space sets it.
        self.delivery_held: Callable[[str, str, int], bool] = lambda message_id, token, now_ms: False

    def held(self, grant: Grant, now_ms: int) -> bool:
        """A grant's units are in use: until its lease ends, or, taken at admission, while its delivery is leased."""
        if grant.message_id is not None:
            assert grant.token is not None, "a grant taken at admission holds its delivery's token"
            return self.delivery_held(grant.message_id, grant.token, now_ms)
        return now_ms < grant.expires_ms

    def in_use(self, pool: Pool, now_ms: int) -> int:
        return sum(grant.units for grant in pool.grants.values() if self.held(grant, now_ms))

    def held_back(self, pool: Pool, now_ms: int) -> int:
        """Units promised to signaled waiters whose turn lasts: free, but only for them."""
        waiters = self._waiters
        return sum(waiters[i].units for i in pool.line if waiters[i].state == SIGNALED and now_ms < waiters[i].due_ms)

    def lined_up(self, pool: Pool, now_ms: int) -> int:
        """Waiters ahead of any newcomer: those in the line whose TTL or turn has not run out."""
        return sum(1 for waiter_id in pool.line if now_ms < self._waiters[waiter_id].due_ms)

    def room(self, pool: Pool, now_ms: int) -> int:
        """Units a request not in the line could take now: none while anyone is lined up."""
        if self.lined_up(pool, now_ms):
            return 0
        return pool.units_total - self.in_use(pool, now_ms) - self.held_back(pool, now_ms)

    def named(self, name: str) -> Pool | None:
        return self._by_name.get(name)

    def find(self, name: str) -> Pool:
        pool = self._by_name.get(name)
        if pool is None:
            raise KernelError(NOT_FOUND, f"permit pool {name!r} not found")
        return pool

    # -- reading --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._pools)

    def waiters_kept(self) -> int:
        """Waiters kept, in a line or ended (the newest `waiters_max` ended ones stay readable)."""
        return len(self._waiters)

    def all(self) -> Iterator[Pool]:
        return iter(self._pools.values())

    def get(self, pool_id: str) -> Pool:
        pool = self._pools.get(pool_id)
        if pool is None:
            raise KernelError(NOT_FOUND, f"permit pool {pool_id!r} not found")
        return pool

    def grant(self, grant_id: str) -> Grant | None:
        return self._grants.get(grant_id)

    def grants(self) -> Iterator[Grant]:
        return iter(self._grants.values())

    def waiter(self, waiter_id: str) -> PoolWaiter:
        waiter = self._waiters.get(waiter_id)
        if waiter is None:
            raise KernelError(NOT_FOUND, f"permit waiter {waiter_id!r} not found")
        return waiter

    def waiters(self) -> Iterator[PoolWaiter]:
        return iter(self._waiters.values())

    def waiter_view(self, waiter: PoolWaiter) -> PoolWaiterView:
        pool = self._pools[waiter.pool_id]
        return PoolWaiterView(
            waiter.id, waiter.pool_id, pool.name, waiter.scope_id, waiter.holder, waiter.units, cast(PoolWaiterState, waiter.state),
            # Place in the line (1 = the head) while in it.
            pool.line.index(waiter.id) + 1 if waiter.id in pool.line else None,
            waiter.signaled_ms,
            waiter.turn_ends_ms if waiter.state == SIGNALED else None,
            waiter.grant_id, waiter.expires_ms, waiter.created_ms, waiter.ended_ms,
        )

    def view(self, pool: Pool, now_ms: int) -> PoolView:
        in_use = self.in_use(pool, now_ms)
        assert 0 <= in_use <= pool.units_total, "units in use are never negative nor above capacity"
        return PoolView(pool.id, pool.name, pool.units_total, pool.units_total, in_use, pool.units_total - in_use, len(pool.line), pool.created_ms)

    @staticmethod
    def grant_view(grant: Grant, pool: Pool) -> GrantView:
        assert grant.holder is not None and grant.session is not None, "a grant is viewed while held"
        return GrantView(
            grant.id, grant.pool_id, pool.name, grant.scope_id, grant.units, grant.token, grant.holder, grant.session,
            grant.lease_ms, grant.expires_ms, grant.acquired_ms,
        )

    @staticmethod
    def turn_grant_view(grant: Grant, pool: Pool, waiter_id: str) -> TurnGrantView:
        """The answer to an acquire on a waiter's turn: the grant, and the waiter whose turn it took."""
        return TurnGrantView(*PoolTable.grant_view(grant, pool), waiter_id)

    @staticmethod
    def released_grant_view(grant: Grant, pool: Pool, now_ms: int) -> ReleasedGrantView:
        """The answer to a release: the grant as it was until `now_ms`, its token withheld (made
        before the release is applied, which forgets the holder)."""
        view = PoolTable.grant_view(grant, pool)
        return ReleasedGrantView(*view._replace(token=None), True, now_ms)

    # -- deciding -------------------------------------------------------------------------------

    def decide_create(self, pool_id: str, name: str, units: int, now_ms: int) -> Record:
        if name in self._by_name:
            raise KernelError(CONFLICT, f"a permit pool named {name!r} exists already", details={"id": self._by_name[name].id})
        if len(self._pools) >= self.pools_max:
            raise full(f"space holds {len(self._pools)} permit pools", "pools_max")
        assert units > 0, "a pool has units to hand out"
        return {"type": POOL_CREATED, "id": pool_id, "name": name, "units": units, "at_ms": now_ms}

    def check_units(self, pool: Pool, units: int) -> None:
        if units > pool.units_total:
            raise KernelError(
                VALIDATION_FAILED, f"units {units} is more than permit pool {pool.name!r} has ({pool.units_total})"
            )

    def decide_acquire(
        self, pool_id: str, grant_id: str, scope_id: str, units: int, token: str, holder: str, session: str,
        lease_ms: int, now_ms: int, waiter_id: str | None = None, served: tuple[Record, ...] = (),
    ) -> list[Record]:
        """Records of the grant, or CAPACITY_UNAVAILABLE (with Retry-After), decided as if the
        line's move `served` (`decide_serve`, not yet applied) had been: the caller commits those
        records only if this one does not refuse, so a refusal changes nothing.

        Without `waiter_id` the units must be free and nobody lined up; with it, the waiter must
        be this pool's and SIGNALED (its units are held back for it). A waiter not signaled stays
        where it is in the line."""
        pool = self.get(pool_id)
        self.check_units(pool, units)
        records = self.decide_ended(pool, now_ms)
        in_use = self.in_use(pool, now_ms)
        if waiter_id is not None:
            waiter = self.waiter(waiter_id)
            if waiter.pool_id != pool_id:
                raise KernelError(VALIDATION_FAILED, f"waiter {waiter_id!r} waits for another permit pool")
            if waiter.units != units:
                raise KernelError(VALIDATION_FAILED, f"waiter {waiter_id!r} waits for {waiter.units} units, not {units}")
            turn = any(r["type"] == PERMIT_WAITER_SIGNALED and r["id"] == waiter.id for r in served)
            turn = turn or (waiter.state == SIGNALED and now_ms < waiter.due_ms)
            if not turn:
                state = EXPIRED if waiter.state in (WAITING, SIGNALED) and now_ms >= waiter.due_ms else waiter.state
                raise self._unavailable(pool, units, in_use, now_ms, f"waiter {waiter_id!r} is {state}, not SIGNALED")
            assert in_use + units <= pool.units_total, "a signaled waiter's units are held back for it"
            records.append({"type": PERMIT_WAITER_ENDED, "id": waiter.id, "state": GRANTED, "grant_id": grant_id, "at_ms": now_ms})
        else:
            lined_up = self.lined_up(pool, now_ms)  # a move of the line changes neither this nor room
            if lined_up or units > self.room(pool, now_ms):
                ahead = f"; {lined_up} waiter(s) ahead" if lined_up else ""
                raise self._unavailable(pool, units, in_use, now_ms, ahead)
            # Paired with `apply_acquired`: never above capacity, nor into a signaled waiter's units.
            assert in_use + self.held_back(pool, now_ms) + units <= pool.units_total, "a grant fits in what is free"
        assert 0 < units <= pool.units_total and lease_ms > 0, "a grant holds some of its pool's units, under a lease"
        records.append({
            "type": GRANT_ACQUIRED, "id": grant_id, "pool_id": pool_id, "scope_id": scope_id, "units": units,
            "token": token, "holder": holder, "session": session, "lease_ms": lease_ms,
            "expires_ms": now_ms + lease_ms, "at_ms": now_ms,
        })
        return records

    def _unavailable(self, pool: Pool, units: int, in_use: int, now_ms: int, why: str) -> KernelError:
        """CAPACITY_UNAVAILABLE, with a Retry-After of when the line may move next: the soonest
        lease end or turn end (else a second)."""
        ends = [grant.expires_ms for grant in pool.grants.values() if self.held(grant, now_ms)]
        ends += [self._waiters[waiter_id].due_ms for waiter_id in pool.line if self._waiters[waiter_id].state == SIGNALED]
        retry_after_s = max(0.0, (min(ends) - now_ms) / 1000) if ends else RETRY_AFTER_S
        free = pool.units_total - in_use
        sep = "; " if why and not why.startswith(";") else ""
        return KernelError(
            CAPACITY_UNAVAILABLE,
            f"permit pool {pool.name!r} has {free} of {pool.units_total} units free, {units} asked{sep}{why}",
            details=PoolUnavailableView(free, pool.units_total, len(pool.line)),
            retry_after_s=retry_after_s,
        )

    # -- the line -------------------------------------------------------------------------------

    def decide_wait(self, pool: Pool, waiter_id: str, scope_id: str, holder: str, units: int, ttl_ms: int, now_ms: int) -> Record:
        self.check_units(pool, units)
        if len(pool.line) >= self.waiters_max:
            raise full(f"permit pool {pool.name!r} has {len(pool.line)} waiters", "waiters_max")
        assert 0 < units <= pool.units_total and ttl_ms > 0, "a waiter waits for units its pool has, for a while"
        return {
            "type": PERMIT_WAITER_ADDED, "id": waiter_id, "pool_id": pool.id, "scope_id": scope_id, "holder": holder,
            "units": units, "expires_ms": now_ms + ttl_ms, "at_ms": now_ms,
        }

    def decide_serve(self, pool: Pool, turn_ms: int, now_ms: int) -> list[Record]:
        """Move the line: end the waiters whose TTL or turn ran out, hold units back for the
        signaled ones, and signal from the head while the units fit. Nobody behind a waiter that
        does not fit is signaled. The caller commits the records in order."""
        records: list[Record] = []
        free = pool.units_total - self.in_use(pool, now_ms)
        blocked = False  # a waiter that does not fit: nobody behind it is signaled (they may still expire)
        for waiter_id in pool.line:
            waiter = self._waiters[waiter_id]
            if now_ms >= waiter.due_ms:
                records.append({"type": PERMIT_WAITER_ENDED, "id": waiter.id, "state": EXPIRED, "grant_id": None, "at_ms": now_ms})
                continue
            if blocked:
                continue
            if waiter.state == WAITING:
                if waiter.units > free:
                    blocked = True
                    continue
                records.append({"type": PERMIT_WAITER_SIGNALED, "id": waiter.id, "turn_ends_ms": now_ms + turn_ms, "at_ms": now_ms})
            free -= waiter.units
            # Never negative: a waiter is signaled only when its units fit, and nothing takes units
            # held back for a signaled one (`room`).
            assert free >= 0, "the units held back for signaled waiters are free units"
        return records

    def decide_cancel(self, waiter: PoolWaiter, now_ms: int) -> Record | None:
        """Leave the line; a waiter that ended already stays as it ended (a grant stands)."""
        if waiter.state not in (WAITING, SIGNALED):
            return None
        assert waiter.id in self._pools[waiter.pool_id].line, "a waiter waiting or signaled is in its pool's line"
        return {"type": PERMIT_WAITER_ENDED, "id": waiter.id, "state": CANCELLED, "grant_id": None, "at_ms": now_ms}

    def decide_ended(self, pool: Pool, now_ms: int) -> list[Record]:
        """Expiry records for the grants of `pool` that ended unrecorded (a lease ran out, or the
        delivery a grant was taken with ended)."""
        assert self.in_use(pool, now_ms) <= pool.units_total, "units in use never exceed the pool's"
        return [self._ended(GRANT_EXPIRED, grant, now_ms) for grant in pool.grants.values() if not self.held(grant, now_ms)]

    def current(self, grant_id: str, token: str, now_ms: int) -> Grant:
        grant = self._grants.get(grant_id)
        if grant is None or grant.token != token:
            raise KernelError(STALE_CLAIM, f"token is not the current one for grant {grant_id!r}")
        if grant.message_id is not None:
            raise KernelError(
                CONFLICT, f"grant {grant_id!r} was taken with delivery {grant.message_id}: renew or settle the delivery"
            )
        if not self.held(grant, now_ms):
            raise KernelError(STALE_CLAIM, f"the lease on grant {grant_id!r} has ended")
        return grant

    def decide_renew(self, grant_id: str, token: str, lease_ms: int | None, now_ms: int) -> Record:
        """The renewal rule (`leases.renewal`) for the grant `token` holds."""
        grant = self.current(grant_id, token, now_ms)
        assert grant.message_id is None, "a grant taken at admission is renewed with its delivery"
        return self.renewed_record(grant, *renewal(grant, lease_ms, now_ms), now_ms)

    @staticmethod
    def renewed_record(grant: Grant, lease_ms: int, expires_ms: int, now_ms: int) -> Record:
        return {"type": GRANT_RENEWED, "id": grant.id, "lease_ms": lease_ms, "expires_ms": expires_ms, "at_ms": now_ms}

    def decide_release(self, grant_id: str, token: str, observation: object, now_ms: int) -> Record:
        grant = self.current(grant_id, token, now_ms)
        assert grant.id in self._pools[grant.pool_id].grants, "a held grant is one of its pool's"
        record = self._ended(GRANT_RELEASED, grant, now_ms)
        if observation is not None:
            record["observation"] = observation
        return record

    def decide_expire(self, grant_id: str, token: str, now_ms: int) -> Record | None:
        grant = self._grants.get(grant_id)
        if grant is None or grant.token != token or self.held(grant, now_ms):
            return None
        assert grant.id in self._pools[grant.pool_id].grants, "a live grant is one of its pool's (its units count there)"
        return self._ended(GRANT_EXPIRED, grant, now_ms)

    @staticmethod
    def _ended(kind: str, grant: Grant, now_ms: int) -> Record:
        return {"type": kind, "id": grant.id, "at_ms": now_ms}

    def held_leases(self) -> list[Grant]:
        """The grants held under a lease of their own (one taken at admission is attached to its
        delivery's lease instead)."""
        return [grant for grant in self._grants.values() if grant.message_id is None]

    def decide_turn_grace(self, now_ms: int, grace_ms: int) -> list[Record]:
        """At a start: a signaled waiter whose turn may have been alive at the crash gets the
        grace a lease gets (`leases.restart`) to come for its units, as a new end of its turn (it
        keeps its place and when its turn began). A turn is no lease (no token), so it is not
        spread: it ends no sooner than the grace after the restart."""
        records: list[Record] = []
        for pool in self._pools.values():
            for waiter_id in pool.line:
                waiter = self._waiters[waiter_id]
                turn_ends_ms = waiter.turn_ends_ms
                if waiter.state == SIGNALED and turn_ends_ms is not None and now_ms < turn_ends_ms < now_ms + grace_ms:
                    assert now_ms + grace_ms > turn_ends_ms, "a grace only makes a turn longer"
                    records.append({"type": PERMIT_WAITER_SIGNALED, "id": waiter.id, "turn_ends_ms": now_ms + grace_ms, "at_ms": now_ms})
        return records

    # -- applying -------------------------------------------------------------------------------

    def apply_created(self, record: Record) -> Pool:
        pool = Pool(record["id"], record["name"], record["units"], record["at_ms"])
        assert pool.id not in self._pools and pool.name not in self._by_name, "a pool id and name are made once"
        self._pools[pool.id] = self._by_name[pool.name] = pool
        self.made = True
        return pool

    def apply_acquired(self, record: Record) -> Grant:
        grant = Grant(record)
        hold(grant, record)
        pool = self._pools[grant.pool_id]
        assert grant.id not in self._grants, "a grant id is handed out once"
        # Units held back for signaled waiters count as taken (a signaled waiter's own grant ended
        # its waiting in the record before this one).
        taken = self.in_use(pool, grant.acquired_ms) + self.held_back(pool, grant.acquired_ms)
        assert taken + grant.units <= pool.units_total, "a grant never takes a pool over its units, nor a signaled waiter's"
        pool.grants[grant.id] = self._grants[grant.id] = grant
        return grant

    def apply_renewed(self, record: Record) -> Grant:
        grant = self._grants[record["id"]]
        assert grant.message_id is None, "a grant taken at admission is renewed with its delivery"
        renewed(grant, record)
        return grant

    def apply_ended(self, record: Record) -> Grant:
        """A release or an expiry: the grant's units go back to its pool, once."""
        grant = self._grants.pop(record["id"])
        del self._pools[grant.pool_id].grants[grant.id]
        release(grant)
        return grant

    def apply_waiter_added(self, record: Record) -> PoolWaiter:
        waiter = PoolWaiter(record)
        assert waiter.id not in self._waiters, "a waiter id is handed out once"
        self._waiters[waiter.id] = waiter
        self._pools[waiter.pool_id].line.append(waiter.id)
        return waiter

    def apply_waiter_signaled(self, record: Record) -> None:
        waiter = self._waiters[record["id"]]
        if waiter.state == SIGNALED:  # a restart's grace: the same turn, a later end
            assert record["turn_ends_ms"] >= (waiter.turn_ends_ms or 0), "a turn is only ever made longer"
            waiter.turn_ends_ms = record["turn_ends_ms"]
            return
        assert waiter.state == WAITING, "a waiter is signaled once per turn"
        pool = self._pools[waiter.pool_id]
        ahead = pool.line[: pool.line.index(waiter.id)]
        assert all(self._waiters[other].state == SIGNALED for other in ahead), "waiters are signaled in the order they came"
        waiter.state = SIGNALED
        waiter.signaled_ms = record["at_ms"]
        waiter.turn_ends_ms = record["turn_ends_ms"]

    def apply_waiter_ended(self, record: Record) -> None:
        waiter = self._waiters[record["id"]]
        assert waiter.state in (WAITING, SIGNALED), "a waiter ends once"
        assert record["state"] != GRANTED or waiter.state == SIGNALED, "only a signaled waiter is granted"
        self._end(waiter, record["state"], record["at_ms"], record.get("grant_id"))

    def _end(self, waiter: PoolWaiter, state: str, at_ms: int, grant_id: str | None = None) -> None:
        waiter.state = state
        waiter.ended_ms = at_ms
        waiter.grant_id = grant_id
        self._pools[waiter.pool_id].line.remove(waiter.id)
        self._ended_count += 1
        while self._ended_count > self.waiters_max:  # forget the oldest ended waiter (replay does the same)
            oldest = next(w for w in self._waiters.values() if w.state not in (WAITING, SIGNALED))
            del self._waiters[oldest.id]
            self._ended_count -= 1

    def end_in_scopes(self, scope_ids: list[str], at_ms: int) -> None:
        """Applied with a scope's end: its waiters are CANCELLED."""
        ended = set(scope_ids)
        for pool in self._pools.values():
            for waiter_id in list(pool.line):
                waiter = self._waiters[waiter_id]
                if waiter.scope_id in ended:
                    self._end(waiter, CANCELLED, at_ms)

    def drop_scopes(self, scope_ids: list[str]) -> list[Grant]:
        """Applied with a scope's end: the grants of its subtree are given back."""
        ended = set(scope_ids)
        dropped = [grant for grant in self._grants.values() if grant.scope_id in ended]
        for grant in dropped:
            del self._grants[grant.id]
            del self._pools[grant.pool_id].grants[grant.id]
        return dropped

    # -- images ---------------------------------------------------------------------------------

    def image(self) -> Iterator[Record]:
        for pool in self._pools.values():
            yield {
                "type": POOL_IMAGE, "id": pool.id, "name": pool.name, "units": pool.units_total,
                "created_ms": pool.created_ms, "grants": [grant.image() for grant in pool.grants.values()],
            }
        # Waiters in the order they came, so every line comes back in order.
        for waiter in self._waiters.values():
            yield waiter.image()

    def apply_waiter_image(self, record: Record) -> None:
        waiter = PoolWaiter(record)
        self._waiters[waiter.id] = waiter
        if waiter.state in (WAITING, SIGNALED):
            self._pools[waiter.pool_id].line.append(waiter.id)
        else:
            self._ended_count += 1

    def apply_image(self, record: Record) -> None:
        pool = self.apply_created({"id": record["id"], "name": record["name"], "units": record["units"], "at_ms": record["created_ms"]})
        for item in record["grants"]:
            grant = Grant(item)
            restore(grant, item)
            pool.grants[grant.id] = self._grants[grant.id] = grant
