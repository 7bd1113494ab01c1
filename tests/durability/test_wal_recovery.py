"""The recovery decision table (`runstate.snapshots.recovery`), one test per row, by corrupting bytes."""

from __future__ import annotations

import os
import stat

import orjson
import pytest

from runstate.actors import KernelState
from runstate.actors.records import VERSION
from runstate.snapshots import FaultyDisk, RecoveryError, load
from runstate.snapshots.frame import FILE_HEADER_BYTES, SNAPSHOT_KIND, WAL_KIND, encode_file_header, encode_frames, file_magic
from runstate.snapshots.recovery import snapshot_dir, wal_dir
from runstate.snapshots.snapshot import write_snapshot

from .helpers import MODEL, T0_MS, check, flip_byte, frames, key_record, numbered_batches, reload, segments, write_log

WAL_MAGIC = file_magic(WAL_KIND, VERSION)  # a segment of the current record format


def keys_of(loaded) -> list[str]:
    return sorted(key.id for key in loaded.state.keys.all())


def expected_keys(count: int) -> list[str]:
    return sorted(f"ak_{n}" for n in range(1, count + 1))


def size(path: str) -> int:
    return os.path.getsize(path)


def test_row1_clean_end(tmp_path):
    """A log that ends after an intact frame is used whole, and nothing is repaired."""
    data = str(tmp_path)
    write_log(data, numbered_batches(1, 2, 1, 3))
    loaded = reload(data, repair=True)
    assert keys_of(loaded) == expected_keys(7)
    assert loaded.last_lsn == 7 and loaded.records == 7 and loaded.repairs == []
    assert loaded.newest_ms == T0_MS + 7


def test_row2_zero_filled_tail_is_truncated_without_a_copy(tmp_path):
    """Zeros after the last frame (preallocated, never written) are cut off; no record is lost."""
    data = str(tmp_path)
    write_log(data, numbered_batches(2, 2))
    [path] = segments(data)
    good = size(path)
    with open(path, "ab") as file:
        file.write(bytes(5000))
    assert check(data).ok and "zero tail" in check(data).repairs[0]
    assert size(path) == good + 5000  # check changes nothing
    loaded = reload(data, repair=True)
    assert keys_of(loaded) == expected_keys(4)
    assert [r.kind for r in loaded.repairs] == ["zero tail"]
    assert size(path) == good
    assert not os.path.exists(path + ".broken")


def test_row3_torn_final_record_is_copied_aside_and_truncated(tmp_path, caplog):
    """A final record cut short: the segment is kept as .broken, truncated at the last intact frame."""
    data = str(tmp_path)
    write_log(data, numbered_batches(1, 1, 1))
    [path] = segments(data)
    last = frames(path)[-1]
    with open(path, "r+b") as file:
        file.truncate(last.end - 3)
    original = open(path, "rb").read()
    loaded = reload(data, repair=True)
    assert keys_of(loaded) == expected_keys(2)
    [repair] = loaded.repairs
    assert (repair.kind, repair.path, repair.offset) == ("torn tail", path, last.offset)
    assert size(path) == last.offset
    assert open(path + ".broken", "rb").read() == original
    assert "torn tail" in caplog.text and path in caplog.text


def test_row3_the_copy_aside_is_private_whatever_the_umask_and_replaces_an_older_one(tmp_path):
    """The .broken copy holds the segment's records (tokens, payloads): 0600 like the segment, also
    under umask 022, and a second torn tail of the same segment replaces the first copy."""
    data = str(tmp_path)
    write_log(data, numbered_batches(1, 1, 1, 1))
    [path] = segments(data)
    old = os.umask(0o022)
    try:
        for cut in (frames(path)[-1], frames(path)[-2]):
            with open(path, "r+b") as file:
                file.truncate(cut.end - 3)
            original = open(path, "rb").read()
            reload(data, repair=True)
            assert open(path + ".broken", "rb").read() == original
            assert stat.S_IMODE(os.stat(path + ".broken").st_mode) == 0o600
    finally:
        os.umask(old)


