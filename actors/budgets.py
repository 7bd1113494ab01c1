"""Budgets: a spending limit in minor units, reserved before work and settled after it.

Amounts are exact integers of minor units (cents for scale 2), read from and written to the wire
as canonical digit strings (`fields.MINOR`) and never held as floats. A budget has a `limit`;
`reserved` is the sum of what active reservations still hold, `spent` the sum of settlements,
and `available` = limit - spent - reserved, which never goes below zero: a reservation that does
not fit is 409 INSUFFICIENT_BUDGET.

A reservation is ACTIVE until its remainder is settled (SETTLED), given back (VOIDED), or its
`settleBy` passes (RELEASED: the remainder goes back to the budget; the friendlier of the two
readings, and the one 0.3.0 relies on). A settle charges at most what the reservation still
holds (unless `allowOverrun`: then up to what the budget can still cover); a partial settle keeps
the rest reserved (still ACTIVE). Settle and void are idempotent
per `workKey`: a key used already on the reservation answers its view again and changes nothing.
Acting with a new key on a reservation that is no longer ACTIVE is 409 CONFLICT. The commands run
on the space's capacity actor (`capacity.py`); the budgets' declaration (`BUDGETS`) is at the end.

A late charge: work that outlived its reservation's `settleBy` is charged through a reservation of
one minor unit made for it, `lateOf` the released one, and settled with `allowOverrun` (0.3.0's
way; the shell reads 0.3.0's `late:<id>` idempotency key as `lateOf`). It records spend that
happened, so it is taken in the released reservation's run even once that run has ended (where
no other reservation is), and only that way: one per released reservation, of one minor unit, in
its run. Without `lateOf` a reservation needs an active run (SCOPE_CANCELLED otherwise).

Timers (tags on the capacity actor):
    ("settle-by", reservation_id)   -   a reservation's settleBy passed: release it

Pure: no IO, no clock reads; every method takes `now_ms`.
"""

from __future__ import annotations

from typing import Iterator, Literal, NamedTuple, cast

from .capacity import CapacityCommand, CapacityCommands
from .caps import full
from .errors import CONFLICT, NOT_FOUND, VALIDATION_FAILED, KernelError
from .fields import BOOLEAN, INTEGER, MINOR, TIMESTAMP, body, check_text, drawn, path
from .limits import Limits
from .outcome import Outcome, Timer, Space, TimerMarker
from .primitive import EVENT, NOT_COUNTED, OPERATION, Primitive, command, operation, record_type, timer_kind
from .shapes import EpochMs, MinorUnits, Record

__all__ = [
    "Budget", "Reservation", "BudgetTable", "INSUFFICIENT_BUDGET", "BUDGETS", "ACTIVE", "SETTLED", "VOIDED",
    "CreateBudget", "EnsureBudget", "Reserve", "Settle", "Void", "SETTLE_BY_TIMER",
    "RELEASED", "BUDGET_CREATED", "BUDGET_IMAGE", "RESERVATION_ENDED", "RESERVATION_IMAGE", "RESERVATION_MADE",
    "RESERVATION_SETTLED", "BudgetView", "BudgetReservationsView", "ActiveReservationView", "ReservationView",
    "InsufficientBudgetView", "BudgetMismatchView", "ReservationState",
]

# The record types this module decides and applies (the journal's spelling of each).
BUDGET_CREATED = record_type("budget.created")
BUDGET_IMAGE = record_type("budget.image")
RESERVATION_ENDED = record_type("reservation.ended")
RESERVATION_IMAGE = record_type("reservation.image")
RESERVATION_MADE = record_type("reservation.made")
RESERVATION_SETTLED = record_type("reservation.settled")

INSUFFICIENT_BUDGET = "INSUFFICIENT_BUDGET"

ACTIVE, SETTLED, VOIDED, RELEASED = "ACTIVE", "SETTLED", "VOIDED", "RELEASED"

SETTLE_BY_TIMER = timer_kind("settle-by")

# A budget's views are named tuples, as a claim's are; amounts are integers of minor units
# (`MinorUnits`). The shell names and writes them on the wire (`server/wire/budgets.py`).

ReservationState = Literal["ACTIVE", "SETTLED", "VOIDED", "RELEASED"]


