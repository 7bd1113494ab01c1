"""Recovery: the newest snapshot that verifies, then the WAL after it, through the state's `apply`.

`load()` reads a data directory (`<data>/snapshots/`, `<data>/wal/`) into a fresh state made by the
`StateModel` it is given. It reads every WAL segment that holds records after the snapshot, checks
each frame (length, crc, LSN, chain, see `frame.py`), reads each record as the model's record format
spells it (upgraded from the version its file's header names, then checked), and applies it
through the same `apply` the live kernel uses. What it does
when something is not as written is decided by this table, one test per row
(`tests/durability/test_wal_recovery.py`):

| # | What recovery finds                                                   | Decision                                         |
|---|-----------------------------------------------------------------------|--------------------------------------------------|
| 1 | The last segment ends exactly after an intact frame (clean end)       | Use everything.                                  |
| 2 | The last segment goes on with zero bytes only, from a frame boundary  | Truncate the zeros, log it. Nothing is lost: no  |
|   | to its end (zero-filled tail: preallocated or never written)          | record was ever there.                           |
| 3 | The last segment ends in a frame that is cut short or fails its crc,  | Torn final batch: copy the segment aside as      |
|   | and every intact frame after it belongs to the same batch             | `<name>.broken`, truncate at the last intact     |
|   | (a crash while writing the last batch)                                | frame, log file, offset and bytes dropped. That  |
|   |                                                                       | batch was never acknowledged (ack after durable).|
| 4 | A damaged frame followed by an intact frame of a later batch, or a    | Refuse to start: `RecoveryError` naming the file |
|   | damaged frame in any segment but the last (bad record before the tail)| and the byte offset of the damaged frame.        |
| 5 | An intact frame whose LSN is not the next one, or whose link to the   | Refuse to start (file, offset): an LSN gap or a  |
|   | frame before it is wrong                                              | record out of place.                             |
| 6 | A segment that does not begin right after the one before it (or the   | Refuse to start (file, offset 0): records are    |
|   | log begins after the snapshot's LSN + 1)                              | missing.                                         |
| 7 | The last segment's header is short, zero or damaged, and no intact    | A crash while starting a segment: move it aside  |
|   | frame follows it                                                      | as `.broken` (it holds no record), log it; an    |
|   |                                                                       | empty or all-zero one is deleted (nothing to     |
|   |                                                                       | keep).                                           |
| 8 | The newest snapshot does not verify (crc, count, end mark)            | Log it and try the next older one; with none     |
|   |                                                                       | left, replay the WAL from LSN 1 (row 6 if it no  |
|   |                                                                       | longer begins there). A `.tmp` is deleted.       |
| 9 | An intact frame whose body is not JSON, is not a record of the format | Refuse to start (file, offset).                  |
|   | (unknown type, missing or unknown fields), or does not apply          |                                                  |
|10 | A segment or snapshot of a record format newer than the server's      | Refuse to start (file, offset 6: the version).   |
|11 | A partition's segment or snapshot whose header names another partition | Refuse to start (file, offset 24: the partition) |
|   | (or none: a file from before partitions)                              | : it was put in the wrong folder.                |

Segments wholly before the snapshot are not read (`runstate check` reads them all). Frames at or
before the snapshot's LSN are checked but not applied. A WAL that ends before the snapshot's LSN
(possible after a power cut under `--fsync off`) is accepted: the snapshot covers it, and the
writer starts a new segment after the snapshot.

Row 3 relies on one batch being written only after the one before it is durable (`always`,
`batch`); under `--fsync off` a power cut can tear several batches, which row 4 then refuses:
`runstate check` shows where, and truncating there by hand is the way on.

With `repair=False` nothing is changed on disk: the repairs that a start would make are reported
(`runstate check`). Blocking: run it in a worker thread.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson

from ..actors.shapes import Record
from .disk import Disk
from .frame import (
    FILE_HEADER_BYTES,
    SNAPSHOT_KIND,
    WAL_KIND,
    Frame,
    decode_file_header,
    file_version,
    find_intact_frame,
    read_frame,
    skip_frames,
)
from .model import StateModel
from .snapshot import SnapshotError, list_snapshots, load_snapshot, snapshot_version
from .wal import SEGMENT_SUFFIX

__all__ = [
    "RecoveryError", "Repair", "Loaded", "load", "list_segments", "wal_dir", "snapshot_dir", "file_versions",
    "replay_batch", "Replayed",
]

log = logging.getLogger("runstate.snapshots")

# Shown each record after the snapshot before it is applied, with its LSN and the state so far:
# False stops the reading there (`load`).
Tap = Callable[[int, Record, Any], bool]


def wal_dir(data_dir: str) -> str:
    return os.path.join(data_dir, "wal")


def snapshot_dir(data_dir: str) -> str:
    return os.path.join(data_dir, "snapshots")


def list_segments(directory: str) -> list[tuple[int, str]]:
    """(first LSN, path) of every segment file, in LSN order."""
    if not os.path.isdir(directory):
        return []
    found = []
    for name in os.listdir(directory):
        stem = name[: -len(SEGMENT_SUFFIX)]
        if name.endswith(SEGMENT_SUFFIX) and len(stem) == 20 and stem.isdigit():
            found.append((int(stem), os.path.join(directory, name)))
    return sorted(found)


def file_versions(data_dir: str) -> dict[str, int]:
    """The record format version of every snapshot and WAL segment in `data_dir`, by path.

    Only headers are read. A file whose header does not name a version (damaged, or a segment
    begun by a crash) is left out: recovery decides about it.
    """
    found: dict[str, int] = {}
    files = [(SNAPSHOT_KIND, path) for _, path in list_snapshots(snapshot_dir(data_dir))]
    files += [(WAL_KIND, path) for _, path in list_segments(wal_dir(data_dir))]
    for kind, path in files:
        with open(path, "rb") as file:
            version = file_version(file.read(8), kind)
        if version is not None:
            found[path] = version
    return found


class RecoveryError(Exception):
    """The data directory cannot be used as it is: names the file and the byte offset."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: byte {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


