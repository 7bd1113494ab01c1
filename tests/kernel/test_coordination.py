"""Barriers, timers, task groups and the event log in the kernel, in virtual time.

Every test ends by replaying the journal (and the state's image) into a fresh state and comparing:
the coordination state, event log included, is rebuilt exactly from the records.
"""

from __future__ import annotations

import orjson
import pytest
import trio
import trio.testing

from runstate.actors import EMPTY, Clock, IdSource, Kernel, KernelError, KernelState, Limits
from runstate.actors.journal import MemoryJournal
from runstate.actors.timestamps import format_ms

from ..coordination_ops import BarrierOps, EventOps, GroupOps, TimerOps
from ..ops import MailboxOps, MessageOps, ScopeOps, TaskOps
from .conftest import T0, rebuilt_exactly
from ..single import only

pytestmark = pytest.mark.trio

S = "default"


class World:
    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.scopes = ScopeOps(kernel)
        self.barriers = BarrierOps(kernel)
        self.timers = TimerOps(kernel)
        self.groups = GroupOps(kernel)
        self.events = EventOps(kernel)
        self.mailboxes = MailboxOps(kernel)
        self.messages = MessageOps(kernel)
        self.tasks = TaskOps(kernel)

    def now_ms(self) -> int:
        return self.kernel.clock.now_ms()

    def replays_exactly(self) -> None:
        """The journal, and the image, rebuild this state (through JSON, as the WAL keeps them)."""
        rebuilt_exactly(self.kernel)


def _kernel(limits: Limits | None = None, state: KernelState | None = None, anchor_ms: int = T0) -> Kernel:
    return Kernel(
        state=state or KernelState(limits),
        journal=MemoryJournal(keep=True),
        clock=Clock(wall_anchor_ms=anchor_ms),
        ids=IdSource(seed=1),
    )


@pytest.fixture
async def world(nursery):
    kernel = _kernel()
    await nursery.start(kernel.run)
    return World(kernel)


async def _error(call) -> KernelError:
    with pytest.raises(KernelError) as caught:
        await call
    return caught.value


# -- barriers ------------------------------------------------------------------------------------


async def test_a_barrier_releases_at_target_distinct_keys_and_stays_released(world, autojump_clock):
    """Three arrivals of which two share a key do not release a barrier of target 3; the third
    distinct key does; a later arrival is BARRIER_RELEASED and the barrier stays released."""
    run = (await world.scopes.create(S))["id"]
    barrier = await world.barriers.create(S, scope_id=run, target=3)
    assert (barrier["state"], barrier["epoch"], barrier["arrived"]) == ("OPEN", 1, 0)
    assert (await world.barriers.arrive(S, barrier["id"], key="a"))["arrived"] == 1
    again = await world.barriers.arrive(S, barrier["id"], key="a")
    assert (again["state"], again["arrived"]) == ("OPEN", 1)
    assert (await world.barriers.arrive(S, barrier["id"], key="b"))["state"] == "OPEN"
    released = await world.barriers.arrive(S, barrier["id"], key="c")
    assert (released["state"], released["arrived"], released["epoch"]) == ("RELEASED", 3, 1)
    late = await _error(world.barriers.arrive(S, barrier["id"], key="d"))
    assert late.code == "BARRIER_RELEASED"
    await world.scopes.cancel(S, run)
    assert world.barriers.view(S, barrier["id"])["state"] == "RELEASED"
    world.replays_exactly()


async def test_a_scope_end_cancels_its_open_barriers_and_its_subtrees(world, autojump_clock):
    """Cancelling a run cancels the open barriers of the run and of its children; arrivals then
    get BARRIER_CANCELLED. A barrier of a run that passed its deadline reads CANCELLED at once."""
    run = (await world.scopes.create(S))["id"]
    child = (await world.scopes.create(S, parent_id=run))["id"]
    mine = await world.barriers.create(S, scope_id=run, target=2)
    theirs = await world.barriers.create(S, scope_id=child, target=2)
    await world.barriers.arrive(S, theirs["id"], key="a")
    await world.scopes.cancel(S, run)
    assert world.barriers.view(S, mine["id"])["state"] == "CANCELLED"
    assert world.barriers.view(S, theirs["id"])["state"] == "CANCELLED"
    assert (await _error(world.barriers.arrive(S, theirs["id"], key="b"))).code == "BARRIER_CANCELLED"
    assert (await _error(world.barriers.create(S, scope_id=run, target=1))).code == "SCOPE_CANCELLED"

    timed = (await world.scopes.create(S, deadline_ms=world.now_ms() + 10_000))["id"]
    late = await world.barriers.create(S, scope_id=timed, target=2)
    await trio.sleep(10)
    assert world.barriers.view(S, late["id"])["state"] == "CANCELLED"
    assert (await _error(world.barriers.arrive(S, late["id"], key="a"))).code == "BARRIER_CANCELLED"
    world.replays_exactly()


