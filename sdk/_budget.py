"""`@runstate.budget(name, reserve=, cost=)`: hold `reserve` of a budget before each call, charge
`cost(result)` after it (the reserve itself without `cost`), give back the rest. A call that
raises is charged nothing. A reservation that no longer fits raises `BudgetExceededError` and
the function does not run.

Settling charges what was spent even past the reserve (`allowOverrun`), as far as the budget can
still cover it; a reservation the server already let go (its hour to be settled passed) is
charged through a reservation of one minor unit made for the purpose. Money crosses as strings of
minor units, never floats (`runstate._units`). If the server cannot be reached to settle, the
result still counts: the server lets the reservation go when its time to be settled passes, and a
warning says so.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from . import _runtime
from ._bound import Done, RunBinding, RunContext, iso_time, run_context, wrap
from ._keys import check_name
from ._units import Amount, to_minor
from .errors import ConfigError, RunstateError

__all__ = ["budget_sizes", "make_budget", "settle_reservation", "void_reservation", "SETTLE_WITHIN"]

# A reservation nobody settles within this time is let go by the server.
SETTLE_WITHIN = timedelta(hours=1)
_CURRENCY = re.compile(r"[A-Z]{3}")


def budget_sizes(limit: Amount | None = None, currency: str | None = None, scale: int | None = None) -> dict[str, Any] | None:
    if limit is None:
        if currency is not None or scale is not None:
            raise ConfigError("currency and scale only apply when the budget is declared with a limit")
        return None
    digits = 2 if scale is None else scale
    if isinstance(digits, bool) or not isinstance(digits, int) or not 0 <= digits <= 9:
        raise ConfigError("scale must be a whole number from 0 to 9")
    code = ("USD" if currency is None else str(currency)).upper()
    if not _CURRENCY.fullmatch(code):
        raise ConfigError("currency must be a 3-letter code such as USD")
    limit_minor = to_minor(limit, digits, "limit")
    if limit_minor == "0":
        raise ConfigError("a budget limit must be more than 0")
    return {"limitMinor": limit_minor, "currency": code, "scale": digits}


async def void_reservation(binding: RunBinding, budget: dict[str, Any], reservation_id: str) -> None:
    try:
        await binding.call(
            "POST", f"/budgets/{budget['id']}/void", body={"reservationId": reservation_id, "workKey": f"void:{reservation_id}"}
        )
    except RunstateError as err:
        if err.code != "CONFLICT":  # already settled or let go: nothing is held any more
            raise


async def settle_reservation(binding: RunBinding, budget: dict[str, Any], reservation_id: str, cost_minor: str) -> None:
    """Charge `cost_minor` against a reservation and give back whatever is left of it."""
    if cost_minor == "0":
        await void_reservation(binding, budget, reservation_id)
        return
    body = {"reservationId": reservation_id, "amountMinor": cost_minor, "workKey": f"settle:{reservation_id}", "allowOverrun": True}
    try:
        settled = await binding.call("POST", f"/budgets/{budget['id']}/settle", body=body)
    except RunstateError as err:
        if err.code != "CONFLICT":
            raise
        await _late_charge(binding, budget, reservation_id, cost_minor)
        return
    if settled.get("state") == "ACTIVE":  # part of it is still held: give that back
        await void_reservation(binding, budget, reservation_id)


async def _late_charge(binding: RunBinding, budget: dict[str, Any], original_id: str, cost_minor: str) -> None:
    """Charge a reservation the server already let go: reserve one minor unit in the same scope
    (one per original, by its idempotency key) and settle the cost against it, overrun allowed."""
    view = await binding.call("GET", f"/budgets/{budget['id']}")
    scope_id = next((r.get("scopeId") for r in view.get("reservations", []) if r.get("id") == original_id), None)
    if scope_id is None:
        _runtime.log.warning("budget %s: reservation %s is gone; its cost of %s minor units was not charged",
                             budget.get("name"), original_id, cost_minor)
        return
    # `lateOf` names the released reservation: the server takes this one even in a run that has
    # ended (the spend happened), once per released reservation.
    reserved = await binding.call(
        "POST", f"/budgets/{budget['id']}/reserve",
        body={"scopeId": scope_id, "holder": "late-charge", "amountMinor": "1", "lateOf": original_id},
        idempotency_key=f"late:{original_id}",
    )
    await binding.call(
        "POST", f"/budgets/{budget['id']}/settle",
        body={"reservationId": reserved["reservationId"], "amountMinor": cost_minor, "workKey": f"late:{original_id}", "allowOverrun": True},
    )


def make_budget(
    binding: RunBinding,
    name: str,
    fn: Callable[..., Any],
    *,
    reserve: Amount | None = None,
    cost: Callable[[Any], Amount] | None = None,
    limit: Amount | None = None,
    currency: str | None = None,
    scale: int | None = None,
) -> Callable[..., Any]:
    if not callable(fn):
        raise ConfigError("budget() needs a function")
    check_name(name, "budget")
    if reserve is None:
        raise ConfigError("budget() needs a reserve amount")
    sizes = budget_sizes(limit, currency, scale)
    return wrap(binding, fn, lambda args, kwargs: _BudgetCall(binding, name, sizes, reserve, cost))


class _BudgetCall:
    def __init__(
        self, binding: RunBinding, name: str, sizes: dict[str, Any] | None, reserve: Amount,
        cost: Callable[[Any], Amount] | None,
    ) -> None:
        self.binding = binding
        self.name = name
        self.sizes = sizes
        self.reserve = reserve
        self.cost = cost
        self.context: RunContext
        self.budget: dict[str, Any] = {}
        self.reservation = ""
        self.reserve_minor = ""

    async def enter(self) -> Done | None:
        binding = self.binding
        run = await binding.run()
        self.budget = await binding.shared.resources.ensure(binding, "budgets", self.name, self.sizes)
        self.reserve_minor = to_minor(self.reserve, self.budget["scale"], "reserve")
        if self.reserve_minor == "0":
            raise ConfigError("reserve must be more than 0")
        settle_by = iso_time(datetime.now(timezone.utc) + SETTLE_WITHIN)
        budget = self.budget

        async def give_back(reserved: Any) -> None:
            await void_reservation(binding, budget, reserved["reservationId"])

        # Not cut by a cancellation: the server reserves all the same, and the money would stay
        # held from every other caller until its hour to be settled passed (see `let_finish`).
        reserved = await binding.call(
            "POST", f"/budgets/{self.budget['id']}/reserve",
            body={"scopeId": run.id, "holder": binding.client().holder, "amountMinor": self.reserve_minor, "settleBy": settle_by},
            undo=give_back,
        )
        self.reservation = reserved["reservationId"]
        try:
            self.context = await run_context(binding)
        except BaseException:
            await self._quietly(void_reservation(binding, self.budget, self.reservation), "give back")
            raise
        return None

    async def exit(self, ok: bool, value: Any) -> Any:
        binding = self.binding
        if not ok:
            await self._quietly(void_reservation(binding, self.budget, self.reservation), "give back")
            raise value
        try:
            cost_minor = self.reserve_minor if self.cost is None else to_minor(self.cost(value), self.budget["scale"], "cost")
        except Exception as err:
            # The work happened: charge the reserve, then say the cost function is broken.
            await self._quietly(settle_reservation(binding, self.budget, self.reservation, self.reserve_minor), "settle")
            if isinstance(err, ConfigError):
                raise
            raise ConfigError(f"cost() failed for budget {self.name}: {err}") from err
        await self._quietly(settle_reservation(binding, self.budget, self.reservation, cost_minor), "settle")
        return value

    async def _quietly(self, settling: Any, what: str) -> None:
        try:
            await settling
        except Exception as err:
            _runtime.log.warning(
                "budget %s: could not %s reservation %s (%s); the server lets it go when its time to be settled passes",
                self.name, what, self.reservation, err,
            )
