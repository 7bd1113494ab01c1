"""The store: what the server opens on a data directory, and the tasks that keep it.

    store = await open_store(data_dir, model=model, clock=clock, fsync="always")
    kernel = Kernel(state=store.state, journal=store.journal, clock=clock)
    await nursery.start(kernel.run)
    await nursery.start(store.run, kernel.partitions[0])  # the WAL writer, snapshots, repairs

The caller hands in the `StateModel` (how to make a state, the record format; `model.py`) and the
clock: this package knows neither the kernel's classes nor where time comes from.

`open_store` takes the directory's lock (one server per directory), recovers (`recovery.py`, in a
worker thread: the loop stays free to answer `/healthz` 503 meanwhile), upgrades a directory written
in an older record format (below), advances the clock to the newest time the journal holds, starts
a new WAL segment and records the boot before anything is served: the state's boot record (epoch
and generation floor) and its restart decisions (leases that had ended expire; the others get a
grace period), written and fsynced whatever the policy. It returns the state, the journal and a
`RecoveryReport`.

Upgrading. Files say which record format they hold (`frame.py`). When any is older than the
model's, recovery has read them upgraded record by record; the start then writes the state so read
as a snapshot of the current format at the last LSN, deletes every older file (their records are
all at or before it) and logs that it did. A crash part way is harmless: the new snapshot is
published atomically before anything is deleted, and the next start deletes what is left.

`Store.run` keeps three things going: the journal's writer, snapshots every `snapshot_every_records`
records or `snapshot_every_s` seconds, or, in a local copy of a cluster's log, every
`snapshot_every_bytes` bytes copied (`compaction.py`), and the repair after a failed write: the
state is rebuilt from what is on disk and handed to `kernel.restore()` at once (reads then show
only recorded changes). Then every `probe_interval_s` the WAL is truncated to the last good record
and a new segment begun; once that works, another rebuild (not yet live, so nothing reads it while
it changes) takes the boot decisions as at a start, they are written, and that state is restored:
the journal takes changes again.

History. With `history_retention_s`, the snapshots and segments that any point of that window
needs are kept (`compaction.prune`), and a fourth task takes checkpoints: snapshots close enough
together that a past point is rebuilt from one plus a bounded stretch of the WAL (`history.py`).
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterator

import trio

from .disk import FILE_MODE, Disk, make_private
from .compaction import command, model_bytes, take_snapshot
from ..actors.journal import Restorable
from ..actors.shapes import Record
from .model import Clock, RecoverableState, StateModel
from .snapshot import SnapshotInfo, list_snapshots, snapshot_version, write_snapshot
from .recovery import Loaded, RecoveryError, file_versions, load, snapshot_dir, wal_dir
from .config import StoreConfig
from .wal import RunBlocking, SegmentWriter, WalJournal

__all__ = ["StoreConfig", "RecoveryReport", "Store", "StoreLocked", "open_store"]

log = logging.getLogger("runstate.snapshots")


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a large state is built in a worker thread.

    A full collection walks every tracked object while holding the interpreter lock: with a
    million claims live and a million more being built for a snapshot, that is hundreds of
    milliseconds in which the event loop cannot run, and building the state is exactly what
    triggers full collections. The state holds no reference cycles (reference counts free it), so
    nothing is lost by pausing the collector for the seconds the build takes.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _make_folders_private(data_dir: str) -> None:
    for folder in (data_dir, wal_dir(data_dir), snapshot_dir(data_dir)):
        make_private(folder)


class StoreLocked(Exception):
    """Another process holds the data directory."""


@dataclass(slots=True)
class RecoveryReport:
    data_dir: str
    fsync: str
    seconds: float = 0.0
    snapshot_lsn: int = 0
    snapshot_path: str | None = None
    records: int = 0  # WAL records replayed after the snapshot
    last_lsn: int = 0  # the last LSN once the boot is recorded
    newest_ms: int = 0
    epoch: int = 0
    segments: int = 0
    wal_bytes: int = 0
    expired: int = 0  # leases that had ended before the crash
    graced: int = 0  # leases given a grace period
    counts: dict[str, int] = field(default_factory=dict)
    repairs: list[str] = field(default_factory=list)
    bad_snapshots: list[str] = field(default_factory=list)
    version: int = 0  # the record format written from now on
    upgraded_from: list[int] = field(default_factory=list)  # older formats this start upgraded

    def describe(self) -> str:
        things = ", ".join(f"{count} {name.replace('_', ' ')}" for name, count in self.counts.items())
        text = (
            f"recovered {self.data_dir} in {self.seconds:.3f} s: snapshot at LSN {self.snapshot_lsn}, "
            f"{self.records} WAL records replayed from {self.segments} segment(s), boot {self.epoch} at LSN "
            f"{self.last_lsn}, fsync {self.fsync}; {things}; {self.expired} lease(s) expired, "
            f"{self.graced} given a grace period"
        )
        for repair in self.repairs:
            text += f"; repaired: {repair}"
        for bad in self.bad_snapshots:
            text += f"; skipped snapshot: {bad}"
        if self.upgraded_from:
            text += f"; upgraded from record format {', '.join(map(str, self.upgraded_from))} to {self.version}"
        return text


def lock_dir(data_dir: str, *folders: str) -> int:
    """Take `data_dir`'s lock (one server per directory), its folders made private first."""
    for folder in (data_dir, *folders):
        make_private(folder)  # 0700 folders, 0600 files (see disk.py)
    fd = os.open(os.path.join(data_dir, "LOCK"), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreLocked(f"{data_dir} is in use by another runstate server") from None
    return fd


def _boot_records(state: RecoverableState, fsync: str, now_ms: int) -> tuple[list[Record], int, int]:
    """The boot and restart records (applied to `state`), and how many expiries and grace periods.

    Only on a state nothing else reads yet: it changes it, in a worker thread. `now_ms` is past
    the newest time the state's journal holds (the clock was advanced to it).
    """
    records = state.decide_boot(fsync, now_ms)
    restart = state.restart(now_ms)
    # A grace period is a renewal marked `graced`; every other restart record ends a lease whose
    # end had passed (a claim expiry, a delivery requeued or ended) or moves a waiter's turn.
    graced = sum(1 for record in restart if record.get("graced"))
    return records + restart, len(restart) - graced, graced


class Store:
    def __init__(
        self,
        data_dir: str,
        config: StoreConfig,
        disk: Disk,
        model: StateModel,
        clock: Clock,
        lock_fd: int | None,
        run_blocking: RunBlocking | None = None,
        partition: int | None = None,
    ) -> None:
        self.data_dir = data_dir
        # The partition whose folder this is (every file must say so), or None: a data directory
        # of one journal, as it was before partitions.
        self.partition = partition
        self.config = config
        self.disk = disk
        self.model = model
        self.clock = clock
        self.run_blocking: RunBlocking = run_blocking or trio.to_thread.run_sync
        # What the journal is given: None on the production path, so that under `batch` and `off`
        # (and in a cluster's local copy) it writes small batches on its own task, not in a thread.
        self._journal_blocking = run_blocking
        # The model as a snapshot's child process reads it; None: snapshots are built in a thread
        # (asked for, or IO run inline in virtual time, where a child's wait would be real time).
        self._child_model: bytes | None = None
        if config.snapshot_process and run_blocking is None:
            self._child_model = model_bytes(model)
        self.state: Any = None
        self.journal: WalJournal | None = None
        self.report: RecoveryReport | None = None
        self.snapshot_lsn = 0
        # The entries of the newest snapshot (its image's size): checkpoints are never closer
        # than this many records, so that writing them costs at most an entry per record.
        self.snapshot_entries = 0
        # Bytes of records copied into a followed log since the store opened (`copy`), and that
        # count when the newest snapshot was taken: what the byte trigger compares.
        self.copied_bytes = 0
        self._snapshot_bytes = 0
        # The last LSN of the start's own records (boot, restart decisions): a final snapshot is
        # worth taking only past it (`Runtime.flush`).
        self.booted_lsn = 0
        self.snapshots_taken = 0
        # Snapshots refused for what the disk held or the state produced (never for a failing
        # disk): a bug, since the durable log always replays. Kept for /metrics and for tests.
        self.snapshot_refusals: list[str] = []
        self.repairs_done = 0
        self.following = False
        self._lock_fd: int | None = lock_fd
        self._owner: Restorable | None = None
        self._busy = trio.Lock()  # snapshots and repairs never run at the same time
        # Told the seconds each snapshot took (the server's metrics).
        self.on_snapshot: Callable[[float], None] | None = None

    # -- opening ---------------------------------------------------------------------------------

    async def _open(self) -> None:
        loaded = await self.recover()
        self.clock.advance_anchor_to(loaded.newest_ms)
        await self.begin(loaded)

    async def recover(self) -> Loaded:
        """Read the directory into a state (repairing a torn tail), upgraded to the current format.

        Nothing is written to the WAL yet: `begin` does that, once the clock has been advanced
        past the newest time every partition holds (a data directory recovers all of its
        partitions before any of them decides its restart)."""
        self._started = time.perf_counter()
        if self._lock_fd is None:  # a partition's folder: the data directory holds the lock
            await self.run_blocking(_make_folders_private, self.data_dir)
        with _collector_paused():
            loaded: Loaded = await self.run_blocking(
                lambda: load(self.data_dir, self.model, repair=True, disk=self.disk, partition=self.partition)
            )
        with _collector_paused():  # an upgrade writes an image of the whole state
            loaded.upgraded_from = await self.run_blocking(self._upgrade, loaded)
        return loaded

    async def begin(self, loaded: Loaded, *, follow: bool = False) -> None:
        """Start a new WAL segment after `loaded` and record the boot and the restart decisions.

        With `follow`, the folder is a local copy of a replicated log (a cluster's partition):
        nothing is decided here; the batches the log commits are written as they come
        (`journal.append_encoded`), without fsync (the log holds them durably; a crash that
        loses the copy's tail is caught up from the log), and the copy's snapshots bound how much
        of the log the node needs again after a restart."""
        record_format = self.model.records
        upgraded_from = loaded.upgraded_from
        self.following = follow
        writer = SegmentWriter(
            wal_dir(self.data_dir), self.disk, self.config.segment_bytes_max, version=record_format.version,
            partition=self.partition or 0,
        )
        await self.run_blocking(writer.start, loaded.last_lsn + 1, loaded.prev_crc)
        self.journal = WalJournal(
            writer,
            fsync="off" if follow else self.config.fsync,
            batch_interval_ms=self.config.batch_interval_ms,
            run_blocking=self._journal_blocking,
            check=record_format.check,
        )
        expired = graced = 0
        if not follow:
            now_ms = self.clock.now_ms()
            records, expired, graced = await self.run_blocking(
                _boot_records, loaded.state, self.config.fsync, now_ms
            )
            await self.journal.write_now(records)
        self.state = loaded.state
        # The recovered state lives as long as the server and holds no cycles: keep the collector
        # from walking it again and again (each full collection would stall the loop). No collect
        # first: on a large state that alone would hold the loop for a second.
        gc.freeze()
        self.snapshot_lsn = loaded.snapshot_lsn
        self.snapshot_entries = loaded.snapshot_entries
        self.booted_lsn = self.journal.durable_lsn
        self.report = RecoveryReport(
            data_dir=self.data_dir,
            fsync=self.config.fsync,
            seconds=time.perf_counter() - self._started,
            snapshot_lsn=loaded.snapshot_lsn,
            snapshot_path=loaded.snapshot_path,
            records=loaded.records,
            last_lsn=self.journal.durable_lsn,
            newest_ms=loaded.newest_ms,
            epoch=self.state.boot.epoch,
            segments=loaded.segments,
            wal_bytes=loaded.wal_bytes,
            expired=expired,
            graced=graced,
            counts=self.state.counts(),
            repairs=[repair.describe() for repair in loaded.repairs],
            bad_snapshots=loaded.bad_snapshots,
            version=record_format.version,
            upgraded_from=upgraded_from,
        )

    def _upgrade(self, loaded: Loaded) -> list[int]:
        """Rewrite a directory that holds files of an older record format; the versions it held.

        `loaded` was read upgraded in memory: its state, as a snapshot at the last LSN in the
        current format, replaces every older file. Blocking: run it in a worker thread.
        """
        current = self.model.records.version
        old = {path: version for path, version in file_versions(self.data_dir).items() if version < current}
        if not old:
            return []
        versions = sorted(set(old.values()))
        snaps = snapshot_dir(self.data_dir)
        newest = list_snapshots(snaps)[-1:]
        covered = bool(newest) and newest[0][0] >= loaded.last_lsn and snapshot_version(newest[0][1]) == current
        fields = {"from": versions, "to": current, "lsn": loaded.last_lsn, "files": len(old)}
        log.warning(
            "upgrading %s from record format %s to %d: a snapshot at LSN %d replaces %d older file(s)",
            self.data_dir, ", ".join(map(str, versions)), current, loaded.last_lsn, len(old),
            extra={"event": "upgrade", "fields": fields},
        )
        if loaded.last_lsn > 0 and not covered:
            info = write_snapshot(
                snaps, loaded.last_lsn, loaded.newest_ms, loaded.state.image(), self.model.records, self.disk,
                partition=self.partition or 0,
            )
            loaded.snapshot_lsn, loaded.snapshot_path = info.lsn, info.path
        for path in old:  # every record in them is at or before the snapshot just made durable
            if path != loaded.snapshot_path:
                self.disk.remove(path)
        self.disk.fsync_dir(snaps)
        self.disk.fsync_dir(wal_dir(self.data_dir))
        loaded.prev_crc = 0  # the record it linked to is gone; a segment after a snapshot needs no link
        return versions

    def log_recovery(self) -> None:
        """Log what the recovery found and did, as one line with its figures."""
        report = self.report
        assert report is not None
        fields = {
            "seconds": round(report.seconds, 3), "snapshot_lsn": report.snapshot_lsn, "records": report.records,
            "last_lsn": report.last_lsn, "epoch": report.epoch, "expired": report.expired, "graced": report.graced,
            "repairs": len(report.repairs), "record_format": report.version, "upgraded_from": report.upgraded_from,
            **report.counts,
        }
        if self.partition is not None:
            fields["partition"] = self.partition
        log.info("%s", report.describe(), extra={"event": "recovery", "fields": fields})

    def close(self) -> None:
        """Sync and close the open segment and release the directory (at shutdown)."""
        if self.journal is not None:
            try:
                self.journal.writer.sync()
            except OSError as error:
                log.error("final fsync failed: %s", error)
            self.journal.writer.close()
            self.journal = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- running ---------------------------------------------------------------------------------

    async def run(self, owner: Restorable | None, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer, the snapshots and the repairs, until cancelled; `owner` serves the state
        (a partition) and is handed the state rebuilt after a failed write."""
        assert self.journal is not None
        self._owner = owner
        async with trio.open_nursery() as nursery:
            await nursery.start(self.journal.run)
            nursery.start_soon(self._snapshots)
            if self.config.history_retention_s > 0:
                nursery.start_soon(self._checkpoints)
            if not self.following:  # a local copy that fails is rebuilt by its node, not here
                nursery.start_soon(self._repairs)
            task_status.started()

    async def _snapshots(self) -> None:
        journal = self.journal
        assert journal is not None
        last_at = trio.current_time()
        while True:
            await trio.sleep(self.config.snapshot_poll_s)
            behind = journal.durable_lsn - self.snapshot_lsn
            every_bytes = self.config.snapshot_every_bytes
            due = behind >= self.config.snapshot_every_records or (
                behind > 0 and trio.current_time() - last_at >= self.config.snapshot_every_s
            ) or (behind > 0 and every_bytes is not None and self.bytes_since_snapshot >= every_bytes)
            if due and journal.failure is None:
                await self.snapshot()
                last_at = trio.current_time()

    @property
    def checkpoint_every_records(self) -> int:
        """Records past the newest snapshot at which a history checkpoint is taken: the setting,
        or the newest snapshot's entries if more (a large state is not written over and over)."""
        return max(self.config.history_checkpoint_every_records, self.snapshot_entries)

    async def _checkpoints(self) -> None:
        """Snapshots close enough together that any point of the history kept is rebuilt from
        one of them plus at most `checkpoint_every_records` records (`history.py`)."""
        journal = self.journal
        assert journal is not None
        while True:
            await trio.sleep(self.config.snapshot_poll_s)
            if journal.failure is None and journal.durable_lsn - self.snapshot_lsn >= self.checkpoint_every_records:
                await self.snapshot()

    @property
    def retention_ms(self) -> int:
        return int(self.config.history_retention_s * 1000)

    async def snapshot(self) -> int:
        """Take a snapshot at the durable end of the log now; returns its LSN (0 if none was taken)."""
        journal = self.journal
        assert journal is not None
        if journal.failure is not None:
            return 0
        async with self._busy:
            if journal.failure is not None:
                return 0  # type: ignore[unreachable]  # the journal can fail while this waits for `_busy`; mypy keeps the test above across the await
            through = journal.durable_lsn
            copied = self.copied_bytes  # (what is copied from here on counts towards the next one)
            started = time.perf_counter()
            try:
                if self._child_model is not None:
                    info = await self._snapshot_in_child(through)
                else:
                    with _collector_paused():
                        info = await self.run_blocking(
                            take_snapshot, self.data_dir, through, self.model, self.disk, self.config.snapshots_kept,
                            self.partition, self.retention_ms,
                        )
            except OSError as error:
                log.error("snapshot at LSN %d failed (the WAL is kept): %s", through, error)
                return 0
            except (ValueError, RecoveryError) as error:  # ValueError: a record the format refuses
                self.snapshot_refusals.append(f"at LSN {through}: {error}")
                log.error("snapshot at LSN %d refused (the WAL is kept): %s", through, error)
                return 0
        if info is None:
            return 0
        seconds = time.perf_counter() - started
        self.snapshot_lsn = info.lsn
        self._snapshot_bytes = copied
        self.snapshots_taken += 1
        fields = {"lsn": info.lsn, "entries": info.entries, "bytes": info.size_bytes, "seconds": round(seconds, 3)}
        if self.partition is not None:
            fields["partition"] = self.partition
        self.snapshot_entries = info.entries
        log.info("snapshot at LSN %d: %d entries, %d bytes", info.lsn, info.entries, info.size_bytes, extra={"event": "snapshot", "fields": fields})
        if self.on_snapshot is not None:
            self.on_snapshot(seconds)
        return info.lsn

    @property
    def bytes_since_snapshot(self) -> int:
        """Bytes of records copied (`copy`) since the newest snapshot began (0 unless following)."""
        return self.copied_bytes - self._snapshot_bytes

    def copy(self, first_lsn: int, bodies: list[bytes]) -> None:
        """Write records a replicated log committed (a cluster's partition) into this local copy,
        at the LSNs they have there; counted for `snapshot_every_bytes`."""
        assert self.following and self.journal is not None, "only a local copy of a log is written so"
        self.journal.append_encoded(first_lsn, bodies)
        self.copied_bytes += sum(len(body) for body in bodies)

    async def _snapshot_in_child(self, through: int) -> SnapshotInfo | None:
        assert self._child_model is not None
        argv = command(self.data_dir, through, self.config.snapshots_kept, self.partition, self.retention_ms)
        result = await trio.run_process(
            argv, stdin=self._child_model, capture_stdout=True, capture_stderr=True, check=False
        )
        if result.returncode != 0:
            detail = result.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
            raise OSError(f"the snapshot process exited with {result.returncode}: {detail[0]}")
        found = json.loads(result.stdout.decode().strip().splitlines()[-1])
        return None if found is None else SnapshotInfo(**found)

    async def _repairs(self) -> None:
        journal = self.journal
        assert journal is not None
        while True:
            await journal.failed.wait()
            await self._repair()

    async def _repair(self) -> None:
        """Drop the unrecorded changes, wait for the disk, truncate the WAL, record a boot, go on.

        Two rebuilds from disk. The first is handed to the kernel at once, so reads show only
        recorded changes while the disk is down; it is never changed afterwards. The second is
        made once the WAL is truncated: the boot decisions are applied to it while nothing reads
        it (in a worker thread), written, and only then is it handed to the kernel, once, with
        the timers of its grace periods. Deciding on the live state instead would change it off
        the event loop while reads are served.
        """
        journal, owner = self.journal, self._owner
        assert journal is not None
        recorded = await self._until_the_disk_works(self._rebuild)
        self.state = recorded.state
        if owner is not None:
            owner.restore(recorded.state)  # from here on, reads show only recorded changes
        del recorded
        booted = await self._until_the_disk_works(self._repair_once)
        self.state = booted.state
        if owner is not None:
            owner.restore(booted.state)
        journal.reopen()
        self.repairs_done += 1
        log.warning("the journal works again: state rebuilt from disk up to LSN %d", journal.durable_lsn)

    async def _until_the_disk_works(self, attempt: Callable[[], Awaitable[Loaded]]) -> Loaded:
        while True:
            try:
                async with self._busy:  # not during a snapshot; released while waiting to try again
                    return await attempt()
            except (OSError, RecoveryError) as error:
                log.warning("the disk still fails (%s); trying again in %.1f s", error, self.config.probe_interval_s)
                await trio.sleep(self.config.probe_interval_s)

    async def _rebuild(self) -> Loaded:
        """The state as recorded: everything up to the last record known durable (`writer.good`)."""
        journal = self.journal
        assert journal is not None
        good = journal.writer.good
        through = good.next_lsn - 1 if good is not None else 0
        with _collector_paused():
            return await self.run_blocking(
                lambda: load(self.data_dir, self.model, repair=False, through_lsn=through, disk=self.disk, partition=self.partition)
            )

    async def _repair_once(self) -> Loaded:
        """One attempt: truncate the WAL, rebuild, decide and write the boot on the rebuilt state."""
        journal = self.journal
        assert journal is not None
        await self.run_blocking(journal.writer.repair)
        loaded = await self._rebuild()
        records, _, _ = await self.run_blocking(
            _boot_records, loaded.state, self.config.fsync, self.clock.now_ms()
        )
        await journal.write_now(records)
        return loaded


async def open_store(
    data_dir: str,
    *,
    model: StateModel,
    clock: Clock,
    fsync: str = "always",
    config: StoreConfig | None = None,
    disk: Disk | None = None,
    run_blocking: RunBlocking | None = None,
) -> Store:
    """Recover `data_dir` into `model`'s state and record the boot.

    Raises `RecoveryError` (file, offset) or `StoreLocked`. `fsync` is used unless a `config` is
    given. Call inside trio; `clock` is advanced to the newest time the journal holds.
    `run_blocking` runs the blocking IO (default: a worker thread; tests in virtual time pass
    `wal.inline`). With `config.snapshot_process`, `model` must pickle (TypeError here if not).
    """
    config = config or StoreConfig(fsync=fsync)
    disk = disk or Disk(config.fsync_slow_ms)
    lock_fd = await (run_blocking or trio.to_thread.run_sync)(lock_dir, data_dir, wal_dir(data_dir), snapshot_dir(data_dir))
    try:
        store = Store(data_dir, config, disk, model, clock, lock_fd, run_blocking)
    except BaseException:
        os.close(lock_fd)
        raise
    try:
        await store._open()
    except BaseException:
        store.close()
        raise
    store.log_recovery()
    return store
