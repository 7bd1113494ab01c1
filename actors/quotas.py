"""Quotas (allowances): at most `units_limit` units consumed per fixed window, and FIFO waiters.

Windows are fixed and aligned to the allowance's creation: window k covers
[created + k * window, created + (k + 1) * window). A consumption counts in the window of the
moment it is recorded, so the units consumed in one window never exceed the limit. A window with
too few units left is 429 ALLOWANCE_EXHAUSTED with a Retry-After of the time to the next window;
while a cooldown lasts (a back-off the provider reported), consume is 429 ALLOWANCE_COOLDOWN and
no waiter is granted. Asking for more units than the limit is a 400: it could never succeed.

Waiters are durable and served first come, first served: the head waiter is granted (the units
consumed on its behalf, its `consumptionId` recorded) as soon as its units fit, and nobody behind
it, and no new consumer, overtakes it. So a consume that arrives while waiters wait is refused even
if its units would fit: fairness beats throughput here, since the head would otherwise starve
behind a stream of small takes. A waiter ends GRANTED, EXPIRED (its TTL ran out) or CANCELLED.

A consumption taken a moment ago may be given back (`refund`): a caller cancelled as its take's
answer came, which never used the units. Each allowance keeps its recent consumptions (direct,
granted to a waiter, or taken by an admission), at most `REFUNDABLE_MAX` of them and only those
recorded in the last `REFUND_WINDOW_MS`, the oldest dropped first, so what it keeps stays small
whatever the traffic. A refund of one still in the window it was taken in lowers that window's
`used` (and may let the head waiter in); one whose window has ended gives nothing back (that
window's units are gone with it), nor does one refunded already; one no longer kept is 409
CONFLICT. The consumption id is drawn and unguessable: knowing it is the fence, as a token is.

`decide_serve` is what grants waiters; every decision on an allowance calls it first, and a timer
(`serve_due_ms`) calls it when the next window begins or the cooldown ends. The commands run on the
space's capacity actor (`capacity.py`); the quotas' declaration (`QUOTAS`) is at the end.

Timers (tags on the capacity actor, each proposing a change the turn checks again):
    ("quota-serve", allowance_id)  marker due_ms  a window began or a cooldown ended: grant waiters
    ("waiter-ttl", waiter_id)      -              a waiter's TTL ran out: EXPIRED if still waiting

Pure: no IO, no clock reads; every method takes `now_ms`.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Literal, NamedTuple, cast

from .capacity import CapacityCommand, CapacityCommands
from .caps import full
from .errors import CONFLICT, NOT_FOUND, VALIDATION_FAILED, KernelError
from .fields import INTEGER, body, check_text, drawn, path
from .limits import Limits
from .outcome import Outcome, Timer, Space, TimerMarker
from .primitive import EVENT, NOT_COUNTED, OPERATION, Primitive, command, event, operation, reason_field, record_type, timer_kind
from .timestamps import format_ms
from .quota_views import (
    AllowanceExhaustedView, AllowanceMismatchView, AllowanceView, AllowanceWaiterState, AllowanceWaiterView, ConsumptionView,
    CooldownView, RefundedAllowanceView,
)
from .shapes import DurationMs, EpochMs, Record

__all__ = [
    "Allowance", "Waiter", "AllowanceTable", "ALLOWANCE_EXHAUSTED", "ALLOWANCE_COOLDOWN", "QUOTAS",
    "CreateAllowance", "EnsureAllowance", "Consume", "WaitAllowance", "CancelWaiter", "Cooldown", "RefundConsumption",
    "WAITING", "GRANTED", "EXPIRED", "CANCELLED", "refund_if_kept", "ALLOWANCE_CONSUMED", "ALLOWANCE_COOLDOWN_RECORD",
    "ALLOWANCE_CREATED", "ALLOWANCE_IMAGE", "ALLOWANCE_REFUNDED", "WAITER_ADDED", "WAITER_ENDED", "WAITER_GRANTED", "WAITER_IMAGE",
    "REFUNDABLE_MAX", "REFUND_WINDOW_MS", "Recent",
    "AllowanceView", "ConsumptionView", "AllowanceWaiterView", "CooldownView", "AllowanceExhaustedView",
    "AllowanceMismatchView", "AllowanceWaiterState", "RefundedAllowanceView",
]

# The record types this module decides and applies (the journal's spelling of each).
ALLOWANCE_CONSUMED = record_type("allowance.consumed")
ALLOWANCE_COOLDOWN_RECORD = record_type("allowance.cooldown")
ALLOWANCE_CREATED = record_type("allowance.created")
ALLOWANCE_IMAGE = record_type("allowance.image")
ALLOWANCE_REFUNDED = record_type("allowance.refunded")
WAITER_ADDED = record_type("waiter.added")
WAITER_ENDED = record_type("waiter.ended")
WAITER_GRANTED = record_type("waiter.granted")
WAITER_IMAGE = record_type("waiter.image")

ALLOWANCE_EXHAUSTED = "ALLOWANCE_EXHAUSTED"
ALLOWANCE_COOLDOWN = "ALLOWANCE_COOLDOWN"

WAITING, GRANTED, EXPIRED, CANCELLED = "WAITING", "GRANTED", "EXPIRED", "CANCELLED"

# What an allowance keeps of its recent consumptions, to give one back: the newest REFUNDABLE_MAX,
# and of those only the ones recorded in the last REFUND_WINDOW_MS. A refund comes from a caller
# cancelled as its answer came, within a second or two; these bounds keep an allowance's memory
# small whatever its traffic. (If in doubt, keep them small: a refund that finds its consumption
# dropped is refused, and the units count until the window ends, as before refunds existed.)
REFUNDABLE_MAX = 16
REFUND_WINDOW_MS = 30_000

SERVE_TIMER = timer_kind("quota-serve")
WAITER_TIMER = timer_kind("waiter-ttl")

def consumption_of(waiter_id: str) -> str:
    """The consumption id of a waiter's grant, made from the waiter's id: one serve may grant many
    waiters without drawing ids."""
    return "cs_" + waiter_id.removeprefix("aw_")


class Recent(NamedTuple):
    """A recent consumption an allowance keeps, to give it back: its units, the window it counts
    in, when it was recorded, and whether it was refunded already (kept so that a second refund
    answers 0 rather than CONFLICT)."""

    units: int
    window_start_ms: EpochMs
    at_ms: EpochMs
    refunded: bool


class Allowance:
    __slots__ = (
        "id", "name", "units_limit", "window_ms", "created_ms", "window_start_ms", "used", "cooldown_until_ms",
        "cooldown_reason", "queue", "recent",
    )

    def __init__(self, allowance_id: str, name: str, units_limit: int, window_ms: int, created_ms: int) -> None:
        self.id = allowance_id
        self.name = name
        self.units_limit = units_limit
        self.window_ms = window_ms
        self.created_ms = created_ms
        self.window_start_ms = created_ms  # the window `used` counts in
        self.used = 0
        self.cooldown_until_ms = 0
        self.cooldown_reason: str | None = None
        self.queue: list[str] = []  # waiter ids still WAITING, oldest first
        # Consumption id -> what may still be given back, oldest first (`REFUNDABLE_MAX`, `REFUND_WINDOW_MS`).
        self.recent: dict[str, Recent] = {}

    def window_at(self, now_ms: int) -> int:
        return self.created_ms + (now_ms - self.created_ms) // self.window_ms * self.window_ms

    def used_at(self, now_ms: int) -> int:
        return self.used if self.window_at(now_ms) == self.window_start_ms else 0

    def remaining_at(self, now_ms: int) -> int:
        return self.units_limit - self.used_at(now_ms)

    def cooling_at(self, now_ms: int) -> bool:
        return now_ms < self.cooldown_until_ms


class Waiter:
    __slots__ = (
        "id", "allowance_id", "scope_id", "holder", "units", "expires_ms", "state", "consumption_id", "window_start_ms",
        "created_ms", "ended_ms",
    )

    def __init__(self, record: Record) -> None:
        self.id: str = record["id"]
        self.allowance_id: str = record["allowance_id"]
        self.scope_id: str = record["scope_id"]
        self.holder: str = record["holder"]
        self.units: int = record["units"]
        self.expires_ms: int = record["expires_ms"]
        self.state: str = record.get("state", WAITING)
        self.consumption_id: str | None = record.get("consumption_id")
        self.window_start_ms: int | None = record.get("window_start_ms")  # of its grant
        self.created_ms: int = record["created_ms"] if "created_ms" in record else record.get("at_ms", 0)
        self.ended_ms: int | None = record.get("ended_ms")


class AllowanceTable:
    """The allowances of one space, by id and name, and their waiters by id."""

    __slots__ = ("_allowances", "_by_name", "_waiters", "_ended_count", "allowances_max", "waiters_max")

    def __init__(self, allowances_max: int, waiters_max: int) -> None:
        self._allowances: dict[str, Allowance] = {}
        self._by_name: dict[str, Allowance] = {}
        # Waiters in the order they came. Ended ones stay readable (a client polls how its waiter
        # ended; 0.3.0's limit() registers one per call), the newest `waiters_max` of them.
        self._waiters: dict[str, Waiter] = {}
        self._ended_count = 0
        self.allowances_max = allowances_max
        self.waiters_max = waiters_max  # WAITING waiters per allowance

    # -- reading --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._allowances)

    def waiters_kept(self) -> int:
        """Waiters kept, waiting or ended (the newest `waiters_max` ended ones stay readable)."""
        return len(self._waiters)

    def all(self) -> Iterator[Allowance]:
        return iter(self._allowances.values())

    def get(self, allowance_id: str) -> Allowance:
        allowance = self._allowances.get(allowance_id)
        if allowance is None:
            raise KernelError(NOT_FOUND, f"allowance {allowance_id!r} not found")
        return allowance

    def named(self, name: str) -> Allowance | None:
        return self._by_name.get(name)

    def find(self, name: str) -> Allowance:
        allowance = self._by_name.get(name)
        if allowance is None:
            raise KernelError(NOT_FOUND, f"allowance {name!r} not found")
        return allowance

    def waiting_at(self, allowance: Allowance, now_ms: int) -> int:
        """Waiters ahead of any new taker: those still waiting whose TTL has not run out."""
        return sum(1 for waiter_id in allowance.queue if now_ms < self._waiters[waiter_id].expires_ms)

    def waiter(self, waiter_id: str) -> Waiter:
        waiter = self._waiters.get(waiter_id)
        if waiter is None:
            raise KernelError(NOT_FOUND, f"allowance waiter {waiter_id!r} not found")
        return waiter

    def waiters(self) -> Iterator[Waiter]:
        return iter(self._waiters.values())

    @staticmethod
    def view(allowance: Allowance, now_ms: int) -> AllowanceView:
        window_start = allowance.window_at(now_ms)
        cooling = allowance.cooling_at(now_ms)
        used, remaining = allowance.used_at(now_ms), allowance.remaining_at(now_ms)
        assert 0 <= remaining <= allowance.units_limit, "a window's units left are never negative nor above its limit"
        return AllowanceView(
            allowance.id, allowance.name, allowance.units_limit, allowance.window_ms, window_start,
            window_start + allowance.window_ms, used, remaining, len(allowance.queue),
            allowance.cooldown_until_ms if cooling else None, allowance.cooldown_reason if cooling else None,
            allowance.created_ms,
        )

    @staticmethod
    def waiter_view(waiter: Waiter) -> AllowanceWaiterView:
        return AllowanceWaiterView(
            waiter.id, waiter.allowance_id, waiter.scope_id, waiter.holder, waiter.units,
            cast(AllowanceWaiterState, waiter.state), waiter.consumption_id, waiter.window_start_ms, waiter.expires_ms,
            waiter.created_ms,
        )

    # -- deciding -------------------------------------------------------------------------------

    def decide_create(self, allowance_id: str, name: str, units_limit: int, window_ms: int, now_ms: int) -> Record:
        if name in self._by_name:
            raise KernelError(CONFLICT, f"an allowance named {name!r} exists already", details={"id": self._by_name[name].id})
        if len(self._allowances) >= self.allowances_max:
            raise full(f"space holds {len(self._allowances)} allowances", "allowances_max")
        assert units_limit > 0 and window_ms > 0, "an allowance grants some units per window"
        return {
            "type": ALLOWANCE_CREATED, "id": allowance_id, "name": name, "units_limit": units_limit,
            "window_ms": window_ms, "at_ms": now_ms,
        }

    def check_units(self, allowance: Allowance, units: int) -> None:
        if units > allowance.units_limit:
            raise KernelError(
                VALIDATION_FAILED,
                f"units {units} is more than allowance {allowance.name!r} grants in a window ({allowance.units_limit})",
            )

    def decide_serve(self, allowance: Allowance, now_ms: int) -> list[Record]:
        """Grant waiters from the head while their units fit (and no cooldown lasts); expire those
        whose TTL ran out on the way. The caller commits the records in order."""
        records: list[Record] = []
        remaining = allowance.remaining_at(now_ms)
        for waiter_id in list(allowance.queue):
            waiter = self._waiters[waiter_id]
            if now_ms >= waiter.expires_ms:
                records.append({"type": WAITER_ENDED, "id": waiter.id, "state": EXPIRED, "at_ms": now_ms})
                continue
            if allowance.cooling_at(now_ms) or waiter.units > remaining:
                break
            remaining -= waiter.units
            # Paired with `_count`: a window never hands out more than the limit.
            assert 0 <= remaining <= allowance.units_limit, "a window's units are never negative nor above the limit"
            records.append({
                "type": WAITER_GRANTED, "id": waiter.id, "consumption_id": consumption_of(waiter.id),
                "window_start_ms": allowance.window_at(now_ms), "at_ms": now_ms,
            })
        return records

    def decide_consume(
        self, allowance: Allowance, consumption_id: str, scope_id: str, holder: str, units: int, now_ms: int
    ) -> Record:
        """The consumption, or 429: cooling down, too few units left, or waiters ahead.

        Waiters still in the queue are ahead even when a new window has begun and the serve timer
        has not run yet: they are served first, so this consume is refused (it changes nothing,
        so the refusal needs no record)."""
        self.check_units(allowance, units)
        if allowance.cooling_at(now_ms):
            raise KernelError(
                ALLOWANCE_COOLDOWN,
                f"allowance {allowance.name!r} is cooling down until {format_ms(allowance.cooldown_until_ms)}"
                + (f": {allowance.cooldown_reason}" if allowance.cooldown_reason else ""),
                retry_after_s=(allowance.cooldown_until_ms - now_ms) / 1000,
            )
        window_start = allowance.window_at(now_ms)
        remaining = allowance.remaining_at(now_ms)
        waiting = self.waiting_at(allowance, now_ms)
        if units > remaining or waiting:
            ahead = f", {waiting} waiter(s) ahead" if waiting else ""
            raise KernelError(
                ALLOWANCE_EXHAUSTED,
                f"allowance {allowance.name!r} has {remaining} of {allowance.units_limit} units left in this window{ahead}, {units} asked",
                details=AllowanceExhaustedView(remaining, window_start, waiting),
                retry_after_s=(window_start + allowance.window_ms - now_ms) / 1000,
            )
        # Paired with `_count`: what this takes fits in what the window has left.
        assert 0 < units <= remaining <= allowance.units_limit, "a consumption takes units the window still has"
        return {
            "type": ALLOWANCE_CONSUMED, "id": allowance.id, "consumption_id": consumption_id, "scope_id": scope_id,
            "holder": holder, "units": units, "window_start_ms": window_start, "at_ms": now_ms,
        }

    def decide_wait(self, allowance: Allowance, waiter_id: str, scope_id: str, holder: str, units: int, ttl_ms: int, now_ms: int) -> Record:
        self.check_units(allowance, units)
        if len(allowance.queue) >= self.waiters_max:
            raise full(f"allowance {allowance.name!r} has {len(allowance.queue)} waiters", "waiters_max")
        assert 0 < units <= allowance.units_limit and ttl_ms > 0, "a waiter waits for units a window could give, for a while"
        return {
            "type": WAITER_ADDED, "id": waiter_id, "allowance_id": allowance.id, "scope_id": scope_id,
            "holder": holder, "units": units, "expires_ms": now_ms + ttl_ms, "at_ms": now_ms,
        }

    def decide_cooldown(self, allowance: Allowance, seconds: int, reason: str | None, now_ms: int) -> Record:
        """A cooldown never shortens one that lasts longer."""
        until_ms = max(allowance.cooldown_until_ms, now_ms + seconds * 1000)
        assert until_ms > now_ms and until_ms >= allowance.cooldown_until_ms, "a cooldown only ever lasts longer"
        return {"type": ALLOWANCE_COOLDOWN_RECORD, "id": allowance.id, "until_ms": until_ms, "reason": reason, "at_ms": now_ms}

    def decide_refund(self, allowance: Allowance, consumption_id: str, now_ms: int) -> Record | None:
        """The refund of a recent consumption still in its window; None when there is nothing to
        give back (its window has ended, or it was refunded already); CONFLICT when it is no longer
        kept (unknown, older than REFUND_WINDOW_MS, or dropped past REFUNDABLE_MAX)."""
        recent = allowance.recent.get(consumption_id)
        if recent is None or now_ms - recent.at_ms > REFUND_WINDOW_MS:
            raise KernelError(
                CONFLICT,
                f"consumption {consumption_id!r} of allowance {allowance.name!r} can no longer be given back "
                f"(only its newest {REFUNDABLE_MAX} consumptions of the last {REFUND_WINDOW_MS // 1000} s can be)",
            )
        if recent.refunded or recent.window_start_ms != allowance.window_at(now_ms):
            return None
        # Paired with `apply_refunded`: the window it counts in is the one `used` counts now.
        assert recent.window_start_ms == allowance.window_start_ms, "a consumption in the current window is counted in `used`"
        assert 0 < recent.units <= allowance.used <= allowance.units_limit, "a refund gives back no more than the window used"
        return {"type": ALLOWANCE_REFUNDED, "id": allowance.id, "consumption_id": consumption_id, "units": recent.units, "at_ms": now_ms}

    def decide_cancel(self, waiter: Waiter, now_ms: int) -> Record | None:
        """Cancel a waiter still waiting; one that ended already stays as it ended (a grant stands)."""
        if waiter.state != WAITING:
            return None
        assert waiter.id in self._allowances[waiter.allowance_id].queue, "a waiting waiter is in its allowance's queue"
        return {"type": WAITER_ENDED, "id": waiter.id, "state": CANCELLED, "at_ms": now_ms}

    def decide_expire(self, waiter_id: str, now_ms: int) -> Record | None:
        waiter = self._waiters.get(waiter_id)
        if waiter is None or waiter.state != WAITING or now_ms < waiter.expires_ms:
            return None
        assert waiter.id in self._allowances[waiter.allowance_id].queue, "a waiting waiter is in its allowance's queue"
        return {"type": WAITER_ENDED, "id": waiter.id, "state": EXPIRED, "at_ms": now_ms}

    def serve_due_ms(self, allowance: Allowance, now_ms: int) -> int | None:
        """When waiters could next be granted: the next window, or the cooldown's end if later."""
        if not allowance.queue:
            return None
        if allowance.cooling_at(now_ms):
            return allowance.cooldown_until_ms
        return allowance.window_at(now_ms) + allowance.window_ms

    def end_in_scopes(self, scope_ids: list[str], at_ms: int) -> None:
        """Applied with a scope's end: its waiters are CANCELLED."""
        ended = set(scope_ids)
        for waiter in self._waiters.values():
            if waiter.state == WAITING and waiter.scope_id in ended:
                self._end(waiter, CANCELLED, at_ms)

    # -- applying -------------------------------------------------------------------------------

    def apply_created(self, record: Record) -> Allowance:
        allowance = Allowance(record["id"], record["name"], record["units_limit"], record["window_ms"], record["at_ms"])
        assert allowance.id not in self._allowances and allowance.name not in self._by_name
        self._allowances[allowance.id] = self._by_name[allowance.name] = allowance
        return allowance

    def _count(self, allowance: Allowance, units: int, window_start_ms: int) -> None:
        if window_start_ms != allowance.window_start_ms:
            assert window_start_ms > allowance.window_start_ms, "windows only move forward"
            allowance.window_start_ms = window_start_ms
            allowance.used = 0
        allowance.used += units
        assert 0 < units and allowance.used <= allowance.units_limit, "a window never consumes more than the limit"

    def _keep(self, allowance: Allowance, consumption_id: str, units: int, window_start_ms: int, at_ms: int) -> None:
        """Keep a consumption just counted, to give it back; forget those past the bounds."""
        assert consumption_id not in allowance.recent, "a consumption id is recorded once"
        allowance.recent[consumption_id] = Recent(units, window_start_ms, at_ms, False)
        self._forget(allowance, at_ms)

    @staticmethod
    def _forget(allowance: Allowance, at_ms: int) -> None:
        """Drop the consumptions recorded more than REFUND_WINDOW_MS before `at_ms`, and the oldest
        past REFUNDABLE_MAX (in the order they were recorded, which replay repeats)."""
        recent = allowance.recent
        while recent:
            oldest_id = next(iter(recent))
            if len(recent) <= REFUNDABLE_MAX and at_ms - recent[oldest_id].at_ms <= REFUND_WINDOW_MS:
                break
            del recent[oldest_id]
        assert len(recent) <= REFUNDABLE_MAX, "an allowance keeps at most REFUNDABLE_MAX recent consumptions"

    def apply_consumed(self, record: Record) -> None:
        allowance = self._allowances[record["id"]]
        self._count(allowance, record["units"], record["window_start_ms"])
        self._keep(allowance, record["consumption_id"], record["units"], record["window_start_ms"], record["at_ms"])

    def apply_refunded(self, record: Record) -> None:
        allowance = self._allowances[record["id"]]
        recent = allowance.recent[record["consumption_id"]]
        assert not recent.refunded and recent.units == record["units"], "a consumption is refunded once, and all of it"
        assert recent.window_start_ms == allowance.window_start_ms, "a refund gives units back to the window `used` counts"
        allowance.used -= recent.units
        # Paired with `decide_refund` and `_count`: `used` never goes below zero.
        assert 0 <= allowance.used <= allowance.units_limit, "a window's units used are never negative"
        allowance.recent[record["consumption_id"]] = recent._replace(refunded=True)
        self._forget(allowance, record["at_ms"])

    def apply_cooldown(self, record: Record) -> None:
        allowance = self._allowances[record["id"]]
        allowance.cooldown_until_ms = record["until_ms"]
        allowance.cooldown_reason = record["reason"]

    def apply_waiter_added(self, record: Record) -> Waiter:
        waiter = Waiter(record)
        assert waiter.id not in self._waiters
        self._waiters[waiter.id] = waiter
        self._allowances[waiter.allowance_id].queue.append(waiter.id)
        return waiter

    def apply_waiter_granted(self, record: Record) -> None:
        waiter = self._waiters[record["id"]]
        assert waiter.state == WAITING, "a waiter is granted once"
        allowance = self._allowances[waiter.allowance_id]
        assert allowance.queue and allowance.queue[0] == waiter.id, "waiters are granted in order"
        self._count(allowance, waiter.units, record["window_start_ms"])
        self._keep(allowance, record["consumption_id"], waiter.units, record["window_start_ms"], record["at_ms"])
        waiter.consumption_id = record["consumption_id"]
        waiter.window_start_ms = record["window_start_ms"]
        self._end(waiter, GRANTED, record["at_ms"])

    def apply_waiter_ended(self, record: Record) -> None:
        self._end(self._waiters[record["id"]], record["state"], record["at_ms"])

    def _end(self, waiter: Waiter, state: str, at_ms: int) -> None:
        assert waiter.state == WAITING, "a waiter ends once"
        waiter.state = state
        waiter.ended_ms = at_ms
        self._allowances[waiter.allowance_id].queue.remove(waiter.id)
        self._ended_count += 1
        while self._ended_count > self.waiters_max:  # forget the oldest ended waiter (replay does the same)
            oldest = next(w for w in self._waiters.values() if w.state != WAITING)
            del self._waiters[oldest.id]
            self._ended_count -= 1

    # -- images ---------------------------------------------------------------------------------

    def image(self) -> Iterator[Record]:
        for allowance in self._allowances.values():
            image: Record = {
                "type": ALLOWANCE_IMAGE, "id": allowance.id, "name": allowance.name, "units_limit": allowance.units_limit,
                "window_ms": allowance.window_ms, "created_ms": allowance.created_ms,
                "window_start_ms": allowance.window_start_ms, "used": allowance.used,
                "cooldown_until_ms": allowance.cooldown_until_ms, "cooldown_reason": allowance.cooldown_reason,
            }
            if allowance.recent:  # (oldest first; left out when empty, as images before refunds were)
                image["refundable"] = [[consumption_id, *recent] for consumption_id, recent in allowance.recent.items()]
            yield image
        # Waiters in the order they were added, so the queues come back in order.
        for waiter in self._waiters.values():
            yield {
                "type": WAITER_IMAGE, "id": waiter.id, "allowance_id": waiter.allowance_id, "scope_id": waiter.scope_id,
                "holder": waiter.holder, "units": waiter.units, "expires_ms": waiter.expires_ms, "state": waiter.state,
                "consumption_id": waiter.consumption_id, "window_start_ms": waiter.window_start_ms, "created_ms": waiter.created_ms, "ended_ms": waiter.ended_ms,
            }

    def apply_image(self, record: Record) -> None:
        allowance = self.apply_created({**record, "at_ms": record["created_ms"]})
        allowance.window_start_ms = record["window_start_ms"]
        allowance.used = record["used"]
        allowance.cooldown_until_ms = record["cooldown_until_ms"]
        allowance.cooldown_reason = record["cooldown_reason"]
        for consumption_id, units, window_start_ms, at_ms, refunded in record.get("refundable", ()):
            allowance.recent[consumption_id] = Recent(units, window_start_ms, at_ms, refunded)
        assert len(allowance.recent) <= REFUNDABLE_MAX, "an image keeps no more recent consumptions than an allowance does"

    def apply_waiter_image(self, record: Record) -> None:
        waiter = Waiter(record)
        self._waiters[waiter.id] = waiter
        if waiter.state == WAITING:
            self._allowances[waiter.allowance_id].queue.append(waiter.id)
        else:
            self._ended_count += 1


