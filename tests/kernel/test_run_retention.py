"""Ended runs leave after their retention, in the kernel and in virtual time.

A run that ended is kept `ended_run_retention_s`, then removed whole with one `run.removed` record:
its child runs, task tombstones, finished messages and dead letters, once slots, barriers, timers
and groups. Its ids answer 404, its name makes a new run, the space's entity count falls, and a
run still referred to by a live task group stays until the group is finalized. Every test ends by
replaying the journal (and the state's image) into a fresh state and comparing.
"""

from __future__ import annotations

import orjson
import pytest
import trio
import trio.testing

from runstate.actors import Clock, IdSource, Kernel, KernelError, KernelState, Limits
from runstate.actors import commands as c
from runstate.actors.errors import NOT_FOUND
from runstate.actors.journal import MemoryJournal
from runstate.actors.runs import pending_removal, removal_due_ms
from runstate.server import wire

from ..coordination_ops import BarrierOps, EventOps, GroupOps, TimerOps
from ..ops import MailboxOps, MessageOps, ScopeOps, TaskOps
from ..single import only
from .conftest import T0, rebuilt_exactly

pytestmark = pytest.mark.trio

S = "default"
# A minute's retention: removals are swept every 6 s (a tenth of it).
LIMITS = Limits().replace(ended_run_retention_s=60)


class World:
    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.scopes = ScopeOps(kernel)
        self.mailboxes = MailboxOps(kernel)
        self.messages = MessageOps(kernel)
        self.tasks = TaskOps(kernel)
        self.barriers = BarrierOps(kernel)
        self.timers = TimerOps(kernel)
        self.groups = GroupOps(kernel)

    @property
    def space(self):
        return only(self.kernel).state.space(S)

    def now_ms(self) -> int:
        return self.kernel.clock.now_ms()

    async def call(self, command_class: type, path: dict | None = None, **body) -> dict:
        kernel = self.kernel
        return wire.encode(await kernel.submit(kernel.parse(command_class, body, {"space": S, **(path or {})})))

    def removals(self) -> list[dict]:
        return [record for record in only(self.kernel).journal.records if record["type"] == "run.removed"]

    def gone(self, scope_id: str) -> KernelError:
        """The run answers 404, naming the retention that removed it."""
        with pytest.raises(KernelError) as caught:
            self.scopes.view(S, scope_id)
        assert caught.value.code == NOT_FOUND
        assert "an ended run is removed 60 s after its end: ended_run_retention_s" in caught.value.message
        return caught.value


def _kernel(limits: Limits = LIMITS, state: KernelState | None = None, anchor_ms: int = T0) -> Kernel:
    return Kernel(
        state=state or KernelState(limits), journal=MemoryJournal(keep=True), clock=Clock(wall_anchor_ms=anchor_ms),
        ids=IdSource(seed=1),
    )


@pytest.fixture
async def world(nursery):
    kernel = _kernel()
    await nursery.start(kernel.run)
    return World(kernel)


async def _fill(world: World, run: str, mailbox: str) -> dict:
    """Everything a run keeps once it has ended: a child run, a finished task and one cancelled by
    the end, a dead letter, a once result, a barrier, a named timer and a task group."""
    child = (await world.scopes.create(S, parent_id=run))["id"]
    done = await world.tasks.submit(S, scope_id=run, mailbox_id=mailbox, key="done", task_input={"n": 1})
    delivery = await world.messages.receive(S, mailbox, scope_id=run, holder="w", session="s", lease_s=30)
    await world.messages.complete(S, delivery["message"]["id"], token=delivery["token"], result={"ok": True})
    waiting = await world.tasks.submit(S, scope_id=child, mailbox_id=mailbox, key="waiting")
    dead = await world.messages.send(S, mailbox, scope_id=run, payload="dead")
    letter = await world.messages.receive(S, mailbox, scope_id=run, holder="w", session="s", lease_s=30)
    assert letter["message"]["id"] == dead["id"]
    await world.messages.nack(S, dead["id"], token=letter["token"], retry=False, error="no")
    await world.messages.send(S, mailbox, scope_id=run, payload="once", work_key="wk")  # dropped by the end
    held = await world.call(c.AcquireOnce, scopeId=run, key="o", holder="h", holderSession="s")
    await world.call(c.CompleteOnce, scopeId=run, key="o", token=held["token"], result={"once": 1})
    barrier = await world.barriers.create(S, scope_id=run, target=2)
    timer = await world.timers.ensure(S, "nap", scope_id=child, after_s=600)
    group = await world.groups.create(S, mailbox_id=mailbox, condition="ALL_TERMINAL", parent_scope_id=run)
    return {"child": child, "tasks": [done["id"], waiting["id"]], "dead": dead["id"], "barrier": barrier["id"],
            "timer": timer["id"], "group": group["id"], "gate": group["scopeId"]}


