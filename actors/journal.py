"""The seam between the kernel and whatever keeps its records: each side's needs, said once.

Two protocols face the journal. `Journal` is what the kernel needs from it while serving: append
the records a turn produced and say, through a callback, when they are durable (only then does the
caller get its answer: ack after durable), where the durable point is, and whether the journal has
failed (then the kernel refuses changes with UNAVAILABLE until it recovers). `RecoverableState` and
`RecordFormat` are what a journal needs from the state it keeps: apply records in order, an image
of the state, the boot and restart decisions of a new start, and how records are spelled, checked
and upgraded. `Restorable` is what a journal's owner calls after a failed write: swap in the state
rebuilt from what is recorded. The local WAL (`snapshots/`) and a replicated log both stand behind
these and nothing else; neither the kernel nor the state machines know which one it is.

`MemoryJournal` keeps nothing on disk: records are durable the moment they are appended. It is the
journal of `runstate.testing` and of a server started without a data directory. It can keep the
records it was given, so a test can replay them into a fresh state and compare.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable, Iterable, Protocol

from .records import RecordError, check_record
from .shapes import Record

__all__ = ["Journal", "MemoryJournal", "DurableWaits", "Durable", "Boot", "RecoverableState", "RecordFormat", "Restorable", "WallClock"]

# Called once with None when the records are durable, or with the error that stopped them.
Durable = Callable[[BaseException | None], None]


class Journal(Protocol):
    """What the kernel needs from whatever keeps its records: the WAL, a replicated log, memory."""

    failure: BaseException | None

    @property
    def appended_lsn(self) -> int:
        """The LSN of the last record appended (durable or not)."""
        ...

    @property
    def durable_lsn(self) -> int:
        """The LSN up to which every record is durable under the journal's policy."""
        ...

    def append(self, records: list[Record], on_durable: Durable) -> int:
        """Queue `records` (never blocks, never does IO) and return the LSN of the last one."""
        ...

    def after(self, lsn: int, on_durable: Durable) -> None:
        """Call `on_durable` once everything up to `lsn` is durable (at once if it already is)."""
        ...


class Boot(Protocol):
    # Read-only here (a property), so that a state's own boot class (`BootInfo`) is one.
    @property
    def epoch(self) -> int:
        """Which start of the partition this is (1, 2, 3...)."""
        ...


class RecoverableState(Protocol):
    """A state that records rebuild: everything recovery, snapshots and `runstate check` call."""

    @property
    def boot(self) -> Boot:
        """The state's boots (read-only here: the state's own records change it)."""
        ...

    def apply(self, record: Record) -> None:
        """Change the state by one record (live, in replay, from a snapshot image alike)."""
        ...

    def image(self) -> Iterable[Record]:
        """Records that rebuild this state exactly when applied, in order, to an empty one."""
        ...

    def decide_boot(self, fsync: str, now_ms: int) -> list[Record]:
        """Decide and apply the record(s) of a new boot."""
        ...

    def restart(self, now_ms: int) -> list[Record]:
        """Decide and apply what a start changes (leases that had ended, grace periods)."""
        ...

    def counts(self) -> dict[str, int]:
        """How many of each thing the state holds, by name (for reports)."""
        ...


class RecordFormat(Protocol):
    """The records' format: its number (written in every file header), its check, its upgrade."""

    version: int

    def check(self, record: Record) -> None:
        """Raise `ValueError` unless `record` is one this format knows, spelled as it spells it."""
        ...

    def upgrade(self, record: Record, version: int) -> Record:
        """A record read from a file of an older `version`, as this format spells it."""
        ...


class Restorable(Protocol):
    """What owns a journal's state while it serves (a partition), as the journal's repairs see it."""

    def restore(self, state: RecoverableState) -> None:
        """Serve `state` (rebuilt from what is recorded) from now on, instead of the live one."""
        ...


class WallClock(Protocol):
    """What a journal needs from the clock: wall time, and never going back before its records."""

    def now_ms(self) -> int:
        """Wall time now, in milliseconds."""
        ...

    def advance_anchor_to(self, wall_ms: int) -> None:
        """Never show a wall time before `wall_ms` (the newest time the journal holds)."""
        ...


class DurableWaits:
    """The callbacks of `Journal.after` waiting for a durable point: each called once, when the
    journal's durable LSN reaches its LSN (`reached`), or with the journal's failure (`fail`),
    in LSN order (and the order they came in, for one LSN)."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Durable]] = []
        self._seq = itertools.count()

    def __bool__(self) -> bool:
        return bool(self._heap)

    def add(self, lsn: int, durable_lsn: int, failure: BaseException | None, on_durable: Durable) -> None:
        """`Journal.after`: called now when `lsn` is durable already or the journal failed, else later."""
        assert lsn >= 0 and durable_lsn >= 0, "LSNs count up from 0"
        if lsn <= durable_lsn:
            on_durable(None)
        elif failure is not None:
            on_durable(failure)
        else:
            heapq.heappush(self._heap, (lsn, next(self._seq), on_durable))

    def reached(self, durable_lsn: int) -> None:
        """The durable point is now `durable_lsn`: call every callback waiting up to it."""
        heap = self._heap
        while heap and heap[0][0] <= durable_lsn:
            lsn, _, on_durable = heapq.heappop(heap)
            assert not heap or heap[0][0] >= lsn, "durable points are reached in LSN order"
            on_durable(None)

    def fail(self, error: BaseException) -> None:
        """Call every waiting callback with `error`, and forget them."""
        waiting, self._heap = self._heap, []
        for _, _, on_durable in sorted(waiting):
            on_durable(error)


class MemoryJournal:
    __slots__ = ("failure", "lsn", "records", "_keep")

    def __init__(self, *, keep: bool = False) -> None:
        self.failure: BaseException | None = None
        self.lsn = 0
        self.records: list[Record] = []
        self._keep = keep

    @property
    def appended_lsn(self) -> int:
        return self.lsn

    @property
    def durable_lsn(self) -> int:
        return self.lsn

    def append(self, records: list[Record], on_durable: Durable) -> int:
        # Checked as the WAL checks them, so a record the format does not know is found by every
        # test in memory too (a bug: its caller is answered that the change was not recorded).
        for record in records:
            try:
                check_record(record)
            except RecordError as error:
                on_durable(error)
                return self.lsn
        before = self.lsn
        self.lsn += len(records)
        assert self.lsn > before or not records, "each record appended gets the next LSN"
        if self._keep:
            self.records.extend(records)
        on_durable(None)
        return self.lsn

    def after(self, lsn: int, on_durable: Durable) -> None:
        assert lsn <= self.lsn, "a durable point waited for is one appended (durable <= written)"
        on_durable(None)