class BudgetView(NamedTuple):
    """A budget: its limit, what active reservations hold, what was spent, and what is left."""

    id: str
    name: str
    currency: str
    scale: int
    limit_minor: MinorUnits
    reserved_minor: MinorUnits
    spent_minor: MinorUnits
    available_minor: MinorUnits
    created_ms: EpochMs


class ActiveReservationView(NamedTuple):
    """A reservation as a budget lists it: who holds how much, for which scope (an active one, or
    one its settleBy released lately, holding nothing)."""

    id: str
    scope_id: str
    state: ReservationState
    reserved_minor: MinorUnits
    holder: str


class BudgetReservationsView(NamedTuple):
    """A budget as `BudgetView`, then its active reservations and those released lately."""

    id: str
    name: str
    currency: str
    scale: int
    limit_minor: MinorUnits
    reserved_minor: MinorUnits
    spent_minor: MinorUnits
    available_minor: MinorUnits
    created_ms: EpochMs
    reservations: tuple[ActiveReservationView, ...]


class ReservationView(NamedTuple):
    """A reservation: what it still holds, what was settled, and when the rest goes back
    (`settle_by_ms`) if nobody settles or voids it."""

    reservation_id: str
    budget_id: str
    scope_id: str
    holder: str
    state: ReservationState
    reserved_minor: MinorUnits
    settled_minor: MinorUnits
    settle_by_ms: EpochMs
    created_ms: EpochMs


class InsufficientBudgetView(NamedTuple):
    """INSUFFICIENT_BUDGET's details: what is available, and what was asked."""

    available_minor: MinorUnits
    requested_minor: MinorUnits


class BudgetMismatchView(NamedTuple):
    """CONFLICT's details when a budget of that name has another limit, currency or scale."""

    id: str
    limit_minor: MinorUnits
    currency: str
    scale: int


class Budget:
    __slots__ = ("id", "name", "currency", "scale", "limit", "spent", "reserved", "created_ms", "reservations")

    def __init__(self, budget_id: str, name: str, currency: str, scale: int, limit: int, created_ms: int) -> None:
        self.id = budget_id
        self.name = name
        self.currency = currency
        self.scale = scale
        self.limit = limit
        self.spent = 0
        self.reserved = 0
        self.created_ms = created_ms
        self.reservations: dict[str, Reservation] = {}

    @property
    def available(self) -> int:
        return self.limit - self.spent - self.reserved


class Reservation:
    __slots__ = (
        "id", "budget_id", "scope_id", "holder", "reserved", "settled", "state", "settle_by_ms", "work_keys", "created_ms",
        "late_of", "late_by",
    )

    def __init__(self, reservation_id: str, budget_id: str, scope_id: str, holder: str, reserved: int, settle_by_ms: int, created_ms: int) -> None:
        self.id = reservation_id
        self.budget_id = budget_id
        self.scope_id = scope_id
        self.holder = holder
        self.reserved = reserved  # what it still holds
        self.settled = 0
        self.state = ACTIVE
        self.settle_by_ms = settle_by_ms
        self.work_keys: list[str] = []
        self.created_ms = created_ms
        self.late_of: str | None = None  # the released reservation whose cost this one charges late
        self.late_by: str | None = None  # the reservation that charges this one's cost late


