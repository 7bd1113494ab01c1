"""Which partition holds what: spaces spread over P data partitions by a stable hash; keys in the system one.

A partition is the unit of state, journal and time (`partition.py`). Partition `SYSTEM` (0) holds
what belongs to no space: API keys, and what a node as a whole records. Data partitions are
numbered 1..P and hold spaces, each space wholly in one: `1 + crc32(space id) mod P`. CRC-32 of
the UTF-8 id is stable across processes, versions and machines (Python's own `hash` of a string is
salted per process), and spreads the ids people use (`default`, `research`, `team-7`) well.

`P` is fixed when a data directory (or, later, a cluster) is created: moving a space to another
partition would mean moving its records, so a directory keeps the count it was made with (its
manifest says it, `snapshots/layout.py`). One node with one data partition is the default: every
space shares one journal, as before partitions existed.

`Layout.single()` is a kernel with one partition that holds everything, keys included: the shape of
a kernel built from one state and one journal, as the kernel's own tests build it.
"""

from __future__ import annotations

import zlib

from .boot import KERNEL_BOOTED
from .shapes import Record

__all__ = ["Layout", "SYSTEM", "PARTITIONS_MAX", "place_record"]

SYSTEM = 0
# Partitions a data directory may be made with: each is a journal, a supervisor and a folder.
PARTITIONS_MAX = 256


class Layout:
    __slots__ = ("count", "single")

    def __init__(self, count: int, *, single: bool = False) -> None:
        if not 1 <= count <= PARTITIONS_MAX:
            raise ValueError(f"partitions must be from 1 to {PARTITIONS_MAX}, got {count}")
        self.count = count  # data partitions
        self.single = single

    @classmethod
    def single_partition(cls) -> "Layout":
        return cls(1, single=True)

    def of(self, space_id: str | None) -> int:
        """The partition that holds `space_id` (None: what belongs to no space)."""
        if self.single:
            return SYSTEM
        if space_id is None:
            return SYSTEM
        return 1 + zlib.crc32(space_id.encode("utf-8", "surrogatepass")) % self.count

    def numbers(self) -> range:
        """Every partition: the system one, then the data ones."""
        return range(1) if self.single else range(self.count + 1)

    def __repr__(self) -> str:
        return "Layout(single)" if self.single else f"Layout({self.count})"


def place_record(record: Record, count: int) -> tuple[int, ...]:
    """The partitions of `count` data partitions that a record of one journal for everything (a
    data directory from before partitions) belongs to, when that directory is split into them.

    A record of a space goes to its space's partition; a key's to the system partition; a boot
    record to every partition, so that each keeps the epoch and the generation floor it reached
    (generations must never be handed out twice, whichever partition a key's space now lives in).
    """
    space = record.get("space")
    if space is not None:
        return (Layout(count).of(space),)
    if record["type"] == KERNEL_BOOTED:
        return tuple(range(count + 1))
    return (SYSTEM,)
