"""What a read of the state asks of a kernel: the live `Kernel`, and the stand-ins that answer the
same reads elsewhere (a space at a past point, `server/history.py`; the one space handed to a
view inside `Kernel.read`, the console's `_Reading`).

The read modules (`reads.py`, `coordination_reads.py`, `capacity_reads.py`) take this, not
`Kernel`, so that a stand-in is checked against exactly what they read: a space's state, the
clock a lease is judged by, and the calls parked now.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the kernel is above the reads, which it does not import
    from .outcome import ActorKey
    from .space import SpaceState

__all__ = ["KernelReads", "ReadClock"]


class ReadClock(Protocol):
    """The time a read judges leases and deadlines at (a past point's clock is stopped there)."""

    def now_ms(self) -> int: ...


class KernelReads(Protocol):
    """The reads' view of a kernel (see the module docstring)."""

    @property
    def clock(self) -> ReadClock: ...

    def space_view(self, space_id: str) -> SpaceState: ...

    def parked(self) -> list[tuple[ActorKey, int]]: ...

    def parked_commands(self, key: ActorKey) -> list[Any]: ...

    def parked_holders(self, key: ActorKey, count_max: int) -> list[str]: ...
