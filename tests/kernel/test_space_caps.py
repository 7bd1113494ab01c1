"""The caps of a space, in the kernel and in virtual time: live runs, claims held, tasks not ended,
payload bytes kept, and a mailbox's backlog.

Past a cap a command is 409 BACKLOG_FULL with a message that names the setting and how to raise
it, and it writes no record; ending runs, releasing claims, settling tasks and messages lets the
space go on. Every test ends by replaying the journal (and the state's image) into a fresh state
and comparing: the counts behind the caps are rebuilt exactly, not merely recomputed close enough.
"""

from __future__ import annotations

import pytest
import trio

from runstate.actors import Clock, Idem, IdSource, Kernel, KernelError, KernelState, Limits
from runstate.actors import commands as c
from runstate.actors.caps import value_bytes
from runstate.actors.claims import ClaimTable
from runstate.actors.errors import BACKLOG_FULL, VALIDATION_FAILED
from runstate.actors.journal import MemoryJournal
from runstate.actors.messages import MessageTable
from runstate.actors.scopes import ScopeTree
from runstate.server import wire
from runstate.actors.tasks import TaskTable

from ..capacity_ops import PoolOps
from ..ops import ClaimOps, MailboxOps, MessageOps, ScopeOps, TaskOps
from .conftest import T0, rebuilt_exactly
from ..single import only

pytestmark = pytest.mark.trio

S = "default"
SMALL = Limits().replace(
    space_scopes_max=3, space_claims_max=2, space_tasks_max=2, backlog_limit_max=3, space_payload_bytes_max=100
)


class World:
    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.scopes = ScopeOps(kernel)
        self.claims = ClaimOps(kernel)
        self.mailboxes = MailboxOps(kernel)
        self.messages = MessageOps(kernel)
        self.tasks = TaskOps(kernel)

    @property
    def space(self):
        return only(self.kernel).state.space(S)

    async def once(self, command_class: type, **body) -> dict:
        kernel = self.kernel
        return wire.encode(await kernel.submit(kernel.parse(command_class, body, {"space": S})))  # (as a client reads it)

    async def receive(self, mailbox_id: str, scope_id: str) -> dict:
        return await self.messages.receive(S, mailbox_id, scope_id=scope_id, holder="w", session="s", lease_s=30)

    async def refused(self, call, setting: str) -> KernelError:
        """`call` is BACKLOG_FULL naming `setting`, and the journal did not grow."""
        before = len(only(self.kernel).journal.records)
        with pytest.raises(KernelError) as caught:
            await call
        error = caught.value
        assert error.code == BACKLOG_FULL, error
        assert error.retry_after_s == 1.0
        flag, variable = "--" + setting.replace("_", "-"), "RUNSTATE_" + setting.upper()
        assert f"(limit {setting}; raise it with {flag} / {variable})" in error.message
        assert len(only(self.kernel).journal.records) == before, "a refusal writes no record"
        return error

    def replays_exactly(self) -> None:
        """The journal, and the image, rebuild this state (through JSON, as the WAL keeps them)."""
        replayed, imaged = rebuilt_exactly(self.kernel)
        for state in (replayed, imaged):  # the counts themselves, named (assert_same_state covers them too)
            space, live = state.space(S), self.space
            assert space.scopes.live == live.scopes.live
            assert space.claims.held_count == live.claims.held_count
            assert space.tasks.live == live.tasks.live
            assert space.messages.payload_bytes == live.messages.payload_bytes
            assert space.tasks.outcome_bytes == live.tasks.outcome_bytes
            assert space.once.result_bytes == live.once.result_bytes


@pytest.fixture
async def world(nursery):
    kernel = Kernel(
        state=KernelState(SMALL), journal=MemoryJournal(keep=True), clock=Clock(wall_anchor_ms=T0), ids=IdSource(seed=1)
    )
    await nursery.start(kernel.run)
    return World(kernel)