async def test_a_named_barrier_is_one_per_scope_and_its_target_is_checked(world, autojump_clock):
    """A put by name creates the barrier once; again it answers the same one (even released);
    another target is CONFLICT; the same name in another scope is another barrier; the name is
    kept through replay and the image."""
    run, other = (await world.scopes.create(S))["id"], (await world.scopes.create(S))["id"]
    first = await world.barriers.ensure(S, "meet", scope_id=run, target=2)
    assert (first["name"], first["state"], first["target"], first["epoch"]) == ("meet", "OPEN", 2, 1)
    assert (await world.barriers.ensure(S, "meet", scope_id=run, target=2))["id"] == first["id"]
    assert (await _error(world.barriers.ensure(S, "meet", scope_id=run, target=3))).code == "CONFLICT"
    elsewhere = await world.barriers.ensure(S, "meet", scope_id=other, target=3)
    assert elsewhere["id"] != first["id"]
    await world.barriers.arrive(S, first["id"], key="a")
    assert (await world.barriers.arrive(S, first["id"], key="b"))["state"] == "RELEASED"
    again = await world.barriers.ensure(S, "meet", scope_id=run, target=2)
    assert (again["id"], again["state"]) == (first["id"], "RELEASED")
    await world.scopes.cancel(S, other)
    assert (await world.barriers.ensure(S, "meet", scope_id=other, target=3))["state"] == "CANCELLED"
    assert (await _error(world.barriers.ensure(S, "late", scope_id=other, target=1))).code == "SCOPE_CANCELLED"
    world.replays_exactly()


# -- timers --------------------------------------------------------------------------------------


async def test_a_named_timer_is_armed_once_and_answered_as_it_is_by_server_time(world, autojump_clock):
    """A put by name arms the timer once; repeated it answers the same timer with the server's
    `now` and the original `fireAt` (a restarted sleeper waits only for what is left, whatever
    it sends); the token shows once it fired; after the ack the name stays ACKED."""
    run = (await world.scopes.create(S))["id"]
    t0 = world.now_ms()
    armed = await world.timers.ensure(S, "nap", scope_id=run, after_s=10)
    assert (armed["name"], armed["state"], armed["token"]) == ("nap", "ARMED", None)
    assert armed["now"] == format_ms(t0) and armed["fireAt"] == format_ms(t0 + 10_000)
    await trio.sleep(4)
    again = await world.timers.ensure(S, "nap", scope_id=run, after_s=10)
    assert (again["id"], again["fireAt"], again["now"]) == (armed["id"], armed["fireAt"], format_ms(t0 + 4_000))
    await trio.sleep(6)
    await trio.testing.wait_all_tasks_blocked()
    fired = await world.timers.ensure(S, "nap", scope_id=run, at_ms=t0)
    assert fired["state"] == "FIRED" and fired["token"]
    assert (await world.timers.ack(S, armed["id"], token=fired["token"]))["state"] == "ACKED"
    done = await world.timers.ensure(S, "nap", scope_id=run, after_s=10)
    assert (done["id"], done["state"], done["token"]) == (armed["id"], "ACKED", None)
    # A time already passed fires at once; the scope's end cancels a named timer like any other.
    past = await world.timers.ensure(S, "past", scope_id=run, at_ms=t0)
    await trio.testing.wait_all_tasks_blocked()
    assert world.timers.view(S, past["id"])["state"] == "FIRED"
    later = await world.timers.ensure(S, "later", scope_id=run, after_s=60)
    await world.scopes.cancel(S, run)
    assert (await world.timers.ensure(S, "later", scope_id=run, after_s=60))["state"] == "CANCELLED"
    assert (await _error(world.timers.ensure(S, "new", scope_id=run, after_s=1))).code == "SCOPE_CANCELLED"
    assert later["id"] != past["id"]
    world.replays_exactly()