@dataclass(slots=True)
class Repair:
    """A change to the tail of the log that a start makes (row 2, 3 or 7)."""

    kind: str  # "zero tail", "torn tail", "broken segment header"
    path: str
    offset: int  # where the log now ends in that file
    dropped_bytes: int
    broken_copy: str | None = None
    done: bool = False

    def describe(self) -> str:
        copy = f", copy kept as {self.broken_copy}" if self.broken_copy else ""
        return f"{self.kind} in {self.path} at byte {self.offset}: {self.dropped_bytes} bytes dropped{copy}"


@dataclass(slots=True)
class Loaded:
    state: Any
    snapshot_lsn: int = 0
    snapshot_path: str | None = None
    last_lsn: int = 0  # the LSN of the last record in the log (or the snapshot's, if later)
    prev_crc: int = 0  # the crc of that record: the link for the next segment
    newest_ms: int = 0  # the newest `at_ms` seen
    records: int = 0  # WAL records applied on top of the snapshot
    segments: int = 0
    wal_bytes: int = 0
    repairs: list[Repair] = field(default_factory=list)
    bad_snapshots: list[str] = field(default_factory=list)
    # The record format versions of the files read (the snapshot used and the segments replayed).
    versions: set[int] = field(default_factory=set)
    # The older record formats a start found and rewrote in the current one (`Store.recover`).
    upgraded_from: list[int] = field(default_factory=list)
    snapshot_entries: int = 0  # the entries of the snapshot used (its image's size)