async def test_live_runs_are_capped_and_an_ended_subtree_gives_its_runs_back(world, autojump_clock):
    """A fourth live run is refused; ending a run frees it and every run under it (ended or not)."""
    root = (await world.scopes.create(S))["id"]
    child = (await world.scopes.create(S, parent_id=root))["id"]
    await world.scopes.create(S, parent_id=child)
    error = await world.refused(world.scopes.create(S), "space_scopes_max")
    assert error.message.startswith("space holds 3 live scopes")
    await world.scopes.cancel(S, child)  # the child and the grandchild end
    assert world.space.scopes.live == 1
    await world.scopes.create(S)
    await world.scopes.create(S)
    await world.refused(world.scopes.create(S), "space_scopes_max")
    await world.scopes.complete(S, root)  # its ended child is not given back twice
    assert world.space.scopes.live == 2
    world.replays_exactly()


async def test_a_run_past_its_deadline_is_given_back_when_its_expiry_is_recorded(world, autojump_clock):
    """The count follows the recorded ends: the supervisor's expiry frees the run."""
    for _ in range(2):
        await world.scopes.create(S)
    await world.scopes.create(S, deadline_ms=world.kernel.clock.now_ms() + 5_000)
    await world.refused(world.scopes.create(S), "space_scopes_max")
    await trio.sleep(6)
    assert world.space.scopes.live == 2
    await world.scopes.create(S)
    world.replays_exactly()


async def test_claims_held_are_capped_and_a_release_or_a_takeover_lets_the_space_go_on(world, autojump_clock):
    """A third key held is refused; a held key asked again is still CLAIM_HELD; a release frees one;
    taking over a lease that ran out holds no more than before, so it is never refused."""
    scope = (await world.scopes.create(S))["id"]
    lease = dict(holder="h", session="s", lease_s=5)
    first = await world.claims.acquire(S, scope_id=scope, key="a", **lease)
    await world.claims.acquire(S, scope_id=scope, key="b", **lease)
    error = await world.refused(world.claims.acquire(S, scope_id=scope, key="c", **lease), "space_claims_max")
    assert error.message.startswith("space holds 2 claims")
    with pytest.raises(KernelError) as held:
        await world.claims.acquire(S, scope_id=scope, key="a", **lease)
    assert held.value.code == "CLAIM_HELD"
    await world.claims.release(S, key="a", token=first["token"])
    await world.claims.acquire(S, scope_id=scope, key="c", **lease)
    await trio.sleep(6)  # both leases run out (and are recorded expired by the supervisor)
    await world.claims.acquire(S, scope_id=scope, key="b", **lease)
    await world.claims.acquire(S, scope_id=scope, key="c", **lease)
    world.replays_exactly()


async def test_tasks_not_ended_are_capped_and_settling_one_lets_the_next_in(world, autojump_clock):
    """A third live task is refused (a replay of a key is not a new task); completing one, or
    cancelling one, frees its place, while the finished tasks stay readable."""
    scope = (await world.scopes.create(S))["id"]
    mailbox = (await world.mailboxes.create(S, name="jobs"))["id"]
    submit = lambda key: world.tasks.submit(S, scope_id=scope, mailbox_id=mailbox, key=key, task_input={"n": key})
    await submit("a")
    second = await submit("b")
    error = await world.refused(submit("c"), "space_tasks_max")
    assert error.message.startswith("space holds 2 tasks not ended")
    assert (await submit("a"))["replay"] is True
    delivery = await world.receive(mailbox, scope)
    await world.messages.complete(S, delivery["message"]["id"], token=delivery["token"], result={"payload": 1})
    await submit("c")
    await world.refused(submit("d"), "space_tasks_max")
    await world.tasks.cancel(S, second["id"])
    await submit("d")
    assert world.space.tasks.live == 2
    world.replays_exactly()


async def test_a_mailbox_without_a_backlog_limit_holds_at_most_the_setting(world, autojump_clock):
    """No backlogLimit: the setting caps the backlog; a lower backlogLimit caps it sooner (and is
    not the setting to raise); a higher one is refused when the mailbox is made."""
    scope = (await world.scopes.create(S))["id"]
    mailbox = (await world.mailboxes.create(S, name="open"))["id"]
    for n in range(3):
        await world.messages.send(S, mailbox, scope_id=scope, payload=n)
    error = await world.refused(world.messages.send(S, mailbox, scope_id=scope, payload=3), "backlog_limit_max")
    assert error.message.startswith("mailbox 'open' holds 3 unsettled messages")
    delivery = await world.receive(mailbox, scope)
    await world.messages.complete(S, delivery["message"]["id"], token=delivery["token"])
    await world.messages.send(S, mailbox, scope_id=scope, payload=3)

    small = (await world.mailboxes.create(S, name="small", backlog_limit=1))["id"]
    await world.messages.send(S, small, scope_id=scope)
    with pytest.raises(KernelError) as caught:
        await world.messages.send(S, small, scope_id=scope)
    assert caught.value.code == BACKLOG_FULL
    assert caught.value.message == "mailbox 'small' holds 1 unsettled messages, its backlogLimit"
    with pytest.raises(KernelError) as caught:
        await world.mailboxes.create(S, name="big", backlog_limit=4)
    assert caught.value.code == VALIDATION_FAILED
    world.replays_exactly()