class BudgetTable:
    __slots__ = ("_budgets", "_by_name", "_reservations", "budgets_max")

    def __init__(self, budgets_max: int) -> None:
        self._budgets: dict[str, Budget] = {}
        self._by_name: dict[str, Budget] = {}
        self._reservations: dict[str, Reservation] = {}
        self.budgets_max = budgets_max

    # -- reading --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._budgets)

    def all(self) -> Iterator[Budget]:
        return iter(self._budgets.values())

    def get(self, budget_id: str) -> Budget:
        budget = self._budgets.get(budget_id)
        if budget is None:
            raise KernelError(NOT_FOUND, f"budget {budget_id!r} not found")
        return budget

    def named(self, name: str) -> Budget | None:
        return self._by_name.get(name)

    def find(self, name: str) -> Budget:
        budget = self._by_name.get(name)
        if budget is None:
            raise KernelError(NOT_FOUND, f"budget {name!r} not found")
        return budget

    def reservation(self, budget: Budget, reservation_id: str) -> Reservation:
        reservation = budget.reservations.get(reservation_id)
        if reservation is None:
            raise KernelError(NOT_FOUND, f"reservation {reservation_id!r} not found in budget {budget.name!r}")
        return reservation

    def reservations(self) -> Iterator[Reservation]:
        return iter(self._reservations.values())

    @staticmethod
    def view(budget: Budget) -> BudgetView:
        assert 0 <= budget.available <= budget.limit, "what is available is never negative nor above the limit"
        return BudgetView(
            budget.id, budget.name, budget.currency, budget.scale, budget.limit, budget.reserved, budget.spent,
            budget.available, budget.created_ms,
        )

    @staticmethod
    def reservations_view(budget: Budget, now_ms: int, released_kept_ms: int) -> BudgetReservationsView:
        """A budget with its active reservations, and those its settleBy released in the last
        `released_kept_ms`: a 0.3.0 worker whose settle comes after the release (409 CONFLICT)
        charges the cost late in the released reservation's run, which it finds here."""
        listed = tuple(
            ActiveReservationView(r.id, r.scope_id, cast(ReservationState, r.state), r.reserved, r.holder)
            for r in budget.reservations.values()
            if r.state == ACTIVE or (r.state == RELEASED and now_ms - r.settle_by_ms < released_kept_ms)
        )
        return BudgetReservationsView(*BudgetTable.view(budget), listed)

    @staticmethod
    def reservation_view(reservation: Reservation) -> ReservationView:
        return ReservationView(
            reservation.id, reservation.budget_id, reservation.scope_id, reservation.holder,
            cast(ReservationState, reservation.state), reservation.reserved, reservation.settled, reservation.settle_by_ms,
            reservation.created_ms,
        )

    # -- deciding -------------------------------------------------------------------------------

    def decide_create(self, budget_id: str, name: str, currency: str, scale: int, limit: int, now_ms: int) -> Record:
        if name in self._by_name:
            raise KernelError(CONFLICT, f"a budget named {name!r} exists already", details={"id": self._by_name[name].id})
        if len(self._budgets) >= self.budgets_max:
            raise full(f"space holds {len(self._budgets)} budgets", "budgets_max")
        assert limit >= 0 and scale >= 0, "a budget's limit and scale are never negative"
        return {
            "type": BUDGET_CREATED, "id": budget_id, "name": name, "currency": currency, "scale": scale,
            "limit_minor": str(limit), "at_ms": now_ms,
        }

    def check_late(self, budget: Budget, late_of: str, scope_id: str, amount: int) -> None:
        """A late charge's reservation (see the module docstring): of one minor unit, in the run of
        a reservation of this budget that its settleBy released, and the only one for it."""
        original = self.reservation(budget, late_of)
        if original.scope_id != scope_id:
            raise KernelError(VALIDATION_FAILED, f"reservation {late_of!r} is in scope {original.scope_id}, not {scope_id}")
        if amount != 1:
            raise KernelError(VALIDATION_FAILED, "a late charge reserves amountMinor 1, and settles its cost with allowOverrun")
        if original.state != RELEASED:
            raise KernelError(CONFLICT, f"reservation {late_of!r} is {original.state}: only one its settleBy released is charged late")
        if original.late_by is not None:
            raise KernelError(CONFLICT, f"reservation {late_of!r} is charged late already, by {original.late_by!r}")

    def decide_reserve(
        self, budget: Budget, reservation_id: str, scope_id: str, holder: str, amount: int, settle_by_ms: int, now_ms: int,
        late_of: str | None = None,
    ) -> Record:
        if amount > budget.available:
            raise KernelError(
                INSUFFICIENT_BUDGET,
                f"budget {budget.name!r} has {budget.available} minor units available, {amount} asked",
                details=InsufficientBudgetView(budget.available, amount),
            )
        # Paired with `_check`: spent plus reserved never exceeds the limit.
        assert 0 < amount <= budget.available and settle_by_ms > now_ms, "a reservation holds what is available, until later"
        record = {
            "type": RESERVATION_MADE, "id": reservation_id, "budget_id": budget.id, "scope_id": scope_id,
            "holder": holder, "amount_minor": str(amount), "settle_by_ms": settle_by_ms, "at_ms": now_ms,
        }
        if late_of is not None:
            assert amount == 1 and budget.reservations[late_of].state == RELEASED, "a late charge is checked first"
            record["late_of"] = late_of
        return record

    @staticmethod
    def _check_active(reservation: Reservation, action: str) -> None:
        if reservation.state != ACTIVE:
            raise KernelError(CONFLICT, f"reservation {reservation.id!r} is {reservation.state}: it cannot be {action}")

    def decide_settle(self, reservation: Reservation, amount: int, work_key: str, now_ms: int, allow_overrun: bool = False) -> list[Record]:
        """The settlement (and, when nothing is left, the end); nothing for a repeated work key.

        With `allow_overrun` a settle may charge more than the reservation holds (the work cost
        more than was reserved, 0.3.0's `cost()`): the excess comes from what the budget has
        available, and is cut to it, so spent plus reserved still never exceeds the limit."""
        if work_key in reservation.work_keys:
            return []
        self._check_active(reservation, "settled")
        if allow_overrun:
            amount = min(amount, reservation.reserved + self._budgets[reservation.budget_id].available)
        elif amount > reservation.reserved:
            raise KernelError(
                CONFLICT,
                f"settle of {amount} minor units is more than reservation {reservation.id!r} holds ({reservation.reserved})",
            )
        assert 0 <= amount <= reservation.reserved + self._budgets[reservation.budget_id].available, "a settle charges what is held or free"
        return [{"type": RESERVATION_SETTLED, "id": reservation.id, "amount_minor": str(amount), "work_key": work_key, "at_ms": now_ms}]

    def decide_void(self, reservation: Reservation, work_key: str, now_ms: int) -> Record | None:
        if work_key in reservation.work_keys:
            return None
        self._check_active(reservation, "voided")
        assert reservation.reserved >= 0, "a void gives back what is still held, never more"
        return {"type": RESERVATION_ENDED, "id": reservation.id, "state": VOIDED, "work_key": work_key, "at_ms": now_ms}

    def find_reservation(self, reservation_id: str) -> Reservation | None:
        """The reservation of that id in any budget of the space, or None."""
        return self._reservations.get(reservation_id)

    def decide_release(self, reservation_id: str, now_ms: int) -> Record | None:
        """The settle-by proposal: give the remainder back if the reservation is still active and due."""
        reservation = self._reservations.get(reservation_id)
        if reservation is None or reservation.state != ACTIVE or now_ms < reservation.settle_by_ms:
            return None
        assert reservation.reserved > 0, "an active reservation still holds something (one settled whole is SETTLED)"
        return {"type": RESERVATION_ENDED, "id": reservation.id, "state": RELEASED, "work_key": None, "at_ms": now_ms}

    # -- applying -------------------------------------------------------------------------------

    def _check(self, budget: Budget) -> None:
        assert budget.reserved >= 0 and budget.spent >= 0, "amounts are never negative"
        assert budget.spent + budget.reserved <= budget.limit, "spent plus reserved never exceeds the limit"

    def apply_created(self, record: Record) -> Budget:
        budget = Budget(record["id"], record["name"], record["currency"], record["scale"], int(record["limit_minor"]), record["at_ms"])
        assert budget.id not in self._budgets and budget.name not in self._by_name
        self._budgets[budget.id] = self._by_name[budget.name] = budget
        return budget

    def apply_made(self, record: Record) -> Reservation:
        budget = self._budgets[record["budget_id"]]
        amount = int(record["amount_minor"])
        reservation = Reservation(record["id"], budget.id, record["scope_id"], record["holder"], amount, record["settle_by_ms"], record["at_ms"])
        assert reservation.id not in self._reservations
        budget.reservations[reservation.id] = self._reservations[reservation.id] = reservation
        budget.reserved += amount
        self._link_late(reservation, record.get("late_of"))
        self._check(budget)
        return reservation

    def _link_late(self, reservation: Reservation, late_of: str | None) -> None:
        """Pair a late charge's reservation with the released one it charges (once each)."""
        if late_of is None:
            return
        original = self._reservations[late_of]
        assert original.state == RELEASED and original.late_by is None, "a released reservation is charged late once"
        assert original.budget_id == reservation.budget_id and original.scope_id == reservation.scope_id
        reservation.late_of, original.late_by = late_of, reservation.id

    def apply_settled(self, record: Record) -> None:
        reservation = self._reservations[record["id"]]
        budget = self._budgets[reservation.budget_id]
        amount = int(record["amount_minor"])
        assert reservation.state == ACTIVE and amount <= reservation.reserved + budget.available, "a settle charges at most what is held and free"
        held = min(amount, reservation.reserved)  # the rest is an overrun, taken from what is available
        reservation.reserved -= held
        reservation.settled += amount
        reservation.work_keys.append(record["work_key"])
        budget.reserved -= held
        budget.spent += amount
        if reservation.reserved == 0:
            reservation.state = SETTLED
        self._check(budget)

    def apply_ended(self, record: Record) -> None:
        """A void or a release: the remainder goes back to the budget."""
        reservation = self._reservations[record["id"]]
        budget = self._budgets[reservation.budget_id]
        assert reservation.state == ACTIVE, "a reservation ends once"
        budget.reserved -= reservation.reserved
        reservation.reserved = 0
        reservation.state = record["state"]
        if record.get("work_key") is not None:
            reservation.work_keys.append(record["work_key"])
        self._check(budget)

    # -- images ---------------------------------------------------------------------------------

    def image(self) -> Iterator[Record]:
        for budget in self._budgets.values():
            yield {
                "type": BUDGET_IMAGE, "id": budget.id, "name": budget.name, "currency": budget.currency,
                "scale": budget.scale, "limit_minor": str(budget.limit), "spent_minor": str(budget.spent),
                "created_ms": budget.created_ms,
            }
        for r in self._reservations.values():
            yield {
                "type": RESERVATION_IMAGE, "id": r.id, "budget_id": r.budget_id, "scope_id": r.scope_id,
                "holder": r.holder, "reserved_minor": str(r.reserved), "settled_minor": str(r.settled), "state": r.state,
                "settle_by_ms": r.settle_by_ms, "work_keys": list(r.work_keys), "created_ms": r.created_ms,
                **({"late_of": r.late_of} if r.late_of is not None else {}),
            }

    def apply_image(self, record: Record) -> None:
        budget = self.apply_created({**record, "at_ms": record["created_ms"]})
        budget.spent = int(record["spent_minor"])

    def apply_reservation_image(self, record: Record) -> None:
        budget = self._budgets[record["budget_id"]]
        r = Reservation(
            record["id"], budget.id, record["scope_id"], record["holder"], int(record["reserved_minor"]),
            record["settle_by_ms"], record["created_ms"],
        )
        r.settled = int(record["settled_minor"])
        r.state = record["state"]
        r.work_keys = list(record["work_keys"])
        budget.reservations[r.id] = self._reservations[r.id] = r
        budget.reserved += r.reserved
        self._link_late(r, record.get("late_of"))  # (the released one is imaged before: it was made first)
        self._check(budget)