def load(
    data_dir: str,
    model: StateModel,
    *,
    repair: bool,
    through_lsn: int | None = None,
    disk: Disk | None = None,
    partition: int | None = None,
    snapshot_lsn_max: int | None = None,
    tap: Tap | None = None,
    check_covered: bool = True,
) -> Loaded:
    """Read `data_dir` into `model.make_state()`; repair the tail when `repair`, else only report.

    With `through_lsn`, stop after that record (the snapshot builder reads only what is durable)
    and treat any damage before it as fatal. With `partition`, every file must say it holds that
    partition's records (a partition's folder); without, the files of a data directory written
    before partitions are read. Raises `RecoveryError` for rows 4, 5, 6, 9 and 11.

    A state as it was at a past point (`history.py`) is read the same way, with two more
    arguments: `snapshot_lsn_max`, the newest snapshot it may start from, and `tap`, shown every
    record after the snapshot, read and checked, before it is applied, with its LSN and the state
    so far: when it answers False the log is read no further (that record is not applied, and the
    log counts as ending before it). It also passes `check_covered=False`: the frames the snapshot
    covers are walked by their headers (`frame.skip_frames`), not checksummed.
    """
    disk = disk or Disk()
    snaps = snapshot_dir(data_dir)
    if repair and os.path.isdir(snaps):
        for name in os.listdir(snaps):
            if name.endswith(".tmp"):  # a crash while writing a snapshot (row 8)
                log.warning("removing %s, left by a crash while writing a snapshot", name)
                disk.remove(os.path.join(snaps, name))
    newest_allowed = min(through_lsn if through_lsn is not None else math.inf, snapshot_lsn_max if snapshot_lsn_max is not None else math.inf)
    loaded = _load_snapshot(snaps, model, newest_allowed, partition)
    _replay_wal(wal_dir(data_dir), loaded, model, repair, through_lsn, disk, partition, tap, check_covered)
    return loaded


def _load_snapshot(snaps: str, model: StateModel, newest_allowed: float, partition: int | None) -> Loaded:
    bad: list[str] = []
    for lsn, path in reversed(list_snapshots(snaps)):
        if lsn > newest_allowed:
            continue
        version = snapshot_version(path)
        if version is not None and version > model.records.version:  # row 10, not row 8: never fall back
            raise RecoveryError(
                path, 6, f"record format {version} is newer than this server's ({model.records.version})"
            )
        state = model.make_state()
        try:
            info = load_snapshot(path, state.apply, model.records, partition)
        except (SnapshotError, OSError) as error:
            log.error("snapshot does not verify, trying an older one: %s", error)
            bad.append(str(error))
            continue
        return Loaded(state, lsn, path, lsn, 0, info.newest_ms, bad_snapshots=bad, versions={info.version}, snapshot_entries=info.entries)
    return Loaded(model.make_state(), bad_snapshots=bad)


