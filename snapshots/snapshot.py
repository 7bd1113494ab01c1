"""Snapshot files: an image of the whole state at an LSN, written atomically, verified as a whole.

A snapshot lives in `<data>/snapshots/` and is named by the LSN it covers
(`00000000000000001234.snap`). It uses the WAL's framing (`frame.py`) with the snapshot magic; the
frame's LSN field counts entries 1, 2, 3... and every frame is chained to the one before:

    header   magic "RSSNAP" + record format version, lsn, prev_crc 0
    frame 1  {"type": "snapshot.begin", "lsn": L, "newest_ms": T, "format": 1}
    frames   the state's image: records that the state's `apply` turns back into the state
    frame n  {"type": "snapshot.end", "lsn": L, "entries": n - 2}

`format` in the begin mark is this file layout (begin, entries, end); the version in the header is
the record format of the entries, each checked before it is written and, upgraded from an older
version if need be, after it is read.

A file verifies when every frame is intact and chained, the entries are numbered without a gap,
it begins and ends as above with the right count, and nothing follows the end. Because the
chain runs through every frame, the last crc is a checksum over the whole file.

Written as: temporary file, fsync, rename, fsync of the directory, so a snapshot is either all
there or not there; a leftover `.tmp` is a crash during writing and is deleted at the next start.

Not to be confused with the WAL: a snapshot holds no history, only how things stand at its LSN.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from .disk import Disk
from .frame import (
    FILE_HEADER_BYTES,
    SNAPSHOT_KIND,
    FileHeader,
    Frame,
    decode_file_header,
    encode_file_header,
    encode_frame,
    file_magic,
    file_version,
    read_frame,
)
from .model import RecordFormat

__all__ = [
    "SnapshotError",
    "SnapshotInfo",
    "write_snapshot",
    "load_snapshot",
    "snapshot_name",
    "list_snapshots",
    "snapshot_version",
    "snapshot_point",
]

SNAPSHOT_SUFFIX = ".snap"
FORMAT = 1
# Bytes gathered before each write while writing a snapshot.
WRITE_CHUNK_BYTES = 1 << 20


def snapshot_name(lsn: int) -> str:
    return f"{lsn:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(snap_dir: str) -> list[tuple[int, str]]:
    """(lsn, path) of every snapshot file, oldest first."""
    if not os.path.isdir(snap_dir):
        return []
    found = []
    for name in os.listdir(snap_dir):
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
            found.append((int(stem), os.path.join(snap_dir, name)))
    return sorted(found)


class SnapshotError(Exception):
    """A snapshot that does not verify; names the file and the byte offset."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: byte {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    path: str
    lsn: int
    newest_ms: int
    entries: int
    size_bytes: int
    version: int  # the record format of its entries


def snapshot_version(path: str) -> int | None:
    """The record format version a snapshot file says it holds (None: not a snapshot)."""
    with open(path, "rb") as file:
        return file_version(file.read(8), SNAPSHOT_KIND)


# Bytes read to find a snapshot's begin mark: its header and a first frame of a few dozen bytes.
BEGIN_READ_BYTES = 4096


