"""Boots: which start of the kernel this is, and the generation floor it sets.

Every start with a data directory records `kernel.booted` before it serves anything, and forces it
to disk whatever the fsync policy. The record carries the boot's `epoch` (1, 2, 3...), the policy
the boot runs with, and the `generation_floor` every claim's next generation must reach.

Why a floor. With `--fsync always` an acquire is answered only once its record is on disk, so
after a crash replay knows every generation that was handed out, and the next owner gets one more:
generations simply count 1, 2, 3 across restarts. With `--fsync batch` or `off` an answer goes out
once the record is written to the operating system, which survives a kill of the process but not a
power cut (nor, under `batch`, a failed background fsync, which rolls back to the last good one):
the end of the journal may then be lost, and with it generations that clients hold. So a boot that
follows a boot under `batch` or `off` raises the floor to `epoch << 32`: every key's next owner
gets a generation above anything the previous boot could have handed out (it handed out fewer than
2**32 per key), and within a boot generations still grow by exactly one per owner. Boots after
`always` boots keep the floor they found (no jump).

Pure: no IO, no clock reads.
"""

from __future__ import annotations

from typing import Iterator

from .primitive import NOT_COUNTED, Primitive, record_type
from .shapes import Record

__all__ = ["BootInfo", "FSYNC_POLICIES", "EPOCH_SHIFT", "UNSYNCED_ANSWERS", "KERNEL_BOOTED", "BOOTS"]

# The record types this module decides and applies (the journal's spelling of each).
KERNEL_BOOTED = record_type("kernel.booted")

FSYNC_POLICIES = ("always", "batch", "off")
# The policies that answer a change before it is on disk: a power cut can lose what they answered.
UNSYNCED_ANSWERS = frozenset({"batch", "off"})

# Generations of one boot stay below the next boot's floor when a key has fewer owners than this
# in one boot (2**32: at a thousand owners a second, fifty days).
EPOCH_SHIFT = 32


class BootInfo:
    __slots__ = ("epoch", "fsync", "generation_floor", "booted_ms")

    def __init__(self) -> None:
        self.epoch = 0
        self.fsync: str | None = None
        self.generation_floor = 0
        self.booted_ms = 0

    def decide_boot(self, fsync: str, now_ms: int) -> Record:
        """The `kernel.booted` record of the next boot."""
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, got {fsync!r}")
        epoch = self.epoch + 1
        floor = self.generation_floor
        if self.fsync in UNSYNCED_ANSWERS:  # the previous boot may have lost generations it handed out
            floor = max(floor, epoch << EPOCH_SHIFT)
        # Paired with `apply_booted`: boots count up, and the floor of generations never goes down.
        assert epoch > self.epoch and floor >= self.generation_floor, "a boot never hands out an old generation again"
        return {"type": KERNEL_BOOTED, "epoch": epoch, "fsync": fsync, "generation_floor": floor, "at_ms": now_ms}

    def apply_booted(self, record: Record) -> None:
        # (The same boot may be read twice: every partition's image carries it.)
        assert record["epoch"] >= self.epoch and record["generation_floor"] >= self.generation_floor, "boots only count up"
        self.epoch = record["epoch"]
        self.fsync = record["fsync"]
        self.generation_floor = record["generation_floor"]
        self.booted_ms = record["at_ms"]

    def image(self) -> Iterator[Record]:
        if self.epoch:
            yield {
                "type": KERNEL_BOOTED,
                "epoch": self.epoch,
                "fsync": self.fsync,
                "generation_floor": self.generation_floor,
                "at_ms": self.booted_ms,
            }


# The kernel's own: a boot is no space's (`KernelState.decide_boot` records it).
BOOTS = Primitive(
    "boots",
    kernel=True,
    records={KERNEL_BOOTED: ("epoch", "fsync", "generation_floor", "at_ms")},
    apply={KERNEL_BOOTED: ("boot", "apply_booted")},
    usage={KERNEL_BOOTED: NOT_COUNTED},
    image=lambda state: state.boot.image(),
)
