"""Mailboxes, messages and tasks through the journal: replay, images and restarts.

The journal alone, an image alone, and an image plus the rest of the journal all rebuild the live
state exactly; a kernel on a real store comes back from a crash with its queues and outcomes, and
a delivery leased at the crash keeps its token through a grace period.
"""

from __future__ import annotations

import orjson
import pytest
import trio

from runstate.actors import KernelError
from ..ops import MailboxOps, MessageOps, TaskOps
from runstate.actors.space import SpaceState
from runstate.snapshots import assert_same_state

from ..kernel.test_queue_simulation import Simulation
from .helpers import T0_MS, reload, running
from ..single import only

SPACE = "s1"


def through_disk(records: list[dict]) -> list[dict]:
    return [orjson.loads(orjson.dumps(record)) for record in records]


def replayed(records: list[dict], limits) -> SpaceState:
    space = SpaceState("default", limits)
    for record in through_disk(records):
        space.apply(record)
    return space


@pytest.mark.parametrize("seed", range(8))
def test_journal_images_and_image_plus_journal_rebuild_the_queues_exactly(seed):
    simulation = Simulation(seed)
    world = simulation.world
    images = []
    for step in range(300):
        simulation.step()
        if step % 60 == 30:
            images.append((len(world.records), list(world.space.image())))
    live, limits = world.space, world.limits
    assert_same_state(live, replayed(world.records, limits))
    assert_same_state(live, replayed(list(live.image()), limits))
    for position, image in images:
        assert_same_state(live, replayed(image + world.records[position:], limits))


class Queues:
    def __init__(self, run) -> None:
        self.run = run
        self.mailboxes = MailboxOps(run.kernel)
        self.messages = MessageOps(run.kernel)
        self.tasks = TaskOps(run.kernel)

    async def recv(self, mailbox_id: str, scope_id: str, lease_s: int = 30, wait_ms: int | None = None):
        return await self.messages.receive(
            SPACE, mailbox_id, scope_id=scope_id, holder="w", session="s", lease_s=lease_s, wait_ms=wait_ms
        )


@pytest.mark.trio
async def test_queues_and_outcomes_survive_a_crash_and_a_held_delivery_gets_a_grace_period(tmp_path, autojump_clock):
    """Before the crash: one task completed, one leased (30 s, crash 10 s in), one retried (its 1 s
    backoff pending), a dead letter, a work-keyed send. After a restart 10 s later, with 10 s of the
    lease left: the outcome is there, the leased delivery still belongs to its worker (a grace), the
    retried one comes back, the work key still replays, and the state on disk equals the live one."""
    data = str(tmp_path)
    async with running(data) as run:
        q = Queues(run)
        scope = (await run.scopes.create(SPACE))["id"]
        mailbox = (await q.mailboxes.create(SPACE, name="research"))["id"]
        tickets = {}
        for key in ("done", "held", "retried", "dead"):
            tickets[key] = await q.tasks.submit(SPACE, scope_id=scope, mailbox_id=mailbox, key=key, task_input={"k": key})
        deliveries = {key: await q.recv(mailbox, scope) for key in ("done", "held", "retried", "dead")}
        await q.messages.complete(SPACE, deliveries["done"]["message"]["id"], token=deliveries["done"]["token"], result={"payload": "report"})
        await q.messages.nack(SPACE, deliveries["dead"]["message"]["id"], token=deliveries["dead"]["token"], retry=False)
        sent = await q.messages.send(SPACE, mailbox, scope_id=scope, payload={"n": 1}, work_key="crawl:acme")
        await trio.sleep(10)
        await q.messages.nack(SPACE, deliveries["retried"]["message"]["id"], token=deliveries["retried"]["token"], retry=True)
        # crash
    restart_ms = T0_MS + 20_000
    async with running(data, wall_ms=restart_ms) as run:
        q = Queues(run)
        assert run.store.report.graced == 1  # the held delivery
        assert run.store.report.counts["tasks"] == 4 and run.store.report.counts["mailboxes"] == 1
        done = q.tasks.view(SPACE, tickets["done"]["taskId"])
        assert done["state"] == "SUCCEEDED" and done["outcome"] == "report"
        assert q.tasks.view(SPACE, tickets["dead"]["taskId"])["state"] == "FAILED"
        assert q.mailboxes.dead_letters(SPACE, mailbox, 10)["total"] == 1
        held = only(run.kernel).state.space(SPACE).messages.get(deliveries["held"]["message"]["id"])
        assert held.token == deliveries["held"]["token"] and held.expires_ms >= restart_ms + 15_000
        await q.messages.renew(SPACE, held.id, token=deliveries["held"]["token"])
        again = await q.messages.send(SPACE, mailbox, scope_id=scope, payload={"n": 1}, work_key="crawl:acme")
        assert again["replay"] is True and again["id"] == sent["id"]
        # The retried task's backoff ended while the server was down: it is delivered now.
        back = await q.recv(mailbox, scope, wait_ms=1_000)
        assert back["message"]["taskId"] == tickets["retried"]["taskId"] and back["message"]["attempt"] == 2
        # Then the work-keyed message.
        assert (await q.recv(mailbox, scope))["message"]["id"] == sent["id"]
        await q.messages.complete(SPACE, held.id, token=deliveries["held"]["token"], result={"payload": "late but valid"})
        assert q.tasks.view(SPACE, tickets["held"]["taskId"])["outcome"] == "late but valid"
        live = only(run.kernel).state
    assert_same_state(live, reload(data).state)


@pytest.mark.trio
async def test_a_delivery_nobody_renews_after_a_restart_is_requeued_when_its_grace_ends(tmp_path, autojump_clock):
    data = str(tmp_path)
    async with running(data) as run:
        q = Queues(run)
        scope = (await run.scopes.create(SPACE))["id"]
        mailbox = (await q.mailboxes.create(SPACE, name="research"))["id"]
        ticket = await q.tasks.submit(SPACE, scope_id=scope, mailbox_id=mailbox, key="k")
        first = await q.recv(mailbox, scope, lease_s=30)
    async with running(data, wall_ms=T0_MS + 3_600_000) as run:
        q = Queues(run)
        second = await q.recv(mailbox, scope, wait_ms=30_000)  # parked until the grace ends
        assert second["message"]["attempt"] == 2
        assert q.tasks.view(SPACE, ticket["taskId"])["attempt"] == 2
        with pytest.raises(KernelError) as stale:
            await q.messages.complete(SPACE, first["message"]["id"], token=first["token"])
        assert stale.value.code == "STALE_CLAIM"


@pytest.mark.trio
async def test_a_lease_that_ended_before_the_crash_is_requeued_at_the_restart(tmp_path, autojump_clock):
    data = str(tmp_path)
    async with running(data) as run:
        q = Queues(run)
        scope = (await run.scopes.create(SPACE))["id"]
        mailbox = (await q.mailboxes.create(SPACE, name="research"))["id"]
        await q.tasks.submit(SPACE, scope_id=scope, mailbox_id=mailbox, key="k")
        await q.recv(mailbox, scope, lease_s=5)
        await trio.sleep(4.9)
        only(run.kernel).supervisor.reset()  # the expiry must not be recorded before the crash
        await trio.sleep(1)
        await run.scopes.create(SPACE)  # the journal's newest time is now past the lease's end
    async with running(data, wall_ms=T0_MS + 600_000) as run:
        assert run.store.report.expired == 1 and run.store.report.graced == 0
        delivery = await Queues(run).recv(mailbox, scope)
        assert delivery["message"]["attempt"] == 2
