"""The simulation in CI: the same trace for the same seed, and proof that it catches what it is
meant to (bugs injected into the kernel for the length of a test). The batch of seeds with no
violation is `test_sim_batch.py`.
"""

from __future__ import annotations

import os
import subprocess
import sys

from runstate.actors import messages, work
from runstate.actors.claims import ClaimTable
from runstate.actors.messages import LEASED, MessageTable

from .runner import run_seed, run_seeds_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_same_seed_gives_the_same_trace():
    """A seed replays exactly: twice in this process, and in a new process with another hash seed
    (started first, so that it runs beside the two here)."""
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": ROOT}
    code = "from tests.sim.runner import run_seed; print(run_seed(7, virtual_s=120).digest)"
    apart = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = run_seed(7, virtual_s=120)
        second = run_seed(7, virtual_s=120)
        out, err = apart.communicate(timeout=110)
    finally:
        apart.kill()
    assert first.trace == second.trace and len(first.trace) > 100
    assert first.stats == second.stats
    assert apart.returncode == 0, err[-3000:]
    assert out.strip().splitlines()[-1] == first.digest


def test_an_injected_stale_token_bug_is_caught(monkeypatch):
    """A release that leaves its token in the index lets a zombie renew someone else's claim."""

    def apply_ended(self, record):
        claim = self._by_token[record["token"]]  # the bug: the ended token is not dropped
        claim.token = claim.holder = claim.session = None
        return claim

    monkeypatch.setattr(ClaimTable, "apply_ended", apply_ended)
    result = run_seed(2, virtual_s=60)
    assert "stale-token" in {violation.invariant for violation in result.violations}, result.describe()


def test_an_injected_return_that_counts_the_attempt_is_caught(monkeypatch):
    """A return judged as a retry: a delivery no handler saw uses up one of the mailbox's attempts,
    and a message of the mailbox with two is dead-lettered by its returns."""
    # The bug: the kernel no longer tells a return's requeue from a lost lease's.
    monkeypatch.setattr(messages, "RETURNED", "not-told-apart")
    monkeypatch.setattr(work, "RETURNED", "not-told-apart")
    found, result = run_seeds_until("returned-uncounted", tuple(range(1, 9)), virtual_s=120)
    assert "returned-uncounted" in found, result.describe()


def test_an_injected_double_lease_is_caught(monkeypatch):
    """A receive that takes a leased message for a deliverable one hands it to a second worker."""
    original = MessageTable.next_deliverable

    def next_deliverable(self, mailbox_id, scope_id, now_ms):
        queue = self._queues.get((mailbox_id, scope_id))
        for _, gen, message_id in sorted(queue.ready) if queue is not None else ():
            message = self._messages.get(message_id)
            if message is not None and message.gen == gen and message.state == LEASED:
                return message  # the bug: a lease not yet looked at again counts as free
        return original(self, mailbox_id, scope_id, now_ms)

    monkeypatch.setattr(MessageTable, "next_deliverable", next_deliverable)
    result = run_seed(3, virtual_s=60)
    assert "one-holder" in {violation.invariant for violation in result.violations}, result.describe()


def test_an_injected_mixup_of_a_batchs_answers_is_caught(monkeypatch):
    """A batch (the crew's coalesced acquires and releases, renewals sent together) whose answers
    are handed to the wrong operations: an agent believes it holds what another was granted."""
    from runstate.actors.partition import Partition

    original = Partition.submit_all

    async def submit_all(self, commands):
        answers = await original(self, commands)
        return answers[::-1] if len(answers) > 1 else answers  # the bug: answered in the wrong order

    monkeypatch.setattr(Partition, "submit_all", submit_all)
    found, result = run_seeds_until("one-holder", (1, 2, 3), virtual_s=120)
    assert "one-holder" in found, result.describe()


def test_an_injected_completion_in_an_ended_run_is_caught(monkeypatch):
    """A run's end that leaves its deliveries under way running (and takes their completions) lets
    a worker record a result in a run that had ended."""
    from runstate.actors import deliveries

    monkeypatch.setattr(deliveries, "end_in_flight", lambda space, outcome, scope_ids, now_ms: None)
    monkeypatch.setattr(deliveries, "_held", lambda space, message_id, token, now_ms: space.messages.current(message_id, token, now_ms))
    found, result = run_seeds_until("ended-run", tuple(range(1, 13)), virtual_s=240)
    assert "ended-run" in found, result.describe()


# -- capacity --


def test_an_injected_double_return_of_pool_units_is_caught(monkeypatch):
    """A release that gives units back twice (its own, and once more by dropping another grant of
    the pool) lets the pool hand out more units than it has."""
    from runstate.actors.pools import PoolTable

    original = PoolTable.apply_ended

    def apply_ended(self, record):
        grant = original(self, record)
        pool = self._pools[grant.pool_id]
        if record["type"] == "grant.released" and pool.grants:  # the bug: the units come back again
            other = next(iter(pool.grants.values()))
            del self._grants[other.id], pool.grants[other.id]
        return grant

    monkeypatch.setattr(PoolTable, "apply_ended", apply_ended)
    found, result = run_seeds_until("pool-units", (2, 3, 4), virtual_s=90)
    assert "pool-units" in found, result.describe()