def _replay_wal(
    directory: str, loaded: Loaded, model: StateModel, repair: bool, through_lsn: int | None, disk: Disk,
    partition: int | None, tap: Tap | None = None, check_covered: bool = True,
) -> None:
    segments = list_segments(directory)
    snapshot_lsn = loaded.snapshot_lsn
    # Skip the segments wholly covered by the snapshot: the next one starts at or before L + 1.
    start = 0
    while start + 1 < len(segments) and segments[start + 1][0] <= snapshot_lsn + 1:
        start += 1
    segments = segments[start:]
    if segments and segments[0][0] > snapshot_lsn + 1:
        first_lsn, path = segments[0]
        raise RecoveryError(
            path, 0, f"the log begins at LSN {first_lsn} but the snapshot ends at {snapshot_lsn}: records are missing"
        )
    state_apply = loaded.state.apply
    record_format = model.records
    check, upgrade, current = record_format.check, record_format.upgrade, record_format.version
    last_lsn: int | None = None  # of the log read so far (None before the first segment)
    stop_lsn = math.inf if through_lsn is None else through_lsn  # the last record to read
    prev_crc = 0
    tapped = False  # the tap stopped the reading
    for number, (name_lsn, path) in enumerate(segments):
        is_last = number == len(segments) - 1
        with open(path, "rb") as file:
            data = file.read()
        loaded.segments += 1
        loaded.wal_bytes += len(data)
        version = file_version(data, WAL_KIND)
        header = None if version is None else decode_file_header(data, bytes(data[:8]))
        if header is not None and version is not None and version > current:
            raise RecoveryError(path, 6, f"record format {version} is newer than this server's ({current})")
        if header is None or header[0] != name_lsn:
            if is_last and find_intact_frame(data, 0, name_lsn) is None:
                _repair(loaded, Repair("broken segment header", path, 0, len(data)), repair, disk, data, remove=True)
                break
            reason = "damaged segment header" if header is None else f"header says LSN {header[0]}, name says {name_lsn}"
            raise RecoveryError(path, 0, reason)
        assert version is not None, "a header decodes only from a file that names its version"
        first_lsn, link, _, header_size = header
        if partition is not None and (header_size != FILE_HEADER_BYTES or header.partition != partition):
            held = f"partition {header.partition}" if header_size == FILE_HEADER_BYTES else "no partition (written before partitions)"
            raise RecoveryError(path, 24, f"a segment of {held}, in the folder of partition {partition}")
        loaded.versions.add(version)
        if last_lsn is not None:
            if first_lsn == last_lsn + 1:
                if link != prev_crc:
                    raise RecoveryError(path, 0, "segment is not linked to the one before it (crc chain broken)")
            elif not last_lsn < first_lsn <= snapshot_lsn + 1:
                raise RecoveryError(path, 0, f"segment begins at LSN {first_lsn}, the one before ends at {last_lsn}")
        expected = first_lsn
        prev_crc = link
        offset = header_size
        frames = memoryview(data)  # read_frame slices bodies out of one view of the segment
        size = len(data)
        if not check_covered and expected <= snapshot_lsn:
            offset, expected, prev_crc = skip_frames(frames, offset, expected, prev_crc, snapshot_lsn if through_lsn is None else min(snapshot_lsn, through_lsn))
        newest_ms = loaded.newest_ms
        older = version != current  # records to upgrade as they are read
        # The loop runs once per record: what it needs is in locals, the frame is unpacked once.
        while offset < size and expected <= stop_lsn:
            found = read_frame(frames, offset)
            if found.__class__ is not Frame:
                if not is_last or through_lsn is not None:
                    raise RecoveryError(path, offset, f"damaged record ({found.kind}) before the end of the log")  # type: ignore[union-attr]  # not a Frame, so the damage found: a class test does not narrow, and is kept for speed here
                _repair(loaded, _tail_decision(path, data, offset, expected), repair, disk, data)
                break
            _, lsn, frame_prev_crc, crc, body, end, _ = found
            if lsn != expected:
                raise RecoveryError(path, offset, f"record has LSN {lsn}, expected {expected} (a gap)")
            if frame_prev_crc != prev_crc:
                raise RecoveryError(path, offset, f"record {lsn} is not linked to the one before it")
            if lsn > snapshot_lsn:
                try:
                    record = orjson.loads(body)
                    if older:
                        record = upgrade(record, version)
                    check(record)
                except Exception as error:  # not JSON, or not a record of the format
                    raise RecoveryError(path, offset, f"record {lsn} does not apply: {error!r}") from None
                if tap is not None and not tap(lsn, record, loaded.state):
                    tapped = True
                    break
                try:
                    state_apply(record)
                except Exception as error:  # not one that applies
                    raise RecoveryError(path, offset, f"record {lsn} does not apply: {error!r}") from None
                at_ms = record.get("at_ms")
                if at_ms.__class__ is int and at_ms > newest_ms:
                    newest_ms = at_ms
            prev_crc = crc
            expected += 1
            offset = end
        loaded.newest_ms = newest_ms
        # The records applied: the ones read past the snapshot's LSN.
        loaded.records += max(0, expected - max(first_lsn, snapshot_lsn + 1))
        last_lsn = expected - 1
        if expected > stop_lsn or tapped:
            break
    if through_lsn is not None and not tapped and max(last_lsn or 0, snapshot_lsn) < through_lsn:
        raise RecoveryError(directory, 0, f"the log ends at LSN {last_lsn}, before {through_lsn}")
    if last_lsn is not None and last_lsn >= snapshot_lsn:
        loaded.last_lsn, loaded.prev_crc = last_lsn, prev_crc
    else:  # no WAL after the snapshot (or it ends before it): continue from the snapshot
        loaded.last_lsn, loaded.prev_crc = snapshot_lsn, 0


