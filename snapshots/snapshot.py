"""Snapshot files: an image of the whole state at an LSN, written atomically, verified as a whole.

A snapshot lives in `<data>/snapshots/` and is named by the LSN it covers
(`00000000000000001234.snap`). It uses the WAL's framing (`frame.py`) with the snapshot magic; the
frame's LSN field counts entries 1, 2, 3... and every frame is chained to the one before:

    header   magic "RSSNAP", lsn, prev_crc 0
    frame 1  {"type": "snapshot.begin", "lsn": L, "newest_ms": T, "format": 1}
    frames   the state's image: records that `KernelState.apply` turns back into the state
    frame n  {"type": "snapshot.end", "lsn": L, "entries": n - 2}

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
    SNAPSHOT_MAGIC,
    Frame,
    decode_file_header,
    encode_file_header,
    encode_frame,
    read_frame,
)

__all__ = ["SnapshotError", "SnapshotInfo", "write_snapshot", "load_snapshot", "snapshot_name", "list_snapshots"]

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


def write_snapshot(
    snap_dir: str, lsn: int, newest_ms: int, records: Iterable[dict], disk: Disk | None = None
) -> SnapshotInfo:
    """Write the image `records` as the snapshot at `lsn`, atomically. Blocking: run it in a thread."""
    disk = disk or Disk()
    path = os.path.join(snap_dir, snapshot_name(lsn))
    temporary = path + ".tmp"
    if os.path.exists(temporary):
        disk.remove(temporary)
    fd = disk.create(temporary)
    size = 0
    try:
        chunk = [encode_file_header(SNAPSHOT_MAGIC, lsn, 0)]
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
            add(entries + 1, record)
        add(entries + 2, {"type": "snapshot.end", "lsn": lsn, "entries": entries})
        disk.write(fd, b"".join(chunk))
        size += chunk_bytes
        disk.fsync(fd, temporary)
    finally:
        disk.close(fd)
    disk.replace(temporary, path)
    disk.fsync_dir(snap_dir)
    return SnapshotInfo(path, lsn, newest_ms, entries, size)


def load_snapshot(path: str, apply: Any) -> SnapshotInfo:
    """Verify the snapshot at `path` while feeding its records to `apply`; SnapshotError if bad.

    The records are applied as they are read, so on an error the caller must throw away whatever
    it applied them to (recovery builds a fresh state for each snapshot it tries).
    """
    with open(path, "rb") as file:
        data = file.read()
    header = decode_file_header(data, SNAPSHOT_MAGIC)
    if header is None:
        raise SnapshotError(path, 0, "not a snapshot, or its header is damaged")
    lsn = header[0]
    offset = FILE_HEADER_BYTES
    prev_crc = 0
    index = 0
    begin: dict | None = None
    while True:
        found = read_frame(data, offset)
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
                apply(record)
            except Exception as error:  # a record this kernel cannot apply
                raise SnapshotError(path, offset, f"entry {index} ({kind}) does not apply: {error!r}") from None
        offset = found.end
    assert begin is not None
    return SnapshotInfo(path, lsn, begin["newest_ms"], index - 2, len(data))
