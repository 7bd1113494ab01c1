"""Framing: records round-trip through frames, and every kind of damage is named, never misread."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, strategies as st

from runstate.snapshots.frame import (
    BODY_BYTES_MAX,
    FILE_HEADER_BYTES,
    FRAME_HEADER_BYTES,
    SNAPSHOT_KIND,
    WAL_KIND,
    Damage,
    FileHeader,
    Frame,
    decode_file_header,
    encode_file_header,
    encode_frame,
    encode_frames,
    file_magic,
    file_version,
    find_intact_frame,
    header_bytes,
    read_frame,
)
from runstate.actors.records import VERSION

WAL_MAGIC, SNAPSHOT_MAGIC = file_magic(WAL_KIND, VERSION), file_magic(SNAPSHOT_KIND, VERSION)

bodies = st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=20)


def read_all(data: bytes) -> list[Frame]:
    frames, offset = [], 0
    while offset < len(data):
        found = read_frame(data, offset)
        assert isinstance(found, Frame), found
        frames.append(found)
        offset = found.end
    return frames


@given(bodies, st.integers(1, 2**40), st.integers(0, 2**32 - 1))
def test_batches_round_trip_with_lsns_links_and_batch_start(parts, first_lsn, link):
    """A batch reads back body for body, with consecutive LSNs, each frame linked to the one before."""
    data, last_crc = encode_frames(first_lsn, link, parts)
    frames = read_all(data)
    assert [bytes(f.body) for f in frames] == parts
    assert [f.lsn for f in frames] == list(range(first_lsn, first_lsn + len(parts)))
    assert [f.batch_lsn for f in frames] == [first_lsn] * len(parts)
    assert frames[0].prev_crc == link
    assert all(b.prev_crc == a.crc for a, b in zip(frames, frames[1:]))
    assert frames[-1].crc == last_crc
    assert len(data) == sum(FRAME_HEADER_BYTES + len(p) for p in parts)


@given(bodies, st.data())
def test_any_flipped_bit_is_caught(parts, data):
    """Flipping any one bit of a frame makes it damaged (or zero/short), never a different record."""
    encoded, _ = encode_frames(7, 0, parts)
    position = data.draw(st.integers(0, len(encoded) - 1))
    bit = data.draw(st.integers(0, 7))
    damaged = bytearray(encoded)
    damaged[position] ^= 1 << bit
    offset = 0
    while offset < len(damaged):
        found = read_frame(bytes(damaged), offset)
        if isinstance(found, Damage):
            assert offset <= position
            return
        offset = found.end
    pytest.fail("a flipped bit went unnoticed")


def test_body_size_boundaries():
    """Bodies of 1 byte and of the maximum encode; empty and over-maximum bodies are refused."""
    assert isinstance(read_frame(encode_frame(1, 0, b"x")[0], 0), Frame)
    big = b"a" * BODY_BYTES_MAX
    assert bytes(read_frame(encode_frame(1, 0, big)[0], 0).body) == big
    with pytest.raises(ValueError):
        encode_frame(1, 0, b"")
    with pytest.raises(ValueError):
        encode_frame(1, 0, big + b"a")


def test_length_is_checked_before_anything_is_allocated():
    """A header claiming 4 GiB, or more than is left, is damage, not an allocation."""
    frame, _ = encode_frame(1, 0, b"{}")
    huge = struct.pack("<I", 0xFFFF_FFFF) + frame[4:]
    assert read_frame(huge, 0) == Damage(0, "length")
    just_over = struct.pack("<I", BODY_BYTES_MAX + 1) + frame[4:]
    assert read_frame(just_over, 0) == Damage(0, "length")
    more_than_left = struct.pack("<I", 1000) + frame[4:]
    assert read_frame(more_than_left, 0) == Damage(0, "short")


def test_cut_frames_and_zeros_are_told_apart():
    frame, _ = encode_frame(1, 0, b'{"a":1}')
    for cut in range(1, len(frame)):
        assert read_frame(frame[:cut], 0).kind in ("short", "zero")
    assert read_frame(frame[:5], 0) == Damage(0, "short")
    assert read_frame(bytes(FRAME_HEADER_BYTES + 10), 0) == Damage(0, "zero")
    assert read_frame(bytes(3), 0) == Damage(0, "zero")
    assert read_frame(b"", 0) == Damage(0, "short")
    zero_length = bytes(4) + frame[4:]
    assert read_frame(zero_length, 0) == Damage(0, "length")


def test_file_headers_round_trip_and_reject_damage():
    """A header names the first LSN, the link to the previous file and the partition; any damage,
    and a nonzero reserved field, makes it unreadable."""
    header = encode_file_header(WAL_MAGIC, 12345, 999, partition=7)
    assert len(header) == FILE_HEADER_BYTES == 32
    assert decode_file_header(header, WAL_MAGIC) == FileHeader(12345, 999, 7, 32)
    assert decode_file_header(header, SNAPSHOT_MAGIC) is None
    assert decode_file_header(header[:-1], WAL_MAGIC) is None
    for position in range(FILE_HEADER_BYTES):
        damaged = bytearray(header)
        damaged[position] ^= 0x10
        assert decode_file_header(bytes(damaged), WAL_MAGIC) is None


def test_find_intact_frame_skips_garbage_and_respects_the_lsn_floor():
    first, crc = encode_frames(1, 0, [b'{"n":1}'])
    second, _ = encode_frames(2, crc, [b'{"n":2}'])
    data = first + b"\xff" * 13 + second
    found = find_intact_frame(data, 1, 1)
    assert found is not None and found.lsn == 2 and found.offset == len(first) + 13
    assert find_intact_frame(data, 1, 3) is None
    assert find_intact_frame(b"\x00" * 100, 0, 1) is None


def test_the_magic_names_the_record_format_and_older_files_read_as_version_0():
    """The version sits in the magic (byte 6), the layout in byte 7; the magics written before the
    version had a number read as version 0, layout 1 (a 24-byte header without a partition)."""
    assert file_version(encode_file_header(WAL_MAGIC, 1, 0), WAL_KIND) == VERSION
    assert file_version(b"RSWAL\x00\x00\x01" + bytes(16), WAL_KIND) == 0
    assert file_version(b"RSSNAP\x00\x01" + bytes(16), SNAPSHOT_KIND) == 0
    assert file_version(b"RSSNAP\x00\x01" + bytes(16), WAL_KIND) is None
    assert file_version(b"RSWAL\x00\x00\x03" + bytes(16), WAL_KIND) is None  # a layout this code does not know
    old = encode_file_header(b"RSWAL\x00\x00\x01", 7, 3)
    assert len(old) == 24 and header_bytes(old) == 24
    assert decode_file_header(old, file_magic(WAL_KIND, 0, layout=1)) == FileHeader(7, 3, 0, 24)
    assert decode_file_header(old, WAL_MAGIC) is None
