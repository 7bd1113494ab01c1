"""A data directory: its lock, its manifest, and one folder (a `Store`) per partition.

    DIR/LOCK                   held by the server that uses the directory
    DIR/runstate.json          the manifest: {"layout": 2, "partitions": P}, written once, atomically
    DIR/partitions/000/        the system partition (API keys): wal/ and snapshots/, as `store.py` keeps them
    DIR/partitions/001/ ...    data partitions 1..P, each the journal and snapshots of its spaces
    DIR/admin.key              the admin credential made at the first start (the server's, not ours)

The manifest fixes P when the directory is made (`--partitions`, 1 by default): a space's
partition is a hash of its id mod P, so a directory keeps the count it was made with, and a start
that asks for another count is refused (`DataDirError`) rather than served with spaces looked for in
the wrong partitions.

Opening. Every partition is recovered first (each in a worker thread, one after another), then the
clock is advanced past the newest time any of them holds, and only then does each record its boot
and restart decisions: every partition decides its restart at the same "now". A partition whose
recovery refuses (damage before the end of its log, a file of another partition in its folder) is
left out with its reason in `refusals`; the others serve, and `reopen` tries it again (the server
does, whenever its files change).

Upgrading. A directory written before partitions holds `DIR/wal/` and `DIR/snapshots/` (record
format 0 or 1) and no manifest. Its first start reads it as one state (upgraded record by record),
splits that state's image into the partitions (`StateModel.place`: a space's records to its
partition, keys to the system one, the boot record to all, so that generations keep counting from
where they were), writes each partition's part as a snapshot at the old log's last LSN, then the
manifest, then deletes the old files, and logs that it did. A crash before the manifest is durable
leaves the old files as they were (the next start throws the half-made partition folders away and
begins again); a crash after it leaves old files that the next start deletes.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from dataclasses import dataclass, field

import trio

from ..actors.shapes import Record
from .disk import Disk, make_private
from .model import Clock, StateModel
from .recovery import Loaded, RecoveryError, file_versions, list_segments, load, snapshot_dir, wal_dir
from .snapshot import list_snapshots, write_snapshot
from .store import RecoveryReport, Store, StoreConfig, _collector_paused, lock_dir
from .wal import RunBlocking

__all__ = [
    "DataDir", "DataDirError", "Manifest", "open_data_dir", "partition_dir", "read_manifest", "LAYOUT",
    "MANIFEST", "PARTITIONS_MAX", "has_old_layout", "make_data_dir", "load_partition",
    "public_reason",
]

log = logging.getLogger("runstate.snapshots")

MANIFEST = "runstate.json"
# The directory's layout: 2 is a folder per partition (layout 1 was one journal, without a manifest).
LAYOUT = 2
PARTITIONS_MAX = 256


class DataDirError(Exception):
    """The directory cannot be used as asked: a damaged manifest, another partition count."""


@dataclass(frozen=True, slots=True)
class Manifest:
    partitions: int  # data partitions (the system partition, 0, comes with them)
    layout: int = LAYOUT

    def numbers(self) -> range:
        return range(self.partitions + 1)


def partition_dir(data_dir: str, number: int) -> str:
    return os.path.join(data_dir, "partitions", f"{number:03d}")


def read_manifest(data_dir: str) -> Manifest | None:
    """The directory's manifest; None when it has none (new, or from before partitions)."""
    path = os.path.join(data_dir, MANIFEST)
    try:
        with open(path, "rb") as file:
            found = json.loads(file.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise DataDirError(f"{path}: cannot read the manifest: {error}") from None
    partitions, layout = (found.get("partitions"), found.get("layout")) if isinstance(found, dict) else (None, None)
    if layout != LAYOUT or not isinstance(partitions, int) or not 1 <= partitions <= PARTITIONS_MAX:
        raise DataDirError(f"{path}: not a manifest this server reads (layout {layout!r}, partitions {partitions!r})")
    return Manifest(partitions)


def _write_manifest(data_dir: str, manifest: Manifest, disk: Disk) -> None:
    path = os.path.join(data_dir, MANIFEST)
    temporary = path + ".tmp"
    if os.path.exists(temporary):
        disk.remove(temporary)
    fd = disk.create(temporary)
    try:
        disk.write(fd, json.dumps({"layout": manifest.layout, "partitions": manifest.partitions}).encode() + b"\n")
        disk.fsync(fd, temporary)
    finally:
        disk.close(fd)
    disk.replace(temporary, path)
    disk.fsync_dir(data_dir)


def load_partition(
    data_dir: str, model: StateModel, number: int, *, repair: bool = False, through_lsn: int | None = None, disk: Disk | None = None
) -> Loaded:
    """Partition `number` of `data_dir` read as a start reads it (`recovery.load` on its folder).

    Blocking. Options as `load`'s (`repair` defaults to False: nothing is changed)."""
    return load(partition_dir(data_dir, number), model, partition=number, repair=repair, through_lsn=through_lsn, disk=disk)


def has_old_layout(data_dir: str) -> bool:
    """Whether `data_dir` holds files of the layout before partitions (`DIR/wal`, `DIR/snapshots`)."""
    return bool(list_segments(wal_dir(data_dir)) or list_snapshots(snapshot_dir(data_dir)))


def make_data_dir(data_dir: str, manifest: Manifest, disk: Disk | None = None) -> None:
    """The folders of a new directory, then its manifest (a start does this for a new directory).

    Blocking."""
    disk = disk or Disk()
    make_private(os.path.join(data_dir, "partitions"))
    for number in manifest.numbers():
        for folder in (wal_dir(partition_dir(data_dir, number)), snapshot_dir(partition_dir(data_dir, number))):
            make_private(folder)
    disk.fsync_dir(os.path.join(data_dir, "partitions"))
    _write_manifest(data_dir, manifest, disk)


def _upgrade_old_layout(data_dir: str, model: StateModel, manifest: Manifest, disk: Disk) -> tuple[list[int], int]:
    """Split a directory of one journal into `manifest`'s partitions (see the module docstring).

    Returns the record format versions it held and the LSN the partitions' snapshots were made at.
    Blocking: run it in a worker thread.
    """
    assert model.place is not None, "a model without `place` cannot split a directory into partitions"
    folders = os.path.join(data_dir, "partitions")
    if os.path.isdir(folders):  # half made by a start that crashed before the manifest
        shutil.rmtree(folders)
    versions = sorted(set(file_versions(data_dir).values()))
    loaded: Loaded = load(data_dir, model, repair=True, disk=disk)
    lsn = max(loaded.last_lsn, 1)
    parts: dict[int, list[Record]] = {number: [] for number in manifest.numbers()}
    for record in loaded.state.image():
        for number in model.place(record, manifest.partitions):
            parts[number].append(record)
    make_private(folders)
    for number, records in parts.items():
        folder = partition_dir(data_dir, number)
        for sub in (wal_dir(folder), snapshot_dir(folder)):
            make_private(sub)
        write_snapshot(snapshot_dir(folder), lsn, loaded.newest_ms, records, model.records, disk, partition=number)
    disk.fsync_dir(folders)
    _write_manifest(data_dir, manifest, disk)
    _remove_old_layout(data_dir, disk)
    return versions, lsn


def _remove_old_layout(data_dir: str, disk: Disk) -> None:
    """Delete the files of the layout before partitions (every record in them is in the partitions now).

    Copies of damaged files that a recovery set aside (`.broken`) are kept where they are."""
    for folder, files in ((wal_dir(data_dir), list_segments(wal_dir(data_dir))), (snapshot_dir(data_dir), list_snapshots(snapshot_dir(data_dir)))):
        for _, path in files:
            disk.remove(path)
        if os.path.isdir(folder):
            for name in os.listdir(folder):
                if name.endswith(".tmp"):
                    disk.remove(os.path.join(folder, name))
            if not os.listdir(folder):
                os.rmdir(folder)
    disk.fsync_dir(data_dir)


# A place inside a file, as some reasons of `RecoveryError` name one: "(record 7 at byte 120 is intact)".
_WHERE = re.compile(r" \([^()]*\bbyte \d+[^()]*\)")


def public_reason(error: BaseException) -> str:
    """Why a partition cannot be opened, as a partition's refusal says it to anyone who asks
    (`/healthz` without a key, the 503 of its spaces): what is wrong, never where (the server's
    path, a file, a byte offset). The log line and `runstate check --data-dir` say where."""
    reason = getattr(error, "reason", None)  # RecoveryError, SnapshotError: (path, offset, reason)
    if isinstance(reason, str):
        return _WHERE.sub("", reason)
    if isinstance(error, OSError):
        return error.strerror or type(error).__name__  # (its str() names the file)
    return str(error) or type(error).__name__


@dataclass(slots=True)
class DataDir:
    """An open data directory: the store of each partition that serves, and why the others do not."""

    path: str
    manifest: Manifest
    config: StoreConfig
    disk: Disk
    model: StateModel
    clock: Clock
    run_blocking: RunBlocking | None
    lock_fd: int | None
    stores: dict[int, Store] = field(default_factory=dict)
    refusals: dict[int, str] = field(default_factory=dict)
    # Partitions refused because the disk failed (full, an I/O error), not for what their files
    # hold: their files may be whole, and a try once the disk works may open them unchanged.
    disk_failures: set[int] = field(default_factory=set)
    upgraded_from: list[int] = field(default_factory=list)

    @property
    def partitions(self) -> int:
        return self.manifest.partitions

    def reports(self) -> dict[int, RecoveryReport]:
        return {number: store.report for number, store in self.stores.items() if store.report is not None}

    def _store(self, number: int) -> Store:
        return Store(
            partition_dir(self.path, number), self.config, self.disk, self.model, self.clock, None, self.run_blocking,
            partition=number,
        )

    async def _open_all(self) -> None:
        loaded: dict[int, tuple[Store, Loaded]] = {}
        for number in self.manifest.numbers():
            store = self._store(number)
            try:
                loaded[number] = (store, await store.recover())
            except RecoveryError as error:
                self._refuse(number, "its journal cannot be recovered", error)
        newest = max((found.newest_ms for _, found in loaded.values()), default=0)
        self.clock.advance_anchor_to(newest)
        for number, (store, found) in loaded.items():
            try:
                await store.begin(found)
            except (OSError, RecoveryError) as error:
                store.close()
                self._refuse(number, "it cannot begin its journal", error)
                continue
            store.log_recovery()
            self.stores[number] = store

    def _refuse(self, number: int, what: str, error: BaseException) -> None:
        """Leave partition `number` out: the log says what and where, `refusals` what alone."""
        self.refused(number, what, error)
        reason = f"{what}: {error}"
        log.error(
            "partition %d does not serve: %s", number, reason,
            extra={"event": "partition_down", "fields": {"partition": number, "reason": reason}},
        )

    def refused(self, number: int, what: str, error: BaseException) -> str:
        """Record why partition `number` is refused (`what` went wrong, with `error`); returns the reason."""
        if isinstance(error, OSError):  # the disk, not the files: tried again until it works
            self.disk_failures.add(number)
            hint = "it is tried again every few seconds until the disk works"
        else:
            self.disk_failures.discard(number)
            hint = "the server's log and `runstate check` say where"
        reason = self.refusals[number] = f"{what}: {public_reason(error)}; {hint}"
        return reason

    async def reopen(self, number: int) -> Store:
        """Try again to open partition `number` (it did not open); raises what refuses it still.

        Its restart is decided at the clock's time now, which is past everything it holds (the
        clock never goes back)."""
        assert number in self.refusals and number not in self.stores
        store = self._store(number)
        found = await store.recover()
        self.clock.advance_anchor_to(found.newest_ms)
        try:
            await store.begin(found)
        except BaseException:
            store.close()
            raise
        store.log_recovery()
        del self.refusals[number]
        self.disk_failures.discard(number)
        self.stores[number] = store
        log.warning("partition %d serves again", number, extra={"event": "partition_up", "fields": {"partition": number}})
        return store

    def files_of(self, number: int) -> tuple[tuple[str, int, int], ...]:
        """What partition `number`'s files look like now (names, sizes, times): when it changes,
        someone repaired them, and `reopen` is worth trying."""
        found: list[tuple[str, int, int]] = []
        folder = partition_dir(self.path, number)
        for sub in (wal_dir(folder), snapshot_dir(folder)):
            if os.path.isdir(sub):
                for entry in sorted(os.scandir(sub), key=lambda entry: entry.name):
                    info = entry.stat()
                    found.append((entry.name, info.st_size, info.st_mtime_ns))
        return tuple(found)

    async def snapshot(self) -> dict[int, int]:
        """A snapshot of every partition that serves, now; the LSN of each (0 where none was needed)."""
        return {number: await store.snapshot() for number, store in self.stores.items()}

    def close(self) -> None:
        for store in self.stores.values():
            store.close()
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


async def open_data_dir(
    data_dir: str,
    *,
    model: StateModel,
    clock: Clock,
    partitions: int | None = None,
    fsync: str = "always",
    config: StoreConfig | None = None,
    disk: Disk | None = None,
    run_blocking: RunBlocking | None = None,
) -> DataDir:
    """Lock `data_dir`, make or read its manifest (upgrading a directory from before partitions),
    and recover and begin every partition.

    Raises `StoreLocked` or `DataDirError`; a partition that cannot be recovered does not raise: it
    is in `refusals`. `partitions` is the count a new directory is made with (None: 1); an existing
    one must have been made with it, if it is given.
    """
    config = config or StoreConfig(fsync=fsync)
    disk = disk or Disk(config.fsync_slow_ms)
    blocking = run_blocking or trio.to_thread.run_sync
    lock_fd = await blocking(lock_dir, data_dir)
    try:
        manifest = read_manifest(data_dir)
        upgraded_from: list[int] = []
        if manifest is None:
            manifest = Manifest(partitions or 1)
            if not 1 <= manifest.partitions <= PARTITIONS_MAX:
                raise DataDirError(f"partitions must be from 1 to {PARTITIONS_MAX}, got {manifest.partitions}")
            if has_old_layout(data_dir):
                with _collector_paused():
                    upgraded_from, lsn = await blocking(_upgrade_old_layout, data_dir, model, manifest, disk)
                log.warning(
                    "upgrading %s from record format %s, one journal, to %d partition(s) of record format %d: "
                    "the state at LSN %d is now a snapshot in each", data_dir, ", ".join(map(str, upgraded_from)),
                    manifest.partitions, model.records.version, lsn,
                    extra={"event": "upgrade", "fields": {"from": upgraded_from, "to": model.records.version,
                                                          "partitions": manifest.partitions, "lsn": lsn}},
                )
            else:
                await blocking(make_data_dir, data_dir, manifest, disk)
        else:
            if partitions is not None and partitions != manifest.partitions:
                raise DataDirError(
                    f"{data_dir} was made with {manifest.partitions} partition(s); the count is fixed when a "
                    f"directory is made, so start it without --partitions (or with --partitions {manifest.partitions})"
                )
            if has_old_layout(data_dir):  # an upgrade that crashed after its manifest was durable
                await blocking(_remove_old_layout, data_dir, disk)
        opened = DataDir(data_dir, manifest, config, disk, model, clock, run_blocking, lock_fd, upgraded_from=upgraded_from)
    except BaseException:
        os.close(lock_fd)
        raise
    try:
        await opened._open_all()
    except BaseException:
        opened.close()
        raise
    return opened

