"""All kernel state: spaces, API keys and stored idempotent answers, and the one `apply`.

`KernelState.apply(record)` is how both the live kernel (inside a turn) and recovery (reading the
journal) change state, so replaying the journal reproduces the state exactly, generation counters
included. The state is plain objects in dicts: a million idle claims cost their memory, not a
million tasks.

`image()` is the other way round: records that, applied to an empty state, rebuild this one
exactly. A snapshot is an image. Each primitive declares its records, their appliers and its image
(`primitive.py`), so a new table joins replay and snapshots with no change here or to the journal.
`restart()` is what a recovery decides once the state is back (expire what had ended before the
crash, give the rest a grace period), journaled like any other change.

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import Iterator

from .boot import BootInfo
from .keys import KeyTable, key_view
from .limits import Limits
from .outcome import Timer
from .primitives import TABLES, bind
from .space import SpaceState
from .shapes import Record

__all__ = ["KernelState"]

# The records of the kernel itself (keys, boots), by type: (attribute of the state, applier).
# Every other record belongs to a space and names it.
_KERNEL_APPLY = TABLES.kernel_apply
_KERNEL_IMAGES = tuple(p.image for p in TABLES.kernel if p.image is not None)


class KernelState:
    __slots__ = ("limits", "boot", "spaces", "keys")

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.boot = BootInfo()
        self.spaces: dict[str, SpaceState] = {}
        self.keys = KeyTable()

    def space(self, space_id: str) -> SpaceState:
        """The state of a space, made empty on first use (a space exists once a key opens it)."""
        space = self.spaces.get(space_id)
        if space is None:
            space = self.spaces[space_id] = SpaceState(space_id, self.limits, self.boot)
        return space

    def space_view(self, space_id: str) -> SpaceState:
        """The state of a space for reading: the one recorded, or an empty one that is not kept
        (reading never makes a space). Never change what this returns."""
        space = self.spaces.get(space_id)
        return space if space is not None else SpaceState(space_id, self.limits, self.boot)

    def apply(self, record: Record) -> None:
        kernel = _KERNEL_APPLY.get(record["type"])
        if kernel is None:  # nearly every record: one of a space
            space = self.spaces.get(record["space"])
            (self.space(record["space"]) if space is None else space).apply(record)
        else:
            bind(self, kernel)(record)

    # -- boots, restarts and images ---------------------------------------------------------------

    def decide_boot(self, fsync: str, now_ms: int) -> list[Record]:
        """Record a boot (see `boot.py` for the generation floor it may set); returns its record."""
        record = self.boot.decide_boot(fsync, now_ms)
        self.apply(record)
        assert self.boot.epoch == record["epoch"], "a boot is applied as it was decided"
        return [record]

    def restart(self, now_ms: int) -> list[Record]:
        """Decide and apply what a start changes (the restart rule of every lease, `leases.py`);
        returns the records to journal. `now_ms` is the time now, already advanced past the
        newest time the journal holds."""
        records: list[Record] = []
        for space in list(self.spaces.values()):
            records.extend(space.restart(now_ms).records)
        return records

    def image(self) -> Iterator[Record]:
        """Records that rebuild this state exactly when applied, in order, to an empty one."""
        for image in _KERNEL_IMAGES:
            yield from image(self)
        for space in self.spaces.values():
            yield from space.image()

    def counts(self) -> dict[str, int]:
        """How many of each thing the state holds (for recovery reports and `runstate check`)."""
        spaces = [space for space in self.spaces.values() if not space.is_empty()]
        return {
            "spaces": len(spaces),
            "scopes": sum(len(space.scopes) for space in spaces),
            "claims": sum(len(space.claims) for space in spaces),
            "claims_held": sum(1 for space in spaces for _ in space.claims.held()),
            "mailboxes": sum(len(space.mailboxes) for space in spaces),
            "messages": sum(len(space.messages) for space in spaces),
            "tasks": sum(len(space.tasks) for space in spaces),
            "keys": len(self.keys),
            "idempotency_keys": sum(len(space.idempotency) for space in spaces),
        }

    # The view of an API key (`keys.key_view`), as the shell's admin routes show it.
    key_view = staticmethod(key_view)

    def timers(self) -> Iterator[Timer]:
        for space in self.spaces.values():
            yield from space.timers()
