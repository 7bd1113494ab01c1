"""The store at work: group commit under each fsync policy, segment rollover, snapshots and what
they delete, slow-fsync logging, and `check` on a healthy directory."""

from __future__ import annotations

import errno
import logging
import os
import threading

import pytest
import trio
import trio.testing

from runstate.actors import KernelError
from runstate.actors.records import VERSION
from runstate.snapshots import Disk, assert_same_state
from runstate.snapshots.recovery import snapshot_dir, wal_dir
from runstate.snapshots.snapshot import list_snapshots
from runstate.snapshots.store import StoreConfig

from .helpers import check, reload, running, segments
from ..single import only

SPACE = "s1"


async def acquire_many(run, scope_id: str, count: int, prefix: str = "k") -> list[dict]:
    grants: list[dict] = []

    async def one(number: int) -> None:
        grants.append(
            await run.claims.acquire(SPACE, scope_id=scope_id, key=f"{prefix}{number}", holder="h", session="x", lease_s=600)
        )

    async with trio.open_nursery() as nursery:
        for number in range(count):
            nursery.start_soon(one, number)
    return grants


@pytest.mark.trio
@pytest.mark.parametrize("fsync", ["always", "batch", "off"])
async def test_concurrent_changes_are_group_committed_and_all_recovered(tmp_path, autojump_clock, fsync):
    data = str(tmp_path)
    disk = Disk()
    async with running(data, fsync=fsync, disk=disk, config=StoreConfig(fsync=fsync, batch_interval_ms=5)) as run:
        scope_id = (await run.scopes.create(SPACE))["id"]
        fsyncs_before, batches_before = disk.fsyncs, run.store.journal.batches
        grants = await acquire_many(run, scope_id, 200)
        batches = run.store.journal.batches - batches_before
        assert len(grants) == 200 and batches < 20  # many changes per write
        if fsync == "off":
            assert disk.fsyncs == fsyncs_before
        elif fsync == "always":
            assert 1 <= disk.fsyncs - fsyncs_before <= batches
        else:  # batch: fsynced in the background within an interval
            assert disk.fsyncs - fsyncs_before <= batches
            await trio.sleep(0.006)
            assert run.store.journal.synced_lsn == run.store.journal.durable_lsn
        live = only(run.kernel).state
    assert_same_state(live, reload(data).state)


@pytest.mark.trio
async def test_batch_policy_answers_at_once_and_fsyncs_in_the_background_once_per_interval(tmp_path, autojump_clock):
    """Under batch a lone change never waits for the interval; the fsyncs follow, one per interval at most."""
    data = str(tmp_path)
    disk = Disk()
    config = StoreConfig(fsync="batch", batch_interval_ms=5)
    async with running(data, fsync="batch", disk=disk, config=config) as run:
        journal = run.store.journal
        scope_id = (await run.scopes.create(SPACE))["id"]
        await trio.sleep(0.01)
        started, fsyncs = trio.current_time(), disk.fsyncs
        for number in range(40):  # one change at a time: none waits for an fsync
            await run.claims.acquire(SPACE, scope_id=scope_id, key=f"k{number}", holder="h", session="x", lease_s=600)
            await trio.sleep(0.001)
        took = trio.current_time() - started
        assert took == pytest.approx(40 * 0.001)
        assert disk.fsyncs - fsyncs <= took / 0.005 + 1
        assert journal.synced_lsn < journal.durable_lsn or disk.fsyncs > fsyncs
        await trio.sleep(0.006)
        assert journal.synced_lsn == journal.durable_lsn and journal.writer.good == journal.writer.written


@pytest.mark.trio
async def test_segments_roll_over_at_their_size_limit(tmp_path, autojump_clock):
    data = str(tmp_path)
    async with running(data, config=StoreConfig(segment_bytes_max=4096)) as run:
        scope_id = (await run.scopes.create(SPACE))["id"]
        for round_number in range(10):
            await acquire_many(run, scope_id, 20, prefix=f"r{round_number}-")
        live = only(run.kernel).state
    assert len(segments(data)) > 5
    assert_same_state(live, reload(data).state)


