"""History: the state a partition held at a past point, rebuilt from its snapshots and its WAL.

Recovery already rebuilds the newest state from the newest snapshot plus the WAL after it; a past
point is the same read stopped early. A point (`Target`) is one of:

- an LSN: the state once that record was applied;
- a time: the state once every record whose `at_ms` (and the `at_ms` of every record before it)
  is at or before that time was applied, i.e. the last LSN of the log's running newest time up
  to there (records are stamped by one clock that never goes back, so this is the last record
  stamped at or before the time);
- a condition on the state (`reached`): the first state, record by record, that meets it, with a
  time before which its snapshot must stand (how "right after the space's event N" is found).

`replay` picks the newest snapshot that stands at or before the first point (its LSN, and the
`newest_ms` of its begin mark, `snapshot.snapshot_point`), and reads from it with `recovery.load`
(every frame checked as a start checks it, nothing repaired, nothing written), showing each record
to a tap that hands out the state at each point before the record that passes it is applied.
Several points in order cost one read: a diff between two points is one replay.

What it costs: loading one snapshot and applying the records after it up to the point. The store
keeps checkpoints (`Store._checkpoints`) so that no point is more than `checkpoint_every_records`
records past a kept snapshot, and keeps the snapshots and segments of the history window
(`compaction.prune`): `kept` says where the history on disk begins and what it holds.

Blocking and read-only: run it in a worker thread. It is safe beside a live writer as long as it
reads no further than what is written (`through_lsn`, the journal's durable LSN), and beside the
snapshot process's pruning as long as the point lies inside the retention (a file deleted under
it raises `FileNotFoundError`: the caller tries again, or says the point is no longer kept).

Not to be confused with the event log: that is part of the state (and bounded); this reads the
journal, where every record is.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

from .model import StateModel
from .recovery import list_segments, load, snapshot_dir, wal_dir
from .snapshot import list_snapshots, snapshot_name, snapshot_point

__all__ = ["Target", "Reached", "Kept", "NotKept", "PointNotReached", "replay", "kept", "start_of", "format_ms"]


@dataclass(frozen=True, slots=True)
class Target:
    """A point to rebuild: set one of `lsn`, `ms` or `reached` (with `starts_before_ms`)."""

    lsn: int | None = None
    ms: int | None = None
    # The first state that meets this (looked at before each record is applied); its snapshot
    # must stand strictly before `starts_before_ms`, so that it does not already meet it.
    reached: Callable[[Any], bool] | None = None
    starts_before_ms: int | None = None

    def __post_init__(self) -> None:
        assert (self.lsn is not None) + (self.ms is not None) + (self.reached is not None) == 1, "one kind of point"
        assert self.reached is None or self.starts_before_ms is not None, "a condition needs a time to start before"

    def fits(self, snapshot_lsn: int, snapshot_ms: int) -> bool:
        """Whether a snapshot at `snapshot_lsn`, standing at `snapshot_ms`, is at or before this point."""
        if self.lsn is not None:
            return snapshot_lsn <= self.lsn
        if self.ms is not None:
            return snapshot_ms <= self.ms
        assert self.starts_before_ms is not None
        return snapshot_ms < self.starts_before_ms


@dataclass(frozen=True, slots=True)
class Reached:
    """Where a point was found: after record `lsn`, whose records' newest time is `newest_ms` (0:
    none carries a time), rebuilt from the snapshot at `snapshot_lsn` plus `records` records."""

    target: Target
    lsn: int
    newest_ms: int
    snapshot_lsn: int
    records: int


@dataclass(frozen=True, slots=True)
class Kept:
    """What a partition's folder holds of its history: the oldest point that can be rebuilt
    (LSN 0 with no time: the very beginning), and the bytes of its snapshots and WAL."""

    oldest_lsn: int
    oldest_ms: int | None
    snapshots: int
    snapshot_bytes: int
    segments: int
    wal_bytes: int

    @property
    def disk_bytes(self) -> int:
        return self.snapshot_bytes + self.wal_bytes


class NotKept(Exception):
    """The point lies before the oldest one the folder holds."""

    def __init__(self, message: str, kept: Kept) -> None:
        super().__init__(message)
        self.kept = kept


class PointNotReached(Exception):
    """The log ends before the point (an LSN past its end, a condition never met)."""


def _sizes(folder: str) -> tuple[int, int]:
    total = 0
    count = 0
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        try:
            total += os.stat(os.path.join(folder, name)).st_size
            count += 1
        except FileNotFoundError:  # pruned as it was listed
            pass
    return count, total


def kept(folder: str) -> Kept:
    """Where the history in a partition's `folder` begins, and what its files take on disk."""
    segments = list_segments(wal_dir(folder))
    snaps = list_snapshots(snapshot_dir(folder))
    snapshot_count, snapshot_bytes = _sizes(snapshot_dir(folder))
    segment_count, wal_bytes = _sizes(wal_dir(folder))
    oldest_lsn, oldest_ms = start_of(segments, snaps)
    return Kept(oldest_lsn, oldest_ms, snapshot_count, snapshot_bytes, segment_count, wal_bytes)