async def test_payload_bytes_are_capped_over_messages_inputs_results_and_once_results(world, autojump_clock):
    """The bytes of JSON kept count across tables; a completion that keeps no more than it lets
    go passes even in a full space; settling gives the bytes back."""
    scope = (await world.scopes.create(S))["id"]
    mailbox = (await world.mailboxes.create(S, name="jobs", max_attempts=1))["id"]
    forty = "x" * 38  # 40 bytes of JSON with its quotes
    assert value_bytes(forty) == 40
    await world.messages.send(S, mailbox, scope_id=scope, payload=forty)
    task = await world.tasks.submit(S, scope_id=scope, mailbox_id=mailbox, key="t", task_input=forty)
    error = await world.refused(world.messages.send(S, mailbox, scope_id=scope, payload=forty), "space_payload_bytes_max")
    assert error.message.startswith("space holds 80 bytes of payloads, inputs and results and this needs 40 more")
    await world.messages.send(S, mailbox, scope_id=scope, payload="y" * 18)  # 20 bytes: exactly at the cap
    assert world.space.messages.payload_bytes == 100

    plain = await world.receive(mailbox, scope)
    job = await world.receive(mailbox, scope)
    assert job["message"]["taskId"] == task["id"]
    # The space is full: the task's result replaces its 40-byte input (no room to keep both), and
    # 81 bytes would end at 101, past the cap.
    await world.refused(
        world.messages.complete(S, job["message"]["id"], token=job["token"], result={"payload": "z" * 79}),
        "space_payload_bytes_max",
    )
    await world.messages.complete(S, job["message"]["id"], token=job["token"], result={"payload": "z" * 38})
    assert world.space.tasks.outcome_bytes == 40 and world.space.messages.payload_bytes == 60
    await world.messages.complete(S, plain["message"]["id"], token=plain["token"], result={"big": forty})  # not kept
    assert world.space.messages.payload_bytes == 20

    # A dead letter keeps its payload (counted until retention forgets it).
    last = await world.receive(mailbox, scope)
    await world.messages.nack(S, last["message"]["id"], token=last["token"], retry=False)
    assert world.space.messages.payload_bytes == 20

    # Once results are kept for good, and count.
    held = await world.once(c.AcquireOnce, scopeId=scope, key="k", holder="h", holderSession="s")
    await world.refused(
        world.once(c.CompleteOnce, scopeId=scope, key="k", token=held["token"], result="r" * 39), "space_payload_bytes_max"
    )
    await world.once(c.CompleteOnce, scopeId=scope, key="k", token=held["token"], result="r" * 38)
    assert world.space.once.result_bytes == 40
    world.replays_exactly()


async def test_retention_gives_back_dead_letters_and_results(world, autojump_clock):
    """When retention forgets a dead letter and tombstones a task, their bytes are given back."""
    scope = (await world.scopes.create(S))["id"]
    mailbox = (await world.mailboxes.create(S, name="jobs"))["id"]
    await world.tasks.submit(S, scope_id=scope, mailbox_id=mailbox, key="t", task_input=None)
    job = await world.receive(mailbox, scope)
    await world.messages.complete(S, job["message"]["id"], token=job["token"], result={"payload": "z" * 48})
    await world.messages.send(S, mailbox, scope_id=scope, payload="d" * 48)
    dead = await world.receive(mailbox, scope)
    await world.messages.nack(S, dead["message"]["id"], token=dead["token"], retry=False)
    assert world.space.tasks.outcome_bytes == 50 and world.space.messages.payload_bytes == 50
    await trio.sleep(SMALL.retention_s + 1)
    assert world.space.tasks.outcome_bytes == 0  # the task is tombstoned
    await world.messages.send(S, mailbox, scope_id=scope, payload="n" * 48)  # the next finish forgets the dead letter
    assert world.space.messages.payload_bytes == 50
    world.replays_exactly()