async def test_a_timer_fires_at_its_time_is_listed_with_its_token_and_acked_once(world, autojump_clock):
    """Armed for 30 s: not listed at 29.999 s, listed from 30 s on (repeatably, same token); a
    wrong token is STALE_CLAIM; the right one acks it; acking again is harmless."""
    run = (await world.scopes.create(S))["id"]
    t0 = world.now_ms()
    timer = await world.timers.create(S, scope_id=run, after_s=30)
    assert timer["state"] == "ARMED" and "token" not in timer
    await trio.sleep(29.999)
    assert (await world.timers.poll(S, scope_id=run))["timers"] == []
    await trio.sleep(0.001)
    await trio.testing.wait_all_tasks_blocked()
    first = (await world.timers.poll(S, scope_id=run))["timers"]
    second = (await world.timers.poll(S, scope_id=run))["timers"]
    assert first == second and [entry["id"] for entry in first] == [timer["id"]]
    entry = first[0]
    assert entry["state"] == "FIRED" and entry["firedAt"] == entry["fireAt"]
    assert world.timers.view(S, timer["id"])["firedAt"] == entry["firedAt"]
    assert only(world.kernel).state.space(S).coordination.timers.get(timer["id"]).fired_ms == t0 + 30_000
    assert (await _error(world.timers.ack(S, timer["id"], token="ct_wrong"))).code == "STALE_CLAIM"
    assert (await world.timers.ack(S, timer["id"], token=entry["token"]))["state"] == "ACKED"
    assert (await world.timers.ack(S, timer["id"], token=entry["token"]))["state"] == "ACKED"
    assert (await world.timers.poll(S, scope_id=run))["timers"] == []
    world.replays_exactly()


async def test_a_held_poll_returns_when_the_timer_fires(world, autojump_clock):
    """A poll with waitMs for one timer parks and is answered at the firing instant."""
    run = (await world.scopes.create(S))["id"]
    timer = await world.timers.create(S, scope_id=run, at_ms=world.now_ms() + 12_500)
    start = trio.current_time()
    answer = await world.timers.poll(S, scope_id=run, timer_id=timer["id"], wait_ms=30_000)
    assert trio.current_time() - start == pytest.approx(12.5)
    assert [entry["id"] for entry in answer["timers"]] == [timer["id"]]
    # With nothing to fire, the hold ends empty after its wait.
    other = (await world.scopes.create(S))["id"]
    start = trio.current_time()
    assert await world.timers.poll(S, scope_id=other, wait_ms=3_000) is EMPTY
    assert trio.current_time() - start == pytest.approx(3)