# -- partitions: nothing shown before it is durable --


def test_an_injected_dirty_read_is_caught(monkeypatch):
    """A kernel that answers a read, a refusal or a woken call before the records it shows are
    durable lets a reader see a task end that a power cut then takes back."""
    from runstate.actors.partition import Partition

    def answer_at_once(self, call, result):
        self._wake(call, result)  # the bug: no wait for the journal's durable point

    async def settled_at_once(self):
        return

    monkeypatch.setattr(Partition, "_answer", answer_at_once)
    monkeypatch.setattr(Partition, "settled", settled_at_once)
    found, result = run_seeds_until("dirty-read", (3, 1, 4, 6), virtual_s=60, crash_mean_s=4)  # (the one that catches it now first)
    assert "dirty-read" in found, result.describe()


def test_the_same_crash_heavy_seeds_break_no_invariant_without_the_bug():
    """The seeds that catch the injected dirty read, as they run on the real kernel: clean."""
    for seed in (1, 3):
        result = run_seed(seed, virtual_s=60, crash_mean_s=4)
        assert not result.violations, result.describe()


def test_an_injected_forced_release_that_keeps_the_token_is_caught(monkeypatch):
    """A forced release that frees the key but leaves the holder's token current lets it renew."""
    original = ClaimTable.apply_ended

    def apply_ended(self, record):
        if record["type"] != "claim.force_released":
            return original(self, record)
        claim = self._by_token[record["token"]]  # the bug: the token stays current, the holder keeps renewing
        claim.expired = False
        return claim

    monkeypatch.setattr(ClaimTable, "apply_ended", apply_ended)
    found, result = run_seeds_until("stale-token", (1, 2, 3, 4), virtual_s=90)
    assert "stale-token" in found, result.describe()


def test_an_injected_delete_of_dead_letters_that_forgets_nothing_is_caught(monkeypatch):
    """A delete that answers but keeps the dead letters: the operator's next scan lists them."""
    monkeypatch.setattr(MessageTable, "apply_dead_deleted", lambda self, record: None)
    # Seed 20 is the one that catches it now (20, 22, 27 and 28 of the first 29; a change to the
    # kernel's scheduling moves the catch among seeds): first, with the other 28 still tried after
    # it rather than nineteen misses first.
    found, result = run_seeds_until("dead-letters", (20, *range(1, 20), *range(21, 30)), virtual_s=120)
    assert "dead-letters" in found or "durability" in found, result.describe()


def test_an_injected_removal_of_a_run_before_its_retention_is_caught(monkeypatch):
    """A retention that removes a run as soon as it has ended: a read of the run answers 404, or a
    recovery lacks it, before its retention has passed."""
    from runstate.actors import runs

    monkeypatch.setattr(runs, "_due_ms", lambda limits, ended_ms: ended_ms)
    found, result = run_seeds_until("retention", (2, 5, 8), virtual_s=120)
    assert "retention" in found, result.describe()


def test_an_injected_removal_that_leaves_a_runs_tasks_behind_is_caught(monkeypatch):
    """A removal that forgets the tasks of the runs it removes: the state keeps task records that
    name a removed run, and its entity count does not fall."""
    from runstate.actors.tasks import TaskTable

    monkeypatch.setattr(TaskTable, "drop_scopes", lambda self, scope_ids: None)
    found, result = run_seeds_until("retention", (2, 5, 8), virtual_s=120)
    assert "retention" in found, result.describe()


def test_an_injected_release_event_without_its_observation_is_caught(monkeypatch):
    """A release whose event forgets the observation the holder gave: recovery's check of the
    event log finds it."""
    from runstate.actors import claiming

    monkeypatch.setattr(claiming, "observed", lambda observation: (None, None))
    found, result = run_seeds_until("durability", (1, 2, 3, 4), virtual_s=60)
    assert "durability" in found and "observation" in result.describe(), result.describe()


def test_an_injected_kept_input_that_is_not_the_tasks_is_caught(monkeypatch):
    """A completion that keeps something else than the task's input beside its result: the check
    of the recovered state finds it."""
    original = MessageTable.apply_finished

    def apply_finished(self, message_id, state, reason, at_ms, keep_payload=False):
        message = original(self, message_id, state, reason, at_ms, keep_payload)
        if keep_payload:
            message.payload = ["not the input"]  # the bug
        return message

    monkeypatch.setattr(MessageTable, "apply_finished", apply_finished)
    found, result = run_seeds_until("durability", (1, 2, 3, 4), virtual_s=60)
    assert "durability" in found and "kept the input" in result.describe(), result.describe()
