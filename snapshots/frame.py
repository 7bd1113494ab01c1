"""Framing: how records sit in WAL segments and snapshot files. Pure functions over bytes.

A file starts with a 32-byte header, then holds frames back to back:

    file header  kind (6) | version u8 | layout u8 | first_lsn u64 | prev_crc u32 | partition u32
                 | reserved u32 (0) | header_crc u32                                                = 32
    frame        length u32 | lsn u64 | index u32 | prev_crc u32 | crc u32 | body (length)       = 24 + length

All integers are little-endian. The first 8 bytes are the file's magic: its kind (`RSWAL\0` for a
WAL segment, `RSSNAP` for a snapshot), the record format version of the records it holds
(`actors/records.py`: a reader upgrades older records as it reads them), and the layout described
here (2). `partition` names the partition whose records the file holds (`actors/layout.py`), so a
file that strays into another partition's folder is refused, not replayed into the wrong state.

Layout 1 is the same without `partition` and `reserved` (a 24-byte header): the files of record
formats 0 and 1, written before partitions, which are read as partition 0's and upgraded at the
first start. Files written before the version was recorded carry 0 there (their magic was
`RSWAL\0\0\1` and `RSSNAP\0\1`), which is exactly version 0, layout 1.

`index` is the frame's place in its batch (the frames one write put down together: 0, 1, 2...), so `lsn - index` is the first LSN of its batch. Recovery uses it to tell
a torn final batch (whose later frames may reach the disk before its earlier ones) from damage
further back: only the last batch can be half written, since a batch is written only after the one
before it is durable. `body` is one record as orjson. `crc` is CRC-32 (zlib) over the
first 20 header bytes and the body, so a damaged length, LSN or link is caught as surely as a
damaged body. `prev_crc` chains each frame to the one before it (the file header carries the link
into the previous segment): a frame that verifies on its own but belongs elsewhere (left over from
an older run, or out of order) breaks the chain. The link is stored rather than only mixed into
the checksum so that a reader can still tell "this frame is intact" apart from "this frame is in
the right place", which is what recovery needs to tell a torn tail from damage in the middle.

A length of zero never occurs (a body is a JSON object, at least `{}`), so a zeroed header reads as
"nothing here": that is how a preallocated or zero-filled tail is recognised. A length above
`BODY_BYTES_MAX` or above the bytes left is rejected before anything is allocated.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

__all__ = [
    "BODY_BYTES_MAX",
    "FILE_HEADER_BYTES",
    "FRAME_HEADER_BYTES",
    "WAL_KIND",
    "SNAPSHOT_KIND",
    "FRAME_LAYOUT",
    "file_magic",
    "file_version",
    "FileHeader",
    "header_bytes",
    "Frame",
    "Damage",
    "encode_frame",
    "encode_frames",
    "encode_file_header",
    "decode_file_header",
    "read_frame",
    "find_intact_frame",
    "skip_frames",
]

WAL_KIND = b"RSWAL\x00"
SNAPSHOT_KIND = b"RSSNAP"
FRAME_LAYOUT = 2
# The header's size in each layout this code reads.
_HEADER_BYTES = {1: 24, 2: 32}

# The largest body a frame may carry. Records are far smaller (a request is at most 1 MiB); this
# bounds what a damaged length can make a reader allocate.
BODY_BYTES_MAX = 16 * 1024 * 1024

_FILE_HEADER_V1 = struct.Struct("<8sQII")  # magic, first_lsn, prev_crc, crc
_FILE_HEADER = struct.Struct("<8sQIIII")  # magic, first_lsn, prev_crc, partition, reserved, crc
_FRAME_HEAD = struct.Struct("<IQII")  # length, lsn, index, prev_crc: the 20 checksummed header bytes
_CRC = struct.Struct("<I")
_FRAME_HEAD_AND_CRC = struct.Struct(_FRAME_HEAD.format + _CRC.format[1:])  # the whole frame header, read in one call
FILE_HEADER_BYTES = _FILE_HEADER.size  # 32: what this code writes
FRAME_HEADER_BYTES = _FRAME_HEAD.size + _CRC.size  # 24
assert FILE_HEADER_BYTES == _HEADER_BYTES[FRAME_LAYOUT] == 32 and _FILE_HEADER_V1.size == 24 and FRAME_HEADER_BYTES == 24


def _checksum(head: bytes, body: bytes | memoryview) -> int:
    return zlib.crc32(body, zlib.crc32(head))


def encode_frame(lsn: int, prev_crc: int, body: bytes, index: int = 0) -> tuple[bytes, int]:
    """One frame and its crc (the next frame's `prev_crc`)."""
    length = len(body)
    if not 0 < length <= BODY_BYTES_MAX:
        raise ValueError(f"a record body must be 1..{BODY_BYTES_MAX} bytes, got {length}")
    head = _FRAME_HEAD.pack(length, lsn, index, prev_crc)
    crc = _checksum(head, body)
    return head + _CRC.pack(crc) + body, crc


def encode_frames(first_lsn: int, prev_crc: int, bodies: list[bytes]) -> tuple[bytes, int]:
    """One batch: frames for `bodies` with consecutive LSNs from `first_lsn`; the bytes and last crc."""
    parts = []
    for index, body in enumerate(bodies):
        frame, prev_crc = encode_frame(first_lsn + index, prev_crc, body, index)
        parts.append(frame)
    return b"".join(parts), prev_crc


def file_magic(kind: bytes, version: int, layout: int = FRAME_LAYOUT) -> bytes:
    """The 8 bytes a file of `kind` holding records of format `version` begins with."""
    assert len(kind) == 6 and 0 <= version <= 255 and layout in _HEADER_BYTES
    return kind + bytes((version, layout))


def file_version(data: bytes | memoryview, kind: bytes) -> int | None:
    """The record format version a file of `kind` says it holds; None if it is not such a file.

    Only the magic is looked at: `decode_file_header` with the file's own magic (its first 8
    bytes) then checks the whole header (the version is covered by its crc).
    """
    if len(data) < 8 or bytes(data[:6]) != kind or data[7] not in _HEADER_BYTES:
        return None
    return data[6]


def header_bytes(data: bytes | memoryview) -> int:
    """The size of the header a file's magic announces (32; 24 for layout 1)."""
    return _HEADER_BYTES.get(data[7], FILE_HEADER_BYTES) if len(data) >= 8 else FILE_HEADER_BYTES


class FileHeader(NamedTuple):
    first_lsn: int
    prev_crc: int
    partition: int  # 0 in a layout-1 file (before partitions)
    size: int  # bytes of the header: where the first frame begins


def encode_file_header(magic: bytes, first_lsn: int, prev_crc: int, partition: int = 0) -> bytes:
    if magic[7] == 1:
        head = _FILE_HEADER_V1.pack(magic, first_lsn, prev_crc, 0)[:-4]
    else:
        head = _FILE_HEADER.pack(magic, first_lsn, prev_crc, partition, 0, 0)[:-4]
    return head + _CRC.pack(zlib.crc32(head))


def decode_file_header(data: bytes | memoryview, magic: bytes) -> FileHeader | None:
    """The header, or None when it is short, foreign or damaged."""
    layout = magic[7]
    size = _HEADER_BYTES.get(layout)
    if size is None or len(data) < size:
        return None
    if layout == 1:
        found, first_lsn, prev_crc, crc = _FILE_HEADER_V1.unpack_from(data, 0)
        partition = reserved = 0
    else:
        found, first_lsn, prev_crc, partition, reserved, crc = _FILE_HEADER.unpack_from(data, 0)
    if found != magic or reserved != 0 or zlib.crc32(bytes(data[: size - 4])) != crc:
        return None
    return FileHeader(first_lsn, prev_crc, partition, size)


class Frame(NamedTuple):  # a tuple: made a million times by a recovery
    offset: int  # where the frame starts in the file
    lsn: int
    prev_crc: int
    crc: int
    body: memoryview
    end: int  # offset just past the frame
    batch_lsn: int  # the LSN of the first frame of its batch


class Damage(NamedTuple):
    """Why no intact frame starts at `offset`. `kind` is one of:

    - `zero`: the header bytes are all zero (nothing was ever written here);
    - `short`: fewer bytes are left than a header, or than the header's length says (cut off);
    - `length`: the length is zero or above the maximum (a damaged header);
    - `checksum`: the bytes are all there but the crc does not match.
    """

    offset: int
    kind: str


def read_frame(data: bytes | memoryview, offset: int) -> Frame | Damage:
    """The intact frame at `offset`, or why there is none. Checks only the frame itself.

    The length is checked against the maximum and against the bytes left before the body is
    touched; the body is a view into `data`, never a copy.
    """
    size = len(data)
    end = offset + FRAME_HEADER_BYTES
    if end > size:
        if offset < size and not any(data[offset:]):
            return Damage(offset, "zero")
        return Damage(offset, "short")
    length, lsn, index, prev_crc, crc = _FRAME_HEAD_AND_CRC.unpack_from(data, offset)
    if length == 0:
        if lsn == 0 and index == 0 and prev_crc == 0 and crc == 0:
            return Damage(offset, "zero")
        return Damage(offset, "length")
    if length > BODY_BYTES_MAX:
        return Damage(offset, "length")
    body_at, end = end, end + length
    if end > size:
        return Damage(offset, "short")
    view = data if data.__class__ is memoryview else memoryview(data)  # a reader of many frames passes one
    body = view[body_at:end]
    if _checksum(view[offset : offset + 20], body) != crc or index > lsn:
        return Damage(offset, "checksum")
    return Frame(offset, lsn, prev_crc, crc, body, end, lsn - index)


def skip_frames(data: bytes | memoryview, offset: int, lsn: int, prev_crc: int, through_lsn: int) -> tuple[int, int, int]:
    """Walk the frames from `offset` (the one of `lsn`, linked to `prev_crc`) up to and including
    `through_lsn` by their headers alone: each must carry the next LSN and link to the crc the
    frame before it declares, but bodies are not checksummed. Returns (offset, lsn, prev_crc) of
    the first frame not walked; it stops early at anything else, for `read_frame` to say what.

    For a reader that applies nothing up to `through_lsn` (a past point rebuilt from a snapshot
    there): what a frame it skips holds does not matter, only where the next one starts, and
    reading a header costs a twentieth of checksumming a record.
    """
    size = len(data)
    unpack = _FRAME_HEAD_AND_CRC.unpack_from
    while lsn <= through_lsn and offset + FRAME_HEADER_BYTES <= size:
        length, found, index, link, crc = unpack(data, offset)
        end = offset + FRAME_HEADER_BYTES + length
        if found != lsn or link != prev_crc or not 0 < length <= BODY_BYTES_MAX or end > size or index > found:
            break
        offset, lsn, prev_crc = end, lsn + 1, crc
    return offset, lsn, prev_crc


def find_intact_frame(data: bytes | memoryview, start: int, lsn_min: int) -> Frame | None:
    """The first intact frame at or after `start` whose LSN is at least `lsn_min`, if any.

    Recovery uses this after a damaged frame: an intact frame further on means the damage is in
    the middle of the log (refuse to start), none means it is a torn tail (truncate). It looks at
    every offset, so it is slow, but it only runs on a damaged file, past the damage.
    """
    end = len(data) - FRAME_HEADER_BYTES
    # A frame takes at least 25 bytes, so no LSN further on can be above this.
    lsn_max = lsn_min + (len(data) - start) // (FRAME_HEADER_BYTES + 1)
    offset = start
    while offset <= end:
        length, lsn, _, _ = _FRAME_HEAD.unpack_from(data, offset)
        if (
            0 < length <= BODY_BYTES_MAX
            and lsn_min <= lsn <= lsn_max
            and offset + FRAME_HEADER_BYTES + length <= len(data)
        ):
            found = read_frame(data, offset)
            if isinstance(found, Frame):
                return found
        offset += 1
    return None
