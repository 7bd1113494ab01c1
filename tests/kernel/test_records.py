"""Every record the state machines write is one the record format knows, spelled as it spells it:
the queue simulation's records and images, checked one by one. (Claims, scopes, keys and stored
answers are checked wherever a WAL is written: the journal checks each record it is given.)"""

from __future__ import annotations

from runstate.actors.primitives import named
from runstate.actors.records import FIELDS, check_record

CAPACITY_RECORDS = {kind for primitive in named("pools", "quotas", "budgets", "work limits", "admission") for kind in primitive.records}
COORDINATION_RECORDS = {kind for primitive in named("barriers", "timers", "groups") for kind in primitive.records}

from .test_queue_simulation import STEPS, Simulation


def test_the_queue_simulation_writes_only_registered_records():
    seen: set[str] = set()
    for seed in range(4):
        simulation = Simulation(seed)
        for _ in range(STEPS):
            simulation.step()
        world = simulation.world
        for record in [*world.records, *world.space.image()]:
            check_record(record)
            seen.add(record["type"])
    # Every type of the queues, tasks, mailboxes and scopes came up: the check saw them all.
    # (Once slots and run names are checked by tests/server/test_named_and_once.py.)
    elsewhere = {kind for kind in FIELDS if kind.startswith(("claim.", "key.", "kernel.", "idem.", "once.", "run."))}
    # (Capacity and coordination records are checked wherever their tests write a WAL.)
    elsewhere |= set(CAPACITY_RECORDS) | set(COORDINATION_RECORDS)
    # (A mailbox's declared settings: tests/server/test_named_and_once.py checks its records.)
    elsewhere.add("mailbox.declared")
    assert seen == set(FIELDS) - elsewhere
