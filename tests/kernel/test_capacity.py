"""Capacity in the kernel, in virtual time: pools, quotas, work limits and budgets.

Each test drives a real kernel (memory journal) through the capacity commands and asserts exact
answers and virtual times; the last ones replay the journal and rebuild from the image and check
that both give the same state and the same timers.
"""

from __future__ import annotations

import pytest
import trio

from runstate.actors import Clock, IdSource, Kernel, KernelError, KernelState
from runstate.actors.journal import MemoryJournal
from runstate.actors.primitives import named
from runstate.actors.records import check_record
from runstate.actors.space import SpaceState

from ..capacity_ops import BudgetOps, PoolOps, QuotaOps, WorkLimitOps
from ..ops import MailboxOps, MessageOps, ScopeOps, TaskOps
from .conftest import T0
from ..single import only

pytestmark = pytest.mark.trio

SPACE = "sp1"


class World:
    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.scopes = ScopeOps(kernel)
        self.pools = PoolOps(kernel)
        self.quotas = QuotaOps(kernel)
        self.work_limits = WorkLimitOps(kernel)
        self.budgets = BudgetOps(kernel)
        self.mailboxes = MailboxOps(kernel)
        self.messages = MessageOps(kernel)
        self.tasks = TaskOps(kernel)
        self.t0 = trio.current_time()

    def elapsed(self) -> float:
        return trio.current_time() - self.t0

    def now_ms(self) -> int:
        return self.kernel.clock.now_ms()


@pytest.fixture
async def world(nursery):
    kernel = Kernel(state=KernelState(), journal=MemoryJournal(keep=True), clock=Clock(wall_anchor_ms=T0), ids=IdSource(seed=3))
    await nursery.start(kernel.run)
    return World(kernel)


async def refused(code: str, call) -> KernelError:
    with pytest.raises(KernelError) as caught:
        await call
    assert caught.value.code == code, caught.value
    return caught.value


# -- pools -------------------------------------------------------------------------------------------


async def test_a_pool_hands_out_units_up_to_its_capacity_and_never_more(world, autojump_clock):
    """Acquire N units under a fenced lease; too few free is CAPACITY_UNAVAILABLE with the time to
    the soonest lease end; more than the pool has at all is a 400; release gives them back."""
    run = await world.scopes.create(SPACE)
    pool = await world.pools.create(SPACE, name="browsers", units=3)
    assert pool["unitsTotal"] == 3 and pool["unitsAvailable"] == 3 and pool["units"] == 3
    await refused("CONFLICT", world.pools.create(SPACE, name="browsers", units=3))
    first = await world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], units=2, lease_s=30)
    assert first["units"] == 2 and first["token"].startswith("ct_")
    await trio.sleep(10)
    error = await refused("CAPACITY_UNAVAILABLE", world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], units=2))
    assert error.retry_after_s == 20.0
    await refused("VALIDATION_FAILED", world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], units=4))
    second = await world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], units=1)
    assert world.pools.list(SPACE)[0]["unitsAvailable"] == 0
    released = await world.pools.release(SPACE, first["grantId"], token=first["token"])
    assert released["released"] is True and released["token"] is None
    assert world.pools.list(SPACE)[0]["unitsAvailable"] == 2
    await refused("STALE_CLAIM", world.pools.release(SPACE, first["grantId"], token=first["token"]))
    await refused("STALE_CLAIM", world.pools.renew(SPACE, second["grantId"], token=first["token"]))
    await refused("NOT_FOUND", world.pools.acquire(SPACE, "pm_none", scope_id=run["id"]))


async def test_an_expired_grant_returns_its_units_on_its_timer(world, autojump_clock):
    """A lease that is not renewed ends at its time: the timer records the expiry and the units are
    free again; a renewal before that moves the end; the token is then stale."""
    run = await world.scopes.create(SPACE)
    pool = await world.pools.create(SPACE, name="p", units=1)
    grant = await world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], lease_s=10)
    await trio.sleep(8)
    renewed = await world.pools.renew(SPACE, grant["grantId"], token=grant["token"])
    assert renewed["leaseExpiresAt"] == "2027-01-15T08:00:18.000Z"
    await trio.sleep(9.999)
    assert world.pools.list(SPACE)[0]["unitsInUse"] == 1
    await trio.sleep(0.002)
    assert only(world.kernel).state.space(SPACE).capacity.pools.grant(grant["grantId"]) is None, "the timer recorded the expiry"
    assert world.pools.list(SPACE)[0]["unitsInUse"] == 0
    await refused("STALE_CLAIM", world.pools.renew(SPACE, grant["grantId"], token=grant["token"]))
    kinds = [r["type"] for r in only(world.kernel).journal.records]
    assert kinds.count("grant.expired") == 1


async def test_a_cancelled_scope_gives_its_grants_back(world, autojump_clock):
    """Ending a scope frees the units of every grant in its subtree, in the same record."""
    run = await world.scopes.create(SPACE)
    child = await world.scopes.create(SPACE, parent_id=run["id"])
    pool = await world.pools.create(SPACE, name="p", units=2)
    grant = await world.pools.acquire(SPACE, pool["id"], scope_id=child["id"], units=2)
    await world.scopes.cancel(SPACE, run["id"])
    assert world.pools.list(SPACE)[0]["unitsAvailable"] == 2
    await refused("STALE_CLAIM", world.pools.renew(SPACE, grant["grantId"], token=grant["token"]))
    await refused("SCOPE_CANCELLED", world.pools.acquire(SPACE, pool["id"], scope_id=child["id"]))


# -- the line of a pool (0.3.0's slots) ----------------------------------------------------------------


