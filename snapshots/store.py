"""The store: what the server opens on a data directory, and the tasks that keep it.

    store = await open_store(data_dir, fsync="always", limits=limits, clock=clock)
    kernel = Kernel(state=store.state, journal=store.journal, clock=clock)
    await nursery.start(store.run, kernel)   # the WAL writer, snapshots, repairs after a disk error
    await nursery.start(kernel.run)

`open_store` takes the directory's lock (one server per directory), recovers (`recovery.py`, in a
worker thread: the loop stays free to answer `/healthz` 503 meanwhile), advances the clock to the
newest time the journal holds, starts a new WAL segment and records the boot before anything is
served: the `kernel.booted` record (epoch and generation floor, `actors/boot.py`) and the restart
decisions of `KernelState.restart` (leases that had ended expire; the others get a grace period),
written and fsynced whatever the policy. It returns the state, the journal and a `RecoveryReport`.

`Store.run` keeps three things going: the journal's writer, snapshots every `snapshot_every_records`
records or `snapshot_every_s` seconds (`compaction.py`), and the repair after a failed write: the
state is rebuilt from what is on disk and handed to `kernel.restore()` at once (reads then show
only recorded changes), then every `probe_interval_s` the WAL is truncated to the last good record
and a new segment begun; once that works, the boot is recorded as at a start, and the journal
takes changes again.
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
from typing import Any, Callable

import trio

from .disk import FILE_MODE, Disk, make_private
from .compaction import command, take_snapshot
from .snapshot import SnapshotInfo
from .recovery import Loaded, RecoveryError, load, snapshot_dir, wal_dir
from .wal import RunBlocking, SegmentWriter, WalJournal

__all__ = ["StoreConfig", "RecoveryReport", "Store", "StoreLocked", "open_store"]

log = logging.getLogger("runstate.snapshots")


@dataclass(frozen=True, slots=True)
class StoreConfig:
    fsync: str = "always"
    # `batch`: a background fsync begins at most this many milliseconds after the previous one began.
    batch_interval_ms: float = 3.0
    segment_bytes_max: int = 64 * 1024 * 1024
    snapshot_every_records: int = 1_000_000
    snapshot_every_s: float = 3600.0
    # How often the snapshot task looks whether one is due.
    snapshot_poll_s: float = 1.0
    snapshots_kept: int = 2
    # Build snapshots in a child process (see compaction.py); else in a worker thread.
    snapshot_process: bool = True
    fsync_slow_ms: float = 100.0
    # After a failed write: how often to try the disk again.
    probe_interval_s: float = 1.0


@contextlib.contextmanager
def _collector_paused():
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
        return text


def _lock(data_dir: str) -> int:
    for folder in (data_dir, wal_dir(data_dir), snapshot_dir(data_dir)):
        make_private(folder)  # 0700 folders, 0600 files (see disk.py)
    fd = os.open(os.path.join(data_dir, "LOCK"), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreLocked(f"{data_dir} is in use by another runstate server") from None
    return fd


def _boot_records(state: Any, fsync: str, newest_ms: int, now_ms: int) -> tuple[list[dict], int, int]:
    """The boot and restart records (applied to `state`), and how many expiries and grace periods."""
    records = state.decide_boot(fsync, now_ms)
    restart = state.restart(newest_ms, now_ms)
    # A grace period is a renewal (of a claim or a delivery); every other restart record ends a
    # lease that had ended before the crash (a claim expiry, a delivery requeued or ended).
    graced = sum(1 for record in restart if record["type"].endswith(".renewed"))
    return records + restart, len(restart) - graced, graced


class Store:
    def __init__(
        self,
        data_dir: str,
        config: StoreConfig,
        disk: Disk,
        make_state: Callable[[], Any],
        clock: Any,
        lock_fd: int,
        run_blocking: RunBlocking | None = None,
        state_spec: tuple[str, Any] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.config = config
        self.disk = disk
        self.make_state = make_state
        self.clock = clock
        self.run_blocking: RunBlocking = run_blocking or trio.to_thread.run_sync
        # How a child process makes the state: ("module:callable", limits); None: threads only.
        self.state_spec = state_spec if run_blocking is None else None
        self.state: Any = None
        self.journal: WalJournal | None = None
        self.report: RecoveryReport | None = None
        self.snapshot_lsn = 0
        self.snapshots_taken = 0
        self.repairs_done = 0
        self._lock_fd: int | None = lock_fd
        self._kernel: Any = None
        self._busy = trio.Lock()  # snapshots and repairs never run at the same time
        # Told the seconds each snapshot took (the server's metrics).
        self.on_snapshot: Callable[[float], None] | None = None

    # -- opening ---------------------------------------------------------------------------------

    async def _open(self) -> None:
        started = time.perf_counter()
        with _collector_paused():
            loaded: Loaded = await self.run_blocking(
                lambda: load(self.data_dir, self.make_state, repair=True, disk=self.disk)
            )
        self.clock.advance_anchor_to(loaded.newest_ms)
        writer = SegmentWriter(wal_dir(self.data_dir), self.disk, self.config.segment_bytes_max)
        await self.run_blocking(writer.start, loaded.last_lsn + 1, loaded.prev_crc)
        self.journal = WalJournal(
            writer,
            fsync=self.config.fsync,
            batch_interval_ms=self.config.batch_interval_ms,
            run_blocking=self.run_blocking,
        )
        now_ms = self.clock.now_ms()
        records, expired, graced = await self.run_blocking(
            _boot_records, loaded.state, self.config.fsync, loaded.newest_ms, now_ms
        )
        await self.journal.write_now(records)
        self.state = loaded.state
        # The recovered state lives as long as the server and holds no cycles: keep the collector
        # from walking it again and again (each full collection would stall the loop). No collect
        # first: on a large state that alone would hold the loop for a second.
        gc.freeze()
        self.snapshot_lsn = loaded.snapshot_lsn
        self.report = RecoveryReport(
            data_dir=self.data_dir,
            fsync=self.config.fsync,
            seconds=time.perf_counter() - started,
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
        )

    def close(self) -> None:
        """Sync and close the open segment and release the directory (at shutdown)."""
        if self.journal is not None:
            try:
                self.journal.writer.sync()
            except OSError as error:
                log.error("final fsync failed: %s", error)
            self.journal.writer.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- running ---------------------------------------------------------------------------------

    async def run(self, kernel: Any, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer, the snapshots and the repairs, until cancelled."""
        assert self.journal is not None
        self._kernel = kernel
        async with trio.open_nursery() as nursery:
            await nursery.start(self.journal.run)
            nursery.start_soon(self._snapshots)
            nursery.start_soon(self._repairs)
            task_status.started()

    async def _snapshots(self) -> None:
        journal = self.journal
        assert journal is not None
        last_at = trio.current_time()
        while True:
            await trio.sleep(self.config.snapshot_poll_s)
            behind = journal.durable_lsn - self.snapshot_lsn
            due = behind >= self.config.snapshot_every_records or (
                behind > 0 and trio.current_time() - last_at >= self.config.snapshot_every_s
            )
            if due and journal.failure is None:
                await self.snapshot()
                last_at = trio.current_time()

    async def snapshot(self) -> int:
        """Take a snapshot at the durable end of the log now; returns its LSN (0 if none was taken)."""
        journal = self.journal
        assert journal is not None
        if journal.failure is not None:
            return 0
        async with self._busy:
            if journal.failure is not None:
                return 0
            through = journal.durable_lsn
            started = time.perf_counter()
            try:
                if self.config.snapshot_process and self.state_spec is not None:
                    info = await self._snapshot_in_child(through)
                else:
                    with _collector_paused():
                        info = await self.run_blocking(
                            take_snapshot, self.data_dir, through, self.make_state, self.disk, self.config.snapshots_kept
                        )
            except (OSError, RecoveryError) as error:
                log.error("snapshot at LSN %d failed (the WAL is kept): %s", through, error)
                return 0
        if info is None:
            return 0
        seconds = time.perf_counter() - started
        self.snapshot_lsn = info.lsn
        self.snapshots_taken += 1
        fields = {"lsn": info.lsn, "entries": info.entries, "bytes": info.size_bytes, "seconds": round(seconds, 3)}
        log.info("snapshot at LSN %d: %d entries, %d bytes", info.lsn, info.entries, info.size_bytes, extra={"event": "snapshot", "fields": fields})
        if self.on_snapshot is not None:
            self.on_snapshot(seconds)
        return info.lsn

    async def _snapshot_in_child(self, through: int) -> SnapshotInfo | None:
        assert self.state_spec is not None
        spec, limits = self.state_spec
        argv = command(self.data_dir, through, self.config.snapshots_kept, spec, limits)
        result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
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
        """Rebuild the state from disk, truncate the WAL to its last good record, start again."""
        journal, kernel = self.journal, self._kernel
        assert journal is not None
        while True:
            try:
                async with self._busy:  # not during a snapshot; released while waiting to try again
                    loaded = await self._repair_once(kernel)
                break
            except (OSError, RecoveryError) as error:
                log.warning("the disk still fails (%s); trying again in %.1f s", error, self.config.probe_interval_s)
                await trio.sleep(self.config.probe_interval_s)
        if kernel is not None:
            kernel.restore(loaded.state)  # again, for the timers of the grace periods just recorded
        journal.reopen()
        self.repairs_done += 1
        log.warning("the journal works again: state rebuilt from disk up to LSN %d", journal.durable_lsn)

    async def _repair_once(self, kernel: Any) -> Loaded:
        """One attempt: reload what is durable (reads show it at once), truncate, record the boot."""
        journal = self.journal
        assert journal is not None
        writer = journal.writer
        through = writer.good.next_lsn - 1 if writer.good is not None else 0
        with _collector_paused():
            loaded = await self.run_blocking(
                lambda: load(self.data_dir, self.make_state, repair=False, through_lsn=through, disk=self.disk)
            )
        self.state = loaded.state
        if kernel is not None:
            kernel.restore(loaded.state)  # from here on, reads show only recorded changes
        await self.run_blocking(writer.repair)
        records, _, _ = await self.run_blocking(
            _boot_records, loaded.state, self.config.fsync, loaded.newest_ms, self.clock.now_ms()
        )
        await journal.write_now(records)
        return loaded


