"""Leases: who holds a thing, under which fencing token, until when. One renewal rule, one restart rule.

A claim, a pool grant, a delivery and a once slot are each held under a lease, and a lease is the
same six values on each of them, spelled the same way (`Claim`, `Grant`, `Message`, `Slot`): the
`token` that fences its holder, the `holder` and its `session`, the lease's length `lease_ms`, its
end `expires_ms`, and `graced` (a restart gave it its grace and its holder has not renewed since).
The functions here are the only code that sets them: `hold` when a lease is taken, `renewed` when
it is extended, `release` when it ends. A grant taken at admission holds no lease of its own: it
is attached to its delivery's, held exactly while the delivery is (as keys attach to one lease in
etcd's `server/lease/lessor.go`).

The renewal rule (`renewal`): a renewal extends the lease from now, by the length asked or else by
the lease's own length; only the current token may renew, and only before the end (each kind
refuses a stale one with its own words, `STALE_CLAIM`).

The restart rule (`restart`, etcd's `Lessor.Promote` for our case): at a start, a lease whose end
has passed while the server was down is expired (its holder, going by its own clock, has stopped
using it: the SDKs fail closed at a lease's end); a live lease keeps its end, moved to at least
`grace_ms` from now when it is nearer, once (a lease still `graced` keeps its end, so restarts
every few seconds cannot keep a dead holder's lease alive); and the new ends are spread over
`spread_ms` in the order of the old ones, over every lease of the space together, so a restart
does not set off a wave of expiries at one instant, whatever kind of thing the leases hold.

`LeaseTable` is a space's leases, every kind together: each kind attaches the leases it holds (a
`LeaseKind`: where they are and what its records are) rather than copying them into an index of
its own, which would cost every held claim a tenth of its memory budget (1 KiB, bench/README.md).
Not to be confused with the supervisor's timers: a lease's timer only proposes its expiry, which
the lease's own kind checks again in a turn.

Pure: no IO, no clock reads.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, NamedTuple, Protocol

from .outcome import Outcome
from .shapes import Record

__all__ = ["Lease", "LeaseKind", "LeaseTable", "hold", "restore", "renewed", "release", "renewal", "restart"]


class Lease(Protocol):
    """The six values every leased thing carries (the columns of the lease table)."""

    token: str | None
    holder: str | None
    session: str | None
    lease_ms: int
    expires_ms: int
    graced: bool


def hold(lease: Lease, record: Record) -> None:
    """Give `lease` the lease an acquiring record states: a new token, never graced yet."""
    assert record["lease_ms"] > 0 and record["expires_ms"] == record["at_ms"] + record["lease_ms"], "a lease runs its length from when it is taken"
    lease.token = record["token"]
    lease.holder = record["holder"]
    lease.session = record["session"]
    lease.lease_ms = record["lease_ms"]
    lease.expires_ms = record["expires_ms"]
    lease.graced = False


def restore(lease: Lease, record: Record) -> None:
    """Give `lease` the lease an image record carries as it stood (renewed or graced since taken,
    or not held: a free claim key keeps its last values, token None; its `graced` mark stays
    until the next lease is taken, as `release` leaves it)."""
    lease.token = record["token"]
    lease.holder = record["holder"]
    lease.session = record["session"]
    lease.lease_ms = record["lease_ms"]
    lease.expires_ms = record["expires_ms"]
    lease.graced = "graced" in record


def renewed(lease: Lease, record: Record) -> None:
    """Apply a renewal: a holder's own (which ends a grace), or a restart's grace (`graced`)."""
    graced = "graced" in record
    assert lease.token is not None, "only a held lease is renewed"
    assert record["expires_ms"] > record["at_ms"], "a renewal ends after it is made"
    assert not graced or record["expires_ms"] > lease.expires_ms, "a grace only ever moves an end later"
    lease.lease_ms = record["lease_ms"]
    lease.expires_ms = record["expires_ms"]
    lease.graced = graced


def release(lease: Lease) -> None:
    """The end of a lease (released, expired, or its thing settled): nobody holds it any more.
    Its length, end and `graced` mark stay, as a reader last saw them (the next `hold` resets
    them; images carry them as they stand)."""
    assert lease.token is not None, "a lease ends once"
    lease.token = None
    lease.holder = None
    lease.session = None


def renewal(lease: Lease, lease_ms: int | None, now_ms: int) -> tuple[int, int]:
    """The renewal rule: (length, end) of a renewal asked at `now_ms`, with `lease_ms` or, when
    none is given, the lease's own length. The caller has checked that the token is current."""
    assert now_ms < lease.expires_ms, "a lease is renewed only before its end"
    length = lease.lease_ms if lease_ms is None else lease_ms
    return length, now_ms + length