# -- commands ----------------------------------------------------------------------------------


@command
class CreateBudget(CapacityCommand):
    space: str = path("space")
    name: str = body("name", length_max="name_len_max")
    currency: str = body("currency", length_max="currency_len_max")
    scale: int = body("scale", INTEGER, minimum=0, maximum="budget_scale_max", description="fraction digits")
    limit: int = body("limitMinor", MINOR)
    budget_id: str = drawn("bg_")


@command
class EnsureBudget(CapacityCommand):
    """The budget of this name: `{}` looks it up; with `limitMinor` (currency USD and scale 2 unless
    given) it is created when missing, and must match when it exists (else CONFLICT)."""

    space: str = path("space")
    name: str = path("name")
    limit: int | None = body("limitMinor", MINOR, required=False)
    currency: str | None = body("currency", required=False, length_max="currency_len_max", description="default USD")
    scale: int | None = body("scale", INTEGER, required=False, minimum=0, maximum="budget_scale_max", description="fraction digits, default 2")
    budget_id: str = drawn("bg_")

    def check(self, limits: Limits) -> None:
        check_text("name", self.name, limits.name_len_max)
        if self.limit is None and (self.currency is not None or self.scale is not None):
            raise KernelError(VALIDATION_FAILED, "currency and scale are only taken with limitMinor")