# -- commands ----------------------------------------------------------------------------------


@command
class CreateAllowance(CapacityCommand):
    space: str = path("space")
    name: str = body("name", length_max="name_len_max")
    units_limit: int = body("unitsLimit", INTEGER, minimum=1, maximum="allowance_units_max")
    window_s: int = body("windowSeconds", INTEGER, minimum=1, maximum="window_s_max")
    allowance_id: str = drawn("al_")


@command
class EnsureAllowance(CapacityCommand):
    """The allowance of this name: `{}` looks it up; with both sizes it is created when missing,
    and must have them when it exists (else CONFLICT)."""

    space: str = path("space")
    name: str = path("name")
    units_limit: int | None = body("unitsLimit", INTEGER, required=False, minimum=1, maximum="allowance_units_max")
    window_s: int | None = body("windowSeconds", INTEGER, required=False, minimum=1, maximum="window_s_max")
    allowance_id: str = drawn("al_")

    def check(self, limits: Limits) -> None:
        check_text("name", self.name, limits.name_len_max)
        if (self.units_limit is None) != (self.window_s is None):
            raise KernelError(VALIDATION_FAILED, "declare an allowance with both unitsLimit and windowSeconds, or neither")


@command
class Consume(CapacityCommand):
    space: str = path("space")
    allowance_id: str = path("allowance_id")
    scope_id: str = body("scopeId")
    units: int = body("units", INTEGER, required=False, minimum=1, maximum="allowance_units_max", default=1)
    holder: str = body("holder", length_max="holder_len_max")
    consumption_id: str = drawn("cs_")