async def test_a_pools_line_is_served_in_order_and_a_big_request_is_not_starved(world, autojump_clock):
    """Waiters are signaled head first, and only when their units fit; nobody overtakes the head:
    not a smaller waiter behind it, not a plain acquire, not a waiter acquiring before its turn.
    A signaled waiter's units are held back for it until it acquires with its waiter id."""
    run = await world.scopes.create(SPACE)
    pool = await world.pools.create(SPACE, name="browsers", units=3)
    two = await world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], units=2, lease_s=30)
    one = await world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], units=1, lease_s=60)
    big = await world.pools.wait(SPACE, pool["id"], scope_id=run["id"], units=3, holder="big")
    small = await world.pools.wait(SPACE, pool["id"], scope_id=run["id"], units=1, holder="small")
    assert (big["state"], big["position"], small["state"], small["position"]) == ("WAITING", 1, "WAITING", 2)
    assert big["waiterId"].startswith("pw_") and big["expiresAt"] == "2027-01-15T09:00:00.000Z", "default TTL: an hour"
    error = await refused("CAPACITY_UNAVAILABLE", world.pools.acquire(SPACE, pool["id"], scope_id=run["id"]))
    assert error.retry_after_s == 30.0 and "2 waiter(s) ahead" in error.message
    await world.pools.release(SPACE, one["grantId"], token=one["token"])
    assert world.pools.waiter(SPACE, small["waiterId"])["state"] == "WAITING", "a unit is free, but the big head is ahead"
    await refused("CAPACITY_UNAVAILABLE", world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], waiter_id=small["waiterId"]))
    await refused("CAPACITY_UNAVAILABLE", world.pools.acquire(SPACE, pool["id"], scope_id=run["id"]))
    await trio.sleep(5)
    await world.pools.release(SPACE, two["grantId"], token=two["token"])
    signaled = world.pools.waiter(SPACE, big["waiterId"])
    assert signaled["state"] == "SIGNALED" and signaled["turnEndsAt"] == "2027-01-15T08:00:15.000Z"
    assert world.pools.waiter(SPACE, small["waiterId"])["state"] == "WAITING", "the head's units are held back"
    error = await refused("CAPACITY_UNAVAILABLE", world.pools.acquire(SPACE, pool["id"], scope_id=run["id"]))
    assert error.retry_after_s == 10.0, "the line moves next when the head's turn ends"
    await refused("VALIDATION_FAILED", world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], units=2, waiter_id=big["waiterId"]))
    grant = await world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], units=3, waiter_id=big["waiterId"])
    assert grant["units"] == 3 and grant["waiterId"] == big["waiterId"]
    granted = world.pools.waiter(SPACE, big["waiterId"])
    assert (granted["state"], granted["grantId"], granted["position"]) == ("GRANTED", grant["grantId"], None)
    assert (await world.pools.cancel(SPACE, big["waiterId"]))["state"] == "GRANTED", "a grant stands"
    await world.pools.release(SPACE, grant["grantId"], token=grant["token"])
    assert world.pools.waiter(SPACE, small["waiterId"])["state"] == "SIGNALED"
    mine = await world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], waiter_id=small["waiterId"])
    assert mine["units"] == 1 and world.pools.list(SPACE)[0]["waiting"] == 0
    now = await world.pools.wait(SPACE, pool["id"], scope_id=run["id"], units=2)
    assert now["state"] == "SIGNALED", "nothing ahead and the units free: its turn at once"
    await refused("NOT_FOUND", world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], waiter_id="pw_none"))
    await refused("VALIDATION_FAILED", world.pools.wait(SPACE, pool["id"], scope_id=run["id"], units=4))


async def test_a_signaled_waiter_that_does_not_come_loses_its_turn_to_the_next(world, autojump_clock):
    """A crashed head holds the line up for one turn (pool_turn_s), then it is EXPIRED and the
    next is signaled by the timer; a WAITING waiter's TTL ends it EXPIRED; a cancel leaves the
    line; a lease that runs out signals the head on its own timer."""
    run = await world.scopes.create(SPACE)
    pool = await world.pools.create(SPACE, name="p", units=1)
    held = await world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], lease_s=20)
    gone = await world.pools.wait(SPACE, pool["id"], scope_id=run["id"], holder="crashed")
    brief = await world.pools.wait(SPACE, pool["id"], scope_id=run["id"], holder="brief", ttl_s=5)
    late = await world.pools.wait(SPACE, pool["id"], scope_id=run["id"], holder="late")
    await trio.sleep(5.001)
    assert world.pools.waiter(SPACE, brief["waiterId"])["state"] == "EXPIRED"
    await trio.sleep(15)
    assert world.pools.waiter(SPACE, gone["waiterId"])["state"] == "SIGNALED", "the lease ran out: the head's turn"
    await trio.sleep(9.998)
    assert world.pools.waiter(SPACE, late["waiterId"])["state"] == "WAITING"
    await trio.sleep(0.002)
    assert world.pools.waiter(SPACE, gone["waiterId"])["state"] == "EXPIRED"
    assert world.pools.waiter(SPACE, late["waiterId"])["state"] == "SIGNALED"
    await refused("CAPACITY_UNAVAILABLE", world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], waiter_id=gone["waiterId"]))
    await refused("STALE_CLAIM", world.pools.renew(SPACE, held["grantId"], token=held["token"]))
    assert (await world.pools.cancel(SPACE, late["waiterId"]))["state"] == "CANCELLED"
    assert (await world.pools.acquire(SPACE, pool["id"], scope_id=run["id"]))["units"] == 1, "nobody in line: a plain acquire"


