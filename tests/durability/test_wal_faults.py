"""Failure while writing: the failed batch and everything after it is answered UNAVAILABLE, new
changes are refused at once, reads go on and show only recorded changes, and once the disk works
again the WAL is truncated to its last good record and the state rebuilt from disk."""

from __future__ import annotations

import pytest
import trio

from runstate.actors import KernelError
from runstate.snapshots import FaultyDisk, assert_same_state
from runstate.snapshots.store import StoreConfig

from ..ops import MailboxOps, MessageOps
from .helpers import check, reload, running
from ..single import only

SPACE = "s1"


def held_keys(run, scope_id: str) -> list[str]:
    return sorted(view["key"] for view in run.claims.in_scope(SPACE, scope_id))


@pytest.mark.trio
@pytest.mark.parametrize(
    ("fsync", "fault"), [("always", "fsync"), ("always", "write"), ("batch", "write"), ("off", "write")]
)
async def test_a_failed_write_is_refused_and_rolled_back_until_the_disk_recovers(tmp_path, autojump_clock, fault, fsync):
    data = str(tmp_path)
    disk = FaultyDisk()
    config = StoreConfig(fsync=fsync, probe_interval_s=1.0)
    async with running(data, fsync=fsync, config=config, disk=disk) as run:
        scope_id = (await run.scopes.create(SPACE))["id"]
        kept = await run.claims.acquire(SPACE, scope_id=scope_id, key="kept", holder="h", session="x", lease_s=60)
        await trio.sleep(config.batch_interval_ms / 1000 + 0.01)  # past batch's interval: its background fsync has covered `kept`

        setattr(disk, f"fail_{fault}", True)
        errors = []

        async def doomed(key: str) -> None:
            try:
                await run.claims.acquire(SPACE, scope_id=scope_id, key=key, holder="h", session="x", lease_s=60)
            except KernelError as error:
                errors.append(error.code)

        async with trio.open_nursery() as nursery:  # one batch fails; those queued behind it too
            for number in range(5):
                nursery.start_soon(doomed, f"lost{number}")
        assert errors == ["UNAVAILABLE"] * 5
        assert run.store.journal.failure is not None

        # Refused at once while the disk is down; reads work and show only what was recorded.
        with pytest.raises(KernelError) as refused:
            await run.claims.renew(SPACE, key="kept", token=kept["token"])
        assert refused.value.code == "UNAVAILABLE"
        assert held_keys(run, scope_id) == ["kept"]
        await trio.sleep(5)  # probes keep failing
        assert run.store.journal.failure is not None and disk.failures > 1

        setattr(disk, f"fail_{fault}", False)
        await trio.sleep(1.5)  # the next probe repairs
        assert run.store.journal.failure is None and run.store.repairs_done == 1
        again = await run.claims.acquire(SPACE, scope_id=scope_id, key="lost0", holder="h", session="x", lease_s=60)
        # A repair records a boot; after a `batch` or `off` boot the generation floor rises (actors/boot.py).
        assert again["generation"] == (1 if fsync == "always" else 2 << 32)
        await run.claims.renew(SPACE, key="kept", token=kept["token"])
        assert held_keys(run, scope_id) == ["kept", "lost0"]
        live = only(run.kernel).state
    report = check(data)
    assert report.ok and report.repairs == []  # the half-written batch was truncated by the repair
    assert_same_state(live, reload(data).state)


@pytest.mark.trio
async def test_parked_callers_are_answered_unavailable_when_the_state_is_rebuilt(tmp_path, autojump_clock):
    data = str(tmp_path)
    disk = FaultyDisk()
    async with running(data, disk=disk) as run:
        scope_id = (await run.scopes.create(SPACE))["id"]
        mailbox_id = (await MailboxOps(run.kernel).create(SPACE, name="box"))["id"]
        answers = []

        async def long_poll() -> None:  # a receive with nothing to deliver yet parks until poked
            try:
                await MessageOps(run.kernel).receive(
                    SPACE, mailbox_id, scope_id=scope_id, holder="h", session="s", lease_s=30, wait_ms=30_000
                )
            except KernelError as error:
                answers.append(error.code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(long_poll)
            await trio.sleep(1)
            disk.fail_fsync = True
            with pytest.raises(KernelError):
                await run.claims.acquire(SPACE, scope_id=scope_id, key="k", holder="h", session="x", lease_s=60)
        assert answers == ["UNAVAILABLE"]
        assert trio.current_time() < 30  # answered at the rebuild, not at its deadline


@pytest.mark.trio
async def test_a_snapshot_is_not_taken_while_the_journal_has_failed(tmp_path, autojump_clock):
    data = str(tmp_path)
    disk = FaultyDisk()
    async with running(data, disk=disk, config=StoreConfig(probe_interval_s=100)) as run:
        scope_id = (await run.scopes.create(SPACE))["id"]
        disk.fail_write = True
        with pytest.raises(KernelError):
            await run.claims.acquire(SPACE, scope_id=scope_id, key="k", holder="h", session="x", lease_s=60)
        assert await run.store.snapshot() == 0


@pytest.mark.trio
async def test_a_repair_records_the_boot_on_a_rebuild_before_the_partition_gets_it(tmp_path, autojump_clock, monkeypatch):
    """No state the kernel serves reads from is changed off the event loop: the first rebuild
    (handed over at once, so reads show only recorded changes) is never touched again, and the one
    the journal goes on from is handed over with its boot already decided and recorded."""
    from runstate.actors.partition import Partition
    from runstate.snapshots import contents

    restored: list = []
    restore = Partition.restore

    def watched(partition, state) -> None:  # type: ignore[no-untyped-def]
        restored.append((state, contents(state)))
        restore(partition, state)

    monkeypatch.setattr(Partition, "restore", watched)
    data = str(tmp_path)
    disk = FaultyDisk()
    async with running(data, disk=disk, config=StoreConfig(probe_interval_s=1.0)) as run:
        scope_id = (await run.scopes.create(SPACE))["id"]
        await run.claims.acquire(SPACE, scope_id=scope_id, key="kept", holder="h", session="x", lease_s=60)
        disk.fail_fsync = True
        with pytest.raises(KernelError):
            await run.claims.acquire(SPACE, scope_id=scope_id, key="lost", holder="h", session="x", lease_s=60)
        await trio.sleep(3)  # probes fail
        disk.fail_fsync = False
        await trio.sleep(1.5)
        assert run.store.repairs_done == 1
        [(recorded, recorded_then), (booted, booted_then)] = restored
        assert recorded.boot.epoch == 1 and contents(recorded) == recorded_then  # never changed once served
        assert booted_then["boot"]["epoch"] == 2  # decided before the kernel had it
        assert only(run.kernel).state is booted and held_keys(run, scope_id) == ["kept"]
        live = only(run.kernel).state
    assert_same_state(live, reload(data).state)