@command
class WaitAllowance(CapacityCommand):
    """Register a durable waiter, granted first come, first served (at once if nothing is ahead)."""

    space: str = path("space")
    allowance_id: str = path("allowance_id")
    scope_id: str = body("scopeId")
    units: int = body("units", INTEGER, required=False, minimum=1, maximum="allowance_units_max", default=1)
    holder: str = body("holder", length_max="holder_len_max")
    ttl_s: int = body("ttlSeconds", INTEGER, minimum="waiter_ttl_s_min", maximum="waiter_ttl_s_max")
    waiter_id: str = drawn("aw_")


@command
class CancelWaiter(CapacityCommand):
    space: str = path("space")
    waiter_id: str = path("waiter_id")


@command
class Cooldown(CapacityCommand):
    space: str = path("space")
    allowance_id: str = path("allowance_id")
    seconds: int = body("seconds", INTEGER, minimum=1, maximum="cooldown_s_max")
    reason: str | None = reason_field("reason")


@command
class RefundConsumption(CapacityCommand):
    """Give a recent consumption's units back to the window it was taken in, once."""

    space: str = path("space")
    allowance_id: str = path("allowance_id")
    consumption_id: str = path("consumption_id")


# -- transitions (of the capacity part) ------------------------------------------------------------


def create(part: CapacityCommands, command: CreateAllowance | EnsureAllowance, now_ms: int) -> Outcome:
    allowances: AllowanceTable = part.allowances
    assert command.units_limit is not None and command.window_s is not None
    record = allowances.decide_create(command.allowance_id, command.name, command.units_limit, command.window_s * 1000, now_ms)
    outcome = part.commit(Outcome(), record)
    outcome.reply = allowances.view(allowances.get(command.allowance_id), now_ms)
    return outcome


