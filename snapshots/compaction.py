"""Taking a snapshot, and deleting what it makes unnecessary.

A snapshot is built from the disk, not from the live state: the newest snapshot and the WAL up to
a durable LSN are read into a fresh state (exactly what a recovery does), and that state's image
is written. Why not from memory: an image of the live state is consistent only if nothing changes
while it is taken, which means either holding every turn for the length of the copy (a million
claims: seconds) or copy-on-write in every table. Rebuilding from disk needs neither: the event
loop does no work for it, the tables need nothing but `apply` and `image`, and every snapshot also
proves that the log reads back. The cost is the CPU of one replay and a second copy of the state
in memory while it is built.

Where: the store runs `take_snapshot` in a child process (`main` below) by default, else in a
worker thread (tests in virtual time, or when told to). The child is handed the `StateModel` itself,
pickled on its standard input (a picklable factory such as `functools.partial(KernelState, limits)`
and the record format), so it makes exactly the state the server makes without naming a class.

A child shares nothing with the server: building a million-entry state in a thread of the server holds the interpreter lock for a whole
dict resize or deallocation cascade at a time (tens to a hundred milliseconds at that size) and
leaves the memory in the server's heap; a child costs an interpreter start (a fifth of a second)
and gives everything back when it exits. A child left running by a server killed mid-snapshot is
harmless: it publishes a snapshot of records that were durable, and prunes only what is older
than the oldest snapshot it keeps (at least two are kept), which no recovery reads. In a thread,
the built state is taken apart bit by bit (`dismantle`) rather than dropped in one cascade.

After the new snapshot is durable, older snapshots beyond the newest `keep` are deleted (but not
those the history retention needs: `prune`), then WAL segments wholly before the oldest snapshot
kept. Keeping the previous snapshot (and its WAL) is
what lets recovery fall back to it when the newest does not verify (row 8 of `recovery.py`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import pickle
import sys
from typing import Any

from .disk import Disk
from .model import StateModel
from .recovery import list_segments, load, snapshot_dir, wal_dir
from .snapshot import SnapshotInfo, list_snapshots, snapshot_point, write_snapshot

__all__ = ["take_snapshot", "prune", "dismantle", "main", "command", "model_bytes"]

# Settings shared with the live state: never emptied.
_SHARED = frozenset({"limits", "_limits"})

log = logging.getLogger("runstate.snapshots")


def take_snapshot(
    data_dir: str, through_lsn: int, model: StateModel, disk: Disk | None = None, keep: int = 2,
    partition: int | None = None, retention_ms: int = 0,
) -> SnapshotInfo | None:
    """Snapshot the state at `through_lsn` (durable) and prune; None if the newest is already there.

    `partition`: whose folder `data_dir` is (None: a directory from before partitions).
    `retention_ms`: the history kept (`prune`). Blocking: run it in a worker thread, never at the
    same time as a WAL repair.
    """
    disk = disk or Disk()
    loaded = load(data_dir, model, repair=False, through_lsn=through_lsn, disk=disk, partition=partition)
    if loaded.snapshot_lsn >= through_lsn:
        return None
    snaps = snapshot_dir(data_dir)
    os.makedirs(snaps, exist_ok=True)
    info = write_snapshot(snaps, through_lsn, loaded.newest_ms, loaded.state.image(), model.records, disk, partition or 0)
    state, loaded.state = loaded.state, None
    dismantle(state)
    prune(data_dir, keep, disk, retention_ms)
    return info


def _attribute_names(cls: type) -> tuple[str, ...]:
    names: list[str] = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.extend((slots,) if isinstance(slots, str) else slots)
    return tuple(name for name in names if name not in _SHARED and not name.startswith("__"))


def dismantle(root: Any) -> None:
    """Empty the dicts and lists of a state a little at a time, then let it go.

    Popping an entry frees what only it held at once, on its own, so nothing is freed in one
    long cascade when the root is dropped, and the interpreter can hand its lock to the event
    loop's thread between any two entries (its forced switch every 5 ms). No explicit yields:
    releasing the lock by hand resets the interpreter's count of a waiting thread's patience, and
    starves it instead. Objects are looked into (for the containers they hold) only
    when the first object of their type held one: a claim holds none and is simply freed, a space
    holds its tables. Only for a state nothing else uses (the one built for a snapshot, or one
    replaced by a rebuild). Blocking: run it in a worker thread.
    """
    holds_containers: dict[type, tuple[str, ...]] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            while node:
                value = node.popitem()[1]
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


def prune(data_dir: str, keep: int, disk: Disk | None = None, retention_ms: int = 0) -> tuple[int, int]:
    """Delete snapshots beyond the newest `keep`, then segments wholly before the oldest kept one.

    With `retention_ms`, the history of that long before the newest snapshot's time is kept too
    (`history.py` rebuilds any point in it): every snapshot at or after that horizon, and the
    newest one before it (where a point just after the horizon starts from), with the WAL from
    there on. While no snapshot stands before the horizon (the partition's first snapshots), a
    point before the oldest one is rebuilt from the log's start: a WAL that still begins at LSN 1
    is kept whole. Returns (snapshots deleted, segments deleted).
    """
    if keep < 2:
        raise ValueError("keep at least two snapshots (the fallback, and safety from a leftover snapshot process)")
    disk = disk or Disk()
    snaps = list_snapshots(snapshot_dir(data_dir))
    if not snaps:
        return 0, 0
    first_kept = max(0, len(snaps) - keep)
    from_start = False
    if retention_ms > 0:
        base = _history_base(snaps, retention_ms)
        from_start = base < 0
        first_kept = min(first_kept, max(base, 0))
    old, kept = snaps[:first_kept], snaps[first_kept:]
    for _, path in old:
        disk.remove(path)
    if old:
        disk.fsync_dir(snapshot_dir(data_dir))
    covered = kept[0][0]
    segments = list_segments(wal_dir(data_dir))
    if from_start and segments and segments[0][0] == 1:
        segments = []  # the history's base is the empty state: every segment from LSN 1 is needed
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


def _history_base(snaps: list[tuple[int, str]], retention_ms: int) -> int:
    """The index of the oldest snapshot that the history of `retention_ms` before the newest
    snapshot's time needs: the newest one that stands before that horizon (a snapshot whose
    begin mark does not read counts as none); -1 when none does (the history starts before the
    oldest snapshot)."""
    newest = snapshot_point(snaps[-1][1])
    if newest is None:
        return len(snaps) - 1
    horizon_ms = newest[1] - retention_ms
    for index in range(len(snaps) - 1, -1, -1):
        point = snapshot_point(snaps[index][1])
        if point is not None and point[1] < horizon_ms:
            return index
    return -1


# -- in a child process --------------------------------------------------------------------------


def model_bytes(model: StateModel) -> bytes:
    """`model` as the child reads it; TypeError when it does not pickle (a lambda, a local class)."""
    try:
        return pickle.dumps(model)
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        raise TypeError(
            f"a snapshot process needs a state model that pickles ({error}); "
            "pass a module-level factory, or set snapshot_process=False"
        ) from None


def command(data_dir: str, through_lsn: int, keep: int, partition: int | None = None, retention_ms: int = 0) -> list[str]:
    """The command line that runs `take_snapshot` in a child process (the model comes on stdin)."""
    return [
        sys.executable,
        "-c",
        "import sys; from runstate.snapshots.compaction import main; sys.exit(main())",
        "--data-dir", data_dir,
        "--through", str(through_lsn),
        "--keep", str(keep),
        *(() if partition is None else ("--partition", str(partition))),
        *(() if not retention_ms else ("--retention-ms", str(retention_ms))),
    ]


def main(argv: list[str] | None = None) -> int:
    """Take a snapshot and print what was written as one JSON line (null when none was needed)."""
    parser = argparse.ArgumentParser(prog="runstate-snapshot")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--through", type=int, required=True)
    parser.add_argument("--keep", type=int, default=2)
    parser.add_argument("--partition", type=int, default=None)
    parser.add_argument("--retention-ms", type=int, default=0)
    args = parser.parse_args(argv)
    # The parent's own model, which it wrote there (`model_bytes`): never data from elsewhere.
    model = pickle.loads(sys.stdin.buffer.read())
    if not isinstance(model, StateModel):
        raise SystemExit("the snapshot process reads a StateModel on its standard input")
    import gc

    gc.disable()  # a state without cycles, in a process about to exit
    info = take_snapshot(
        args.data_dir, args.through, model, keep=args.keep, partition=args.partition, retention_ms=args.retention_ms
    )
    print(json.dumps(None if info is None else dataclasses.asdict(info)), flush=True)
    os._exit(0)  # skip freeing the state object by object