async def test_cancelled_and_expired_timers_are_never_listed(world, autojump_clock):
    """A cancelled timer never fires; a fired timer nobody acks is EXPIRED after the setting;
    a run's end cancels the rest and ends a parked poll at once."""
    run = (await world.scopes.create(S))["id"]
    cancelled = await world.timers.create(S, scope_id=run, after_s=5)
    forgotten = await world.timers.create(S, scope_id=run, after_s=5)
    assert (await world.timers.cancel(S, cancelled["id"]))["state"] == "CANCELLED"
    assert (await world.timers.cancel(S, cancelled["id"]))["state"] == "CANCELLED"
    await trio.sleep(6)
    assert [entry["id"] for entry in (await world.timers.poll(S, scope_id=run))["timers"]] == [forgotten["id"]]
    await trio.sleep(world.kernel.limits.timer_fired_ttl_s)
    assert world.timers.view(S, forgotten["id"])["state"] == "EXPIRED"
    assert (await world.timers.poll(S, scope_id=run))["timers"] == []
    assert (await _error(world.timers.ack(S, forgotten["id"], token=only(world.kernel).state.space(S).coordination.timers.get(forgotten["id"]).token))).code == "CONFLICT"

    pending = await world.timers.create(S, scope_id=run, after_s=60)
    answers = []

    async def hold(timer_id):
        try:
            answer = await world.timers.poll(S, scope_id=run, timer_id=timer_id, wait_ms=30_000)
            answers.append((timer_id, answer["timer"]["state"] if timer_id else answer, trio.current_time()))
        except KernelError as error:
            answers.append((timer_id, error.code, trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold, pending["id"])
        nursery.start_soon(hold, None)
        await trio.sleep(1)
        cancelled_at = trio.current_time()
        await world.scopes.cancel(S, run)
    assert world.timers.view(S, pending["id"])["state"] == "CANCELLED"
    assert sorted(answers, key=str) == sorted(
        [(pending["id"], "CANCELLED", pytest.approx(cancelled_at)), (None, "SCOPE_CANCELLED", pytest.approx(cancelled_at))], key=str
    )
    world.replays_exactly()


async def test_a_timer_needs_exactly_one_of_after_seconds_and_at(world, autojump_clock):
    run = (await world.scopes.create(S))["id"]
    assert (await _error(world.timers.create(S, scope_id=run))).code == "VALIDATION_FAILED"
    assert (await _error(world.timers.create(S, scope_id=run, after_s=1, at_ms=world.now_ms()))).code == "VALIDATION_FAILED"
    too_far = world.now_ms() + (world.kernel.limits.timer_after_s_max + 1) * 1000
    assert (await _error(world.timers.create(S, scope_id=run, at_ms=too_far))).code == "VALIDATION_FAILED"
    past = await world.timers.create(S, scope_id=run, at_ms=world.now_ms() - 60_000)
    await trio.testing.wait_all_tasks_blocked()
    assert world.timers.view(S, past["id"])["state"] == "FIRED"


async def test_a_timer_due_while_the_server_was_down_fires_once_after_recovery(autojump_clock):
    """The journal of a kernel stopped before its timer's time, recovered an hour later: the timer
    fires at once (and once), never earlier than its time."""
    async with trio.open_nursery() as nursery:
        first = _kernel()
        await nursery.start(first.run)
        world = World(first)
        run = (await world.scopes.create(S))["id"]
        timer = await world.timers.create(S, scope_id=run, after_s=600)
        early = await world.timers.create(S, scope_id=run, after_s=7200)
        records = list(only(first).journal.records)
        nursery.cancel_scope.cancel()
    state = KernelState()
    for record in records:
        state.apply(orjson.loads(orjson.dumps(record)))
    async with trio.open_nursery() as nursery:
        second = _kernel(state=state, anchor_ms=T0 + 3_600_000)
        await nursery.start(second.run)
        await trio.testing.wait_all_tasks_blocked()
        world = World(second)
        listed = (await world.timers.poll(S, scope_id=run))["timers"]
        assert [entry["id"] for entry in listed] == [timer["id"]]
        assert world.timers.view(S, early["id"])["state"] == "ARMED"
        fired = [r for r in only(second).journal.records if r["type"] == "timer.fired"]
        assert [r["id"] for r in fired] == [timer["id"]] and fired[0]["at_ms"] == T0 + 3_600_000
        nursery.cancel_scope.cancel()


# -- task groups ---------------------------------------------------------------------------------


async def _group_world(world: World, **create) -> tuple[str, dict]:
    mailbox = (await world.mailboxes.create(S, name=f"g{len(world.mailboxes.list(S))}"))["id"]
    group = await world.groups.create(S, mailbox_id=mailbox, **create)
    return mailbox, group


async def _finish(world: World, group: dict, succeed: bool) -> dict:
    """Receive the next member task of the group's queue and complete it (or fail it)."""
    delivery = await world.messages.receive(
        S, group["mailboxId"], scope_id=group["scopeId"], holder="w", session="s", lease_s=30
    )
    if succeed:
        await world.messages.complete(S, delivery["message"]["id"], token=delivery["token"], result={"payload": 1})
    else:
        await world.messages.nack(S, delivery["message"]["id"], token=delivery["token"], retry=False)
    return delivery


async def test_n_accepted_finalizes_at_the_threshold_and_verdicts_are_given_once(world, autojump_clock):
    """Two accepts of three succeed an N_ACCEPTED group with threshold 2; the same verdict again is
    harmless, the other verdict is CONFLICT; the outcome never changes after."""
    _, group = await _group_world(world, condition="N_ACCEPTED", threshold=2)
    assert (group["state"], group["scopeId"] != group["id"]) == ("OPEN", True)
    assert world.scopes.view(S, group["scopeId"])["effective"] == "ACTIVE"
    members = [await world.groups.submit(S, group["id"], key=f"k{i}", task_input={"i": i}) for i in range(3)]
    assert len({member["taskId"] for member in members}) == 3
    replay = await world.groups.submit(S, group["id"], key="k0", task_input={"i": 0})
    assert replay["taskId"] == members[0]["taskId"] and replay["created"] is False
    await world.groups.accept(S, group["id"], members[0]["taskId"])
    assert (await world.groups.accept(S, group["id"], members[0]["taskId"]))["state"] == "OPEN"
    assert (await _error(world.groups.reject(S, group["id"], members[0]["taskId"]))).code == "CONFLICT"
    done = await world.groups.accept(S, group["id"], members[1]["taskId"])
    assert (done["state"], done["outcome"], done["outcomeReason"]) == ("FINALIZED", "SUCCEEDED", "threshold_reached")
    await world.groups.reject(S, group["id"], members[2]["taskId"])
    assert world.groups.view(S, group["id"])["outcome"] == "SUCCEEDED"
    assert (await world.groups.close(S, group["id"]))["state"] == "FINALIZED"
    assert (await _error(world.groups.seal(S, group["id"]))).code == "CONFLICT"
    world.replays_exactly()


async def test_an_unreachable_threshold_is_decided_once_sealed(world, autojump_clock):
    """With two members, one rejected, threshold 2 cannot be met: FAILED only when sealed."""
    _, group = await _group_world(world, condition="N_ACCEPTED", threshold=2)
    a = await world.groups.submit(S, group["id"], key="a")
    b = await world.groups.submit(S, group["id"], key="b")
    await world.groups.reject(S, group["id"], a["taskId"])
    assert world.groups.view(S, group["id"])["state"] == "OPEN"
    sealed = await world.groups.close(S, group["id"])
    assert (sealed["state"], sealed["outcome"], sealed["outcomeReason"]) == ("FINALIZED", "FAILED", "threshold_unreachable")
    assert b["taskId"]
    world.replays_exactly()


async def test_expected_members_seal_the_group_and_first_accepted_wins(world, autojump_clock):
    """expectedMembers 2 seals at the second member; a third is refused; join-task after it too;
    FIRST_ACCEPTED finalizes at the first accept."""
    _, group = await _group_world(world, condition="FIRST_ACCEPTED", expected_members=2)
    a = await world.groups.submit(S, group["id"], key="a")
    await world.groups.submit(S, group["id"], key="b")
    assert world.groups.view(S, group["id"])["state"] == "SEALED"
    assert (await _error(world.groups.submit(S, group["id"], key="c"))).code == "CONFLICT"
    outside_run = (await world.scopes.create(S))["id"]
    outside = await world.tasks.submit(S, scope_id=outside_run, mailbox_id=group["mailboxId"], key="x")
    assert (await _error(world.groups.join(S, group["id"], task_id=outside["id"]))).code == "CONFLICT"
    done = await world.groups.accept(S, group["id"], a["taskId"])
    assert (done["state"], done["outcome"]) == ("FINALIZED", "SUCCEEDED")
    world.replays_exactly()


async def test_the_join_that_seals_a_group_says_so_and_an_older_journal_replays_as_it_was(world, autojump_clock):
    """The join that brings expectedMembers is recorded with `seals` and makes `group.sealed` after
    its `group.joined`. A journal written before `seals` was (the same join without it) still seals
    the group when replayed, and makes the events it made then: the log keeps its numbers."""
    _, group = await _group_world(world, condition="ALL_TERMINAL", expected_members=2)
    await world.groups.submit(S, group["id"], key="a")
    await world.groups.submit(S, group["id"], key="b")
    joins = [r for r in only(world.kernel).journal.records if r["type"] == "group.joined"]
    assert [r.get("seals") for r in joins] == [None, True]
    kinds = [e["type"] for e in world.events.page(S, aggregate=("group", group["id"]))["events"]]
    assert kinds == ["group.created", "group.joined", "group.joined", "group.sealed"]
    world.replays_exactly()
    older = KernelState()
    for record in only(world.kernel).journal.records:
        record = orjson.loads(orjson.dumps(record))
        record.pop("seals", None)
        older.apply(record)
    space = older.space(S)
    assert space.coordination.groups.get(group["id"]).state == "SEALED"
    kinds = [e.type for e in space.events.page(None, 100, None)[0] if e.aggregate_id == group["id"]]
    assert kinds == ["group.created", "group.joined", "group.joined"]


async def test_all_terminal_follows_its_members_tasks(world, autojump_clock):
    """ALL_TERMINAL finalizes once sealed and every member task ended: SUCCEEDED when all succeeded
    (a joined outside task included), FAILED when one failed without being accepted."""
    _, group = await _group_world(world, condition="ALL_TERMINAL")
    await world.groups.submit(S, group["id"], key="a")
    outside_run = (await world.scopes.create(S))["id"]
    outside = await world.tasks.submit(S, scope_id=outside_run, mailbox_id=group["mailboxId"], key="x")
    await world.groups.join(S, group["id"], task_id=outside["id"])
    await _finish(world, group, succeed=True)
    assert (await world.groups.close(S, group["id"]))["state"] == "SEALED"
    delivery = await world.messages.receive(S, group["mailboxId"], scope_id=outside_run, holder="w", session="s", lease_s=30)
    await world.messages.complete(S, delivery["message"]["id"], token=delivery["token"])
    view = world.groups.view(S, group["id"])
    assert (view["state"], view["outcome"], view["outcomeReason"]) == ("FINALIZED", "SUCCEEDED", "all_terminal")

    _, failing = await _group_world(world, condition="ALL_TERMINAL", expected_members=2)
    await world.groups.submit(S, failing["id"], key="a")
    await world.groups.submit(S, failing["id"], key="b")
    await _finish(world, failing, succeed=True)
    assert world.groups.view(S, failing["id"])["state"] == "SEALED"
    await _finish(world, failing, succeed=False)
    view = world.groups.view(S, failing["id"])
    assert (view["state"], view["outcome"], view["outcomeReason"]) == ("FINALIZED", "FAILED", "member_failed")
    world.replays_exactly()


async def test_a_group_fails_at_its_deadline_and_is_cancelled_with_its_gate_scope(world, autojump_clock):
    _, timed = await _group_world(world, condition="ALL_TERMINAL", deadline_ms=world.now_ms() + 60_000)
    await world.groups.submit(S, timed["id"], key="a")
    await trio.sleep(59.9)
    assert world.groups.view(S, timed["id"])["state"] == "OPEN"
    await trio.sleep(0.2)
    view = world.groups.view(S, timed["id"])
    assert (view["state"], view["outcome"], view["outcomeReason"]) == ("FINALIZED", "FAILED", "deadline_exceeded")

    parent = (await world.scopes.create(S))["id"]
    _, gated = await _group_world(world, condition="N_ACCEPTED", threshold=1, parent_scope_id=parent)
    member = await world.groups.submit(S, gated["id"], key="a")
    await world.scopes.cancel(S, parent)
    view = world.groups.view(S, gated["id"])
    assert (view["state"], view["outcome"], view["outcomeReason"]) == ("FINALIZED", "CANCELLED", "scope_cancelled")
    assert world.tasks.view(S, member["taskId"])["state"] == "CANCELLED"
    world.replays_exactly()


async def test_a_group_holds_at_most_its_member_limit_and_checks_its_condition(nursery, autojump_clock):
    kernel = _kernel(Limits(group_members_max=3))
    await nursery.start(kernel.run)
    world = World(kernel)
    _, group = await _group_world(world, condition="ALL_TERMINAL")
    for key in "abc":
        await world.groups.submit(S, group["id"], key=key)
    assert (await _error(world.groups.submit(S, group["id"], key="d"))).code == "BACKLOG_FULL"
    mailbox = group["mailboxId"]
    for bad in ({"condition": "SOME"}, {"condition": "N_ACCEPTED"}, {"condition": "ALL_TERMINAL", "threshold": 2},
                {"condition": "N_ACCEPTED", "threshold": 3, "expected_members": 2}):
        assert (await _error(world.groups.create(S, mailbox_id=mailbox, **bad))).code == "VALIDATION_FAILED"


# -- events --------------------------------------------------------------------------------------


async def test_events_are_derived_in_order_with_cursors_strictly_after_and_filters(world, autojump_clock):
    """Each change makes its event; a cursor means strictly after; nextCursor moves past events a
    filter skipped; scopeId covers the subtree."""
    run = (await world.scopes.create(S))["id"]
    child = (await world.scopes.create(S, parent_id=run))["id"]
    barrier = await world.barriers.create(S, scope_id=child, target=1)
    await world.barriers.arrive(S, barrier["id"], key="a")
    everything = world.events.page(S)
    types = [event["type"] for event in everything["events"]]
    assert types == ["scope.created", "scope.created", "barrier.created", "barrier.arrived", "barrier.released"]
    assert [event["eventId"] for event in everything["events"]] == [f"ev_{n}" for n in range(1, 6)]
    assert everything["nextCursor"] == "5"
    after_two = world.events.page(S, after=2)
    assert [event["eventId"] for event in after_two["events"]] == ["ev_3", "ev_4", "ev_5"]
    released = world.events.page(S, types=frozenset({"barrier.released"}))
    assert [event["type"] for event in released["events"]] == ["barrier.released"] and released["nextCursor"] == "5"
    in_child = world.events.page(S, scope_id=run)
    assert len(in_child["events"]) == 5
    only_child = world.events.page(S, scope_id=child)
    assert [event["type"] for event in only_child["events"]][0] == "scope.created"
    assert all(event["scopeId"] == child for event in only_child["events"])
    by_aggregate = world.events.page(S, aggregate=("barrier", barrier["id"]))
    assert len(by_aggregate["events"]) == 3
    limited = world.events.page(S, limit=2)
    assert [event["eventId"] for event in limited["events"]] == ["ev_1", "ev_2"] and limited["nextCursor"] == "2"
    empty = world.events.page(S, after=5)
    assert empty == {"events": [], "nextCursor": "5"}
    assert (await _error(_raise(lambda: world.events.page(S, after=9)))).code == "CURSOR_EXPIRED"
    mailbox = (await world.mailboxes.create(S, name="queue"))["id"]
    task = await world.tasks.submit(S, scope_id=child, mailbox_id=mailbox, key="waiting")
    cursor = int(world.events.page(S)["nextCursor"])
    await world.scopes.cancel(S, run)
    tail = world.events.page(S, after=cursor)["events"]
    assert [(event["type"], event["aggregate"]["id"]) for event in tail] == [("scope.cancelled", run), ("task.cancelled", task["id"])]
    assert tail[1]["payload"] == {"reason": "scope_cancelled", "by": None}  # cancelled in code: by nobody
    world.replays_exactly()


async def _raise(function):
    return function()


async def test_a_watch_waits_for_the_next_event(world, autojump_clock):
    """A watch with nothing after its cursor parks and is answered by the turn that makes an event."""
    run = (await world.scopes.create(S))["id"]
    cursor = int(world.events.page(S)["nextCursor"])
    got = []

    async def watch():
        got.append((await world.events.watch(S, after=cursor, wait_ms=8_000), trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        await trio.sleep(2)
        assert not got
        at = trio.current_time()
        await world.barriers.create(S, scope_id=run, target=2)
    page, when = got[0]
    assert [event["type"] for event in page["events"]] == ["barrier.created"] and when == pytest.approx(at)
    start = trio.current_time()
    assert await world.events.watch(S, after=int(page["nextCursor"]), wait_ms=5_000) is EMPTY
    assert trio.current_time() - start == pytest.approx(5)


async def test_the_log_is_bounded_and_an_old_cursor_expires(nursery, autojump_clock):
    """With 4 events kept, a cursor before the oldest kept is CURSOR_EXPIRED; events older than
    the age limit go too."""
    kernel = _kernel(Limits(events_kept_max=4, events_kept_s=60))
    await nursery.start(kernel.run)
    world = World(kernel)
    for _ in range(6):
        await world.scopes.create(S)
    page = world.events.page(S)
    assert [event["eventId"] for event in page["events"]] == ["ev_3", "ev_4", "ev_5", "ev_6"]
    assert world.events.page(S, after=2)["events"][0]["eventId"] == "ev_3"
    assert (await _error(_raise(lambda: world.events.page(S, after=1)))).code == "CURSOR_EXPIRED"
    await trio.sleep(61)
    await world.scopes.create(S)
    assert [event["eventId"] for event in world.events.page(S)["events"]] == ["ev_7"]
    assert (await _error(_raise(lambda: world.events.page(S, after=5)))).code == "CURSOR_EXPIRED"
    world.replays_exactly()