def start_of(segments: list[tuple[int, str]], snaps: list[tuple[int, str]]) -> tuple[int, int | None]:
    """The oldest point the files rebuild: the beginning when the WAL still starts at LSN 1 (or
    nothing was ever written), else the oldest snapshot whose begin mark reads."""
    if (segments and segments[0][0] == 1) or (not segments and not snaps):
        return 0, None
    for lsn, path in snaps:
        try:
            point = snapshot_point(path)
        except FileNotFoundError:
            continue
        if point is not None:
            return point
    return (segments[0][0] - 1, None) if segments else (0, None)


def _snapshot_for(folder: str, target: Target, through_lsn: int | None) -> int:
    """The LSN of the newest snapshot a replay to `target` may start from (0: the log's start)."""
    snaps = list_snapshots(snapshot_dir(folder))
    for lsn, path in reversed(snaps):
        if through_lsn is not None and lsn > through_lsn:
            continue
        if target.lsn is not None and lsn > target.lsn:
            continue
        point = snapshot_point(path) if target.lsn is None else (lsn, 0)
        if point is not None and target.fits(lsn, point[1]):
            return lsn
    segments = list_segments(wal_dir(folder))
    if segments and segments[0][0] != 1:
        found = kept(folder)
        raise NotKept(_before_message(target, found), found)
    return 0


def _before_message(target: Target, found: Kept) -> str:
    since = f"LSN {found.oldest_lsn}" + (f" ({format_ms(found.oldest_ms)})" if found.oldest_ms is not None else "")
    return f"the history kept begins at {since}; the point asked for is older"


def format_ms(wall_ms: int) -> str:
    """`YYYY-MM-DDTHH:MM:SS.mmmZ`, as the wire spells times."""
    seconds, millis = divmod(wall_ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


# Called at each point reached, in order, with the state as it stands there (a caller reads it
# before returning: the replay goes on changing it), and for each record applied after the first
# point with its LSN, the record, how many points were reached before it and the state before it.
OnPoint = Callable[[Reached, Any], None]
OnRecord = Callable[[int, dict, int, Any], None]


def replay(
    folder: str,
    model: StateModel,
    targets: list[Target],
    on_point: OnPoint,
    *,
    partition: int | None,
    through_lsn: int | None = None,
    on_record: OnRecord | None = None,
) -> list[Reached]:
    """Rebuild the state at each of `targets` (in the log's order), calling `on_point` at each.

    `through_lsn`: read no further (a live journal's durable LSN); None: to the end of the log as
    it is (offline). Raises `NotKept` when the first point is older than the folder's history,
    `PointNotReached` when the log ends before a point (an LSN past the end, a condition never
    met: a time after the end is the end), `RecoveryError` for damage, and `FileNotFoundError`
    when a file was pruned while it was read. Blocking.
    """
    assert targets, "at least one point"
    start = _snapshot_for(folder, targets[0], through_lsn)
    reached: list[Reached] = []
    newest = [0, start]  # the running newest time, and the LSN the replay started from
    if start:
        point = snapshot_point(os.path.join(snapshot_dir(folder), snapshot_name(start)))
        newest[0] = point[1] if point is not None else 0
    # The point looked for now, as bounds compared on every record (the tap runs a million times).
    bounds: list = []

    def aim() -> None:
        target = targets[len(reached)] if len(reached) < len(targets) else None
        bounds[:] = [
            math.inf if target is None or target.lsn is None else target.lsn,
            math.inf if target is None or target.ms is None else target.ms,
            None if target is None else target.reached,
        ]

    aim()

    def tap(lsn: int, record: dict, state: Any) -> bool:
        at_ms = record.get("at_ms")
        newest_ms = at_ms if at_ms.__class__ is int and at_ms > newest[0] else newest[0]
        lsn_max, ms_max, until = bounds
        if lsn > lsn_max or newest_ms > ms_max or (until is not None and until(state)):
            while True:  # this record passes the point: the state before it is the point's
                found = Reached(targets[len(reached)], lsn - 1, newest[0], newest[1], lsn - 1 - newest[1])
                reached.append(found)
                on_point(found, state)
                aim()
                if len(reached) == len(targets):
                    return False
                lsn_max, ms_max, until = bounds
                if not (lsn > lsn_max or newest_ms > ms_max or (until is not None and until(state))):
                    break
        if on_record is not None and reached:
            on_record(lsn, record, len(reached), state)
        newest[0] = newest_ms
        return True

    loaded = load(
        folder, model, repair=False, through_lsn=through_lsn, partition=partition, snapshot_lsn_max=start, tap=tap,
        check_covered=False,
    )
    if loaded.snapshot_lsn != newest[1]:  # the chosen snapshot did not verify: an older one was used
        newest[1] = loaded.snapshot_lsn
    for target in targets[len(reached):]:  # the points at the end of the log
        if target.lsn is not None and target.lsn > loaded.last_lsn:
            raise PointNotReached(f"LSN {target.lsn} is past the end of the log (LSN {loaded.last_lsn})")
        if target.reached is not None and not target.reached(loaded.state):
            raise PointNotReached("the log ends before that point")
        found = Reached(target, loaded.last_lsn, max(newest[0], loaded.newest_ms), newest[1], loaded.records)
        reached.append(found)
        on_point(found, loaded.state)
    return reached