async def test_a_succeeded_task_keeps_its_input_while_there_is_room_until_it_is_tombstoned(world, autojump_clock):
    """With room for both, a completion keeps the task's input beside its result (counted, and
    in the journal and the image alike); the tombstone lets both go. Cancelled work lets its
    input go at once, as before."""
    scope = (await world.scopes.create(S))["id"]
    mailbox = (await world.mailboxes.create(S, name="jobs"))["id"]
    task = await world.tasks.submit(S, scope_id=scope, mailbox_id=mailbox, key="t", task_input={"ask": "x" * 30})
    job = await world.receive(mailbox, scope)
    await world.messages.complete(S, job["message"]["id"], token=job["token"], result={"payload": "z" * 18})
    kept = world.space.messages.find(world.space.tasks.get(task["id"]).message_id)
    assert kept is not None and kept.state == "COMPLETED" and kept.payload == {"ask": "x" * 30}
    assert world.space.messages.payload_bytes == value_bytes({"ask": "x" * 30}) and world.space.tasks.outcome_bytes == 20
    world.replays_exactly()
    cancelled = await world.tasks.submit(S, scope_id=scope, mailbox_id=mailbox, key="c", task_input="c" * 8)
    await world.tasks.cancel(S, cancelled["id"])
    assert world.space.messages.find(world.space.tasks.get(cancelled["id"]).message_id).payload is None
    await trio.sleep(SMALL.retention_s + 1)
    assert world.space.tasks.outcome_bytes == 0 and kept.payload is None  # tombstoned: input and result let go
    assert world.space.messages.payload_bytes == 0
    world.replays_exactly()


# -- the defaults, filled at the table level (the kernel would take minutes for 100 000 commands) ----

DEFAULTS = Limits()


async def test_every_cap_has_a_finite_default():
    """Nothing is unbounded unless an operator says so: the defaults, as docs/configuration.md lists them."""
    assert DEFAULTS.space_scopes_max == 100_000
    assert DEFAULTS.space_claims_max == 100_000
    assert DEFAULTS.space_tasks_max == 100_000
    assert DEFAULTS.backlog_limit_max == 100_000
    assert DEFAULTS.space_payload_bytes_max == 256 * 1_048_576


async def test_the_default_scope_cap_is_reached():
    tree = ScopeTree(DEFAULTS)
    for n in range(DEFAULTS.space_scopes_max):
        tree.apply_created({"id": f"sc_{n}", "name": None, "parent_id": None, "deadline_ms": None, "child_limit": None, "at_ms": T0})
    with pytest.raises(KernelError) as caught:
        tree.decide_create("sc_new", None, None, None, None, T0)
    assert caught.value.code == BACKLOG_FULL
    assert "space holds 100000 live scopes (limit space_scopes_max; raise it with --space-scopes-max" in caught.value.message


async def test_the_default_claim_cap_is_reached():
    table = ClaimTable()
    for n in range(DEFAULTS.space_claims_max):
        table.apply_acquired({
            "scope_id": "sc_1", "key": f"k{n}", "generation": 1, "token": f"t{n}", "holder": "h", "session": "s",
            "lease_ms": 30_000, "expires_ms": T0 + 30_000, "at_ms": T0,
        })
    with pytest.raises(KernelError) as caught:
        table.decide_acquire("sc_1", "new", "h", "s", 30_000, "t-new", T0, 0, DEFAULTS.space_claims_max)
    assert caught.value.code == BACKLOG_FULL
    assert "space holds 100000 claims (limit space_claims_max" in caught.value.message


async def test_the_default_task_cap_is_reached():
    table = TaskTable(DEFAULTS)
    for n in range(DEFAULTS.space_tasks_max):
        table.apply_created({
            "id": f"tk_{n}", "task_key": f"k{n}", "scope_id": "sc_1", "mailbox_id": "mb_1", "message_id": f"ms_{n}",
            "input_hash": "h", "deadline_ms": None, "subscriber_id": None, "at_ms": T0,
        })
    with pytest.raises(KernelError) as caught:
        table.decide_create("tk_new", "new", "sc_1", "mb_1", "ms_new", None, "h", None, None, T0)
    assert caught.value.code == BACKLOG_FULL
    assert "space holds 100000 tasks not ended (limit space_tasks_max" in caught.value.message


