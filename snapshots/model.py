"""What the journal and the snapshots need from the state they keep.

The protocols themselves (`RecoverableState`, `RecordFormat`, `Durable`, the clock's `WallClock`)
are the kernel's seam, defined once in `runstate.actors.journal`; this package takes them from there
and knows no kernel class. Whoever opens a data directory (the server) hands in a `StateModel`: how
to make an empty state, and the record format (its version, its check, its upgrade from older
versions). The kernel's `KernelState` and `actors.records.FORMAT` satisfy these as they are.

The seam is kept narrow on purpose: a journal on a replicated log (see the cluster's design) needs
the same four things (apply records in order, check them before they go out, an image to start a
replica from, and the boot decisions of a new leader), and nothing about segment files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ..actors.journal import Durable, RecordFormat, RecoverableState, WallClock
from ..actors.shapes import Record

__all__ = ["Durable", "RecoverableState", "RecordFormat", "Clock", "StateModel"]

# The clock as the store uses it.
Clock = WallClock


@dataclass(frozen=True, slots=True)
class StateModel:
    """How to make an empty state, and how its records are written.

    `make_state` must pickle (a module-level function, a class, or a `functools.partial` of one)
    when snapshots are built in a child process: the child gets the model, not a name to import.
    """

    make_state: Callable[[], RecoverableState]
    records: RecordFormat
    # Where a record of a directory from before partitions goes when it is split into `count`
    # data partitions (and the system one, 0): the partitions it belongs to.
    place: Callable[[Record, int], Iterable[int]] | None = None