@pytest.mark.trio
async def test_snapshots_are_taken_every_n_records_and_delete_what_they_cover(tmp_path, autojump_clock):
    data = str(tmp_path)
    config = StoreConfig(segment_bytes_max=2048, snapshot_every_records=100, snapshot_poll_s=0.5, snapshots_kept=2)
    async with running(data, config=config) as run:
        scope_id = (await run.scopes.create(SPACE))["id"]
        for round_number in range(8):
            await acquire_many(run, scope_id, 50, prefix=f"r{round_number}-")
            with trio.fail_after(30):
                while run.store.snapshot_lsn < run.store.journal.durable_lsn - 100:
                    await trio.sleep(0.5)
        live = only(run.kernel).state
        taken = run.store.snapshots_taken
    assert taken >= 3
    snaps = list_snapshots(snapshot_dir(data))
    assert len(snaps) == 2
    oldest_kept = snaps[0][0]
    first_segment_lsn = int(os.path.basename(segments(data)[0])[:20])
    assert first_segment_lsn <= oldest_kept + 1  # nothing needed after the oldest snapshot is gone
    loaded = reload(data)
    assert loaded.snapshot_lsn == snaps[-1][0]
    assert_same_state(live, loaded.state)


@pytest.mark.trio
async def test_snapshots_are_taken_every_t_seconds_when_there_is_something_new(tmp_path, autojump_clock):
    data = str(tmp_path)
    config = StoreConfig(snapshot_every_s=60, snapshot_poll_s=1)
    async with running(data, config=config) as run:
        scope_id = (await run.scopes.create(SPACE))["id"]
        await trio.sleep(61)
        assert run.store.snapshots_taken == 1
        await trio.sleep(120)
        assert run.store.snapshots_taken == 1  # nothing new since
        await acquire_many(run, scope_id, 3)
        await trio.sleep(61)
        assert run.store.snapshots_taken == 2


@pytest.mark.trio
async def test_slow_fsyncs_are_logged(tmp_path, autojump_clock, caplog):
    caplog.set_level(logging.WARNING, "runstate.snapshots")
    async with running(str(tmp_path), disk=Disk(fsync_slow_ms=0)) as run:
        await run.scopes.create(SPACE)
    assert "fsync of" in caplog.text and "slow disk" in caplog.text


@pytest.mark.trio
async def test_check_reports_what_a_directory_holds(tmp_path, autojump_clock):
    data = str(tmp_path)
    async with running(data) as run:
        scope_id = (await run.scopes.create(SPACE))["id"]
        grants = await acquire_many(run, scope_id, 5)
        await run.claims.release(SPACE, key=grants[0]["key"], token=grants[0]["token"])
        await run.store.snapshot()
        await acquire_many(run, scope_id, 2, prefix="late")
        last = run.store.journal.durable_lsn
    report = check(data)
    assert report.ok and report.problem is None
    assert report.snapshots == 1 and report.snapshot_lsn > 0 and report.last_lsn == last
    assert report.counts["scopes"] == 1 and report.counts["claims"] == 7 and report.counts["claims_held"] == 6
    text = report.format()
    assert "OK" in text and "claims held: 6" in text and f"last LSN: {last}" in text
    assert not check(str(tmp_path / "missing")).ok


def test_a_record_too_large_or_not_json_fails_the_journal_rather_than_the_kernel(tmp_path):
    """A record the journal cannot encode is a bug upstream: the change is answered UNAVAILABLE."""

    async def main() -> None:
        async with running(str(tmp_path)) as run:
            scope_id = (await run.scopes.create(SPACE))["id"]
            with pytest.raises(KernelError) as caught:
                await run.claims.release(SPACE, key="x", token="nope")
            assert caught.value.code == "STALE_CLAIM"
            grant = (await acquire_many(run, scope_id, 1))[0]
            with pytest.raises(KernelError) as caught:
                await run.claims.release(SPACE, key=grant["key"], token=grant["token"], observation={1, 2})
            assert caught.value.code == "UNAVAILABLE"
            await trio.sleep(2)  # the repair rebuilds the state from disk: the claim is still held
            assert run.store.journal.failure is None
            assert run.claims.in_scope(SPACE, scope_id)[0]["token"] == grant["token"]

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@pytest.mark.trio
async def test_with_worker_threads_in_real_time(tmp_path):
    """The production path: IO and snapshots in worker threads, the real clock."""
    data = str(tmp_path)
    async with running(data, threads=True, config=StoreConfig(segment_bytes_max=8192)) as run:
        scope_id = (await run.scopes.create(SPACE))["id"]
        await acquire_many(run, scope_id, 100)
        assert await run.store.snapshot() > 0
        await acquire_many(run, scope_id, 100, prefix="after")
        live = only(run.kernel).state
    assert_same_state(live, reload(data).state)


