"""The one partition of a kernel made as a whole (`Kernel(state=..., journal=...)`, the kernel's
tests and the durability helpers): its state, journal, supervisor and actors, as the tests read them.

    from tests.single import only
    only(kernel).state.space("default")
    only(kernel).journal.records

A kernel of several partitions has no one state: a test of one reads `kernel.partitions[n]`.
"""

from __future__ import annotations

from runstate.actors.kernel import Kernel
from runstate.actors.partition import Partition

__all__ = ["only"]


def only(kernel: Kernel) -> Partition:
    """The partition of a kernel of one partition."""
    assert len(kernel.partitions) == 1, "only a kernel of one partition has one state, journal and supervisor"
    return kernel.partitions[0]