@command
class Reserve(CapacityCommand):
    space: str = path("space")
    budget_id: str = path("budget_id")
    scope_id: str = body("scopeId")
    holder: str = body("holder", length_max="holder_len_max")
    amount: int = body("amountMinor", MINOR)
    settle_by_ms: int | None = body("settleBy", TIMESTAMP, required=False, description="default: {settle_by_s_default} s from now; at most {settle_by_s_max} s from now")
    late_of: str | None = body(
        "lateOf", required=False,
        description="a reservation its settleBy released: this one (amountMinor 1) charges its cost late, in its run even once ended",
    )
    reservation_id: str = drawn("rs_")

    def check(self, limits: Limits) -> None:
        if self.amount == 0:
            raise KernelError(VALIDATION_FAILED, "amountMinor must be more than 0")


@command
class Settle(CapacityCommand):
    space: str = path("space")
    budget_id: str = path("budget_id")
    reservation_id: str = body("reservationId")
    amount: int = body("amountMinor", MINOR)
    work_key: str = body("workKey", length_max="work_key_len_max")
    allow_overrun: bool | None = body(
        "allowOverrun", BOOLEAN, required=False,
        description="charge more than the reservation holds, up to what the budget can still cover",
    )


@command
class Void(CapacityCommand):
    space: str = path("space")
    budget_id: str = path("budget_id")
    reservation_id: str = body("reservationId")
    work_key: str = body("workKey", length_max="work_key_len_max")


