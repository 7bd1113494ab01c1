"""Partitions: each space lives wholly in one partition, with its own journal, timers and actors;
keys live in the system partition; a partition that cannot serve refuses only its own spaces."""

from __future__ import annotations

import pytest
import trio

from runstate.actors import Clock, IdSource, Kernel, KernelError, KernelState, Limits
from runstate.actors.journal import MemoryJournal
from runstate.actors.layout import SYSTEM, Layout
from runstate.actors.reads import scope as read_scope

from ..ops import ClaimOps, KeyOps, ScopeOps
from .conftest import T0

SPACES = [f"space-{number}" for number in range(40)]


def test_a_space_maps_to_the_same_partition_in_every_process_and_version():
    """The map is part of the data: a directory made with P partitions keeps each space in the
    partition this function gives, so it must never change (CRC-32 of the UTF-8 id, mod P, plus one)."""
    layout = Layout(8)
    assert [layout.of(space) for space in ("default", "research", "sim", "team-7")] == [8, 3, 1, 5]
    assert layout.of(None) == SYSTEM
    assert {layout.of(space) for space in SPACES} == set(range(1, 9)), "forty spaces reach every partition"
    assert Layout(1).of("anything") == 1 and list(Layout(1).numbers()) == [0, 1]
    single = Layout.single_partition()
    assert single.of("anything") == single.of(None) == SYSTEM and list(single.numbers()) == [0]
    with pytest.raises(ValueError):
        Layout(0)


async def partitioned(nursery: trio.Nursery, count: int, refusals: dict[int, str] | None = None) -> Kernel:
    layout = Layout(count)
    journals = {number: MemoryJournal(keep=True) for number in layout.numbers()}
    kernel = Kernel.partitioned(
        {}, journals, layout=layout, limits=Limits(), clock=Clock(wall_anchor_ms=T0), ids=IdSource(seed=3),
        refusals=refusals,
    )
    await nursery.start(kernel.run)
    return kernel


@pytest.mark.trio
async def test_each_space_is_journaled_and_held_only_by_its_partition(nursery, autojump_clock):
    """Runs and claims in forty spaces: every record lands in the journal of its space's
    partition, each partition's state holds exactly its spaces, and keys go to the system one."""
    kernel = await partitioned(nursery, 4)
    scopes, claims, keys = ScopeOps(kernel), ClaimOps(kernel), KeyOps(kernel)
    for space in SPACES:
        run = await scopes.create(space)
        await claims.acquire(space, scope_id=run["id"], key="k", holder="h", session="s", lease_s=30)
    await keys.register("rs_partition_key", frozenset({"space-1"}))
    for partition in kernel.partitions:
        mine = {space for space in SPACES if kernel.layout.of(space) == partition.number}
        assert set(partition.state.spaces) == mine
        journaled = {record.get("space") for record in partition.journal.records}
        if partition.number == SYSTEM:
            assert journaled == {None} and len(partition.state.keys) == 1
        else:
            assert journaled == mine and len(partition.state.keys) == 0
    assert kernel.keys.spaces_for("rs_partition_key") == frozenset({"space-1"})
    assert sorted(space.id for space in kernel.spaces()) == sorted(SPACES)


@pytest.mark.trio
async def test_lease_timers_run_in_the_partition_of_their_space(nursery, autojump_clock):
    """A lease ends in its own partition's supervisor, and the expiry is journaled there."""
    kernel = await partitioned(nursery, 4)
    scopes, claims = ScopeOps(kernel), ClaimOps(kernel)
    for space in SPACES[:8]:
        run = await scopes.create(space)
        await claims.acquire(space, scope_id=run["id"], key="k", holder="h", session="s", lease_s=5)
    await trio.sleep(6)
    for space in SPACES[:8]:
        partition = kernel.partition_of(space)
        expired = [r for r in partition.journal.records if r["type"] == "claim.expired" and r["space"] == space]
        assert len(expired) == 1
    armed, fired = kernel.timers()
    assert fired >= 8


@pytest.mark.trio
async def test_a_partition_that_cannot_serve_refuses_its_spaces_and_the_others_go_on(nursery, autojump_clock):
    """Partition 3 could not be opened: its spaces' commands and reads answer UNAVAILABLE with
    the reason; every other space works, and the space of partition 3 was not made by the attempt."""
    kernel = await partitioned(nursery, 4, refusals={3: "its journal cannot be recovered: damaged record before the end of the log"})
    scopes = ScopeOps(kernel)
    down = [space for space in SPACES if kernel.layout.of(space) == 3]
    up = [space for space in SPACES if kernel.layout.of(space) != 3]
    assert down and up
    for space in down:
        with pytest.raises(KernelError) as refused:
            await scopes.create(space)
        assert refused.value.code == "UNAVAILABLE" and "damaged record" in refused.value.message
        with pytest.raises(KernelError) as unreadable:
            kernel.space_view(space)
        assert unreadable.value.code == "UNAVAILABLE"
    for space in up:
        run = await scopes.create(space)
        assert read_scope(kernel, space, run["id"]).id == run["id"]
    assert not kernel.partitions[3].state.spaces