async def test_a_scope_end_cancels_its_pool_waiters_and_signals_those_behind(world, autojump_clock):
    """A waiter of an ended run is CANCELLED in the scope's own record; the one behind it, which
    fits, is signaled; joining the line from an ended scope is SCOPE_CANCELLED."""
    run = await world.scopes.create(SPACE)
    other = await world.scopes.create(SPACE)
    pool = await world.pools.create(SPACE, name="p", units=2)
    await world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], units=1, lease_s=600)
    head = await world.pools.wait(SPACE, pool["id"], scope_id=other["id"], units=2)
    behind = await world.pools.wait(SPACE, pool["id"], scope_id=run["id"], units=1)
    assert (head["state"], behind["state"]) == ("WAITING", "WAITING")
    from runstate.actors.capacity_reads import pool_waiting

    waiting = pool_waiting(world.kernel, SPACE, [run["id"]])
    assert [(w.name, w.units, w.waiter_id) for w in waiting] == [("p", 1, behind["waiterId"])]
    await world.scopes.cancel(SPACE, other["id"])
    await trio.sleep(0.001)
    assert world.pools.waiter(SPACE, head["waiterId"])["state"] == "CANCELLED"
    assert world.pools.waiter(SPACE, behind["waiterId"])["state"] == "SIGNALED"
    await refused("SCOPE_CANCELLED", world.pools.wait(SPACE, pool["id"], scope_id=other["id"]))


# -- by name (0.3.0's setup and decorators) ------------------------------------------------------------


async def test_by_name_looks_up_creates_or_checks_each_resource(world, autojump_clock):
    """`{}` looks a name up (404 when missing); sizes create it when missing and must match when
    it exists (409 CONFLICT naming what differs); half a declaration is a 400."""
    await refused("NOT_FOUND", world.pools.ensure(SPACE, "browsers"))
    pool = await world.pools.ensure(SPACE, "browsers", units=5)
    assert (pool["name"], pool["units"]) == ("browsers", 5)
    assert (await world.pools.ensure(SPACE, "browsers"))["id"] == pool["id"]
    assert (await world.pools.ensure(SPACE, "browsers", units=5))["id"] == pool["id"]
    error = await refused("CONFLICT", world.pools.ensure(SPACE, "browsers", units=4))
    assert "has 5 units, not 4" in error.message

    await refused("NOT_FOUND", world.quotas.ensure(SPACE, "search"))
    quota = await world.quotas.ensure(SPACE, "search", units_limit=60, window_s=60)
    assert (quota["unitsLimit"], quota["windowSeconds"]) == (60, 60)
    assert (await world.quotas.ensure(SPACE, "search"))["id"] == quota["id"]
    await refused("CONFLICT", world.quotas.ensure(SPACE, "search", units_limit=60, window_s=1))
    await refused("VALIDATION_FAILED", world.quotas.ensure(SPACE, "other", units_limit=60))

    await refused("NOT_FOUND", world.budgets.ensure(SPACE, "spend"))
    budget = await world.budgets.ensure(SPACE, "spend", limit=500)
    assert (budget["limitMinor"], budget["currency"], budget["scale"]) == ("500", "USD", 2)
    assert (await world.budgets.ensure(SPACE, "spend", limit=500, currency="USD", scale=2))["id"] == budget["id"]
    error = await refused("CONFLICT", world.budgets.ensure(SPACE, "spend", limit=500, scale=3))
    assert "scale 2, not 3" in error.message
    await refused("CONFLICT", world.budgets.ensure(SPACE, "spend", limit=501))
    await refused("VALIDATION_FAILED", world.budgets.ensure(SPACE, "none", currency="EUR"))


async def test_a_settle_with_overrun_charges_past_the_reservation_up_to_what_is_left(world, autojump_clock):
    """allowOverrun charges more than was reserved, cut to what the budget still has (spent never
    passes the limit); a smaller settle leaves the reservation ACTIVE with the rest; without
    allowOverrun a settle past the reservation is a CONFLICT."""
    run = await world.scopes.create(SPACE)
    budget = await world.budgets.create(SPACE, name="b", limit=100)
    first = await world.budgets.reserve(SPACE, budget["id"], scope_id=run["id"], amount=30)
    await refused("CONFLICT", world.budgets.settle(SPACE, budget["id"], reservation_id=first["reservationId"], amount=40, work_key="k0"))
    over = await world.budgets.settle(SPACE, budget["id"], reservation_id=first["reservationId"], amount=40, work_key="k1", allow_overrun=True)
    assert (over["state"], over["settledMinor"], over["reservedMinor"]) == ("SETTLED", "40", "0")
    second = await world.budgets.reserve(SPACE, budget["id"], scope_id=run["id"], amount=20)
    part = await world.budgets.settle(SPACE, budget["id"], reservation_id=second["reservationId"], amount=5, work_key="k2", allow_overrun=True)
    assert (part["state"], part["reservedMinor"]) == ("ACTIVE", "15")
    capped = await world.budgets.settle(SPACE, budget["id"], reservation_id=second["reservationId"], amount=500, work_key="k3", allow_overrun=True)
    assert (capped["state"], capped["settledMinor"]) == ("SETTLED", "60")
    view = world.budgets.view(SPACE, budget["id"])
    assert (view["spentMinor"], view["availableMinor"], view["reservations"]) == ("100", "0", [])
    await refused("INSUFFICIENT_BUDGET", world.budgets.reserve(SPACE, budget["id"], scope_id=run["id"], amount=1))


# -- quotas ------------------------------------------------------------------------------------------


