"""The write-ahead log: segment files and the one writer task that group-commits to them.

Segments live in `<data>/wal/` and are named by the LSN of their first record
(`00000000000000000001.wal`); `frame.py` gives their layout. A segment's header names the record
format version of what it holds: the writer always writes the current one (older segments are
upgraded away at a start, see `store.py`). A segment is sealed (fsynced) when it
reaches `segment_bytes_max` and the next one is started; a new segment's name is made durable (the
directory is fsynced) before any record is written into it, whatever the policy.

`WalJournal` is the kernel's `Journal` (structurally: nothing here imports the kernel). `append()`
checks each record against the record format (`check`, handed in by whoever opens the store) and
only encodes the records (orjson, on the loop,
so a reply the shell goes on to mutate cannot change what is written) and queues them: it never
blocks and never does IO. One writer task takes everything queued from all actors as one batch,
writes it and, by policy, fsyncs it in a worker thread, then calls each batch's `on_durable(None)`
in LSN order:

- `always` (default): write and fsync every batch before answering. Batches grow by themselves
  under load (group commit): whatever is appended while one fsync runs goes in the next.
- `batch`: write (to the operating system) and answer, as `off` does; a second task fsyncs in the
  background, beginning one at most `batch_interval_ms` after the previous one began, while
  writes go on. Survives a kill of the process; a power cut loses at most the changes of the last
  interval (plus one fsync's duration), like Redis's `appendfsync everysec` or PostgreSQL's
  `synchronous_commit = off`. A lone request never waits for an interval.
- `off`: write (to the operating system) and answer; no fsync. Survives a kill of the process, not
  a power cut (see `actors/boot.py` for what still holds for generations under `batch` and `off`).

If a write or fsync fails, every mutation of that batch and all queued after it is answered with
the error (the kernel turns it into 503 UNAVAILABLE), `failure` is set so the kernel refuses new
mutations at once, and `failed` is set for the store, which rebuilds the state from disk and calls
`reopen()` once the disk works again. After a failed fsync nothing written since the last good
fsync can be trusted (the kernel may have dropped those pages), so `good` only ever moves after a
batch is fully durable under the policy, and a repair truncates back to it. Under `batch` that is
the last background fsync that succeeded: a failed one rolls back the changes answered since, as a
power cut would (and the next boot's generation floor covers what they handed out).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from dataclasses import dataclass
from typing import Awaitable, Callable, Protocol, TypeVar, TypeVarTuple, Unpack

import orjson
import outcome
import trio

from ..actors.journal import DurableWaits
from ..actors.shapes import Record
from .config import FSYNC_POLICIES
from .disk import Disk
from .frame import BODY_BYTES_MAX, FILE_HEADER_BYTES, WAL_KIND, encode_file_header, encode_frames, file_magic
from .model import Durable

__all__ = ["WalJournal", "SegmentWriter", "Position", "segment_name", "FSYNC_POLICIES", "RunBlocking", "inline"]

# How blocking IO is run: `trio.to_thread.run_sync` (the default), or `inline` in tests that run in
# virtual time, where a worker thread would let the mock clock jump while the IO runs.
_Result = TypeVar("_Result")
_Arguments = TypeVarTuple("_Arguments")


class RunBlocking(Protocol):
    def __call__(self, function: Callable[[Unpack[_Arguments]], _Result], /, *args: Unpack[_Arguments]) -> Awaitable[_Result]: ...


async def inline(function: Callable[[Unpack[_Arguments]], _Result], *args: Unpack[_Arguments]) -> _Result:
    """Run blocking `function` on the event loop itself (tests in virtual time only)."""
    return function(*args)

log = logging.getLogger("runstate.snapshots")


SEGMENT_SUFFIX = ".wal"
# The largest batch (its records' bytes) written in the writer task under `batch` and `off`;
# larger ones go to a worker thread, as every write under `always` does (`WalJournal`).
INLINE_WRITE_BYTES_MAX = 64 * 1024


def _ignore(error: BaseException | None) -> None:
    """Nobody waits for a copied batch; a failure is the journal's own (`failure`)."""