def test_row3_final_record_with_a_bad_checksum_is_a_torn_tail(tmp_path):
    data = str(tmp_path)
    write_log(data, numbered_batches(1, 1, 1))
    [path] = segments(data)
    last = frames(path)[-1]
    flip_byte(path, last.end - 2)
    loaded = reload(data, repair=True)
    assert keys_of(loaded) == expected_keys(2)
    assert loaded.repairs[0].kind == "torn tail" and size(path) == last.offset


def test_row3_torn_last_batch_with_later_frames_intact(tmp_path):
    """A power cut may write a batch's later sectors but not its first: the whole batch goes."""
    data = str(tmp_path)
    write_log(data, numbered_batches(2, 3))
    [path] = segments(data)
    batch_start = frames(path)[2]
    flip_byte(path, batch_start.offset + 30)  # the first frame of the last batch; two intact follow
    loaded = reload(data, repair=True)
    assert keys_of(loaded) == expected_keys(2)
    assert loaded.repairs[0].kind == "torn tail" and size(path) == batch_start.offset


def test_row4_flipped_byte_mid_log_refuses_to_start(tmp_path):
    """Damage followed by a later, intact batch: refuse, naming the file and the byte offset."""
    data = str(tmp_path)
    write_log(data, numbered_batches(1, 1, 1, 1, 1))
    [path] = segments(data)
    second = frames(path)[1]
    flip_byte(path, second.offset + 30)
    before = open(path, "rb").read()
    with pytest.raises(RecoveryError) as caught:
        reload(data, repair=True)
    assert caught.value.path == path and caught.value.offset == second.offset
    assert f"{path}: byte {second.offset}" in str(caught.value)
    assert open(path, "rb").read() == before and not os.path.exists(path + ".broken")
    report = check(data)
    assert not report.ok and report.problem_path == path and report.problem_offset == second.offset


def test_row4_damage_in_a_segment_that_is_not_the_last_refuses(tmp_path):
    data = str(tmp_path)
    write_log(data, numbered_batches(*[1] * 12), segment_bytes_max=400)
    paths = segments(data)
    assert len(paths) >= 3
    last_frame = frames(paths[0])[-1]
    with open(paths[0], "r+b") as file:  # a sealed segment cut short: the disk lost a fsynced write
        file.truncate(last_frame.end - 1)
    with pytest.raises(RecoveryError) as caught:
        reload(data, repair=True)
    assert caught.value.path == paths[0] and caught.value.offset == last_frame.offset


def _segment(path: str, first_lsn: int, link: int, lsns: list[int], links: list[int] | None = None) -> None:
    data = encode_file_header(WAL_MAGIC, first_lsn, link)
    prev = link
    for index, lsn in enumerate(lsns):
        frame, crc = encode_frames(lsn, prev if links is None else links[index], [orjson.dumps(key_record(lsn))])
        data += frame
        prev = crc
    with open(path, "wb") as file:
        file.write(data)


def test_row5_lsn_gap_inside_a_segment_refuses(tmp_path):
    data = str(tmp_path)
    os.makedirs(wal_dir(data))
    path = os.path.join(wal_dir(data), f"{1:020d}.wal")
    _segment(path, 1, 0, [1, 2, 4])
    offsets = [f.offset for f in frames(path)]
    with pytest.raises(RecoveryError, match="LSN 4, expected 3") as caught:
        reload(data, repair=True)
    assert caught.value.offset == offsets[2]


def test_row5_broken_chain_refuses(tmp_path):
    """An intact frame that is not linked to the frame before it (from elsewhere) is refused."""
    data = str(tmp_path)
    os.makedirs(wal_dir(data))
    path = os.path.join(wal_dir(data), f"{1:020d}.wal")
    _segment(path, 1, 0, [1, 2, 3], links=[0, 0, 0])
    with pytest.raises(RecoveryError, match="not linked") as caught:
        reload(data, repair=True)
    assert caught.value.offset == frames(path)[1].offset