async def test_a_window_consumes_up_to_its_limit_then_says_when_the_next_begins(world, autojump_clock):
    """Fixed windows from the allowance's creation: the limit per window, 429 ALLOWANCE_EXHAUSTED
    with Retry-After until the next window, more than the limit is a 400."""
    run = await world.scopes.create(SPACE)
    allowance = await world.quotas.create(SPACE, name="llm", units_limit=5, window_s=60)
    await refused("CONFLICT", world.quotas.create(SPACE, name="llm", units_limit=5, window_s=60))
    taken = await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"], units=3)
    assert taken["remaining"] == 2 and taken["windowStart"] == "2027-01-15T08:00:00.000Z"
    await trio.sleep(15)
    error = await refused("ALLOWANCE_EXHAUSTED", world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"], units=3))
    assert error.retry_after_s == 45.0
    await refused("VALIDATION_FAILED", world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"], units=6))
    await trio.sleep(45)
    again = await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"], units=5)
    assert again["remaining"] == 0 and again["windowStart"] == "2027-01-15T08:01:00.000Z"


async def test_a_cooldown_refuses_and_grants_nothing_until_it_ends(world, autojump_clock):
    """While a cooldown lasts consume is 429 ALLOWANCE_COOLDOWN (Retry-After its end) and no waiter
    is granted; at its end the head waiter is granted by the timer."""
    run = await world.scopes.create(SPACE)
    allowance = await world.quotas.create(SPACE, name="llm", units_limit=5, window_s=600)
    cooled = await world.quotas.cooldown(SPACE, allowance["id"], seconds=30, reason="provider 429")
    assert cooled["cooldownUntil"] == "2027-01-15T08:00:30.000Z"
    error = await refused("ALLOWANCE_COOLDOWN", world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"]))
    assert error.retry_after_s == 30.0
    waiter = await world.quotas.wait(SPACE, allowance["id"], scope_id=run["id"], units=2, ttl_s=120)
    assert waiter["state"] == "WAITING"
    await trio.sleep(29.9)
    assert world.quotas.waiter(SPACE, waiter["waiterId"])["state"] == "WAITING"
    await trio.sleep(0.2)
    granted = world.quotas.waiter(SPACE, waiter["waiterId"])
    assert granted["state"] == "GRANTED" and granted["consumptionId"] and granted["units"] == 2
    assert world.quotas.view(SPACE, allowance["id"])["remaining"] == 3


async def test_waiters_are_served_first_come_first_served_at_the_next_window(world, autojump_clock):
    """A big head waiter is not overtaken by a small one behind it, nor by a fresh consume; at the
    next window the head is granted first, then whoever fits behind it; a TTL ends a waiter
    EXPIRED; cancel ends one CANCELLED, and cancelling a granted one changes nothing."""
    run = await world.scopes.create(SPACE)
    allowance = await world.quotas.create(SPACE, name="llm", units_limit=4, window_s=60)
    await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"], units=3)
    big = await world.quotas.wait(SPACE, allowance["id"], scope_id=run["id"], units=4, ttl_s=120)
    small = await world.quotas.wait(SPACE, allowance["id"], scope_id=run["id"], units=1, ttl_s=300)
    short = await world.quotas.wait(SPACE, allowance["id"], scope_id=run["id"], units=1, ttl_s=30)
    assert small["state"] == "WAITING", "one unit is left, but the big waiter is ahead"
    await refused("ALLOWANCE_EXHAUSTED", world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"], units=1))
    await trio.sleep(30.001)
    assert world.quotas.waiter(SPACE, short["waiterId"])["state"] == "EXPIRED"
    await trio.sleep(30)
    assert world.quotas.waiter(SPACE, big["waiterId"])["state"] == "GRANTED"
    assert world.quotas.waiter(SPACE, small["waiterId"])["state"] == "WAITING", "the window is used up by the head"
    await trio.sleep(60)
    assert world.quotas.waiter(SPACE, small["waiterId"])["state"] == "GRANTED"
    cancelled = await world.quotas.cancel(SPACE, small["waiterId"])
    assert cancelled["state"] == "GRANTED"
    late = await world.quotas.wait(SPACE, allowance["id"], scope_id=run["id"], units=4, ttl_s=60)
    assert (await world.quotas.cancel(SPACE, late["waiterId"]))["state"] == "CANCELLED"
    now = await world.quotas.wait(SPACE, allowance["id"], scope_id=run["id"], units=3, ttl_s=60)
    assert now["state"] == "GRANTED" and now["consumptionId"], "nothing ahead and the units fit: granted at once"


def _refund_records(world: World) -> list[dict]:
    return [record for record in only(world.kernel).journal.records if record["type"] == "allowance.refunded"]


async def test_a_refund_gives_a_consumption_back_to_its_window_once(world, autojump_clock):
    """A consumption in the current window is given back once: `used` goes down by its units and
    the answer says how many; a second refund gives 0 and records nothing; so does one whose
    window has ended (its units went with it)."""
    run = await world.scopes.create(SPACE)
    allowance = await world.quotas.create(SPACE, name="llm", units_limit=4, window_s=60)
    taken = await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"], units=3)
    await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"], units=1)
    await trio.sleep(1)
    refunded = await world.quotas.refund(SPACE, allowance["id"], taken["consumptionId"])
    assert refunded == {**world.quotas.view(SPACE, allowance["id"]), "refunded": 3}
    assert refunded["used"] == 1 and refunded["remaining"] == 3
    again = await world.quotas.refund(SPACE, allowance["id"], taken["consumptionId"])
    assert again["refunded"] == 0 and again["used"] == 1
    await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"], units=3)  # the units given back are there again
    assert [(r["consumption_id"], r["units"]) for r in _refund_records(world)] == [(taken["consumptionId"], 3)]
    assert world.quotas.view(SPACE, allowance["id"])["remaining"] == 0


async def test_a_refund_of_a_consumption_whose_window_ended_gives_nothing_back(world, autojump_clock):
    """The window it was taken in has ended, its units with it: 200 with `refunded` 0, and the
    new window's units are untouched; nothing is recorded."""
    run = await world.scopes.create(SPACE)
    allowance = await world.quotas.create(SPACE, name="llm", units_limit=4, window_s=10)
    taken = await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"], units=3)
    await trio.sleep(10)
    await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"], units=1)
    answer = await world.quotas.refund(SPACE, allowance["id"], taken["consumptionId"])
    assert answer["refunded"] == 0 and answer["used"] == 1 and answer["windowStart"] == "2027-01-15T08:00:10.000Z"
    assert _refund_records(world) == []


async def test_a_refund_of_a_consumption_no_longer_kept_is_a_conflict(world, autojump_clock):
    """Only the newest REFUNDABLE_MAX consumptions of the last REFUND_WINDOW_MS are kept: an
    older one, one dropped past the bound, and an unknown id are 409 CONFLICT; an unknown
    allowance is 404."""
    from runstate.actors.quotas import REFUNDABLE_MAX, REFUND_WINDOW_MS

    run = await world.scopes.create(SPACE)
    allowance = await world.quotas.create(SPACE, name="llm", units_limit=100, window_s=3600)
    old = await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"])
    await trio.sleep(REFUND_WINDOW_MS / 1000)
    kept = await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"])
    await trio.sleep(0.001)
    error = await refused("CONFLICT", world.quotas.refund(SPACE, allowance["id"], old["consumptionId"]))
    assert "can no longer be given back" in error.message
    ids = [(await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"]))["consumptionId"] for _ in range(REFUNDABLE_MAX - 1)]
    assert (await world.quotas.refund(SPACE, allowance["id"], kept["consumptionId"]))["refunded"] == 1
    ids.append((await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"]))["consumptionId"])
    # `kept` (refunded, still remembered as such) was the oldest of REFUNDABLE_MAX + 1: dropped.
    await refused("CONFLICT", world.quotas.refund(SPACE, allowance["id"], kept["consumptionId"]))
    assert all([(await world.quotas.refund(SPACE, allowance["id"], i))["refunded"] == 1 for i in ids])
    await refused("CONFLICT", world.quotas.refund(SPACE, allowance["id"], "cs_unknown"))
    await refused("NOT_FOUND", world.quotas.refund(SPACE, "al_unknown", ids[0]))
    assert world.quotas.view(SPACE, allowance["id"])["used"] == 1, "only `old` still counts"


async def test_units_refunded_let_the_head_waiter_in(world, autojump_clock):
    """A refund is a decision on the allowance like any other: the units it frees go to the head
    waiter at once, and a waiter's grant (its consumption id) can be refunded too."""
    run = await world.scopes.create(SPACE)
    allowance = await world.quotas.create(SPACE, name="llm", units_limit=4, window_s=600)
    taken = await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"], units=3)
    head = await world.quotas.wait(SPACE, allowance["id"], scope_id=run["id"], units=2, ttl_s=60)
    assert head["state"] == "WAITING"
    answer = await world.quotas.refund(SPACE, allowance["id"], taken["consumptionId"])
    granted = world.quotas.waiter(SPACE, head["waiterId"])
    assert granted["state"] == "GRANTED" and answer["refunded"] == 3
    assert answer["used"] == 2 and answer["waiting"] == 0, "the answer shows the head waiter's grant"
    assert (await world.quotas.refund(SPACE, allowance["id"], granted["consumptionId"]))["refunded"] == 2
    now = await world.quotas.wait(SPACE, allowance["id"], scope_id=run["id"], units=4, ttl_s=60)
    assert now["state"] == "GRANTED"
    assert (await world.quotas.refund(SPACE, allowance["id"], now["consumptionId"]))["used"] == 0


async def test_an_image_keeps_what_can_be_given_back_and_an_older_one_reads_as_nothing():
    """The recent consumptions go into the allowance's image, so a restart can still give them
    back; an image written before refunds existed has none, and reads as an empty set."""
    from runstate.actors.limits import Limits

    image = {
        "type": "allowance.image", "id": "al_1", "name": "q", "units_limit": 4, "window_ms": 60_000, "created_ms": T0,
        "window_start_ms": T0, "used": 3, "cooldown_until_ms": 0, "cooldown_reason": None, "space": SPACE,
    }
    older = SpaceState(SPACE, Limits())
    check_record(image)
    older.apply(image)
    assert older.capacity.allowances.get("al_1").recent == {}
    kept = {**image, "refundable": [["cs_a", 1, T0, T0 + 5, True], ["cs_b", 2, T0, T0 + 6, False]]}
    check_record(kept)
    restarted = SpaceState(SPACE, Limits())
    restarted.apply(kept)
    [again] = [record for record in restarted.image() if record["type"] == "allowance.image"]
    assert again["refundable"] == kept["refundable"]
    allowances = restarted.capacity.allowances
    record = allowances.decide_refund(allowances.get("al_1"), "cs_b", T0 + 1_000)
    assert record is not None and record["units"] == 2
    assert allowances.decide_refund(allowances.get("al_1"), "cs_a", T0 + 1_000) is None, "refunded already"


# -- work limits -------------------------------------------------------------------------------------


async def test_a_work_limit_refuses_a_submit_past_its_outstanding_maximum(world, autojump_clock):
    """Tasks not yet ended count; a submit past maxOutstanding is BACKLOG_FULL; a replay of an
    existing task key is not counted again; a task's end makes room."""
    run = await world.scopes.create(SPACE)
    mailbox = await world.mailboxes.create(SPACE, name="jobs")
    limit = await world.work_limits.create(SPACE, name="crawl", scope_id=run["id"], max_outstanding=2)
    assert limit["maxOutstanding"] == 2 and limit["outstanding"] == 0
    await refused("CONFLICT", world.work_limits.create(SPACE, name="crawl", scope_id=run["id"], max_outstanding=2))

    async def submit(key):
        return await world.tasks._submit(
            __import__("runstate.actors.commands", fromlist=["SubmitTask"]).SubmitTask, None,
            space=SPACE, scope_id=run["id"], mailbox_id=mailbox["id"], key=key, work_limit="crawl",
        )

    first = await submit("a")
    await submit("b")
    assert (await submit("a"))["created"] is False
    error = await refused("BACKLOG_FULL", submit("c"))
    assert error.retry_after_s is not None
    await world.tasks.cancel(SPACE, first["id"])
    await submit("c")
    assert world.work_limits.list(SPACE)[0]["outstanding"] == 2
    await refused("NOT_FOUND", world.tasks._submit(
        __import__("runstate.actors.commands", fromlist=["SubmitTask"]).SubmitTask, None,
        space=SPACE, scope_id=run["id"], mailbox_id=mailbox["id"], key="d", work_limit="nope",
    ))


# -- budgets -----------------------------------------------------------------------------------------


async def test_a_budget_reserves_settles_and_voids_in_exact_minor_units(world, autojump_clock):
    """Reserve what fits (else INSUFFICIENT_BUDGET), settle at most what is held, idempotent per
    work key; a partial settle keeps the rest reserved; void gives the rest back; amounts stay exact
    integers far past a float's precision."""
    run = await world.scopes.create(SPACE)
    huge = 10**25 + 1
    budget = await world.budgets.create(SPACE, name="spend", limit=huge)
    assert budget["limitMinor"] == str(huge) and budget["availableMinor"] == str(huge)
    await refused("CONFLICT", world.budgets.create(SPACE, name="spend", limit=1))
    reservation = await world.budgets.reserve(SPACE, budget["id"], scope_id=run["id"], amount=10**25)
    assert reservation["state"] == "ACTIVE" and reservation["reservedMinor"] == str(10**25)
    await refused("INSUFFICIENT_BUDGET", world.budgets.reserve(SPACE, budget["id"], scope_id=run["id"], amount=2))
    rid = reservation["reservationId"]
    await refused("CONFLICT", world.budgets.settle(SPACE, budget["id"], reservation_id=rid, amount=10**25 + 1, work_key="u1"))
    settled = await world.budgets.settle(SPACE, budget["id"], reservation_id=rid, amount=7, work_key="u1")
    assert settled["state"] == "ACTIVE" and settled["settledMinor"] == "7"
    again = await world.budgets.settle(SPACE, budget["id"], reservation_id=rid, amount=7, work_key="u1")
    assert again == settled, "a repeated work key changes nothing"
    view = world.budgets.view(SPACE, budget["id"])
    assert view["spentMinor"] == "7" and view["reservedMinor"] == str(10**25 - 7) and view["availableMinor"] == "1"
    assert int(view["spentMinor"]) + int(view["reservedMinor"]) + int(view["availableMinor"]) == huge
    voided = await world.budgets.void(SPACE, budget["id"], reservation_id=rid, work_key="u2")
    assert voided["state"] == "VOIDED" and voided["reservedMinor"] == "0"
    assert (await world.budgets.void(SPACE, budget["id"], reservation_id=rid, work_key="u2"))["state"] == "VOIDED"
    await refused("CONFLICT", world.budgets.settle(SPACE, budget["id"], reservation_id=rid, amount=1, work_key="u3"))
    assert world.budgets.view(SPACE, budget["id"])["availableMinor"] == str(huge - 7)


async def test_a_reservation_past_its_settle_by_is_released(world, autojump_clock):
    """The settleBy timer gives the remainder back (state RELEASED); the spent part stays spent."""
    run = await world.scopes.create(SPACE)
    budget = await world.budgets.create(SPACE, name="spend", limit=100)
    reservation = await world.budgets.reserve(SPACE, budget["id"], scope_id=run["id"], amount=60, settle_by_ms=world.now_ms() + 5000)
    await world.budgets.settle(SPACE, budget["id"], reservation_id=reservation["reservationId"], amount=10, work_key="k")
    await trio.sleep(4.9)
    assert world.budgets.view(SPACE, budget["id"])["reservedMinor"] == "50"
    await trio.sleep(0.2)
    view = world.budgets.view(SPACE, budget["id"])
    assert view["reservedMinor"] == "0" and view["spentMinor"] == "10" and view["availableMinor"] == "90"
    await refused("VALIDATION_FAILED", world.budgets.reserve(SPACE, budget["id"], scope_id=run["id"], amount=1, settle_by_ms=world.now_ms()))


# -- replay and images -------------------------------------------------------------------------------


async def _busy(world: World) -> None:
    run = await world.scopes.create(SPACE)
    other = await world.scopes.create(SPACE)
    pool = await world.pools.create(SPACE, name="p", units=4)
    grant = await world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], units=2, lease_s=20)
    await world.pools.acquire(SPACE, pool["id"], scope_id=other["id"], units=1, lease_s=600)
    await world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], units=1, lease_s=5)
    allowance = await world.quotas.create(SPACE, name="q", units_limit=3, window_s=30)
    given_back = await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"], units=1)
    await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"], units=2)
    await world.quotas.refund(SPACE, allowance["id"], given_back["consumptionId"])
    await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"], units=1)
    await world.quotas.wait(SPACE, allowance["id"], scope_id=run["id"], units=2, ttl_s=300)
    await world.quotas.wait(SPACE, allowance["id"], scope_id=other["id"], units=2, ttl_s=300)
    budget = await world.budgets.create(SPACE, name="b", limit=1000)
    reservation = await world.budgets.reserve(SPACE, budget["id"], scope_id=run["id"], amount=300)
    await world.budgets.settle(SPACE, budget["id"], reservation_id=reservation["reservationId"], amount=120, work_key="w")
    await world.budgets.reserve(SPACE, budget["id"], scope_id=other["id"], amount=200, settle_by_ms=world.now_ms() + 10_000)
    mailbox = await world.mailboxes.create(SPACE, name="m")
    await world.work_limits.create(SPACE, name="wl", scope_id=run["id"], max_outstanding=5)
    from runstate.actors import commands as c
    for key in ("t1", "t2"):
        await world.tasks._submit(c.SubmitTask, None, space=SPACE, scope_id=run["id"], mailbox_id=mailbox["id"], key=key, work_limit="wl")
    line = await world.pools.create(SPACE, name="line", units=2)
    blocking = await world.pools.acquire(SPACE, line["id"], scope_id=run["id"], units=2, lease_s=600)
    for scope, units in ((run, 1), (other, 2), (run, 1), (run, 2)):
        await world.pools.wait(SPACE, line["id"], scope_id=scope["id"], units=units)
    await trio.sleep(12)
    await world.pools.renew(SPACE, grant["grantId"], token=grant["token"])
    await world.scopes.cancel(SPACE, other["id"])
    await trio.sleep(15)
    # The line: one signaled, one waiting behind it, one cancelled with its scope.
    await world.pools.release(SPACE, blocking["grantId"], token=blocking["token"])
    await trio.sleep(1)


_CAPACITY = named("pools", "quotas", "budgets", "work limits", "admission")


def _state_of(space: SpaceState) -> list[dict]:
    return [record for primitive in _CAPACITY for record in primitive.image(space)]


def _timers_of(space: SpaceState) -> list:
    return [timer for primitive in _CAPACITY if primitive.deadlines for timer in primitive.deadlines(space)]


async def test_replaying_the_journal_rebuilds_capacity_exactly(world, autojump_clock):
    """The journal applied to an empty state gives the same capacity, and so does the image; both
    ask for the same timers."""
    await _busy(world)
    live = only(world.kernel).state.space(SPACE)
    replayed = KernelState()
    for record in only(world.kernel).journal.records:
        replayed.apply(record)
    imaged = SpaceState(SPACE, live.limits)
    for record in live.image():
        check_record(record)  # as a snapshot writes it: the record format knows every image
        imaged.apply(record)
    assert _state_of(replayed.space(SPACE)) == _state_of(live) == _state_of(imaged)
    timers = sorted(map(repr, _timers_of(live)))
    assert sorted(map(repr, _timers_of(replayed.space(SPACE)))) == timers == sorted(map(repr, _timers_of(imaged)))
    view = world.pools.list(SPACE)[0]
    assert view["unitsInUse"] == 2, "the 5 s grant expired, the other scope's grant went with its scope"


async def test_a_scope_end_cancels_its_waiters_and_serves_those_behind_them(world, autojump_clock):
    """A waiter of an ended run is CANCELLED; the next waiter, which fits, is granted at once."""
    run = await world.scopes.create(SPACE)
    other = await world.scopes.create(SPACE)
    allowance = await world.quotas.create(SPACE, name="q", units_limit=4, window_s=600)
    await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"], units=2)
    head = await world.quotas.wait(SPACE, allowance["id"], scope_id=other["id"], units=4, ttl_s=300)
    behind = await world.quotas.wait(SPACE, allowance["id"], scope_id=run["id"], units=2, ttl_s=300)
    assert behind["state"] == "WAITING"
    await world.scopes.cancel(SPACE, other["id"])
    await trio.sleep(0.001)
    assert world.quotas.waiter(SPACE, head["waiterId"])["state"] == "CANCELLED"
    assert world.quotas.waiter(SPACE, behind["waiterId"])["state"] == "GRANTED"


async def test_ended_waiters_are_forgotten_oldest_first_past_the_bound(autojump_clock, nursery):
    """A client reads how its waiter ended, so ended waiters (of pools and of allowances) are
    kept, but only the newest `waiters_max` of them: replay and the image forget the same ones."""
    from runstate.actors.limits import Limits

    limits = Limits().replace(waiters_max=2)
    kernel = Kernel(state=KernelState(limits), journal=MemoryJournal(keep=True), clock=Clock(wall_anchor_ms=T0), ids=IdSource(seed=4))
    await nursery.start(kernel.run)
    world = World(kernel)
    run = await world.scopes.create(SPACE)
    pool = await world.pools.create(SPACE, name="p", units=1)
    await world.pools.acquire(SPACE, pool["id"], scope_id=run["id"], lease_s=600)
    ids = []
    for _ in range(3):
        waiter = await world.pools.wait(SPACE, pool["id"], scope_id=run["id"])
        await world.pools.cancel(SPACE, waiter["waiterId"])
        ids.append(waiter["waiterId"])
    await refused("NOT_FOUND", world.pools.cancel(SPACE, ids[0]))
    assert [world.pools.waiter(SPACE, i)["state"] for i in ids[1:]] == ["CANCELLED", "CANCELLED"]
    allowance = await world.quotas.create(SPACE, name="q", units_limit=1, window_s=600)
    await world.quotas.consume(SPACE, allowance["id"], scope_id=run["id"])
    quota_ids = []
    for _ in range(3):
        waiter = await world.quotas.wait(SPACE, allowance["id"], scope_id=run["id"], ttl_s=60)
        await world.quotas.cancel(SPACE, waiter["waiterId"])
        quota_ids.append(waiter["waiterId"])
    await refused("NOT_FOUND", world.quotas.cancel(SPACE, quota_ids[0]))
    assert [world.quotas.waiter(SPACE, i)["state"] for i in quota_ids[1:]] == ["CANCELLED", "CANCELLED"]
    live = only(kernel).state.space(SPACE)
    replayed = KernelState(limits)
    for record in only(kernel).journal.records:
        replayed.apply(record)
    imaged = SpaceState(SPACE, live.limits)
    for record in live.image():
        check_record(record)
        imaged.apply(record)
    assert _state_of(replayed.space(SPACE)) == _state_of(live) == _state_of(imaged)


async def test_a_refused_acquire_changes_nothing_even_when_the_line_was_due_to_move():
    """The line's move and the acquire are decided together and committed only if the acquire
    succeeds: a refusal (a turn that raises) leaves the state as it was, the move included."""
    from runstate.actors import commands as c
    from runstate.actors.limits import Limits
    from runstate.actors.transitions import TRANSITIONS

    space = SpaceState(SPACE, Limits())
    records = [
        {"type": "scope.created", "id": "sc_1", "name": None, "parent_id": None, "deadline_ms": None, "child_limit": None, "at_ms": T0},
        {"type": "pool.created", "id": "pm_1", "name": "p", "units": 1, "at_ms": T0},
        {"type": "grant.acquired", "id": "gr_1", "pool_id": "pm_1", "scope_id": "sc_1", "units": 1, "token": "t1", "holder": "h",
         "session": "s", "lease_ms": 60_000, "expires_ms": T0 + 60_000, "at_ms": T0},
        {"type": "permit_waiter.added", "id": "pw_a", "pool_id": "pm_1", "scope_id": "sc_1", "holder": "a", "units": 1, "expires_ms": T0 + 5_000, "at_ms": T0},
        {"type": "permit_waiter.added", "id": "pw_b", "pool_id": "pm_1", "scope_id": "sc_1", "holder": "b", "units": 1, "expires_ms": T0 + 600_000, "at_ms": T0},
    ]
    for record in records:
        record["space"] = SPACE
        check_record(record)
        space.apply(record)
    before = _state_of(space)
    base = dict(space=SPACE, pool_id="pm_1", scope_id="sc_1", units=1, holder="x", session="s", lease_s=30, grant_id="gr_2", token="t2")
    later = T0 + 10_000  # pw_a's TTL ran out, and no timer has recorded it
    for waiter_id in (None, "pw_b", "pw_a"):
        with pytest.raises(KernelError) as caught:
            TRANSITIONS[c.AcquireGrant](_Spaces(space), c.AcquireGrant(**base, waiter_id=waiter_id), later)
        assert caught.value.code == "CAPACITY_UNAVAILABLE"
        assert _state_of(space) == before, f"a refused acquire (waiter {waiter_id}) changed the state"
    assert "pw_a' is EXPIRED" in caught.value.message


class _Spaces:
    def __init__(self, space: SpaceState) -> None:
        self._space = space

    def space(self, space_id: str) -> SpaceState:
        return self._space


async def test_a_restart_gives_a_signaled_waiter_the_grace_to_come_for_its_units():
    """The claims' restart rule for a pool's line: a turn that has not ended by the restart ends
    no sooner than the grace after it; one that has ended is not extended (the next move of the
    line expires it). The waiter keeps when its turn began."""
    from runstate.actors.limits import Limits

    space = SpaceState(SPACE, Limits())
    records = [
        {"type": "scope.created", "id": "sc_1", "name": None, "parent_id": None, "deadline_ms": None, "child_limit": None, "at_ms": T0},
        {"type": "pool.created", "id": "pm_1", "name": "p", "units": 2, "at_ms": T0},
        {"type": "pool.created", "id": "pm_2", "name": "q", "units": 1, "at_ms": T0},
        {"type": "permit_waiter.added", "id": "pw_a", "pool_id": "pm_1", "scope_id": "sc_1", "holder": "a", "units": 1, "expires_ms": T0 + 600_000, "at_ms": T0},
        {"type": "permit_waiter.added", "id": "pw_b", "pool_id": "pm_2", "scope_id": "sc_1", "holder": "b", "units": 1, "expires_ms": T0 + 600_000, "at_ms": T0},
        {"type": "permit_waiter.signaled", "id": "pw_a", "turn_ends_ms": T0 + 10_000, "at_ms": T0},
        {"type": "permit_waiter.signaled", "id": "pw_b", "turn_ends_ms": T0 + 3_000, "at_ms": T0 - 7_000},
    ]
    for record in records:
        record["space"] = SPACE
        space.apply(record)
    now = T0 + 8_000  # the restart: pw_a's turn (to +10 s) is still on, pw_b's (to +3 s) is over
    [pools] = named("pools")
    outcome = pools.restart(space, now, 15_000)
    assert [(r["type"], r["id"], r["turn_ends_ms"]) for r in outcome.records] == [("permit_waiter.signaled", "pw_a", now + 15_000)]
    waiter = space.capacity.pools.waiter("pw_a")
    assert (waiter.state, waiter.signaled_ms, waiter.due_ms) == ("SIGNALED", T0, now + 15_000)
    assert any(timer.tag == ("pool-waiter", "pw_a") and timer.due_ms == now + 15_000 for timer in outcome.timers)
    for record in outcome.records:
        check_record(record)