async def test_an_ended_run_leaves_whole_after_its_retention_and_a_live_one_stays(world, autojump_clock):
    """Before its retention nothing of an ended run goes; at the sweep after it, the run, its child
    runs and everything they kept go in one record; the space keeps what it kept before the run;
    a live run beside it loses nothing."""
    mailbox = (await world.mailboxes.create(S, name="jobs", max_attempts=1))["id"]
    live = (await world.scopes.create(S, name="live"))["id"]
    await world.tasks.submit(S, scope_id=live, mailbox_id=mailbox, key="keep")
    await world.messages.send(S, mailbox, scope_id=live, payload="kept", work_key="wk")
    before = world.space.entities()
    run = (await world.scopes.create(S, name="doomed"))["id"]
    made = await _fill(world, run, mailbox)
    assert world.space.entities() > before + 4
    await world.scopes.cancel(S, run)
    ended_ms = world.now_ms()
    due_ms = removal_due_ms(LIMITS, ended_ms)
    assert ended_ms + 60_000 <= due_ms < ended_ms + 66_000 and due_ms % 6_000 == 0
    pending = pending_removal(world.space, world.now_ms())
    assert (pending.runs, pending.scopes, pending.tasks, pending.overdue_runs) == (1, 3, 2, 0)
    assert pending.messages == 4 and pending.ended_run_retention_ms == 60_000 and pending.next_removal_ms == due_ms

    await trio.sleep((due_ms - world.now_ms()) / 1000 - 0.001)
    assert world.removals() == [] and world.scopes.view(S, run)["effective"] == "CANCELLED"
    await trio.sleep(0.002)
    [removal] = world.removals()
    assert removal["ids"] == [run] and removal["at_ms"] == due_ms
    for scope_id in (run, made["child"], made["gate"]):
        world.gone(scope_id)
    space = world.space
    assert all(space.tasks.find(task_id) is None for task_id in made["tasks"])
    assert space.messages.find(made["dead"]) is None and space.messages.dead_letters(mailbox) == []
    assert space.once.find(run, "o") is None and space.once.result_bytes == 0
    assert space.coordination.barriers.find(made["barrier"]) is None
    assert space.coordination.timers.find(made["timer"]) is None
    assert space.coordination.groups.find(made["group"]) is None
    assert space.entities() == before, "what the run kept is given back"
    assert space.messages.payload_bytes == 6 and space.tasks.outcome_bytes == 0  # the live run's message
    assert world.scopes.view(S, live)["effective"] == "ACTIVE" and len(space.tasks) == 1
    assert space.messages.work_key(mailbox, live, "wk", world.now_ms()) is not None
    pending = pending_removal(space, world.now_ms())
    assert (pending.runs, pending.scopes, pending.tasks, pending.next_removal_ms) == (0, 0, 0, None)
    events = EventOps(world.kernel).page(S, types=frozenset({"run.removed"}))["events"]
    assert [(event["scopeId"], event["payload"]) for event in events] == [(run, {"scopes": 3})]
    with pytest.raises(KernelError) as caught:
        await world.tasks.cancel(S, made["tasks"][0])
    assert caught.value.code == NOT_FOUND
    # Its name names no run any more: a PUT of it makes a new run.
    again = await world.call(c.EnsureRun, path={"name": "doomed"})
    assert again["id"] != run and again["effective"] == "ACTIVE"
    rebuilt_exactly(world.kernel)