@dataclass(slots=True)
class Replayed:
    """What `replay_batch` applied: the last LSN, the newest `at_ms` among the records, and each
    record's body as it was framed (for a local copy)."""

    last_lsn: int
    newest_ms: int
    bodies: list[bytes]


def replay_batch(data: bytes, first_lsn: int, state_apply: Callable[[Record], None], model: StateModel, where: str) -> Replayed:
    """Apply one batch of frames from a replicated log, as recovery replays a segment.

    `data` is what the leader committed (`frame.encode_frames`, a chain of its own from 0: the
    batches follow each other by their keys' LSNs): every frame must be intact, carry the next LSN
    from `first_lsn` and link to the one before; each record is read as the format spells it,
    checked and applied through `state_apply`, the same `apply` replay uses. Raises
    `RecoveryError(where, offset, reason)` on anything else: a standby that meets it stops
    following rather than diverge.
    """
    prev_crc = 0
    check = model.records.check  # (a replicated log is written in the current format)
    view = memoryview(data)
    offset, expected, newest_ms = 0, first_lsn, 0
    bodies: list[bytes] = []
    while offset < len(data):
        found = read_frame(view, offset)
        if found.__class__ is not Frame:
            raise RecoveryError(where, offset, f"damaged record ({found.kind}) in a batch of the log")  # type: ignore[union-attr]  # not a Frame, so the damage found: a class test does not narrow, and is kept for speed here
        _, lsn, frame_prev_crc, crc, body, end, _ = found
        if lsn != expected:
            raise RecoveryError(where, offset, f"record has LSN {lsn}, expected {expected} (a gap)")
        if frame_prev_crc != prev_crc:
            raise RecoveryError(where, offset, f"record {lsn} is not linked to the one before it")
        raw = bytes(body)
        try:
            record = orjson.loads(raw)
            check(record)
            state_apply(record)
        except Exception as error:  # not JSON, not a record of the format, or not one that applies
            raise RecoveryError(where, offset, f"record {lsn} does not apply: {error!r}") from None
        at_ms = record.get("at_ms")
        if at_ms.__class__ is int and at_ms > newest_ms:
            newest_ms = at_ms
        bodies.append(raw)
        prev_crc, expected, offset = crc, expected + 1, end
    if expected == first_lsn:
        raise RecoveryError(where, 0, "an empty batch")
    return Replayed(expected - 1, newest_ms, bodies)


def _tail_decision(path: str, data: bytes, offset: int, expected: int) -> Repair:
    """Row 2, 3 or 4 for damage at `offset` in the last segment."""
    dropped = len(data) - offset
    if not any(memoryview(data)[offset:]):
        return Repair("zero tail", path, offset, dropped)
    frame = find_intact_frame(data, offset + 1, expected)
    while frame is not None:
        if frame.batch_lsn > expected:  # a later batch was written after the damaged one
            raise RecoveryError(
                path,
                offset,
                f"damaged record before the end of the log (record {frame.lsn} at byte {frame.offset} is intact)",
            )
        frame = find_intact_frame(data, frame.end, frame.lsn + 1)
    return Repair("torn tail", path, offset, dropped)


def _repair(loaded: Loaded, fix: Repair, repair: bool, disk: Disk, data: bytes, remove: bool = False) -> None:
    loaded.repairs.append(fix)
    if any(memoryview(data)[fix.offset:]):  # (bytes dropped that are not all zero: kept aside to look at)
        assert fix.kind != "zero tail", "a zero tail drops zeros only"
        fix.broken_copy = fix.path + ".broken"
    if not repair:
        return
    if remove:
        if fix.broken_copy is None:  # (an empty segment, or zeros: nothing to keep)
            disk.remove(fix.path)
        else:
            disk.replace(fix.path, fix.broken_copy)
        disk.fsync_dir(os.path.dirname(fix.path))
    else:
        if fix.broken_copy:
            disk.copy(fix.path, fix.broken_copy)
        fd = disk.open_write(fix.path)
        try:
            disk.truncate(fd, fix.offset)
            disk.fsync(fd, fix.path)
        finally:
            disk.close(fd)
    fix.done = True
    log.warning("recovery: %s", fix.describe())
