"""Images and restarts of the queue and task tables.

An image is the records that rebuild a table exactly (what a snapshot holds); the restart rule
gives delivery leases that may still be held a grace period, and ends those that ended before
the crash, as for claims.
"""

from __future__ import annotations

import pytest

from runstate.actors.messages import _IMAGED, Message
from runstate.actors.space import SpaceState

from .queue_world import SPACE, T0, World, snapshot
from .test_queue_simulation import Simulation


def restored(world: World) -> SpaceState:
    """A fresh space rebuilt from the image of the world's space alone."""
    fresh = SpaceState(SPACE, world.limits)
    for record in world.space.image():
        fresh.apply(record)
    return fresh


def test_an_image_record_carries_every_slot_of_a_message():
    """Every slot, or the optional `graced` and `returned` (carried only when set, as the record
    format allows)."""
    assert set(_IMAGED) | {"graced", "returned"} == set(Message.__slots__)


@pytest.mark.parametrize("seed", range(6))
def test_an_image_rebuilds_the_queues_and_tasks_exactly(seed):
    """After random work (deliveries, retries, dead letters, work keys, cancels, tombstones), the
    image rebuilds the same state, and both copies then make the same decisions."""
    simulation = Simulation(seed)
    for _ in range(300):
        simulation.step()
    world = simulation.world
    copy = restored(world)
    assert snapshot(copy, world.now) == snapshot(world.space, world.now)
    # The same command on both: the same delivery, the same records.
    for mailbox in simulation.mailboxes:
        for scope in simulation.scopes:
            try:
                here = world.space.receive(mailbox, scope, "w", "s", 30_000, "dt_same", world.now)
                there = copy.receive(mailbox, scope, "w", "s", 30_000, "dt_same", world.now)
            except Exception as error:  # a cancelled scope refuses both alike
                with pytest.raises(type(error)):
                    copy.receive(mailbox, scope, "w", "s", 30_000, "dt_same", world.now)
                continue
            assert here.records == there.records and here.reply == there.reply
    assert snapshot(copy, world.now) == snapshot(world.space, world.now)


def test_an_empty_space_has_an_empty_work_image():
    space = SpaceState(SPACE, World().limits)
    assert space.is_empty()
    assert [r["type"] for r in space.image()] == ["messages.image"]


def test_a_restart_ends_leases_that_have_ended_and_gives_the_rest_a_grace_period_once():
    """Restart at T0+8 s with 15 s grace spread over 15 s: the lease that ended at 5 s is
    requeued; the ones ending at 10 s and 20 s (maybe still held) end at 23 s and 30.5 s; one
    ending after the grace anyway is left alone. A second restart at 10 s gives no more grace to
    leases not renewed since; the one its worker renewed meanwhile gets it again at a third."""
    world = World()
    mailbox, run = world.mailbox(), world.scope()
    ended = world.send(mailbox, run, "ended")
    early = world.send(mailbox, run, "early")
    later = world.send(mailbox, run, "later")
    long = world.send(mailbox, run, "long")
    tokens = {}
    for sent, lease_s in ((ended, 5), (early, 10), (later, 20), (long, 600)):
        tokens[sent["id"]] = world.recv(mailbox, run, lease_s=lease_s)["token"]
    world.at(8_000)
    outcome = world.do("restart_deliveries", 15_000, 15_000)
    assert world.message(ended["id"])["state"] == "QUEUED"
    assert world.message(early["id"])["leaseExpiresAt"] == "2027-01-15T08:00:23.000Z"
    assert world.message(later["id"])["leaseExpiresAt"] == "2027-01-15T08:00:30.500Z"
    assert world.message(long["id"])["leaseExpiresAt"] == "2027-01-15T08:10:00.000Z"
    assert {t.tag for t in outcome.timers} == {("lease", early["id"]), ("lease", later["id"])}
    assert all(record.get("graced") for record in outcome.records if record["type"] == "delivery.renewed")

    world.at(10_000)  # restarted again, two seconds later: no lease gets a second grace
    assert world.do("restart_deliveries", 15_000, 15_000).records == []
    world.do("renew_delivery", early["id"], tokens[early["id"]], 10_000)  # its worker is alive: to 20 s
    world.at(12_000)
    again = world.do("restart_deliveries", 15_000, 15_000)
    assert [(r["message_id"], r["expires_ms"]) for r in again.records] == [(early["id"], T0 + 27_000)]
    assert world.message(later["id"])["leaseExpiresAt"] == "2027-01-15T08:00:30.500Z"
    # The grace is a renewal with the same token: the worker that still holds it carries on.
    world.do("complete_delivery", early["id"], tokens[early["id"]], None)
    assert world.recv(mailbox, run)["message"]["id"] == ended["id"]
    world.assert_replay_matches()