def test_row6_gap_between_segments_refuses(tmp_path):
    data = str(tmp_path)
    write_log(data, numbered_batches(*[1] * 12), segment_bytes_max=400)
    paths = segments(data)
    os.remove(paths[1])
    with pytest.raises(RecoveryError, match="begins at LSN") as caught:
        reload(data, repair=True)
    assert caught.value.path == paths[2] and caught.value.offset == 0


def test_row6_log_beginning_after_the_snapshot_refuses(tmp_path):
    data = str(tmp_path)
    write_log(data, numbered_batches(*[1] * 12), segment_bytes_max=400)
    paths = segments(data)
    os.remove(paths[0])  # no snapshot covers those records
    with pytest.raises(RecoveryError, match="records are missing"):
        reload(data, repair=True)


def test_row7_broken_header_of_the_last_segment_is_moved_aside(tmp_path):
    """A crash while starting a segment leaves a short header: set aside, the log before is used."""
    data = str(tmp_path)
    write_log(data, numbered_batches(2, 1))
    path = os.path.join(wal_dir(data), f"{4:020d}.wal")
    with open(path, "wb") as file:
        file.write(encode_file_header(WAL_MAGIC, 4, 0)[:10])
    loaded = reload(data, repair=True)
    assert keys_of(loaded) == expected_keys(3) and loaded.last_lsn == 3
    assert loaded.repairs[0].kind == "broken segment header"
    assert not os.path.exists(path) and os.path.exists(path + ".broken")


def test_row8_a_snapshot_that_does_not_verify_falls_back_to_the_older_one(tmp_path, caplog):
    data = str(tmp_path)
    write_log(data, numbered_batches(*[1] * 6))
    os.makedirs(snapshot_dir(data))
    for lsn in (2, 4):
        state = reload(data).state  # whole log; fine for an image test: only keys
        partial = KernelState()
        for record in state.image():
            if int(record["id"][3:]) <= lsn:
                partial.apply(record)
        write_snapshot(snapshot_dir(data), lsn, T0_MS + lsn, partial.image(), MODEL.records)
    newest = os.path.join(snapshot_dir(data), f"{4:020d}.snap")
    flip_byte(newest, size(newest) - 5)
    leftover = os.path.join(snapshot_dir(data), f"{6:020d}.snap.tmp")
    open(leftover, "wb").write(b"half a snapshot")
    loaded = reload(data, repair=True)
    assert loaded.snapshot_lsn == 2 and loaded.records == 4
    assert keys_of(loaded) == expected_keys(6)
    assert len(loaded.bad_snapshots) == 1 and newest in loaded.bad_snapshots[0]
    assert not os.path.exists(leftover)
    assert "does not verify" in caplog.text


def test_row8_no_snapshot_verifies_replays_from_lsn_1(tmp_path):
    data = str(tmp_path)
    write_log(data, numbered_batches(1, 1, 1))
    os.makedirs(snapshot_dir(data))
    write_snapshot(snapshot_dir(data), 2, T0_MS, iter([]), MODEL.records)
    path = os.path.join(snapshot_dir(data), f"{2:020d}.snap")
    with open(path, "r+b") as file:
        file.truncate(size(path) - 1)
    loaded = reload(data, repair=True)
    assert loaded.snapshot_lsn == 0 and keys_of(loaded) == expected_keys(3)


def test_row9_a_record_that_does_not_apply_refuses(tmp_path):
    data = str(tmp_path)
    write_log(data, [[key_record(1)], [{"type": "no.such.record", "at_ms": 1}], [key_record(3)]])
    [path] = segments(data)
    with pytest.raises(RecoveryError, match="does not apply") as caught:
        reload(data, repair=True)
    assert caught.value.offset == frames(path)[1].offset


def test_frames_at_or_before_the_snapshot_are_not_applied_again(tmp_path):
    data = str(tmp_path)
    write_log(data, numbered_batches(1, 1, 1, 1))
    os.makedirs(snapshot_dir(data))
    image = KernelState()
    image.apply(key_record(1))
    image.apply(key_record(2))
    write_snapshot(snapshot_dir(data), 2, T0_MS + 2, image.image(), MODEL.records)
    loaded = reload(data, repair=True)
    assert loaded.snapshot_lsn == 2 and loaded.records == 2 and keys_of(loaded) == expected_keys(4)