# -- transitions (of the capacity part) ------------------------------------------------------------


def create(part: CapacityCommands, command: CreateBudget, now_ms: int) -> Outcome:
    budgets: BudgetTable = part.budgets
    record = budgets.decide_create(command.budget_id, command.name, command.currency, command.scale, command.limit, now_ms)
    outcome = part.commit(Outcome(), record)
    outcome.reply = budgets.view(budgets.get(command.budget_id))
    return outcome


def ensure(part: CapacityCommands, command: EnsureBudget, now_ms: int) -> Outcome:
    """`PUT /budgets/by-name/{name}`: look up, create, or check the budget of this name."""
    budgets: BudgetTable = part.budgets
    budget = budgets.named(command.name)
    currency = command.currency or "USD"
    scale = 2 if command.scale is None else command.scale
    if budget is None:
        if command.limit is None:
            raise KernelError(NOT_FOUND, f"budget {command.name!r} not found (send limitMinor to create it)")
        record = budgets.decide_create(command.budget_id, command.name, currency, scale, command.limit, now_ms)
        outcome = part.commit(Outcome(), record)
        outcome.reply = budgets.view(budgets.get(command.budget_id))
        return outcome
    if command.limit is not None:
        differs = [
            f"{field} {have!r}, not {want!r}"
            for field, have, want in (("limitMinor", str(budget.limit), str(command.limit)), ("currency", budget.currency, currency), ("scale", budget.scale, scale))
            if have != want
        ]
        if differs:
            raise KernelError(
                CONFLICT, f"budget {budget.name!r} has " + ", ".join(differs),
                details=BudgetMismatchView(budget.id, budget.limit, budget.currency, budget.scale),
            )
    return Outcome(reply=budgets.view(budget))


def reserve(part: CapacityCommands, command: Reserve, now_ms: int) -> Outcome:
    """Hold an amount for an active run; or, `lateOf` a released reservation, the one minor unit a
    late charge is settled against, in that reservation's run even once it has ended."""
    if command.late_of is None:
        part.scopes.require_active(command.scope_id, now_ms)
    else:
        part.scopes.get(command.scope_id)  # (it exists; ended or not, the spend happened)
        part.budgets.check_late(part.budgets.get(command.budget_id), command.late_of, command.scope_id, command.amount)
    limits = part.limits
    settle_by_ms = command.settle_by_ms
    if settle_by_ms is None:
        settle_by_ms = now_ms + limits.settle_by_s_default * 1000
    elif settle_by_ms <= now_ms:
        raise KernelError(VALIDATION_FAILED, "settleBy must be in the future")
    elif settle_by_ms > now_ms + limits.settle_by_s_max * 1000:
        raise KernelError(VALIDATION_FAILED, f"settleBy must be at most {limits.settle_by_s_max} s from now")
    budgets: BudgetTable = part.budgets
    budget = budgets.get(command.budget_id)
    record = budgets.decide_reserve(
        budget, command.reservation_id, command.scope_id, command.holder, command.amount, settle_by_ms, now_ms, command.late_of
    )
    outcome = part.commit(Outcome(), record)
    outcome.timers.append(settle_by_timer(part, command.reservation_id, settle_by_ms))
    outcome.reply = budgets.reservation_view(budgets.reservation(budget, command.reservation_id))
    return outcome