async def open_store(
    data_dir: str,
    *,
    fsync: str = "always",
    limits: Any = None,
    clock: Any = None,
    config: StoreConfig | None = None,
    disk: Disk | None = None,
    make_state: Callable[[], Any] | None = None,
    run_blocking: RunBlocking | None = None,
) -> Store:
    """Recover `data_dir` and record the boot; raises `RecoveryError` (file, offset) or `StoreLocked`.

    `fsync` is used unless a `config` is given. Call inside trio; the clock (created here when not
    given) is advanced to the newest time the journal holds. `run_blocking` runs the blocking IO
    (default: a worker thread; tests in virtual time pass `wal.inline`).
    """
    from ..actors.clock import Clock
    from ..actors.state import KernelState

    from ..actors.limits import Limits

    config = config or StoreConfig(fsync=fsync)
    disk = disk or Disk(config.fsync_slow_ms)
    state_spec = None
    if make_state is None:
        limits = limits or Limits()
        make_state = lambda: KernelState(limits)  # noqa: E731
        state_spec = ("runstate.actors.state:KernelState", limits)
    lock_fd = await (run_blocking or trio.to_thread.run_sync)(_lock, data_dir)
    store = Store(data_dir, config, disk, make_state, clock or Clock(), lock_fd, run_blocking, state_spec)
    try:
        await store._open()
    except BaseException:
        store.close()
        raise
    report = store.report
    fields = {
        "seconds": round(report.seconds, 3), "snapshot_lsn": report.snapshot_lsn, "records": report.records,
        "last_lsn": report.last_lsn, "epoch": report.epoch, "expired": report.expired, "graced": report.graced,
        "repairs": len(report.repairs), **report.counts,
    }
    log.info("%s", report.describe(), extra={"event": "recovery", "fields": fields})
    return store