async def test_runs_that_end_together_leave_in_one_record_and_a_child_run_waits_for_its_run(world, autojump_clock):
    """Three runs ended in one sweep step go in one record at one instant; an ended child of a
    live run stays while its run lives."""
    runs = [(await world.scopes.create(S))["id"] for _ in range(3)]
    live = (await world.scopes.create(S))["id"]
    child = (await world.scopes.create(S, parent_id=live))["id"]
    await world.scopes.cancel(S, child)
    for run in runs:
        await world.scopes.complete(S, run)
    await trio.sleep(70)
    [removal] = world.removals()
    assert sorted(removal["ids"]) == sorted(runs)
    assert world.scopes.view(S, child)["effective"] == "CANCELLED"
    await world.scopes.cancel(S, live)
    await trio.sleep(70)
    assert world.removals()[-1]["ids"] == [live]
    world.gone(child)
    assert len(world.space.scopes) == 0
    rebuilt_exactly(world.kernel)


async def test_a_run_past_its_deadline_leaves_after_its_retention_too(world, autojump_clock):
    run = (await world.scopes.create(S, deadline_ms=world.now_ms() + 10_000))["id"]
    await trio.sleep(69)
    assert world.scopes.view(S, run)["effective"] == "EXPIRED"
    await trio.sleep(7)
    world.gone(run)
    rebuilt_exactly(world.kernel)


async def test_a_run_a_live_group_still_counts_on_stays_until_the_group_is_finalized(world, autojump_clock):
    """A task of an ended run is a member of a group of a live run, not yet sealed: the run is kept
    past its retention (and shown overdue) and removed at the first sweep after the group ends."""
    mailbox = (await world.mailboxes.create(S, name="jobs"))["id"]
    live = (await world.scopes.create(S))["id"]
    group = await world.groups.create(S, mailbox_id=mailbox, condition="ALL_TERMINAL", parent_scope_id=live)
    run = (await world.scopes.create(S))["id"]
    task = await world.tasks.submit(S, scope_id=run, mailbox_id=mailbox, key="member")
    await world.groups.join(S, group["id"], task_id=task["id"])
    await world.scopes.cancel(S, run)
    await trio.sleep(120)
    assert world.removals() == [] and world.scopes.view(S, run)["effective"] == "CANCELLED"
    assert pending_removal(world.space, world.now_ms()).overdue_runs == 1
    sealed = await world.groups.seal(S, group["id"])
    assert sealed["state"] == "FINALIZED"
    await trio.sleep(7)
    assert world.removals()[-1]["ids"] == [run]
    world.gone(run)
    members = world.groups.view(S, group["id"])["members"]
    assert members == [{"taskId": task["id"], "verdict": None, "state": None}]
    rebuilt_exactly(world.kernel)


async def test_a_retention_of_zero_keeps_ended_runs_for_good(autojump_clock):
    async with trio.open_nursery() as nursery:
        kernel = _kernel(Limits().replace(ended_run_retention_s=0))
        await nursery.start(kernel.run)
        world = World(kernel)
        run = (await world.scopes.create(S))["id"]
        await world.scopes.cancel(S, run)
        await trio.sleep(30 * 86_400)
        assert world.scopes.view(S, run)["effective"] == "CANCELLED" and world.removals() == []
        assert pending_removal(world.space, world.now_ms()).runs == 0
        with pytest.raises(KernelError) as caught:
            world.scopes.view(S, "sc_nothing")
        assert caught.value.message == "scope 'sc_nothing' not found"
        nursery.cancel_scope.cancel()


async def test_a_removal_due_while_the_server_was_down_is_made_after_recovery(autojump_clock):
    """The journal of a kernel stopped before a run's removal, recovered a day later: the removal
    timer is armed from the state and the run goes at once."""
    async with trio.open_nursery() as nursery:
        first = _kernel()
        await nursery.start(first.run)
        world = World(first)
        run = (await world.scopes.create(S, name="r"))["id"]
        await world.scopes.cancel(S, run)
        records = list(only(first).journal.records)
        nursery.cancel_scope.cancel()
    state = KernelState(LIMITS)
    for record in records:
        state.apply(orjson.loads(orjson.dumps(record)))
    async with trio.open_nursery() as nursery:
        second = _kernel(state=state, anchor_ms=T0 + 86_400_000)
        await nursery.start(second.run)
        await trio.testing.wait_all_tasks_blocked()
        world = World(second)
        [removal] = world.removals()
        assert removal["ids"] == [run] and removal["at_ms"] == T0 + 86_400_000
        world.gone(run)
        assert world.space.run_names.scope_of("r") is None
        nursery.cancel_scope.cancel()