def test_a_wal_ending_before_the_snapshot_continues_after_it(tmp_path):
    """Under fsync off a power cut may lose WAL records a snapshot already holds: that is fine."""
    data = str(tmp_path)
    write_log(data, numbered_batches(1, 1))
    os.makedirs(snapshot_dir(data))
    image = KernelState()
    for n in range(1, 5):
        image.apply(key_record(n))
    write_snapshot(snapshot_dir(data), 4, T0_MS + 4, image.image(), MODEL.records)
    loaded = reload(data, repair=True)
    assert loaded.last_lsn == 4 and keys_of(loaded) == expected_keys(4)


def test_row10_a_segment_of_a_newer_record_format_refuses_to_start(tmp_path):
    """Row 10: a server never reads records spelled in a format it does not know yet."""
    data = str(tmp_path)
    os.makedirs(wal_dir(data))
    path = os.path.join(wal_dir(data), f"{1:020d}.wal")
    frames, _ = encode_frames(1, 0, [orjson.dumps(key_record(1))])
    with open(path, "wb") as file:
        file.write(encode_file_header(file_magic(WAL_KIND, VERSION + 1), 1, 0) + frames)
    with pytest.raises(RecoveryError, match="newer than this server") as caught:
        reload(data, repair=True)
    assert caught.value.path == path and caught.value.offset == 6
    assert not check(data).ok


def test_row10_a_snapshot_of_a_newer_record_format_refuses_rather_than_falls_back(tmp_path):
    data = str(tmp_path)
    write_log(data, numbered_batches(1, 1))
    os.makedirs(snapshot_dir(data))
    image = KernelState()
    image.apply(key_record(1))
    write_snapshot(snapshot_dir(data), 1, T0_MS + 1, image.image(), MODEL.records)
    newer = os.path.join(snapshot_dir(data), f"{2:020d}.snap")
    with open(newer, "wb") as file:
        file.write(encode_file_header(file_magic(SNAPSHOT_KIND, VERSION + 1), 2, 0))
    with pytest.raises(RecoveryError, match="newer than this server") as caught:
        reload(data, repair=True)
    assert caught.value.path == newer and caught.value.offset == 6


def test_row7_an_empty_last_segment_is_deleted_with_no_copy_kept(tmp_path):
    """A crash right after a segment was created, before its header went down, leaves an empty
    file: it holds nothing to look at, so it is deleted rather than set aside as an empty .broken."""
    data = str(tmp_path)
    write_log(data, numbered_batches(2, 1))
    path = os.path.join(wal_dir(data), f"{4:020d}.wal")
    open(path, "wb").close()
    assert "copy kept" not in check(data).repairs[0]
    loaded = reload(data, repair=True)
    assert keys_of(loaded) == expected_keys(3) and loaded.last_lsn == 3
    assert loaded.repairs[0].kind == "broken segment header" and loaded.repairs[0].broken_copy is None
    assert not os.path.exists(path) and not os.path.exists(path + ".broken")


def test_row3_on_a_full_disk_leaves_no_partial_copy_and_the_segment_as_it_was(tmp_path):
    """A torn tail found on a full disk: the copy aside cannot be written, so the start fails, and
    it leaves neither an empty (or partial) .broken nor a truncated segment: the next start, with
    room again, makes the whole repair."""
    data = str(tmp_path)
    write_log(data, numbered_batches(1, 1, 1))
    [path] = segments(data)
    with open(path, "r+b") as file:
        file.truncate(frames(path)[-1].end - 3)
    original = open(path, "rb").read()
    disk = FaultyDisk()
    disk.full = True
    with pytest.raises(OSError, match="no space left"):
        load(data, MODEL, repair=True, disk=disk)
    assert open(path, "rb").read() == original and not os.path.exists(path + ".broken")
    loaded = reload(data, repair=True)
    assert keys_of(loaded) == expected_keys(2) and open(path + ".broken", "rb").read() == original