@pytest.mark.trio
@pytest.mark.parametrize("fsync, threaded", [("off", False), ("batch", False), ("always", True)])
async def test_on_the_production_path_small_batches_are_written_by_the_journal_task(tmp_path, monkeypatch, fsync, threaded):
    """Opened without a `run_blocking` of its own, a store's journal writes a small batch itself
    under `batch` and `off` (a worker thread's round trip costs more than the write); under
    `always` every batch goes to a thread, since it waits for an fsync."""
    from runstate.snapshots.wal import SegmentWriter

    loop_thread = threading.get_ident()
    threaded_writes = []
    serving = False  # the boot's records are written by the start, in a thread, whatever the policy
    write = SegmentWriter.write

    def noting(self, first_lsn, bodies, sync):
        if serving and threading.get_ident() != loop_thread:
            threaded_writes.append(first_lsn)
        write(self, first_lsn, bodies, sync)

    monkeypatch.setattr(SegmentWriter, "write", noting)
    async with running(str(tmp_path), fsync=fsync, threads=True) as run:
        serving = True
        scope_id = (await run.scopes.create(SPACE))["id"]
        await acquire_many(run, scope_id, 20)
        assert run.store.journal.batches >= 2
    assert bool(threaded_writes) is threaded, threaded_writes


class HeldDisk(Disk):
    """A disk whose fsyncs, once `hold` is set, wait in their thread until the test lets them go
    (or fail with `error`)."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.error: OSError | None = None
        self.syncing = threading.Event()
        self.go = threading.Event()

    def fsync(self, fd: int, what: str = "") -> None:
        if self.hold:
            self.syncing.set()
            self.go.wait()
        if self.error is not None:
            raise self.error
        super().fsync(fd, what)


def held_journal(tmp_path):
    """A journal on the production path (its own worker thread), under `always`, on a `HeldDisk`."""
    from runstate.snapshots.wal import SegmentWriter, WalJournal

    disk = HeldDisk()
    writer = SegmentWriter(str(tmp_path), disk, 1 << 20, version=VERSION)
    writer.start(1, 0)
    disk.hold = True
    return disk, WalJournal(writer, fsync="always")


@pytest.mark.trio
async def test_a_change_is_answered_only_once_its_fsync_in_the_worker_thread_returned(tmp_path):
    disk, journal = held_journal(tmp_path)
    answers: list[BaseException | None] = []
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(journal.run)
            journal.append([{"type": "a"}], answers.append)
            journal.append([{"type": "b"}], answers.append)
            await trio.to_thread.run_sync(disk.syncing.wait)  # the batch's fsync has begun
            await trio.testing.wait_all_tasks_blocked()
            assert answers == [] and journal.durable_lsn == 0
            disk.go.set()
            while len(answers) < 2:
                await trio.sleep(0)
            assert answers == [None, None] and journal.durable_lsn == journal.synced_lsn == 2
            assert journal.batches == 1  # both in one group commit
            nursery.cancel_scope.cancel()
    journal.writer.close()


@pytest.mark.trio
async def test_a_stopped_journal_waits_for_the_write_in_its_worker_thread_and_answers_it(tmp_path):
    """The production path's worker thread, like `trio.to_thread.run_sync`'s, cannot be stopped:
    the change being written is answered as written, the one queued behind it as not."""
    disk, journal = held_journal(tmp_path)
    answers: dict[str, BaseException | None] = {}
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(journal.run)
            journal.append([{"type": "a"}], lambda error: answers.setdefault("written", error))
            await trio.to_thread.run_sync(disk.syncing.wait)
            journal.append([{"type": "b"}], lambda error: answers.setdefault("queued", error))
            nursery.cancel_scope.cancel()
            assert answers == {}  # the writer waits for its thread
            disk.go.set()
    journal.writer.close()
    assert answers["written"] is None and journal.durable_lsn == 1
    assert isinstance(answers["queued"], OSError) and "stopped" in str(answers["queued"])


@pytest.mark.trio
async def test_a_failed_fsync_in_the_worker_thread_answers_the_batch_with_the_error_and_fails_the_journal(tmp_path):
    disk, journal = held_journal(tmp_path)
    disk.error = OSError(errno.EIO, "Input/output error")
    answers: list[BaseException | None] = []
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(journal.run)
            journal.append([{"type": "a"}], answers.append)
            disk.go.set()
            await journal.failed.wait()
            assert answers == [disk.error] and journal.failure is disk.error and journal.durable_lsn == 0
            journal.append([{"type": "b"}], answers.append)  # refused at once
            assert answers == [disk.error, disk.error]
            nursery.cancel_scope.cancel()
    journal.writer.close()


@pytest.mark.trio
async def test_a_durable_callback_that_raises_is_raised_by_the_journal_task(tmp_path):
    """A bug in a caller's callback stops the writer task with that error, not trio's own loop."""
    disk, journal = held_journal(tmp_path)
    disk.hold = False

    def broken(error: BaseException | None) -> None:
        raise RuntimeError("a broken callback")

    with pytest.raises(BaseExceptionGroup) as raised:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(journal.run)
                journal.append([{"type": "a"}], broken)
                await trio.sleep_forever()
    journal.writer.close()
    assert raised.value.subgroup(RuntimeError) is not None, raised.value


def test_dismantle_empties_a_state_and_leaves_shared_settings_alone():
    from runstate.actors import KernelState, Limits
    from runstate.actors import commands as c
    from runstate.actors import scopes
    from runstate.actors.idempotency import IdempotencyTable
    from runstate.snapshots.compaction import dismantle

    limits = Limits(restart_grace_s=20)
    state = KernelState(limits)
    space = state.space(SPACE)
    scopes.create(space, c.CreateScope(space=SPACE, scope_id="sc"), 0)
    scopes.create(space, c.CreateScope(space=SPACE, scope_id="child", parent_id="sc"), 0)
    for number in range(3000):
        command = c.AcquireClaim(space=SPACE, scope_id="sc", key=f"k{number}", holder="h", session="x", lease_s=5, token=f"t{number}")
        space.claiming.acquire(command, 0)
    state.apply(IdempotencyTable.record(SPACE, "i", "fp", {"nested": [1, {"a": 2}]}, 0))
    dismantle(state)
    assert state.counts() == {
        "spaces": 0, "scopes": 0, "claims": 0, "claims_held": 0, "mailboxes": 0, "messages": 0, "tasks": 0,
        "keys": 0, "idempotency_keys": 0,
    }
    assert limits.restart_grace_s == 20 and state.limits is limits


@pytest.mark.trio
@pytest.mark.parametrize("fsync", ["always", "batch", "off"])
async def test_stopping_the_journal_answers_the_changes_it_had_not_written(tmp_path, autojump_clock, fsync):
    """At shutdown a change queued behind a write in progress is answered with an error, not left waiting."""
    from runstate.snapshots.wal import SegmentWriter, WalJournal

    writer = SegmentWriter(str(tmp_path), Disk(), 1 << 20, version=VERSION)
    writer.start(1, 0)

    async def slow_disk(function, *args):  # a write that takes a second, in a thread (not cancellable once begun)
        await trio.lowlevel.checkpoint_if_cancelled()
        with trio.CancelScope(shield=True):
            await trio.sleep(1)
        return function(*args)

    journal = WalJournal(writer, fsync=fsync, run_blocking=slow_disk)
    answers: dict[str, object] = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        journal.append([{"type": "a"}], lambda error: answers.setdefault("written", error))
        await trio.sleep(0.1)  # its write has begun
        journal.append([{"type": "b"}], lambda error: answers.setdefault("queued", error))
        nursery.cancel_scope.cancel()
    writer.close()
    assert answers["written"] is None
    assert isinstance(answers["queued"], OSError) and "stopped" in str(answers["queued"])