@pytest.mark.trio
async def test_a_reopened_partition_serves_and_the_one_it_replaces_ends_its_tasks(nursery, autojump_clock):
    """Partition 3 could not be opened; once repaired it is reopened: its spaces are served, and
    the refused partition it replaces leaves no task behind (its supervisor, its sweep)."""
    kernel = await partitioned(nursery, 4, refusals={3: "its journal cannot be recovered"})
    assert kernel._nursery is not None
    tasks_before = len(kernel._nursery.child_tasks)
    old = kernel.partitions[3]
    new = await kernel.reopen(3, KernelState(Limits()), MemoryJournal(keep=True))
    await trio.sleep(1)
    assert kernel.partitions[3] is new and old is not new
    assert len(kernel._nursery.child_tasks) == tasks_before, "the replaced partition's run ended"
    space = next(space for space in SPACES if kernel.layout.of(space) == 3)
    run = await ScopeOps(kernel).create(space)
    await ClaimOps(kernel).acquire(space, scope_id=run["id"], key="k", holder="h", session="s", lease_s=5)
    await trio.sleep(6)
    assert [r["type"] for r in new.journal.records if r["type"] == "claim.expired"] == ["claim.expired"]


@pytest.mark.trio
async def test_a_read_waits_only_for_its_own_partition(nursery, autojump_clock):
    """A journal that holds its writes in one partition does not hold reads of the others."""

    class Held(MemoryJournal):
        def __init__(self) -> None:
            super().__init__()
            self.waiting: list = []
            self.durable = 0

        @property
        def durable_lsn(self) -> int:  # type: ignore[override]
            return self.durable

        def append(self, records, on_durable):  # type: ignore[no-untyped-def]
            self.lsn += len(records)
            self.waiting.append((self.lsn, on_durable))
            return self.lsn

        def after(self, lsn, on_durable):  # type: ignore[no-untyped-def]
            if lsn <= self.durable:
                on_durable(None)
            else:
                self.waiting.append((lsn, on_durable))

        def release(self) -> None:
            self.durable = self.lsn
            waiting, self.waiting = self.waiting, []
            for _, on_durable in waiting:
                on_durable(None)

    kernel = await partitioned(nursery, 2)
    slow_space = next(space for space in SPACES if kernel.layout.of(space) == 1)
    fast_space = next(space for space in SPACES if kernel.layout.of(space) == 2)
    held = kernel.partitions[1].journal = Held()
    scopes = ScopeOps(kernel)
    fast = await scopes.create(fast_space)
    made: list = []
    nursery.start_soon(lambda: _append(made, scopes.create(slow_space)))
    await trio.testing.wait_all_tasks_blocked()
    assert made == [] and len(held.waiting) == 1
    seen: list = []
    nursery.start_soon(lambda: _append(seen, kernel.read(slow_space, lambda space: sorted(scope.id for scope in space.scopes.all()) if space else [])))
    assert await kernel.read(fast_space, lambda space: fast["id"] in [scope.id for scope in space.scopes.all()])
    await trio.testing.wait_all_tasks_blocked()
    assert seen == [], "the slow partition's read waits for its write"
    held.release()
    await trio.testing.wait_all_tasks_blocked()
    assert len(made) == 1 and seen == [[made[0]["id"]]]


async def _append(into: list, awaitable) -> None:  # type: ignore[no-untyped-def]
    into.append(await awaitable)


@pytest.mark.trio
async def test_a_caller_cancelled_before_its_turn_withdraws_its_call(nursery, autojump_clock):
    """A call is posted, then its caller parks on it: cancelled there, before the actor's turn, the
    call is withdrawn. The turn skips it, nothing is journaled, the key stays free, and the next
    caller of the key is served as if it had never come."""
    import trio.testing

    from runstate.actors import KernelState
    from runstate.actors.commands import AcquireClaim

    journal = MemoryJournal(keep=True)
    kernel = Kernel(state=KernelState(), journal=journal, clock=Clock(wall_anchor_ms=T0), ids=IdSource(seed=3))
    await nursery.start(kernel.run)
    scope_id = (await ScopeOps(kernel).create("s"))["id"]
    body = {"scopeId": scope_id, "key": "k", "holder": "h", "holderSession": "x", "leaseSeconds": 30}
    recorded = len(journal.records)
    turns = kernel.turns
    with trio.CancelScope() as cancelled:
        cancelled.cancel()  # delivered where the caller first parks, after its call is posted
        await kernel.submit(kernel.parse(AcquireClaim, body, {"space": "s"}))
    assert cancelled.cancelled_caught
    await trio.testing.wait_all_tasks_blocked()
    assert len(journal.records) == recorded and kernel.turns == turns, "the withdrawn call never ran"
    claim = await kernel.submit(kernel.parse(AcquireClaim, body, {"space": "s"}))
    assert claim.generation == 1 and [r["type"] for r in journal.records[recorded:]] == ["claim.acquired"]