def ensure(part: CapacityCommands, command: EnsureAllowance, now_ms: int) -> Outcome:
    """`PUT /allowances/by-name/{name}`: look up, create, or check the allowance of this name."""
    allowance = part.allowances.named(command.name)
    if allowance is None:
        if command.units_limit is None:
            raise KernelError(NOT_FOUND, f"allowance {command.name!r} not found (send unitsLimit and windowSeconds to create it)")
        return create(part, command, now_ms)
    if command.units_limit is not None:
        assert command.window_s is not None
        if (command.units_limit, command.window_s * 1000) != (allowance.units_limit, allowance.window_ms):
            raise KernelError(
                CONFLICT,
                f"allowance {allowance.name!r} allows {allowance.units_limit} units per {allowance.window_ms // 1000} s, "
                f"not {command.units_limit} per {command.window_s} s",
                details=AllowanceMismatchView(allowance.id, allowance.units_limit, allowance.window_ms),
            )
    return Outcome(reply=part.allowances.view(allowance, now_ms))


def _served(part: CapacityCommands, allowance: Allowance, now_ms: int) -> Outcome:
    """An outcome that begins with the grants waiters are owed now (FIFO, head first)."""
    return part.commit(Outcome(), *part.allowances.decide_serve(allowance, now_ms))