async def test_the_default_backlog_and_payload_caps_are_reached(nursery, autojump_clock):
    """The default backlog, then the default payload bytes (filled with the largest payloads)."""
    kernel = Kernel(state=KernelState(), journal=MemoryJournal(), clock=Clock(wall_anchor_ms=T0), ids=IdSource(seed=1))
    await nursery.start(kernel.run)
    world = World(kernel)
    scope = (await world.scopes.create(S))["id"]
    mailbox_id = (await world.mailboxes.create(S, name="open"))["id"]
    space = world.space
    mailbox = space.mailboxes.get(mailbox_id)
    table: MessageTable = space.messages
    for n in range(DEFAULTS.backlog_limit_max):
        table.apply_enqueued(f"ms_{n}", mailbox_id, scope, None, None, None, None, None, T0)
    assert mailbox.backlog == DEFAULTS.backlog_limit_max
    with pytest.raises(KernelError) as caught:
        await world.messages.send(S, mailbox_id, scope_id=scope)
    assert caught.value.code == BACKLOG_FULL
    assert "mailbox 'open' holds 100000 unsettled messages (limit backlog_limit_max" in caught.value.message

    other = (await world.mailboxes.create(S, name="bytes"))["id"]
    largest = "p" * (DEFAULTS.payload_bytes_max - 2)
    for n in range(DEFAULTS.space_payload_bytes_max // DEFAULTS.payload_bytes_max):
        table.apply_enqueued(f"mp_{n}", other, scope, largest, None, None, None, None, T0)
    assert table.payload_bytes == DEFAULTS.space_payload_bytes_max
    with pytest.raises(KernelError) as caught:
        await world.messages.send(S, other, scope_id=scope, payload=1)
    assert caught.value.code == BACKLOG_FULL
    assert "this needs 1 more (limit space_payload_bytes_max" in caught.value.message


async def test_values_echoed_in_refusals_are_quoted_short(world, autojump_clock):
    """A 512-character workKey, and an unknown timer kind, are quoted up to ~100 characters."""
    scope = (await world.scopes.create(S))["id"]
    mailbox = (await world.mailboxes.create(S, name="jobs"))["id"]
    key = "w" * 512
    await world.messages.send(S, mailbox, scope_id=scope, payload=1, work_key=key)
    with pytest.raises(KernelError) as caught:
        await world.messages.send(S, mailbox, scope_id=scope, payload=2, work_key=key)
    assert caught.value.code == "IDEMPOTENCY_CONFLICT"
    assert key not in caught.value.message and "... (514 characters)" in caught.value.message
    with pytest.raises(KernelError) as caught:
        world.space.fire(("k" * 300, "x"), None, 0)
    assert caught.value.message.startswith("no timer of kind 'kkk") and "(302 characters)" in caught.value.message


async def test_stored_answers_take_the_room_the_values_leave_and_replay_drops_the_same(nursery, autojump_clock):
    """Keyed receives of 300-byte payloads in a space of 3,000 bytes: each answer counts its JSON;
    a new one drops the oldest answers until the values and the answers fit (the newest is always
    kept); a value is never refused for the answers' sake; replay and the image keep the same."""
    limits = SMALL.replace(space_payload_bytes_max=3_000, backlog_limit_max=10)
    kernel = Kernel(
        state=KernelState(limits), journal=MemoryJournal(keep=True), clock=Clock(wall_anchor_ms=T0), ids=IdSource(seed=1)
    )
    await nursery.start(kernel.run)
    world = World(kernel)
    scope = (await world.scopes.create(S))["id"]
    mailbox = (await world.mailboxes.create(S, name="jobs"))["id"]
    answers = world.space.idempotency
    kept = []
    for n in range(10):
        await world.messages.send(S, mailbox, scope_id=scope, payload="p" * 298)  # 300 bytes of JSON
        got = await world.messages.receive(
            S, mailbox, scope_id=scope, holder="w", session="s", lease_s=30, idem=Idem(S, f"r{n}", "fp")
        )
        if n % 2:  # every other delivery stays leased: its payload is a value the space keeps
            await world.messages.complete(S, got["message"]["id"], token=got["token"])
        kept.append(len(answers))
        assert answers.bytes >= value_bytes(got) > 300
        assert world.space.values_bytes() + answers.bytes <= limits.space_payload_bytes_max
    assert max(kept) >= 3 and kept[-1] < max(kept), kept  # the room shrank as the leased payloads grew
    assert world.space.values_bytes() == 1_500
    # The values alone decide a refusal: 1,500 bytes more fit (the answers give their room back).
    await world.refused(world.messages.send(S, mailbox, scope_id=scope, payload="p" * 1_499), "space_payload_bytes_max")
    await world.messages.send(S, mailbox, scope_id=scope, payload="p" * 1_498)
    assert world.space.values_bytes() == 3_000
    # The next stored answer leaves only itself, the newest, past the cap.
    await world.scopes.create(S, idem=Idem(S, "last", "fp"))
    assert len(answers) == 1
    world.replays_exactly()


async def test_every_kept_entity_counts_against_the_space_entity_cap(nursery, autojump_clock):
    """Ended runs, released claim keys, settled messages, ended tasks and pool waiters are kept,
    and each counts against `space_entities_max` (none did: only live ones were capped); past it,
    BACKLOG_FULL naming the setting and nothing written. Stored answers take the room the others
    leave, never causing a refusal; replay and the image rebuild the same."""
    limits = SMALL.replace(space_entities_max=7, space_scopes_max=100, space_claims_max=100, space_tasks_max=100)
    kernel = Kernel(
        state=KernelState(limits), journal=MemoryJournal(keep=True), clock=Clock(wall_anchor_ms=T0), ids=IdSource(seed=1)
    )
    await nursery.start(kernel.run)
    world = World(kernel)
    ended = (await world.scopes.create(S))["id"]
    await world.scopes.cancel(S, ended)  # an ended run: kept for good
    run = (await world.scopes.create(S))["id"]
    held = await world.claims.acquire(S, scope_id=run, key="k", holder="h", session="s", lease_s=30)
    await world.claims.release(S, key="k", token=held["token"])  # the key keeps its generation
    mailbox = (await world.mailboxes.create(S, name="jobs"))["id"]
    await world.messages.send(S, mailbox, scope_id=run, payload=None)
    got = await world.receive(mailbox, run)
    await world.messages.complete(S, got["message"]["id"], token=got["token"])  # settled: kept for retention
    task = await world.tasks.submit(S, scope_id=run, mailbox_id=mailbox, key="t", task_input=None)
    await world.tasks.cancel(S, task["id"])  # a cancelled task (and its message) are kept
    pool = await PoolOps(kernel).create(S, name="p", units=1)
    await PoolOps(kernel).acquire(S, pool["id"], scope_id=run, lease_s=60)
    await PoolOps(kernel).wait(S, pool["id"], scope_id=run)
    space = world.space
    assert space.scopes.live == 1 and space.claims.held_count == 0 and space.tasks.live == 0
    for call in (
        world.scopes.create(S),
        world.claims.acquire(S, scope_id=run, key="other", holder="h", session="s", lease_s=30),
        world.messages.send(S, mailbox, scope_id=run, payload=None),
        world.tasks.submit(S, scope_id=run, mailbox_id=mailbox, key="t2", task_input=None),
        PoolOps(kernel).wait(S, pool["id"], scope_id=run),
    ):
        error = await world.refused(call, "space_entities_max")
        assert error.message.startswith("space keeps 7 runs, claim keys, messages, tasks and waiters")
    assert space.entities() == 7
    # A key already remembered is no new entity: taking it again passes.
    again = await world.claims.acquire(S, scope_id=run, key="k", holder="h", session="s", lease_s=30, idem=Idem(S, "i0", "fp"))
    # Stored answers take the room the others leave: at the cap, only the newest is kept.
    await world.claims.release(S, key="k", token=again["token"], idem=Idem(S, "i1", "fp"))
    assert len(space.idempotency) == 1 and space.idempotency.lookup("i1", "fp", T0 + 1) is not None
    # Ending the run gives back its key: room for one more entity.
    await world.scopes.cancel(S, run, idem=Idem(S, "i2", "fp"))
    assert space.entities() == 6 and len(space.idempotency) == 1
    await world.scopes.create(S, idem=Idem(S, "i3", "fp"))
    assert space.entities() == 7 and len(space.idempotency) == 1
    world.replays_exactly()
