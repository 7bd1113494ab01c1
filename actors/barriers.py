"""Barriers: wait until `target` distinct arrivals, then stay released.

A barrier lives in a scope. Each arrival names an `arrivalKey`; a key counts once per epoch, so an
agent that retries its arrival (or arrives twice by mistake) does not release the barrier early.
When the count reaches `target` the barrier is RELEASED and stays released: a later arrival is a
409 `BARRIER_RELEASED` (which the 0.3.0 client counts as success), never a second round. Only an
explicit reset, which no client uses, would start a new epoch; `epoch` is 1 for every barrier here.

When its scope ends (cancelled, completed or expired) an open barrier is CANCELLED, and an arrival
then gets 409 `BARRIER_CANCELLED`. The cascade is applied with the scope's `scope.ended` record
(`coordination.py`), like the tasks of the scope, so no crash can leave an open barrier in an ended
scope. A barrier whose scope has passed its deadline before the expiry is recorded reads as
CANCELLED already, and refuses arrivals the same way.

A barrier may have a name, unique in its scope (`PUT /barriers/by-name/{name}`, what the 0.3.0
client's `together(name, count)` uses): a put of a name that exists answers that barrier, in
whatever state it is, if its target is the one sent, and is 409 `CONFLICT` otherwise (two callers
that disagree on how many must meet would never both be right).

Pure: no IO, no clock reads; every method takes `now_ms`.
"""

from __future__ import annotations

from typing import Iterator

from .caps import full
from .errors import CONFLICT, NOT_FOUND, KernelError
from .limits import Limits
from .scopes import ACTIVE, ScopeTree
from .timestamps import format_ms

__all__ = [
    "Barrier", "BarrierTable", "BARRIER_RECORDS", "OPEN", "RELEASED", "CANCELLED", "BARRIER_RELEASED",
    "BARRIER_CANCELLED", "BARRIER_ARRIVED", "BARRIER_CREATED", "BARRIER_IMAGE",
]

# The record types this module decides and applies (the journal's spelling of each).
BARRIER_ARRIVED = "barrier.arrived"
BARRIER_CREATED = "barrier.created"
BARRIER_IMAGE = "barrier.image"

OPEN = "OPEN"
RELEASED = "RELEASED"
CANCELLED = "CANCELLED"

# Wire codes (409).
BARRIER_RELEASED = "BARRIER_RELEASED"
BARRIER_CANCELLED = "BARRIER_CANCELLED"

# The record types of this table and the fields each must carry.
BARRIER_RECORDS: dict[str, tuple[str, ...]] = {
    # `name` only on a named barrier (`PUT /barriers/by-name/{name}`).
    BARRIER_CREATED: ("id", "scope_id", "target", "at_ms", "name?"),
    # The arrival that makes `target` releases the barrier in the same record: a release recorded
    # apart could be lost with the tail of the journal while the arrival was kept.
    BARRIER_ARRIVED: ("id", "arrival_key", "at_ms"),
    BARRIER_IMAGE: ("id", "scope_id", "target", "epoch", "state", "arrivals", "at_ms", "ended_ms", "name?"),
}


class Barrier:
    __slots__ = ("id", "scope_id", "target", "epoch", "state", "arrivals", "created_ms", "ended_ms", "name")

    def __init__(self, barrier_id: str, scope_id: str, target: int, created_ms: int, name: str | None = None) -> None:
        self.id = barrier_id
        self.name = name
        self.scope_id = scope_id
        self.target = target
        self.epoch = 1
        self.state = OPEN
        # Insertion-ordered, at most `target` keys: arrivals stop counting at the release.
        self.arrivals: dict[str, None] = {}
        self.created_ms = created_ms
        self.ended_ms: int | None = None