def _serve_timer(part: CapacityCommands, outcome: Outcome, allowance: Allowance, now_ms: int) -> Outcome:
    due_ms = part.allowances.serve_due_ms(allowance, now_ms)
    if due_ms is not None:
        outcome.timers.append(Timer(due_ms, part.actor, (SERVE_TIMER, allowance.id), due_ms))
    return outcome


def consume(part: CapacityCommands, command: Consume, now_ms: int) -> Outcome:
    part.scopes.require_active(command.scope_id, now_ms)
    allowances: AllowanceTable = part.allowances
    allowance = allowances.get(command.allowance_id)
    record = allowances.decide_consume(allowance, command.consumption_id, command.scope_id, command.holder, command.units, now_ms)
    outcome = part.commit(Outcome(), record)
    outcome.reply = ConsumptionView(
        command.consumption_id, allowance.id, command.units, record["window_start_ms"], allowance.remaining_at(now_ms),
    )
    return _serve_timer(part, outcome, allowance, now_ms)


def wait(part: CapacityCommands, command: WaitAllowance, now_ms: int) -> Outcome:
    part.scopes.require_active(command.scope_id, now_ms)
    allowances: AllowanceTable = part.allowances
    allowance = allowances.get(command.allowance_id)
    part.check_entities(1)
    record = allowances.decide_wait(allowance, command.waiter_id, command.scope_id, command.holder, command.units, command.ttl_s * 1000, now_ms)
    outcome = _served(part, allowance, now_ms)
    part.commit(outcome, record)
    # The new waiter may be granted at once (nothing ahead, units free).
    part.commit(outcome, *allowances.decide_serve(allowance, now_ms))
    waiter = allowances.waiter(command.waiter_id)
    if waiter.state == WAITING:
        outcome.timers.append(Timer(waiter.expires_ms, part.actor, (WAITER_TIMER, waiter.id), None))
    outcome.reply = allowances.waiter_view(waiter)
    return _serve_timer(part, outcome, allowance, now_ms)


