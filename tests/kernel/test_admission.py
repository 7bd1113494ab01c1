"""Admission in the kernel, in virtual time: a task delivered with everything its requirements
name, all or nothing; grants that live and end with the delivery; parked admissions woken when
capacity frees; the ordering rule (a big task is not overtaken forever by small ones)."""

from __future__ import annotations

import pytest
import trio

from runstate.actors import Clock, IdSource, Kernel, KernelState
from runstate.actors.kernel import EMPTY
from runstate.actors.journal import MemoryJournal
from runstate.actors.space import SpaceState

from ..capacity_ops import AdmitOps, BudgetOps, PoolOps, QuotaOps
from ..ops import MailboxOps, MessageOps, ScopeOps
from .conftest import T0
from ..single import only

pytestmark = pytest.mark.trio

SPACE = "sp1"


class World:
    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.scopes, self.mailboxes, self.messages = ScopeOps(kernel), MailboxOps(kernel), MessageOps(kernel)
        self.pools, self.quotas, self.budgets, self.admission = PoolOps(kernel), QuotaOps(kernel), BudgetOps(kernel), AdmitOps(kernel)

    async def setup(self, *, units=2, limit=3, window_s=60, budget=1000):
        self.run = (await self.scopes.create(SPACE))["id"]
        self.box = (await self.mailboxes.create(SPACE, name="jobs"))["id"]
        self.pool = await self.pools.create(SPACE, name="gpu", units=units)
        self.allowance = await self.quotas.create(SPACE, name="llm", units_limit=limit, window_s=window_s)
        self.budget = await self.budgets.create(SPACE, name="spend", limit=budget)

    async def submit(self, key, requirements=None):
        return await self.admission.submit(SPACE, scope_id=self.run, mailbox_id=self.box, key=key, task_input={"k": key}, requirements=requirements)

    async def admit(self, **kwargs):
        return await self.admission.admit(SPACE, mailbox_id=self.box, scope_id=self.run, **kwargs)

    def in_use(self) -> int:
        return self.pools.list(SPACE)[0]["unitsInUse"]


@pytest.fixture
async def world(nursery):
    kernel = Kernel(state=KernelState(), journal=MemoryJournal(keep=True), clock=Clock(wall_anchor_ms=T0), ids=IdSource(seed=5))
    await nursery.start(kernel.run)
    return World(kernel)


def gpu(units):
    return {"pools": [{"name": "gpu", "units": units}]}


async def test_admit_takes_everything_at_once_and_recv_never_delivers_such_a_task(world, autojump_clock):
    """Pool units, quota units and a budget reservation come with the delivery; the task is
    RUNNING; recv skips the task (it delivers plain messages only) and admit delivers plain ones too."""
    await world.setup()
    needs = {**gpu(2), "quotas": [{"name": "llm", "units": 1}], "budgets": [{"name": "spend", "reserveMinor": "300"}]}
    task = await world.submit("a", needs)
    got = await world.messages.receive(SPACE, world.box, scope_id=world.run, holder="w", session="s", lease_s=30)
    assert got is EMPTY, "recv never hands out a task that needs admission"
    admitted = await world.admit()
    assert admitted["taskId"] == task["id"] and admitted["payload"] == {"k": "a"} and admitted["attempt"] == 1
    assert [g["units"] for g in admitted["grants"]] == [2] and admitted["grants"][0]["name"] == "gpu"
    assert [c["units"] for c in admitted["consumptions"]] == [1] and len(admitted["reservations"]) == 1
    assert world.in_use() == 2 and world.quotas.view(SPACE, world.allowance["id"])["remaining"] == 2
    assert world.budgets.view(SPACE, world.budget["id"])["reservedMinor"] == "300"
    assert only(world.kernel).state.space(SPACE).tasks.get(task["id"]).state == "RUNNING"
    await world.messages.send(SPACE, world.box, scope_id=world.run, payload="plain")
    plain = await world.admit()
    assert plain["taskId"] is None and plain["grants"] == [] and plain["payload"] == "plain"


async def test_nothing_is_taken_when_one_requirement_does_not_fit(world, autojump_clock):
    """A task whose quota is used up takes no pool units either; it is admitted once all fit."""
    await world.setup(limit=1, window_s=60)
    await world.quotas.consume(SPACE, world.allowance["id"], scope_id=world.run, units=1)
    await world.submit("a", {**gpu(1), "quotas": [{"name": "llm", "units": 1}]})
    assert await world.admit() is EMPTY
    assert world.in_use() == 0, "no partial hold"
    await trio.sleep(60)
    admitted = await world.admit()
    assert admitted["grants"] and admitted["consumptions"][0]["windowStart"] == "2027-01-15T08:01:00.000Z"