def settle(part: CapacityCommands, command: Settle, now_ms: int) -> Outcome:
    budgets: BudgetTable = part.budgets
    reservation = budgets.reservation(budgets.get(command.budget_id), command.reservation_id)
    records = budgets.decide_settle(reservation, command.amount, command.work_key, now_ms, bool(command.allow_overrun))
    outcome = part.commit(Outcome(), *records)
    outcome.reply = budgets.reservation_view(reservation)
    return outcome


def void(part: CapacityCommands, command: Void, now_ms: int) -> Outcome:
    budgets: BudgetTable = part.budgets
    reservation = budgets.reservation(budgets.get(command.budget_id), command.reservation_id)
    record = budgets.decide_void(reservation, command.work_key, now_ms)
    outcome = Outcome() if record is None else part.commit(Outcome(), record)
    outcome.reply = budgets.reservation_view(reservation)
    return outcome


def settle_by_timer(part: CapacityCommands, reservation_id: str, settle_by_ms: int) -> Timer:
    return Timer(settle_by_ms, part.actor, (SETTLE_BY_TIMER, reservation_id), None)


def on_settle_by_timer(part: CapacityCommands, reservation_id: str, _: TimerMarker, now_ms: int) -> Outcome:
    record = part.budgets.decide_release(reservation_id, now_ms)
    return Outcome() if record is None else part.commit(Outcome(), record)


def _deadlines(space: Space) -> Iterator[Timer]:
    part: CapacityCommands = space.capacity
    for reservation in part.budgets.reservations():
        if reservation.state == ACTIVE:
            yield settle_by_timer(part, reservation.id, reservation.settle_by_ms)


def _make(space: Space) -> None:
    space.capacity.budgets = BudgetTable(space.limits.budgets_max)


_ON = "capacity"
_TABLE = "capacity.budgets"

BUDGETS = Primitive(
    "budgets",
    make=_make,
    commands={
        CreateBudget: (_ON, create),
        EnsureBudget: (_ON, ensure),
        Reserve: (_ON, reserve),
        Settle: (_ON, settle),
        Void: (_ON, void),
    },
    # Amounts in records are digit strings too, so a journal written as JSON keeps them exact.
    records={
        BUDGET_CREATED: ("id", "name", "currency", "scale", "limit_minor", "at_ms"),
        RESERVATION_MADE: ("id", "budget_id", "scope_id", "holder", "amount_minor", "settle_by_ms", "at_ms", "late_of?"),
        RESERVATION_SETTLED: ("id", "amount_minor", "work_key", "at_ms"),
        RESERVATION_ENDED: ("id", "state", "work_key", "at_ms"),
        BUDGET_IMAGE: ("id", "name", "currency", "scale", "limit_minor", "spent_minor", "created_ms"),
        RESERVATION_IMAGE: (
            "id", "budget_id", "scope_id", "holder", "reserved_minor", "settled_minor", "state", "settle_by_ms", "work_keys",
            "created_ms", "late_of?",
        ),
    },
    apply={
        BUDGET_CREATED: (_TABLE, "apply_created"),
        RESERVATION_MADE: (_TABLE, "apply_made"),
        RESERVATION_SETTLED: (_TABLE, "apply_settled"),
        RESERVATION_ENDED: (_TABLE, "apply_ended"),
        BUDGET_IMAGE: (_TABLE, "apply_image"),
        RESERVATION_IMAGE: (_TABLE, "apply_reservation_image"),
    },
    usage={
        BUDGET_CREATED: operation("budgets.create"),
        RESERVATION_MADE: operation("budgets.reserve"),
        RESERVATION_SETTLED: operation("budgets.settle"),
        RESERVATION_ENDED: lambda record: (OPERATION, "budgets.void") if record["state"] == VOIDED else (EVENT, "budgets.release"),
        BUDGET_IMAGE: NOT_COUNTED,
        RESERVATION_IMAGE: NOT_COUNTED,
    },
    timers={SETTLE_BY_TIMER: (_ON, on_settle_by_timer)},
    deadlines=_deadlines,
    image=lambda space: space.capacity.budgets.image(),
    is_empty=lambda space: not len(space.capacity.budgets),
)