class LeaseKind(NamedTuple):
    """One kind of leased thing in a space, as the lease table sees it: where its leases are, and
    how its records spell the two changes the rules make."""

    name: str  # "claim", "grant", "delivery", "once"
    # The leases of this kind held now (some may have ended unrecorded).
    held: Callable[[], Iterable[Any]]
    # The record that ends a lease whose end has passed: (lease, now_ms) -> record (an expiry;
    # for a delivery, what a lost lease becomes: requeued, or its message ended).
    ended: Callable[[Any, int], Record]
    # A renewal record of this kind: (lease, lease_ms, expires_ms, now_ms) -> record.
    renewed: Callable[[Any, int, int, int], Record]
    # The space's commit (applies records into an outcome), and the timers a lease (or what it
    # held) needs once it has changed.
    commit: Callable[..., Outcome]
    timers: Callable[[Any], Iterable[Any]]


def restart(
    leases: Iterable[tuple[LeaseKind, Any]], now_ms: int, grace_ms: int, spread_ms: int
) -> tuple[list[tuple[LeaseKind, Any]], list[tuple[LeaseKind, Any, int]]]:
    """The restart rule over `leases`: those to expire, and those to grace with their new ends.

    Ordered by old end (then token, then kind, so the order never depends on how the state was
    rebuilt); the i-th of n graced ends at `now_ms + grace_ms + spread_ms * i // n`.
    """
    assert grace_ms >= 0 and spread_ms >= 0
    ended: list[tuple[LeaseKind, Any]] = []
    short: list[tuple[LeaseKind, Any]] = []
    for kind, lease in leases:
        assert lease.token is not None, "the table holds held leases only"
        if lease.expires_ms <= now_ms:
            ended.append((kind, lease))
        elif lease.expires_ms < now_ms + grace_ms and not lease.graced:
            short.append((kind, lease))
    order: Callable[[tuple[LeaseKind, Any]], tuple[int, str | None, str]] = lambda pair: (pair[1].expires_ms, pair[1].token, pair[0].name)
    ended.sort(key=order)
    short.sort(key=order)
    count = len(short)
    graced = [(kind, lease, now_ms + grace_ms + spread_ms * index // count) for index, (kind, lease) in enumerate(short)]
    assert all(a[2] <= b[2] for a, b in zip(graced, graced[1:])), "new ends keep the order of the old ones"
    assert all(end > lease.expires_ms for _, lease, end in graced), "a grace only ever moves an end later"
    return ended, graced


class LeaseTable:
    """Every lease held in one space: the kinds attach where theirs are, the rules run over all."""

    __slots__ = ("_kinds",)

    def __init__(self) -> None:
        self._kinds: list[LeaseKind] = []

    def attach(self, kind: LeaseKind) -> None:
        assert all(other.name != kind.name for other in self._kinds), f"lease kind {kind.name!r} attached twice"
        self._kinds.append(kind)

    def __iter__(self) -> Iterator[tuple[LeaseKind, Any]]:
        """(kind, lease) for every lease held now, kind by kind."""
        for kind in self._kinds:
            for lease in kind.held():
                yield kind, lease

    def restart(self, now_ms: int, grace_ms: int, spread_ms: int) -> Outcome:
        """Decide the restart rule over every lease of the space and record it, each kind in its
        own records: an ended lease's end, a grace as a renewal with the same token marked `graced`."""
        ended, graced = restart(list(self), now_ms, grace_ms, spread_ms)
        outcome = Outcome()
        for kind, lease in ended:
            kind.commit(outcome, kind.ended(lease, now_ms))
            assert lease.token is None or lease.expires_ms > now_ms, "an ended lease is not held after the restart"
            outcome.timers.extend(kind.timers(lease))
        for kind, lease, expires_ms in graced:
            record = kind.renewed(lease, lease.lease_ms, expires_ms, now_ms)
            record["graced"] = True
            kind.commit(outcome, record)
            assert lease.expires_ms == expires_ms and lease.graced, "a grace is applied as it was decided"
            outcome.timers.extend(kind.timers(lease))
        return outcome