def snapshot_point(path: str) -> tuple[int, int] | None:
    """(LSN, newest_ms) of the snapshot at `path`, from its header and begin mark only; None when
    they do not read (a damaged or foreign file: `load_snapshot` says why when it is loaded).

    `newest_ms` is the newest `at_ms` of the records it covers: the time it stands at, which is
    how a point in time finds the snapshot to start from without loading any other."""
    with open(path, "rb") as file:
        data = file.read(BEGIN_READ_BYTES)
    version = file_version(data, SNAPSHOT_KIND)
    header = None if version is None else decode_file_header(data, bytes(data[:8]))
    if header is None:
        return None
    found = read_frame(data, header.size)
    if not isinstance(found, Frame) or found.lsn != 1 or found.prev_crc != 0:
        return None
    try:
        begin = orjson.loads(found.body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(begin, dict) or begin.get("type") != "snapshot.begin" or begin.get("lsn") != header.first_lsn:
        return None
    newest_ms = begin.get("newest_ms")
    return (header.first_lsn, newest_ms) if isinstance(newest_ms, int) else None


def write_snapshot(
    snap_dir: str,
    lsn: int,
    newest_ms: int,
    records: Iterable[dict],
    record_format: RecordFormat,
    disk: Disk | None = None,
    partition: int = 0,
) -> SnapshotInfo:
    """Write the image `records` as the snapshot at `lsn`, atomically, each record checked first.

    Blocking: run it in a thread. A record `record_format` refuses raises its `ValueError` before
    the snapshot is published (the temporary file is left for the next start to delete).
    """
    disk = disk or Disk()
    check = record_format.check
    path = os.path.join(snap_dir, snapshot_name(lsn))
    temporary = path + ".tmp"
    if os.path.exists(temporary):
        disk.remove(temporary)
    fd = disk.create(temporary)
    size = 0
    try:
        chunk = [encode_file_header(file_magic(SNAPSHOT_KIND, record_format.version), lsn, 0, partition)]
        chunk_bytes = FILE_HEADER_BYTES
        prev_crc = 0
        entries = 0

        def add(index: int, record: dict) -> None:
            nonlocal prev_crc, chunk_bytes, size
            frame, prev_crc = encode_frame(index, prev_crc, orjson.dumps(record))
            chunk.append(frame)
            chunk_bytes += len(frame)
            if chunk_bytes >= WRITE_CHUNK_BYTES:
                disk.write(fd, b"".join(chunk))
                size += chunk_bytes
                chunk.clear()
                chunk_bytes = 0

        add(1, {"type": "snapshot.begin", "lsn": lsn, "newest_ms": newest_ms, "format": FORMAT})
        for entries, record in enumerate(records, 1):
            check(record)
            add(entries + 1, record)
        add(entries + 2, {"type": "snapshot.end", "lsn": lsn, "entries": entries})
        disk.write(fd, b"".join(chunk))
        size += chunk_bytes
        disk.fsync(fd, temporary)
    finally:
        disk.close(fd)
    disk.replace(temporary, path)
    disk.fsync_dir(snap_dir)
    return SnapshotInfo(path, lsn, newest_ms, entries, size, record_format.version)


def _partition_name(header: FileHeader) -> str:
    return "no partition (written before partitions)" if header.size != FILE_HEADER_BYTES else f"partition {header.partition}"


def load_snapshot(path: str, apply: Any, record_format: RecordFormat, partition: int | None = None) -> SnapshotInfo:
    """Verify the snapshot at `path` while feeding its records to `apply`; SnapshotError if bad.

    With `partition`, the file must say it holds that partition's records (a layout-1 file, from
    before partitions, holds no partition's).

    Each entry is upgraded from the file's record format version to `record_format`'s and checked
    before it is applied. The records are applied as they are read, so on an error the caller must throw
    away whatever it applied them to (recovery builds a fresh state for each snapshot it tries).
    """
    with open(path, "rb") as file:
        data = file.read()
    version = file_version(data, SNAPSHOT_KIND)
    header = None if version is None else decode_file_header(data, bytes(data[:8]))
    if header is None:
        raise SnapshotError(path, 0, "not a snapshot, or its header is damaged")
    if partition is not None and (header.size != FILE_HEADER_BYTES or header.partition != partition):
        raise SnapshotError(path, 24, f"a snapshot of {_partition_name(header)}, in the folder of partition {partition}")
    if version > record_format.version:
        raise SnapshotError(path, 6, f"record format {version} is newer than this server's ({record_format.version})")
    check, upgrade = record_format.check, record_format.upgrade
    lsn = header.first_lsn
    offset = header.size
    prev_crc = 0
    index = 0
    begin: dict | None = None
    frames = memoryview(data)  # read_frame slices bodies out of one view of the file
    while True:
        found = read_frame(frames, offset)
        if not isinstance(found, Frame):
            raise SnapshotError(path, offset, f"damaged entry ({found.kind}): the snapshot ends without its end mark")
        index += 1
        if found.lsn != index or found.prev_crc != prev_crc:
            raise SnapshotError(path, offset, f"entry {found.lsn} out of place (expected {index})")
        prev_crc = found.crc
        try:
            record = orjson.loads(found.body)
        except orjson.JSONDecodeError as error:
            raise SnapshotError(path, offset, f"entry {index} is not JSON: {error}") from None
        kind = record.get("type") if isinstance(record, dict) else None
        if index == 1:
            if kind != "snapshot.begin" or record.get("lsn") != lsn or record.get("format") != FORMAT:
                raise SnapshotError(path, offset, "the snapshot does not begin with its begin mark")
            begin = record
        elif kind == "snapshot.end":
            if record.get("entries") != index - 2 or record.get("lsn") != lsn:
                raise SnapshotError(path, offset, f"the end mark counts {record.get('entries')} entries, found {index - 2}")
            if found.end != len(data):
                raise SnapshotError(path, found.end, "bytes after the end mark")
            break
        else:
            try:
                if version != record_format.version:
                    record = upgrade(record, version)
                check(record)
                apply(record)
            except Exception as error:  # a record this kernel cannot apply
                raise SnapshotError(path, offset, f"entry {index} ({kind}) does not apply: {error!r}") from None
        offset = found.end
    assert begin is not None
    return SnapshotInfo(path, lsn, begin["newest_ms"], index - 2, len(data), version)