def cancel_waiter(part: CapacityCommands, command: CancelWaiter, now_ms: int) -> Outcome:
    allowances: AllowanceTable = part.allowances
    waiter = allowances.waiter(command.waiter_id)
    record = allowances.decide_cancel(waiter, now_ms)
    outcome = Outcome() if record is None else part.commit(Outcome(), record)
    allowance = allowances.get(waiter.allowance_id)
    if record is not None:
        # The head may have left: those behind it may fit now.
        part.commit(outcome, *allowances.decide_serve(allowance, now_ms))
    outcome.reply = allowances.waiter_view(waiter)
    return _serve_timer(part, outcome, allowance, now_ms)


def cooldown(part: CapacityCommands, command: Cooldown, now_ms: int) -> Outcome:
    allowances: AllowanceTable = part.allowances
    allowance = allowances.get(command.allowance_id)
    outcome = _served(part, allowance, now_ms)
    part.commit(outcome, allowances.decide_cooldown(allowance, command.seconds, command.reason, now_ms))
    assert allowance.cooling_at(now_ms), "a cooldown just recorded lasts past now (paired with `decide_cooldown`)"
    outcome.reply = CooldownView(allowance.id, allowance.cooldown_until_ms, allowance.cooldown_reason)
    return _serve_timer(part, outcome, allowance, now_ms)


