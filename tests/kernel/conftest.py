import orjson
import pytest
import trio

from runstate.actors import Clock, IdSource, Kernel, KernelState
from runstate.actors.journal import MemoryJournal
from runstate.actors.records import check_record
from runstate.snapshots import assert_same_state

from ..ops import ClaimOps, ScopeOps
from ..single import only

# 2027-01-15T08:00:00.000Z: a fixed wall time so tests can assert exact timestamps.
T0 = 1_800_000_000_000


def rebuilt_exactly(kernel: Kernel) -> tuple[KernelState, KernelState]:
    """Assert that the journal, and the image, rebuild the kernel's state (through JSON, as the
    WAL keeps them; every image record as the record format knows it); returns both rebuilds."""
    replayed = KernelState(only(kernel).state.limits)
    for record in only(kernel).journal.records:
        replayed.apply(orjson.loads(orjson.dumps(record)))
    assert_same_state(only(kernel).state, replayed)
    imaged = KernelState(only(kernel).state.limits)
    for record in only(kernel).state.image():
        check_record(record)  # as a snapshot writes it
        imaged.apply(orjson.loads(orjson.dumps(record)))
    assert_same_state(only(kernel).state, imaged)
    return replayed, imaged


class Harness:
    """A running kernel with its operations; tests must also request `autojump_clock`."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.scopes = ScopeOps(kernel)
        self.claims = ClaimOps(kernel)
        self.t0 = trio.current_time()

    def elapsed(self) -> float:
        return trio.current_time() - self.t0


@pytest.fixture
async def harness(nursery):
    kernel = Kernel(
        state=KernelState(),
        journal=MemoryJournal(keep=True),
        clock=Clock(wall_anchor_ms=T0),
        ids=IdSource(seed=1),
    )
    await nursery.start(kernel.run)
    return Harness(kernel)
