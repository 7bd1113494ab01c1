"""The journal seam between the kernel and the disk.

The kernel appends the records a turn produced and is told, through a callback, when they are
durable; only then does the caller get its answer (ack after durable). A journal that has failed
says so in `failure`, and the kernel refuses mutations with UNAVAILABLE until it recovers.

`MemoryJournal` keeps nothing on disk: records are durable the moment they are appended. It is the
journal of `runstate.testing` and of a server started without a data directory. It can keep the
records it was given, so a test can replay them into a fresh state and compare.
"""

from __future__ import annotations

from typing import Callable, Protocol

from .records import RecordError, check_record

__all__ = ["Journal", "MemoryJournal", "Durable"]

# Called once with None when the records are durable, or with the error that stopped them.
Durable = Callable[[BaseException | None], None]


class Journal(Protocol):
    """What the kernel needs from whatever keeps its records: the WAL, a replicated log, memory.

    Defined here, by its consumer, so that the kernel depends on no implementation of it.
    """

    failure: BaseException | None

    @property
    def appended_lsn(self) -> int:
        """The LSN of the last record appended (durable or not)."""
        ...

    def append(self, records: list[dict], on_durable: Durable) -> int:
        """Queue `records` (never blocks, never does IO) and return the LSN of the last one."""
        ...

    def after(self, lsn: int, on_durable: Durable) -> None:
        """Call `on_durable` once everything up to `lsn` is durable (at once if it already is)."""
        ...


class MemoryJournal:
    __slots__ = ("failure", "lsn", "records", "_keep")

    def __init__(self, *, keep: bool = False) -> None:
        self.failure: BaseException | None = None
        self.lsn = 0
        self.records: list[dict] = []
        self._keep = keep

    @property
    def appended_lsn(self) -> int:
        return self.lsn

    def append(self, records: list[dict], on_durable: Durable) -> int:
        # Checked as the WAL checks them, so a record the format does not know is found by every
        # test in memory too (a bug: its caller is answered that the change was not recorded).
        for record in records:
            try:
                check_record(record)
            except RecordError as error:
                on_durable(error)
                return self.lsn
        self.lsn += len(records)
        if self._keep:
            self.records.extend(records)
        on_durable(None)
        return self.lsn

    def after(self, lsn: int, on_durable: Durable) -> None:
        on_durable(None)