def refund_if_kept(part: CapacityCommands, outcome: Outcome, allowance: Allowance, consumption_id: str, now_ms: int) -> int:
    """Into `outcome`: the refund of `consumption_id` when it can still be given back (kept, and
    its window current), the waiters its units let in served; the units refunded, else 0. For a
    return of work its taker never handled (`deliveries.return_delivery`): what its admission
    consumed goes back with it where the server still can, and is let be where it cannot."""
    recent = allowance.recent.get(consumption_id)
    if recent is None or now_ms - recent.at_ms > REFUND_WINDOW_MS:
        return 0
    part.commit(outcome, *part.allowances.decide_serve(allowance, now_ms))
    record = part.allowances.decide_refund(allowance, consumption_id, now_ms)
    if record is None:
        return 0
    part.commit(outcome, record)
    part.commit(outcome, *part.allowances.decide_serve(allowance, now_ms))
    _serve_timer(part, outcome, allowance, now_ms)
    units: int = record["units"]
    return units


def refund(part: CapacityCommands, command: RefundConsumption, now_ms: int) -> Outcome:
    """Give a consumption back: the allowance as it then stands, and the units refunded (0 when
    there was nothing to give back). Units freed may let the head waiter in."""
    allowances: AllowanceTable = part.allowances
    allowance = allowances.get(command.allowance_id)
    outcome = _served(part, allowance, now_ms)
    record = allowances.decide_refund(allowance, command.consumption_id, now_ms)
    refunded = 0
    if record is not None:
        used = allowance.used
        part.commit(outcome, record)
        refunded = record["units"]
        assert allowance.used == used - refunded, "the refund lowered the window's units used by what it gave back"
        part.commit(outcome, *allowances.decide_serve(allowance, now_ms))
    outcome.reply = RefundedAllowanceView(*allowances.view(allowance, now_ms), refunded)
    return _serve_timer(part, outcome, allowance, now_ms)


def on_serve_timer(part: CapacityCommands, allowance_id: str, due_ms: Any, now_ms: int) -> Outcome:
    allowance = part.allowances.get(allowance_id)
    return _serve_timer(part, _served(part, allowance, now_ms), allowance, now_ms)