def _wait_for_the_thread(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
    """A write in a worker thread cannot be stopped: a cancelled writer waits for it."""
    return trio.lowlevel.Abort.FAILED


def segment_name(first_lsn: int) -> str:
    return f"{first_lsn:020d}{SEGMENT_SUFFIX}"


@dataclass(frozen=True, slots=True)
class Position:
    """A point in the log just after a record: where the next one goes."""

    path: str  # the segment file
    offset: int  # bytes of that file in use
    next_lsn: int
    prev_crc: int  # crc of the record before this point (0 when there is none)


class SegmentWriter:
    """The open segment. Blocking; used from one thread at a time (the writer's)."""

    def __init__(self, wal_dir: str, disk: Disk, segment_bytes_max: int, *, version: int, partition: int = 0) -> None:
        self.wal_dir = wal_dir
        self.disk = disk
        self.segment_bytes_max = segment_bytes_max
        self.magic = file_magic(WAL_KIND, version)  # the record format every new segment says it holds
        self.partition = partition  # whose records they are, also in every segment's header
        self._fd: int | None = None
        self._path = ""
        self._offset = 0
        self.next_lsn = 1
        self._prev_crc = 0
        self.good: Position | None = None  # the last point known durable under the policy
        self.written: Position | None = None  # the end of what was written (to the operating system)
        # Whether a write without fsync is as good as it gets (`off`); under `batch` only an fsync
        # moves `good`.
        self.good_after_write = False
        # `sync_through` may run in another thread than `write` (`batch`): the segment it syncs
        # must not be closed under it, so rotating and syncing take this lock (writing does not).
        self._segment_lock = threading.RLock()
        self.epoch = 0  # how many times `start` ran: a sync aimed before a repair must not count after it

    def start(self, next_lsn: int, prev_crc: int) -> None:
        """Begin a new segment at `next_lsn` (recovery and repairs always start a fresh one)."""
        with self._segment_lock:
            self._open_segment(next_lsn, prev_crc)
            self.next_lsn = next_lsn
            self._prev_crc = prev_crc
            self.good = self.written = Position(self._path, self._offset, next_lsn, prev_crc)
            self.epoch += 1

    def _open_segment(self, first_lsn: int, prev_crc: int) -> None:
        path = os.path.join(self.wal_dir, segment_name(first_lsn))
        if os.path.exists(path):
            if os.path.getsize(path) > FILE_HEADER_BYTES:
                raise FileExistsError(f"segment {path} already holds records")
            self.disk.remove(path)  # an empty segment left by an earlier start
        fd = self.disk.create(path)
        try:
            self.disk.write(fd, encode_file_header(self.magic, first_lsn, prev_crc, self.partition))
            self.disk.fsync(fd, path)
            self.disk.fsync_dir(self.wal_dir)
        except BaseException:
            self.disk.close(fd)
            # A segment begun on a full disk holds no header: gone, it is not left for the next
            # start to find and set aside (it holds nothing a recovery could use).
            with contextlib.suppress(OSError):
                self.disk.remove(path)
            raise
        old = self._fd
        self._fd, self._path, self._offset = fd, path, FILE_HEADER_BYTES
        if old is not None:
            self.disk.close(old)

    def rotation_due(self) -> bool:
        """Whether the next `write` seals the segment and opens a new one (two fsyncs)."""
        return self._offset >= self.segment_bytes_max and self._offset > FILE_HEADER_BYTES

    def write(self, first_lsn: int, bodies: list[bytes], sync: bool) -> None:
        """Append `bodies` as one batch; fsync it when `sync`. On any error, `good` stays put."""
        assert self._fd is not None, "start() first"
        assert first_lsn == self.next_lsn, f"LSN {first_lsn} appended, {self.next_lsn} expected"
        if self.rotation_due():
            with self._segment_lock:
                self.disk.fsync(self._fd, self._path)  # seal the full segment
                self._open_segment(first_lsn, self._prev_crc)
        data, crc = encode_frames(first_lsn, self._prev_crc, bodies)
        self.disk.write(self._fd, data)
        if sync:
            self.disk.fsync(self._fd, self._path)
        self._offset += len(data)
        self.next_lsn += len(bodies)
        self._prev_crc = crc
        self.written = Position(self._path, self._offset, self.next_lsn, crc)
        if sync or self.good_after_write:
            self.good = self.written

    def sync(self) -> None:
        with self._segment_lock:
            if self._fd is not None:
                self.disk.fsync(self._fd, self._path)

    def sync_through(self, target: Position, epoch: int) -> None:
        """Make everything up to `target` durable; then it is `good`. Safe beside a `write` in another thread.

        A `target` in an earlier segment is durable already: a segment is fsynced when it is sealed.
        A `target` from before the last `start` (a repair came between) is ignored.
        """
        with self._segment_lock:
            if epoch != self.epoch:
                return
            if self._fd is not None and target.path == self._path:
                self.disk.fsync(self._fd, self._path)
            good = self.good
            if good is None or target.next_lsn > good.next_lsn:
                self.good = target

    def repair(self) -> Position:
        """After a failure: drop everything past `good` from disk and start a new segment there."""
        with self._segment_lock:  # no background fsync runs meanwhile
            return self._repair()

    def _repair(self) -> Position:
        good = self.good
        assert good is not None
        if self._fd is not None:
            try:
                self.disk.close(self._fd)
            except OSError:
                pass
            self._fd = None
        good_name = os.path.basename(good.path)
        for name in sorted(os.listdir(self.wal_dir)):
            if name.endswith(SEGMENT_SUFFIX) and name > good_name:
                self.disk.remove(os.path.join(self.wal_dir, name))  # begun after the good point
        fd = self.disk.open_write(good.path)
        try:
            self.disk.truncate(fd, good.offset)
            self.disk.fsync(fd, good.path)
        finally:
            self.disk.close(fd)
        self.disk.fsync_dir(self.wal_dir)
        if good.offset <= FILE_HEADER_BYTES:
            self.disk.remove(good.path)  # no records: start() makes it again
        self.start(good.next_lsn, good.prev_crc)
        return good

    def close(self) -> None:
        with self._segment_lock:
            if self._fd is not None:
                self.disk.close(self._fd)
                self._fd = None


class WalJournal:
    """The kernel's journal on disk. Create inside trio; run `run` in a nursery."""

    def __init__(
        self,
        writer: SegmentWriter,
        *,
        fsync: str = "always",
        batch_interval_ms: float = 20.0,
        batch_records_max: int = 65_536,
        run_blocking: RunBlocking | None = None,
        check: Callable[[Record], None] | None = None,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, got {fsync!r}")
        self.writer = writer
        self.run_blocking: RunBlocking = run_blocking or trio.to_thread.run_sync
        # Under `batch` and `off` a small batch is written in the writer task itself, not in a
        # worker thread: a write into the page cache takes microseconds, a thread's round trip
        # (hand-off, wake-up, the answer back through trio's wake-up socket) costs about 0.1-0.2
        # ms of CPU, and with requests spread out in time (many agents each renewing now and
        # then) every request is a batch of its own. A write that fsyncs (`always`, a segment
        # sealed) still goes to a thread, as does every write when `run_blocking` is given.
        self._write_inline = run_blocking is None and fsync != "always"
        # A write that goes to a thread on the production path goes by `_write_in_thread`, which
        # answers the batch's callers from the thread's wake-up itself (see there).
        self._own_thread = run_blocking is None
        self.fsync = fsync
        self.batch_interval_s = batch_interval_ms / 1000
        self.batch_records_max = batch_records_max
        # Raises ValueError for a record the format does not know (None: records are not checked).
        self.check = check
        self.failure: BaseException | None = None
        self.failed = trio.Event()  # set on failure, for the store's repair loop
        self.appended_lsn = writer.next_lsn - 1
        # Answered as durable under the policy (under `batch` and `off`: written to the OS).
        self.durable_lsn = writer.next_lsn - 1
        # Under `batch`: fsynced by the background task (the rest may be lost to a power cut).
        self.synced_lsn = writer.next_lsn - 1
        self.batches = 0
        self.background_syncs = 0
        writer.good_after_write = fsync == "off"
        self._unsynced = trio.Event()  # something was written that the background fsync has not covered
        self._sync_error: OSError | None = None  # a failed background fsync, for the writer to act on
        self._pending: list[tuple[int, list[bytes], Durable]] = []  # (first LSN, bodies, callback)
        self._pending_records = 0
        self._after = DurableWaits()
        self._wakeup = trio.Event()
        self._synced_at = -float("inf")

    # -- the Journal protocol ----------------------------------------------------------------------

    def append(self, records: list[Record], on_durable: Durable) -> int:
        if self.failure is not None:
            on_durable(self.failure)
            return self.appended_lsn
        try:
            if self.check is not None:
                for record in records:
                    self.check(record)
            bodies = [orjson.dumps(record) for record in records]
            for body in bodies:
                if len(body) > BODY_BYTES_MAX:
                    raise ValueError(f"a {records[0].get('type')} record of {len(body)} bytes is over the maximum")
        except (TypeError, ValueError) as error:  # a bug upstream; the state holds an unrecorded change
            log.error("cannot encode a record: %s", error)
            self._fail(error, [(self.appended_lsn + 1, [], on_durable)])
            return self.appended_lsn
        first_lsn = self.appended_lsn + 1
        self.appended_lsn += len(bodies)
        self._pending.append((first_lsn, bodies, on_durable))
        self._pending_records += len(bodies)
        self._wakeup.set()
        return self.appended_lsn

    def append_encoded(self, first_lsn: int, bodies: list[bytes]) -> None:
        """Queue records already checked and encoded elsewhere, at the LSNs they already have.

        For a local copy of a replicated log (`Store.follow`): the batches come committed, in
        order, and are written here as they are; nobody waits for them."""
        if self.failure is not None:
            return
        assert first_lsn == self.appended_lsn + 1, f"LSN {first_lsn} copied, {self.appended_lsn + 1} expected"
        self.appended_lsn += len(bodies)
        self._pending.append((first_lsn, bodies, _ignore))
        self._pending_records += len(bodies)
        self._wakeup.set()

    def after(self, lsn: int, on_durable: Durable) -> None:
        self._after.add(lsn, self.durable_lsn, self.failure, on_durable)

    # -- the writer task ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            if self.fsync == "batch":
                nursery.start_soon(self._sync_in_background)
            task_status.started()
            await self._write()

    async def _write(self) -> None:
        try:
            while True:
                if self._sync_error is not None and self.failure is None:
                    self._fail_sync()
                if not self._pending or self.failure is not None:
                    await self._wakeup.wait()
                    self._wakeup = trio.Event()
                    continue
                await self._commit(self._take())
        finally:
            # Stopped (shutdown): callers of changes still queued wait for an answer that no
            # write will bring; tell them these were not recorded. (A batch already in a worker
            # thread finishes first: that call cannot be cancelled.)
            if self._pending or self._after:
                stopped = OSError("the journal stopped before this change was written")
                pending, self._pending, self._pending_records = self._pending, [], 0
                for _, _, on_durable in pending:
                    on_durable(stopped)
                self._after.fail(stopped)

    def _take(self) -> list[tuple[int, list[bytes], Durable]]:
        """The next batch: everything queued, or at most `batch_records_max` records of it."""
        if self._pending_records <= self.batch_records_max:
            batch, self._pending, self._pending_records = self._pending, [], 0
            return batch
        taken = 0
        for count, (_, bodies, _) in enumerate(self._pending, 1):
            taken += len(bodies)
            if taken >= self.batch_records_max:
                break
        batch, self._pending = self._pending[:count], self._pending[count:]
        self._pending_records -= taken
        return batch

    async def _commit(self, batch: list[tuple[int, list[bytes], Durable]]) -> None:
        first_lsn = batch[0][0]
        bodies = [body for _, part, _ in batch for body in part]
        sync = self.fsync == "always"
        try:
            if self._write_inline and not self.writer.rotation_due() and sum(map(len, bodies)) <= INLINE_WRITE_BYTES_MAX:
                self.writer.write(first_lsn, bodies, sync)
            elif self._own_thread:
                await self._write_in_thread(batch, first_lsn, bodies, sync)
                return  # answered already
            else:
                await self.run_blocking(self.writer.write, first_lsn, bodies, sync)
        except trio.Cancelled:
            # Stopped before the write began (a worker thread, once begun, is waited for): the batch
            # is queued again, so that the stop answers it with the others.
            self._pending[:0] = batch
            self._pending_records += len(bodies)
            raise
        except OSError as error:
            log.error("the journal cannot write (%s): refusing changes until the disk works again", error)
            self._fail(error, batch)
            return
        self._written(batch, first_lsn + len(bodies) - 1, sync)

    async def _write_in_thread(self, batch: list[tuple[int, list[bytes], Durable]], first_lsn: int, bodies: list[bytes], sync: bool) -> None:
        """Write (and fsync when `sync`) in one of trio's cached worker threads; answer the batch's callers as it comes back.

        What `trio.to_thread.run_sync` does, less what the writer does not need, each on the path
        of every answer under `always`: its capacity limiter's checkpoint (a pass of the event loop
        between taking the batch and starting its write), the copy of the context, the thread's
        name set for each call. And the callers are answered in the callback that brings the
        thread's result back to the loop, so they run in the loop's next pass, beside the writer
        task, not one pass after it. As with `trio.to_thread.run_sync`, a write once begun is
        waited for even when the writer is cancelled; an OSError is raised here for `_commit`.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        token = trio.lowlevel.current_trio_token()
        task = trio.lowlevel.current_task()
        last_lsn = first_lsn + len(bodies) - 1

        def back(result: outcome.Outcome[None]) -> None:  # on the loop
            if isinstance(result, outcome.Value):
                # A callback that raises (a bug) is raised in the writer task, as it would be
                # had the writer called it; never in trio's own callback.
                result = outcome.capture(self._written, batch, last_lsn, sync)
            trio.lowlevel.reschedule(task, result)

        def deliver(result: outcome.Outcome[None]) -> None:  # in the worker thread
            token.run_sync_soon(back, result)

        trio.lowlevel.start_thread_soon(functools.partial(self.writer.write, first_lsn, bodies, sync), deliver)
        await trio.lowlevel.wait_task_rescheduled(_wait_for_the_thread)

    def _written(self, batch: list[tuple[int, list[bytes], Durable]], last_lsn: int, sync: bool) -> None:
        """`batch` is written (and fsynced under `always`) through `last_lsn`: answer its callers."""
        self.batches += 1
        self.durable_lsn = last_lsn
        if sync:
            self.synced_lsn = self.durable_lsn
        elif self.fsync == "batch":
            self._unsynced.set()
        for _, _, on_durable in batch:
            on_durable(None)
        self._after.reached(last_lsn)

    async def _sync_in_background(self) -> None:
        """`batch`: fsync what was written, each fsync beginning at most `batch_interval_ms` after the last began.

        The interval runs from the start of an fsync, so on a disk slower than the interval the
        fsyncs follow each other without a pause. A failure is handed to the writer task, which
        acts on it between two writes (a repair must not run beside a write).
        """
        while True:
            if self._sync_error is not None or self.failure is not None or self.synced_lsn >= self.durable_lsn:
                await self._unsynced.wait()
                self._unsynced = trio.Event()
                continue
            due = self._synced_at + self.batch_interval_s
            if trio.current_time() < due:
                await trio.sleep_until(due)
            target, epoch = self.writer.written, self.writer.epoch
            assert target is not None
            started = trio.current_time()
            try:
                await self.run_blocking(self.writer.sync_through, target, epoch)
            except OSError as error:
                log.error("the journal's background fsync failed (%s): refusing changes until the disk works again", error)
                self._sync_error = error
                self._wakeup.set()
                continue
            if epoch == self.writer.epoch:  # not overtaken by a repair
                self._synced_at = started
                self.synced_lsn = max(self.synced_lsn, target.next_lsn - 1)
                self.background_syncs += 1

    def _fail_sync(self) -> None:
        error, self._sync_error = self._sync_error, None
        assert error is not None
        self._fail(error, [])

    def _fail(self, error: BaseException, batch: list[tuple[int, list[bytes], Durable]]) -> None:
        self.failure = error
        waiting = batch + self._pending
        self._pending, self._pending_records = [], 0
        for _, _, on_durable in waiting:
            on_durable(error)
        self._after.fail(error)
        self.failed.set()

    # -- repairs (the store calls these) -------------------------------------------------------------

    def reopen(self) -> None:
        """The disk works again and the writer was repaired: take appends from where it ends."""
        assert not self._pending
        self.appended_lsn = self.durable_lsn = self.synced_lsn = self.writer.next_lsn - 1
        self.failed = trio.Event()
        self.failure = None
        self._sync_error = None
        self._wakeup.set()
        self._unsynced.set()

    async def write_now(self, records: list[Record]) -> int:
        """Write and fsync `records` at once, whatever the policy (boot records); returns the LSN.

        Only while nothing else is queued: at a start, or during a repair before `reopen()`.
        """
        assert not self._pending
        if records:
            await self.run_blocking(self._write_now, records)
        self.appended_lsn = self.durable_lsn = self.synced_lsn = self.writer.next_lsn - 1
        return self.durable_lsn

    def _write_now(self, records: list[Record]) -> None:
        if self.check is not None:
            for record in records:
                self.check(record)
        bodies = [orjson.dumps(record) for record in records]
        for start in range(0, len(bodies), self.batch_records_max):
            part = bodies[start : start + self.batch_records_max]
            self.writer.write(self.writer.next_lsn, part, True)