class BarrierTable:
    """The barriers of one space, by id."""

    __slots__ = ("_by_id", "_open_by_scope", "_by_name", "_scopes", "_limits")
    # (`_scopes` is the space's own table, compared there: `snapshots.equality`.)
    _DERIVED = ("_scopes",)

    def __init__(self, limits: Limits, scopes: ScopeTree) -> None:
        self._by_id: dict[str, Barrier] = {}
        # The open barriers of each scope, so a scope's end finds its own without a scan.
        self._open_by_scope: dict[str, dict[str, None]] = {}
        # Named barriers, whatever their state: (scope_id, name) -> barrier id.
        self._by_name: dict[tuple[str, str], str] = {}
        self._scopes = scopes
        self._limits = limits

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, barrier_id: str) -> Barrier:
        barrier = self._by_id.get(barrier_id)
        if barrier is None:
            raise KernelError(NOT_FOUND, f"barrier {barrier_id!r} not found")
        return barrier

    def find(self, barrier_id: str) -> Barrier | None:
        return self._by_id.get(barrier_id)

    def by_name(self, scope_id: str, name: str) -> Barrier | None:
        barrier_id = self._by_name.get((scope_id, name))
        return None if barrier_id is None else self._by_id[barrier_id]

    def all(self) -> Iterator[Barrier]:
        return iter(self._by_id.values())

    def state_of(self, barrier: Barrier, now_ms: int) -> str:
        """The stored state, or CANCELLED for an open barrier whose scope is no longer active."""
        if barrier.state == OPEN and self._scopes.effective(self._scopes.get(barrier.scope_id), now_ms) != ACTIVE:
            return CANCELLED
        return barrier.state

    def view(self, barrier: Barrier, now_ms: int) -> dict:
        return {
            "id": barrier.id,
            "scopeId": barrier.scope_id,
            "name": barrier.name,
            "state": self.state_of(barrier, now_ms),
            "epoch": barrier.epoch,
            "target": barrier.target,
            "arrived": len(barrier.arrivals),
            "createdAt": format_ms(barrier.created_ms),
            "releasedAt": format_ms(barrier.ended_ms) if barrier.state == RELEASED and barrier.ended_ms is not None else None,
        }

    # -- deciding -------------------------------------------------------------------------------

    def decide_create(self, barrier_id: str, scope_id: str, target: int, now_ms: int, name: str | None = None) -> dict:
        self._scopes.require_active(scope_id, now_ms)
        if name is not None and (scope_id, name) in self._by_name:
            raise KernelError(CONFLICT, f"scope {scope_id} already has a barrier named {name!r}")
        if len(self._by_id) >= self._limits.barriers_max:
            raise full(f"space holds {len(self._by_id)} barriers", "barriers_max")
        if barrier_id in self._by_id:  # an id source collision: the caller draws another id
            raise KernelError(CONFLICT, f"barrier id {barrier_id} is taken")
        record = {"type": BARRIER_CREATED, "id": barrier_id, "scope_id": scope_id, "target": target, "at_ms": now_ms}
        if name is not None:
            record["name"] = name
        return record

    @staticmethod
    def check_named(barrier: Barrier, target: int) -> None:
        """A put by name of a barrier that exists: the target sent must be its own."""
        if barrier.target != target:
            raise KernelError(CONFLICT, f"barrier {barrier.name!r} has target {barrier.target}, not {target}")

    def decide_arrive(self, barrier: Barrier, arrival_key: str, now_ms: int) -> list[dict]:
        """The arrival's record (which releases the barrier when it is the last one needed); none
        for a key already counted in this epoch."""
        state = self.state_of(barrier, now_ms)
        if state == CANCELLED:
            raise KernelError(BARRIER_CANCELLED, f"barrier {barrier.id} was cancelled (its scope ended)")
        if state == RELEASED:
            raise KernelError(
                BARRIER_RELEASED, f"barrier {barrier.id} was already released (epoch {barrier.epoch})",
                details={"epoch": barrier.epoch},
            )
        if arrival_key in barrier.arrivals:
            return []
        return [{"type": BARRIER_ARRIVED, "id": barrier.id, "arrival_key": arrival_key, "at_ms": now_ms}]

    # -- applying -------------------------------------------------------------------------------

    def apply_created(self, record: dict) -> Barrier:
        barrier = Barrier(record["id"], record["scope_id"], record["target"], record["at_ms"], record.get("name"))
        self._by_id[barrier.id] = barrier
        if barrier.name is not None:
            assert (barrier.scope_id, barrier.name) not in self._by_name, f"two barriers named {barrier.name!r}"
            self._by_name[(barrier.scope_id, barrier.name)] = barrier.id
        self._open_by_scope.setdefault(barrier.scope_id, {})[barrier.id] = None
        return barrier

    def _close(self, barrier: Barrier, state: str, at_ms: int | None) -> None:
        barrier.state = state
        barrier.ended_ms = at_ms
        open_here = self._open_by_scope.get(barrier.scope_id)
        if open_here is not None:
            open_here.pop(barrier.id, None)
            if not open_here:
                del self._open_by_scope[barrier.scope_id]

    def apply_arrived(self, record: dict) -> Barrier:
        barrier = self._by_id[record["id"]]
        assert barrier.state == OPEN, f"an arrival at barrier {barrier.id} after it ended"
        barrier.arrivals[record["arrival_key"]] = None
        assert len(barrier.arrivals) <= barrier.target, "a barrier counts at most target arrivals"
        if len(barrier.arrivals) == barrier.target:
            self._close(barrier, RELEASED, record["at_ms"])
        return barrier

    def cancel_in_scopes(self, scope_ids: list[str], at_ms: int) -> list[Barrier]:
        """Applied with a scope's end: its open barriers (and its subtree's) are CANCELLED."""
        cancelled = []
        for scope_id in scope_ids:
            for barrier_id in list(self._open_by_scope.get(scope_id, ())):
                barrier = self._by_id[barrier_id]
                self._close(barrier, CANCELLED, at_ms)
                cancelled.append(barrier)
        return cancelled

    # -- images ---------------------------------------------------------------------------------

    def image(self) -> Iterator[dict]:
        for barrier in self._by_id.values():
            yield {
                "type": BARRIER_IMAGE,
                "id": barrier.id,
                "scope_id": barrier.scope_id,
                "target": barrier.target,
                "epoch": barrier.epoch,
                "state": barrier.state,
                "arrivals": list(barrier.arrivals),
                "at_ms": barrier.created_ms,
                "ended_ms": barrier.ended_ms,
                "name": barrier.name,
            }

    def apply_image(self, record: dict) -> Barrier:
        barrier = self.apply_created(record)
        barrier.epoch = record["epoch"]
        barrier.arrivals = dict.fromkeys(record["arrivals"])
        if record["state"] != OPEN:
            self._close(barrier, record["state"], record["ended_ms"])
        return barrier