def on_waiter_timer(part: CapacityCommands, waiter_id: str, _: TimerMarker, now_ms: int) -> Outcome:
    allowances: AllowanceTable = part.allowances
    record = allowances.decide_expire(waiter_id, now_ms)
    if record is None:
        return Outcome()
    outcome = part.commit(Outcome(), record)
    allowance = allowances.get(allowances.waiter(waiter_id).allowance_id)
    part.commit(outcome, *allowances.decide_serve(allowance, now_ms))
    return _serve_timer(part, outcome, allowance, now_ms)


def _deadlines(space: Space) -> Iterator[Timer]:
    part: CapacityCommands = space.capacity
    for allowance in part.allowances.all():
        if allowance.queue:
            # Due at once after a recovery: the turn grants what is owed and arms the next.
            yield Timer(0, part.actor, (SERVE_TIMER, allowance.id), 0)
    for waiter in part.allowances.waiters():
        if waiter.state == WAITING:
            yield Timer(waiter.expires_ms, part.actor, (WAITER_TIMER, waiter.id), None)


def _scope_ending(space: Space, subtree: list[str]) -> Callable[[Outcome, int], None]:
    """A scope's end may remove the head of a queue of waiters: those behind it may fit now."""

    def then(outcome: Outcome, at_ms: int) -> None:
        part: CapacityCommands = space.capacity
        for allowance in part.allowances.all():
            if allowance.queue:
                outcome.timers.append(Timer(at_ms, part.actor, (SERVE_TIMER, allowance.id), at_ms))

    return then


def _make(space: Space) -> None:
    space.capacity.allowances = AllowanceTable(space.limits.allowances_max, space.limits.waiters_max)


_ON = "capacity"
_TABLE = "capacity.allowances"

QUOTAS = Primitive(
    "quotas",
    make=_make,
    commands={
        CreateAllowance: (_ON, create),
        EnsureAllowance: (_ON, ensure),
        Consume: (_ON, consume),
        WaitAllowance: (_ON, wait),
        CancelWaiter: (_ON, cancel_waiter),
        Cooldown: (_ON, cooldown),
        RefundConsumption: (_ON, refund),
    },
    records={
        ALLOWANCE_CREATED: ("id", "name", "units_limit", "window_ms", "at_ms"),
        ALLOWANCE_CONSUMED: ("id", "consumption_id", "scope_id", "holder", "units", "window_start_ms", "at_ms"),
        ALLOWANCE_COOLDOWN_RECORD: ("id", "until_ms", "reason", "at_ms"),
        ALLOWANCE_REFUNDED: ("id", "consumption_id", "units", "at_ms"),
        WAITER_ADDED: ("id", "allowance_id", "scope_id", "holder", "units", "expires_ms", "at_ms"),
        WAITER_GRANTED: ("id", "consumption_id", "window_start_ms", "at_ms"),
        WAITER_ENDED: ("id", "state", "at_ms"),
        ALLOWANCE_IMAGE: (
            "id", "name", "units_limit", "window_ms", "created_ms", "window_start_ms", "used", "cooldown_until_ms", "cooldown_reason",
            "refundable?",
        ),
        WAITER_IMAGE: (
            "id", "allowance_id", "scope_id", "holder", "units", "expires_ms", "state", "consumption_id", "window_start_ms",
            "created_ms", "ended_ms",
        ),
    },
    apply={
        ALLOWANCE_CREATED: (_TABLE, "apply_created"),
        ALLOWANCE_CONSUMED: (_TABLE, "apply_consumed"),
        ALLOWANCE_COOLDOWN_RECORD: (_TABLE, "apply_cooldown"),
        ALLOWANCE_REFUNDED: (_TABLE, "apply_refunded"),
        WAITER_ADDED: (_TABLE, "apply_waiter_added"),
        WAITER_GRANTED: (_TABLE, "apply_waiter_granted"),
        WAITER_ENDED: (_TABLE, "apply_waiter_ended"),
        ALLOWANCE_IMAGE: (_TABLE, "apply_image"),
        WAITER_IMAGE: (_TABLE, "apply_waiter_image"),
    },
    usage={
        ALLOWANCE_CREATED: operation("quotas.create"),
        ALLOWANCE_CONSUMED: operation("quotas.consume"),
        ALLOWANCE_COOLDOWN_RECORD: operation("quotas.cooldown"),
        ALLOWANCE_REFUNDED: operation("quotas.refund"),
        WAITER_ADDED: operation("quotas.wait"),
        WAITER_GRANTED: event("quotas.grant"),
        WAITER_ENDED: lambda record: (OPERATION, "quotas.cancel_wait") if record["state"] == "CANCELLED" else (EVENT, "quotas.wait_expire"),
        ALLOWANCE_IMAGE: NOT_COUNTED,
        WAITER_IMAGE: NOT_COUNTED,
    },
    timers={SERVE_TIMER: (_ON, on_serve_timer), WAITER_TIMER: (_ON, on_waiter_timer)},
    deadlines=_deadlines,
    image=lambda space: space.capacity.allowances.image(),
    is_empty=lambda space: not len(space.capacity.allowances),
    entities=lambda space: space.capacity.allowances.waiters_kept(),
    scope_ended=lambda space, subtree, state, at_ms: space.capacity.allowances.end_in_scopes(subtree, at_ms),
    scope_ending=_scope_ending,
)
