"""Taking a snapshot, and deleting what it makes unnecessary.

A snapshot is built from the disk, not from the live state: in a worker thread, the newest
snapshot and the WAL up to a durable LSN are read into a fresh state (exactly what a recovery
would do), and that state's image is written. Why not from memory: an image of the live state is
consistent only if nothing changes while it is taken, which means either holding every turn for
the length of the copy (a million claims: seconds) or copy-on-write in every table. Rebuilding
from disk needs neither: the event loop does no work for it at all, the tables need nothing but
`apply` and `image`, and every snapshot also proves that the log reads back. The cost is a second
copy of the state in memory while the snapshot is built, and the CPU of one replay (which shares
the interpreter lock with the loop, so the loop waits at most one switch interval, 5 ms by
default, each time it needs to run).

The state built for a snapshot is then taken apart bit by bit (`dismantle`) rather than dropped:
dropping a million claims at once frees them in one cascade of deallocations that holds the
interpreter lock, and the event loop, for half a second.

After the new snapshot is durable, older snapshots beyond the newest `keep` are deleted, then WAL
segments wholly before the oldest snapshot kept. Keeping the previous snapshot (and its WAL) is
what lets recovery fall back to it when the newest does not verify (row 8 of `recovery.py`).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Iterator

from .disk import Disk
from .recovery import list_segments, load, snapshot_dir, wal_dir
from .snapshot import SnapshotInfo, list_snapshots, write_snapshot

__all__ = ["take_snapshot", "prune", "dismantle"]

# Objects freed between two releases of the interpreter lock while a state is taken apart.
DISMANTLE_YIELD_EVERY = 1024
# Settings shared with the live state: never emptied.
_SHARED = frozenset({"limits", "_limits"})

log = logging.getLogger("runstate.snapshots")


def take_snapshot(
    data_dir: str, through_lsn: int, make_state: Callable[[], Any], disk: Disk | None = None, keep: int = 2
) -> SnapshotInfo | None:
    """Snapshot the state at `through_lsn` (durable) and prune; None if the newest is already there.

    Blocking: run it in a worker thread, never at the same time as a WAL repair.
    """
    disk = disk or Disk()
    loaded = load(data_dir, make_state, repair=False, through_lsn=through_lsn, disk=disk)
    if loaded.snapshot_lsn >= through_lsn:
        return None
    snaps = snapshot_dir(data_dir)
    os.makedirs(snaps, exist_ok=True)
    info = write_snapshot(snaps, through_lsn, loaded.newest_ms, loaded.state.image(), disk)
    state, loaded.state = loaded.state, None
    dismantle(state)
    prune(data_dir, keep, disk)
    return info


def _attribute_names(cls: type) -> tuple[str, ...]:
    names = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.extend((slots,) if isinstance(slots, str) else slots)
    return tuple(name for name in names if name not in _SHARED and not name.startswith("__"))


def dismantle(root: Any) -> None:
    """Empty the dicts and lists of a state a little at a time, then let it go.

    Popping an entry frees what only it held at once, on its own, so nothing is freed in one
    long cascade when the root is dropped; the interpreter lock is released every
    `DISMANTLE_YIELD_EVERY` entries. Objects are looked into (for the containers they hold) only
    when the first object of their type held one: a claim holds none and is simply freed, a space
    holds its tables. Only for a state nothing else uses (the one built for a snapshot, or one
    replaced by a rebuild). Blocking: run it in a worker thread.
    """
    holds_containers: dict[type, tuple[str, ...]] = {}
    stack = [root]
    count = 0
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            while node:
                value = node.popitem()[1]
                count += 1
                if not count % DISMANTLE_YIELD_EVERY:
                    os.sched_yield()
                if not isinstance(value, _LEAVES) and holds_containers.get(type(value)) != ():
                    stack.append(value)  # else it is freed here, now, if this was its last holder
        elif isinstance(node, list):
            while node:
                value = node.pop()
                if not isinstance(value, _LEAVES) and holds_containers.get(type(value)) != ():
                    stack.append(value)
        elif not isinstance(node, _LEAVES):
            kind = type(node)
            names = holds_containers.get(kind)
            if names is None:
                names = tuple(
                    name for name in _attribute_names(kind)
                    if not isinstance(getattr(node, name, None), _LEAVES)
                )
                holds_containers[kind] = names
            for name in names:
                value = getattr(node, name, None)
                if value is not None and not isinstance(value, _LEAVES):
                    stack.append(value)


# What `dismantle` never looks into: values that hold no dicts or lists of the state.
_LEAVES = (str, bytes, int, float, bool, tuple, frozenset, type(None))


def prune(data_dir: str, keep: int, disk: Disk | None = None) -> tuple[int, int]:
    """Delete snapshots beyond the newest `keep`, then segments wholly before the oldest kept one.

    Returns (snapshots deleted, segments deleted).
    """
    assert keep >= 1
    disk = disk or Disk()
    snaps = list_snapshots(snapshot_dir(data_dir))
    if not snaps:
        return 0, 0
    old, kept = snaps[:-keep], snaps[-keep:]
    for _, path in old:
        disk.remove(path)
    if old:
        disk.fsync_dir(snapshot_dir(data_dir))
    covered = kept[0][0]
    segments = list_segments(wal_dir(data_dir))
    deleted = 0
    for (_, path), (next_first, _) in zip(segments, segments[1:]):
        if next_first > covered + 1:
            break
        disk.remove(path)  # every record in it is at or before the oldest snapshot kept
        deleted += 1
    if deleted:
        disk.fsync_dir(wal_dir(data_dir))
    log.info("snapshot at LSN %d: deleted %d older snapshot(s) and %d WAL segment(s)", snaps[-1][0], len(old), deleted)
    return len(old), deleted
