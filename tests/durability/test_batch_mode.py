"""`--fsync batch`: answered once written, fsynced in the background, and still never a generation twice.

The guarantee (docs/durability.md): a killed process loses nothing answered; a power cut loses at
most what was answered in the last `batch_interval_ms` (plus one fsync), and the generations handed
out in that window are never handed out again, since the next boot raises the generation floor.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from runstate.actors import KernelError
from runstate.actors.boot import EPOCH_SHIFT
from runstate.snapshots import FaultyDisk
from runstate.snapshots.store import StoreConfig

from .helpers import T0_MS, frames, running, segments
from ..single import only

pytestmark = pytest.mark.trio

SPACE = "s1"


async def _acquire(run, scope_id: str, key: str = "k", holder: str = "h1") -> dict:
    return await run.claims.acquire(SPACE, scope_id=scope_id, key=key, holder=holder, session="x", lease_s=5)


async def test_an_answer_waits_for_no_fsync_and_the_fsync_follows_within_the_interval(tmp_path, autojump_clock):
    """A lone acquire is answered without virtual time passing; the background fsync covers it one interval later."""
    config = StoreConfig(fsync="batch", batch_interval_ms=50)
    async with running(str(tmp_path), fsync="batch", config=config) as run:
        journal = run.store.journal
        scope_id = (await run.scopes.create(SPACE))["id"]
        await trio.sleep(0.1)
        before = trio.current_time()
        await _acquire(run, scope_id)
        await trio.testing.wait_all_tasks_blocked()
        assert journal.synced_lsn == journal.durable_lsn  # the interval had passed: fsynced at once
        await _acquire(run, scope_id, key="next")
        await trio.testing.wait_all_tasks_blocked()
        assert trio.current_time() == before  # neither answer waited for an interval
        assert journal.synced_lsn < journal.durable_lsn  # the next fsync waits for its slot
        await trio.sleep(0.049)
        assert journal.synced_lsn < journal.durable_lsn
        await trio.sleep(0.002)
        assert journal.synced_lsn == journal.durable_lsn


async def test_a_power_cut_in_the_window_cannot_bring_a_generation_back(tmp_path, autojump_clock):
    """The acquire's record is lost with the unsynced window; the next boot's floor is above what it handed out."""
    data = str(tmp_path)
    config = StoreConfig(fsync="batch", batch_interval_ms=1000)
    async with running(data, fsync="batch", config=config) as run:
        await trio.sleep(2)
        scope_id = (await run.scopes.create(SPACE))["id"]
        await trio.testing.wait_all_tasks_blocked()  # the scope is fsynced at once: an interval had passed
        first = await _acquire(run, scope_id)  # its fsync waits for the next slot, a second away
        assert first["generation"] == 1
        assert run.store.journal.synced_lsn < run.store.journal.durable_lsn
        good = run.store.journal.writer.good
    # The power cut: what was written after the last background fsync never reached the disk.
    path = segments(data)[-1]
    assert path == good.path and any(b"claim.acquired" in bytes(f.body) for f in frames(path))
    with open(path, "r+b") as file:
        file.truncate(good.offset)
    async with running(data, fsync="batch", config=config, wall_ms=T0_MS + 60_000) as run:
        assert only(run.kernel).state.space(SPACE).claims.get(scope_id, "k") is None  # lost with the window
        second = await _acquire(run, scope_id, holder="h2")
        assert second["generation"] == 2 << EPOCH_SHIFT > first["generation"]


async def test_a_failed_background_fsync_refuses_changes_and_rolls_back_to_the_last_good_one(tmp_path, autojump_clock):
    """An fsync failure acts like a power cut of the window: refused at once, then rebuilt from the last good fsync."""
    disk = FaultyDisk()
    config = StoreConfig(fsync="batch", batch_interval_ms=50, probe_interval_s=1.0)
    async with running(str(tmp_path), fsync="batch", config=config, disk=disk) as run:
        journal = run.store.journal
        scope_id = (await run.scopes.create(SPACE))["id"]
        kept = await _acquire(run, scope_id, key="kept")
        await trio.sleep(0.1)  # fsynced
        disk.fail_fsync = True
        lost = await _acquire(run, scope_id, key="lost")  # answered: written to the OS
        await trio.sleep(0.1)  # the background fsync fails
        assert journal.failure is not None
        with pytest.raises(KernelError) as refused:
            await _acquire(run, scope_id, key="refused")
        assert refused.value.code == "UNAVAILABLE"
        disk.fail_fsync = False
        await trio.sleep(1.5)  # the next probe repairs
        assert journal.failure is None and run.store.repairs_done == 1
        claims = only(run.kernel).state.space(SPACE).claims
        assert claims.get(scope_id, "kept") is not None and claims.get(scope_id, "lost") is None
        again = await _acquire(run, scope_id, key="lost", holder="h2")
        assert again["generation"] > lost["generation"]  # the floor rose with the repair's boot
        assert kept["generation"] == 1
