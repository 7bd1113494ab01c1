"""What the journal and the snapshots need from the state they keep, said here, by them.

`snapshots` keeps a state durable without knowing what it is: it replays records into a state,
writes a state's image, asks it for the records of a boot, and counts what it holds. Whoever opens
a data directory (the server) hands in a `StateModel`: how to make an empty state, and the record
format (its version, its check, its upgrade from older versions). Nothing here imports the kernel;
the kernel's `KernelState` and `actors.records.FORMAT` satisfy these protocols as they are.

The seam is kept narrow on purpose: a journal on a replicated log (see the scale-out notes) needs
the same four things (apply records in order, check them before they go out, an image to start a
replica from, and the boot decisions of a new leader), and nothing about segment files.

Not to be confused with the kernel's own `Journal` protocol (what the kernel needs from a
journal): `WalJournal` satisfies that one structurally, with the callback type `Durable` below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

__all__ = ["Durable", "Boot", "RecoverableState", "RecordFormat", "Clock", "StateModel"]

# Called once with None when records are durable, or with the error that stopped them.
Durable = Callable[[BaseException | None], None]


class Boot(Protocol):
    epoch: int  # which start of the kernel this is (1, 2, 3...)


class RecoverableState(Protocol):
    """A state that records rebuild: everything recovery, snapshots and `runstate check` call."""

    boot: Boot

    def apply(self, record: dict) -> None:
        """Change the state by one record (live, in replay, from a snapshot image alike)."""
        ...

    def image(self) -> Iterable[dict]:
        """Records that rebuild this state exactly when applied, in order, to an empty one."""
        ...

    def decide_boot(self, fsync: str, now_ms: int) -> list[dict]:
        """Decide and apply the record(s) of a new boot."""
        ...

    def restart(self, newest_ms: int, now_ms: int) -> list[dict]:
        """Decide and apply what a recovery changes (leases that had ended, grace periods)."""
        ...

    def counts(self) -> dict[str, int]:
        """How many of each thing the state holds, by name (for reports)."""
        ...


class RecordFormat(Protocol):
    """The records' format: its number (written in every file header), its check, its upgrade."""

    version: int

    def check(self, record: dict) -> None:
        """Raise `ValueError` unless `record` is one this format knows, spelled as it spells it."""
        ...

    def upgrade(self, record: dict, version: int) -> dict:
        """A record read from a file of an older `version`, as this format spells it."""
        ...


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall time now, in milliseconds."""
        ...

    def advance_anchor_to(self, wall_ms: int) -> None:
        """Never show a wall time before `wall_ms` (the newest time the journal holds)."""
        ...


@dataclass(frozen=True, slots=True)
class StateModel:
    """How to make an empty state, and how its records are written.

    `make_state` must pickle (a module-level function, a class, or a `functools.partial` of one)
    when snapshots are built in a child process: the child gets the model, not a name to import.
    """

    make_state: Callable[[], RecoverableState]
    records: RecordFormat