async def test_grants_share_the_delivery_lease_and_end_with_it(world, autojump_clock):
    """Renewing the delivery keeps the units; completing it gives them back; a delivery whose
    lease runs out gives them back too, and its grant cannot be renewed on its own."""
    await world.setup()
    await world.submit("a", gpu(2))
    first = await world.admit(lease_s=10)
    await trio.sleep(8)
    await world.messages.renew(SPACE, first["messageId"], token=first["token"])
    await trio.sleep(8)
    assert world.in_use() == 2
    from runstate.actors import KernelError

    with pytest.raises(KernelError) as caught:
        await world.pools.renew(SPACE, first["grants"][0]["grantId"], token=first["token"])
    assert caught.value.code == "CONFLICT"
    await trio.sleep(3)
    assert world.in_use() == 0, "the delivery's lease ran out at 18 s"
    again = await world.admit(lease_s=10)
    assert again["attempt"] == 2 and world.in_use() == 2
    await world.messages.complete(SPACE, again["messageId"], token=again["token"], result={"payload": "done"})
    assert world.in_use() == 0


async def test_a_parked_admit_wakes_when_capacity_frees(world, autojump_clock):
    """An admit with waitMs parks while the pool is full and is answered in the turn that frees it."""
    await world.setup(units=1)
    await world.submit("a", gpu(1))
    await world.submit("b", gpu(1))
    first = await world.admit()
    answers = []

    async def parked():
        answers.append((await world.admit(wait_ms=20_000), trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(parked)
        await trio.sleep(4)
        start = trio.current_time()
        await world.messages.complete(SPACE, first["messageId"], token=first["token"])
    second, at = answers[0]
    assert second["grants"][0]["units"] == 1 and at == pytest.approx(start, abs=1e-6)


async def test_a_parked_admit_wakes_when_quota_units_are_refunded(world, autojump_clock):
    """A task that waits for quota units is admitted in the turn of a refund that gives them back,
    not at the next window."""
    await world.setup(limit=1, window_s=60)
    taken = await world.quotas.consume(SPACE, world.allowance["id"], scope_id=world.run)
    await world.submit("a", {"quotas": [{"name": "llm", "units": 1}]})
    answers = []

    async def parked():
        answers.append((await world.admit(wait_ms=20_000), trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(parked)
        await trio.sleep(4)
        start = trio.current_time()
        await world.quotas.refund(SPACE, world.allowance["id"], taken["consumptionId"])
    admitted, at = answers[0]
    assert admitted is not EMPTY and admitted["consumptions"][0]["units"] == 1
    assert at == pytest.approx(start, abs=1e-6), "the parked admit waited past the refund"


async def test_a_parked_admit_wakes_at_the_next_quota_window(world, autojump_clock):
    """A task that waits for a quota window is admitted by the window's own timer, not by polling."""
    await world.setup(limit=1, window_s=10)
    await world.quotas.consume(SPACE, world.allowance["id"], scope_id=world.run)
    await trio.sleep(2)
    await world.submit("a", {"quotas": [{"name": "llm", "units": 1}]})
    start = trio.current_time()
    admitted = await world.admit(wait_ms=20_000)
    assert admitted["consumptions"] and trio.current_time() - start == pytest.approx(8.0, abs=0.01)


async def test_a_big_task_is_not_overtaken_by_small_ones(world, autojump_clock):
    """The ordering rule: the oldest task that does not fit reserves what it names against the
    tasks behind it. Small tasks that need the same pool wait; one that needs nothing of it goes."""
    await world.setup(units=3)
    held = await world.pools.acquire(SPACE, world.pool["id"], scope_id=world.run, units=2, lease_s=600)
    big = await world.submit("big", gpu(3))
    await world.submit("small", gpu(1))
    other = await world.submit("other", {"budgets": [{"name": "spend", "reserveMinor": "5"}]})
    admitted = await world.admit()
    assert admitted["taskId"] == other["id"], "the budget-only task needs nothing the big one waits for"
    assert await world.admit() is EMPTY, "one unit is free, but the big task is ahead of the small one"
    await world.pools.release(SPACE, held["grantId"], token=held["token"])
    first = await world.admit()
    assert first["taskId"] == big["id"] and world.in_use() == 3


async def test_requirements_are_checked_at_submit(world, autojump_clock):
    """Unknown names are NOT_FOUND; more than a pool or window could ever give is a 400."""
    from runstate.actors import KernelError

    await world.setup(units=2, limit=3)
    for needs, code in (
        ({"pools": [{"name": "nope", "units": 1}]}, "NOT_FOUND"),
        (gpu(3), "VALIDATION_FAILED"),
        ({"quotas": [{"name": "llm", "units": 4}]}, "VALIDATION_FAILED"),
        ({"budgets": [{"name": "spend", "reserveMinor": "1001"}]}, "VALIDATION_FAILED"),
    ):
        with pytest.raises(KernelError) as caught:
            await world.submit("x", needs)
        assert caught.value.code == code, needs


async def test_a_delivery_returned_unhandled_gives_back_what_its_admission_took(world, autojump_clock):
    """A return (work its taker never handed to a handler: taken as it was cancelled, or ahead
    by a consumer that stops) gives back its pool units, its quota units and its budget
    reservation, as if it had never been admitted: the next admission takes them all again.
    Left, the reservation held the budget for an hour and the units counted until the window
    ended. Past the time a consumption can be refunded, its units stay counted."""
    from runstate.actors.quotas import REFUND_WINDOW_MS

    await world.setup(limit=1)
    needs = {**gpu(2), "quotas": [{"name": "llm", "units": 1}], "budgets": [{"name": "spend", "reserveMinor": "300"}]}
    await world.submit("a", needs)
    first = await world.admit()
    assert world.budgets.view(SPACE, world.budget["id"])["reservedMinor"] == "300"
    await world.messages.give_back(SPACE, first["messageId"], token=first["token"])
    assert world.in_use() == 0 and world.quotas.view(SPACE, world.allowance["id"])["remaining"] == 1
    budget = world.budgets.view(SPACE, world.budget["id"])
    assert budget["reservedMinor"] == "0" and budget["spentMinor"] == "0"
    again = await world.admit(lease_s=60)
    assert again["attempt"] == 2 and world.quotas.view(SPACE, world.allowance["id"])["remaining"] == 0
    assert world.budgets.view(SPACE, world.budget["id"])["reservedMinor"] == "300"
    await trio.sleep(REFUND_WINDOW_MS / 1000 + 1)  # (the window is 60 s: still the same one)
    await world.messages.give_back(SPACE, again["messageId"], token=again["token"])
    assert world.quotas.view(SPACE, world.allowance["id"])["remaining"] == 0, "too late to refund: counted"
    assert world.budgets.view(SPACE, world.budget["id"])["reservedMinor"] == "0"


async def test_admission_replays_and_images_exactly(world, autojump_clock):
    """The journal and the image rebuild the same capacity, requirements and bound grants included."""
    from runstate.snapshots.equality import assert_same_state

    await world.setup(units=3)
    await world.submit("a", {**gpu(2), "quotas": [{"name": "llm", "units": 1}], "budgets": [{"name": "spend", "reserveMinor": "10"}]})
    await world.submit("b", gpu(2))
    await world.admit(lease_s=10)
    await world.admit()
    await trio.sleep(11)
    live = only(world.kernel).state
    replayed = KernelState()
    for record in only(world.kernel).journal.records:
        replayed.apply(record)
    assert_same_state(replayed.space(SPACE), live.space(SPACE))
    imaged = SpaceState(SPACE, live.limits)
    for record in live.space(SPACE).image():
        imaged.apply(record)
    assert_same_state(imaged, live.space(SPACE))


async def test_admit_answers_the_task_key_and_includes_descendants_when_asked(world, autojump_clock):
    """0.3.0's workers admit with includeDescendants: tasks of child scopes (a gather's gate scope)
    come too, oldest first across the subtree; without it only the scope's own queue. The answer
    names the task key; a parked admit wakes when a child scope's task arrives."""
    await world.setup()
    child = (await world.scopes.create(SPACE, parent_id=world.run))["id"]
    in_child = await world.admission.submit(SPACE, scope_id=child, mailbox_id=world.box, key="c1", task_input=1)
    assert await world.admit() is EMPTY, "the child's queue is not the run's"
    mine = await world.submit("r1")
    first = await world.admit(include_descendants=True)
    assert (first["taskId"], first["taskKey"], first["scopeId"]) == (in_child["id"], "c1", child), "the oldest of the subtree"
    second = await world.admit(include_descendants=True)
    assert (second["taskId"], second["taskKey"]) == (mine["id"], "r1")
    answers = []

    async def parked():
        answers.append((await world.admit(wait_ms=20_000, include_descendants=True), trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(parked)
        await trio.sleep(3)
        start = trio.current_time()
        late = await world.admission.submit(SPACE, scope_id=child, mailbox_id=world.box, key="c2", task_input=2)
    got, at = answers[0]
    assert got["taskId"] == late["id"] and at == pytest.approx(start, abs=1e-6)


async def test_admission_does_not_overtake_a_pools_line_and_a_delivery_end_moves_it(world, autojump_clock):
    """A task needing units of a pool with waiters lined up waits behind them; units given back by
    a delivery's end (outside the capacity actor) signal the head of the line by a timer."""
    await world.setup(units=1)
    await world.submit("a", gpu(1))
    first = await world.admit()
    waiter = await world.pools.wait(SPACE, world.pool["id"], scope_id=world.run)
    assert waiter["state"] == "WAITING"
    await world.submit("b", gpu(1))
    await world.messages.complete(SPACE, first["messageId"], token=first["token"])
    await trio.sleep(0.001)
    assert world.pools.waiter(SPACE, waiter["waiterId"])["state"] == "SIGNALED"
    assert await world.admit() is EMPTY, "the signaled waiter's unit is held back for it"
    grant = await world.pools.acquire(SPACE, world.pool["id"], scope_id=world.run, waiter_id=waiter["waiterId"])
    await world.pools.release(SPACE, grant["grantId"], token=grant["token"])
    assert (await world.admit())["taskKey"] == "b"
