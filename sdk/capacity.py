"""Capacity: pools of units, quotas per window, work limits and budgets, with the 0.2.0 names.

- `rs.pools.ensure(name, capacity=)`, `rs.quotas.ensure(name, units_per_window=, window_seconds=)`,
  `rs.work_limits.ensure(name, scope_id=, max_outstanding=)`, `rs.budgets.ensure(name, currency=,
  scale=, limit=)`: create, or verify what exists (a 409 CONFLICT on create lists and compares).
- `run.pool(name)`: `acquire()` / `try_acquire()` / `run(fn)`. A `PoolLease` behaves as a claim
  lease: renewed in the background, through an outage until its end by this process's clock, lost
  for good when the server refuses a renewal or that end passes, and `run(fn)` cancels `fn` when
  it is lost and raises `LeaseLostError`.
- `run.quota(name)`: `try_take()` / `take()` (which waits through a durable server-side waiter,
  granted first come, first served) / `status()` / `cooldown()`.
- `run.budget(name)`: `reserve(amount=)` -> `BudgetReservation.settle(amount=, usage_key=)` /
  `void(usage_key=)`. Amounts are decimal strings in major units ("2.50"), turned into minor units
  with integer arithmetic only, never floats.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, cast

import anyio

from ._checks import check_id
from . import _runtime
from ._context import Context
from ._grace import ABORT_GRACE_S, let_finish
from .claims import ClaimLease
from .errors import AuthenticationError, ConflictError, NotFoundError, RateLimitError, ValidationError, WaitTimeoutError

__all__ = [
    "PoolsAPI", "QuotasAPI", "WorkLimitsAPI", "BudgetsAPI", "PoolRef", "PoolLease", "QuotaRef", "BudgetRef",
    "BudgetReservation", "decimal_to_minor", "minor_to_decimal",
]

POOL_TIMEOUT_MS = 60_000
QUOTA_TIMEOUT_MS = 30_000
# Pauses (uniform, seconds): a full pool, a plan limit, between two looks at a quota waiter.
CAPACITY_RETRY_S = (0.225, 0.375)
LIMITED_RETRY_S = (0.75, 1.25)
WAITER_POLL_S = (0.1875, 0.3125)
WAITER_TTL_S = (5, 3600)
_EXHAUSTED = ("ALLOWANCE_EXHAUSTED", "ALLOWANCE_COOLDOWN")
_AMOUNT = re.compile(r"^(\d+)(?:\.(\d+))?$")


def decimal_to_minor(amount: str, scale: int) -> str:
    """A decimal string in major units ("2.50") as a canonical digit string of minor units ("250").
    Anything else (a sign, an exponent, more fraction digits than `scale`) raises `ValidationError`."""
    match = _AMOUNT.match(amount)
    if match is None:
        raise ValidationError("VALIDATION_FAILED", 0, f"invalid amount {amount!r}: digits with an optional fraction")
    whole, fraction = match.group(1), (match.group(2) or "").rstrip("0")
    if len(fraction) > scale:
        raise ValidationError("VALIDATION_FAILED", 0, f"amount {amount!r} has more fraction digits than scale {scale}")
    return (whole + fraction.ljust(scale, "0")).lstrip("0") or "0"


def minor_to_decimal(minor: str, scale: int) -> str:
    """A digit string of minor units ("250") as a decimal string in major units ("2.50")."""
    padded = minor.rjust(scale + 1, "0")
    whole, fraction = padded[: len(padded) - scale], padded[len(padded) - scale :]
    return whole if scale == 0 else f"{whole}.{fraction}"


# -- create or verify --------------------------------------------------------------------------------


async def _ensure(ctx: Context, suffix: str, key: str, body: dict[str, Any], matches: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
    """POST first; on a conflict (or no right to create) list and verify, as 0.2.0 does."""
    try:
        answer: dict[str, Any] = (await ctx.call("POST", suffix, body=body)).body
        return answer
    except (ConflictError, AuthenticationError) as err:
        if isinstance(err, AuthenticationError) and err.code != "FORBIDDEN":
            raise
        rows = [row for row in (await ctx.call("GET", suffix)).body[key] if row["name"] == body["name"]]
        for row in rows:
            if matches(row):
                return cast(dict[str, Any], row)
        if not rows and err.code == "FORBIDDEN":
            raise
        raise ConflictError("CONFLICT", 409, f"{what} {body['name']!r} exists with different settings") from err


class PoolsAPI:
    """`rs.pools`: the space's concurrency pools (at most `capacity` units held at once)."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    async def ensure(self, name: str, *, capacity: int) -> dict[str, Any]:
        """Create the pool `name`, or verify that it has this capacity (`ConflictError` if not);
        returns its row."""
        body = {"name": name, "units": capacity}
        return await _ensure(self._ctx, "/permits", "permits", body, lambda row: row["unitsTotal"] == capacity, "permit pool")

    async def list(self) -> list[dict[str, Any]]:
        """Every pool of the space: `id`, `name`, `unitsTotal`, `unitsAvailable`..."""
        return cast(list[dict[str, Any]], (await self._ctx.call("GET", "/permits")).body["permits"])


class QuotasAPI:
    """`rs.quotas`: the space's quotas (at most `units_per_window` units per `window_seconds`)."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    async def ensure(self, name: str, *, units_per_window: int, window_seconds: int) -> dict[str, Any]:
        """Create the quota `name`, or verify its limit and window (`ConflictError` if they
        differ); returns its row."""
        body = {"name": name, "unitsLimit": units_per_window, "windowSeconds": window_seconds}
        return await _ensure(
            self._ctx, "/allowances", "allowances", body,
            lambda row: row["unitsLimit"] == units_per_window and row["windowSeconds"] == window_seconds, "allowance",
        )

    async def list(self) -> list[dict[str, Any]]:
        """Every quota of the space: `id`, `name`, `unitsLimit`, `windowSeconds`..."""
        return cast(list[dict[str, Any]], (await self._ctx.call("GET", "/allowances")).body["allowances"])


class WorkLimitsAPI:
    """`rs.work_limits`: caps on the tasks outstanding at once in a run (a task names one with
    `submit(..., work_limit=name)`)."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    async def ensure(self, name: str, *, scope_id: str, max_outstanding: int) -> dict[str, Any]:
        """Create the work limit `name` for the run `scope_id`, or verify its maximum."""
        body = {"name": name, "scopeId": scope_id, "maxOutstanding": max_outstanding}
        return await _ensure(self._ctx, "/work-limits", "workLimits", body, lambda row: row["maxOutstanding"] == max_outstanding, "work limit")


class BudgetsAPI:
    """`rs.budgets`: the space's money budgets (a `limit` in a `currency`, counted in minor units
    of `scale` decimals)."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    async def ensure(self, name: str, *, currency: str, scale: int, limit: str) -> dict[str, Any]:
        """Create the budget, or verify that it has this limit and scale (currency is not compared)."""
        limit_minor = decimal_to_minor(limit, scale)
        body = {"name": name, "currency": currency, "scale": scale, "limitMinor": limit_minor}
        try:
            answer: dict[str, Any] = (await self._ctx.call("POST", "/budgets", body=body)).body
            return answer
        except ConflictError:
            rows = [row for row in (await self._ctx.call("GET", "/budgets")).body["budgets"] if row["name"] == name]
            for row in rows:
                if row["limitMinor"] == limit_minor and row["scale"] == scale:
                    return cast(dict[str, Any], row)
            if not rows:
                raise
            raise ConflictError("CONFLICT", 409, f"budget {name!r} exists with a different limit or scale") from None


# -- names to ids --------------------------------------------------------------------------------------


class _Named:
    """A pool, allowance or budget named in a scope, resolved to its row once (then cached): its
    `scope_id` and `name` (None when made by id)."""

    _suffix = ""
    _key = ""
    _what = ""

    def __init__(self, ctx: Context, scope_id: str, *, name: str | None = None, id: str | None = None) -> None:
        self._ctx = ctx
        self.scope_id = scope_id
        self.name = name
        self._id = None if id is None else check_id("id", id)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(scope_id={self.scope_id!r}, name={self.name!r}, id={self._id!r})"

    async def _rows(self) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], (await self._ctx.call("GET", self._suffix)).body[self._key])

    async def resolve_id(self) -> str:
        """Its id: the first call lists the space's rows (`NotFoundError` for an unknown name)."""
        if self._id is None:
            for row in await self._rows():
                if row["name"] == self.name:
                    self._id = row["id"]
                    break
            else:
                raise NotFoundError("NOT_FOUND", 404, f"{self._what} {self.name!r} not found in space {self._ctx.space_id}")
        return self._id


class PoolRef(_Named):
    """A concurrency pool for a run (`run.pool(name)`): `acquire()`, `try_acquire()`, `run(fn)`."""

    _suffix, _key, _what = "/permits", "permits", "permit pool"

    async def status(self) -> dict[str, Any] | None:
        """The pool's row (`unitsTotal`, `unitsAvailable`...), or None if it is gone."""
        pool_id = await self.resolve_id()
        return next((row for row in await self._rows() if row["id"] == pool_id), None)

    async def acquire(
        self, *, units: int = 1, lease_seconds: int = 30, wait: bool = True, timeout_ms: int = POOL_TIMEOUT_MS
    ) -> "PoolLease":
        """Take `units` under a renewed lease; with `wait` (the default) a full pool is tried again
        every ~0.3 s until `timeout_ms`, then `WaitTimeoutError`."""
        pool_id = await self.resolve_id()
        deadline = _runtime.deadline_in(timeout_ms)
        body = {
            "scopeId": self.scope_id, "units": units, "holder": self._ctx.holder, "holderSession": self._ctx.session,
            "leaseSeconds": lease_seconds,
        }

        async def give_back(reply: Any) -> None:
            await PoolLease(self._ctx, reply.body, lease_seconds, sent)._release_quietly(cancelled=True)

        while True:
            sent = anyio.current_time()
            try:
                # Not cut by a cancellation: the server grants it all the same (see `let_finish`).
                reply = await let_finish(lambda: self._ctx.call("POST", f"/permits/{pool_id}/acquire", body=body), give_back)
            except (ConflictError, RateLimitError) as err:
                if not wait or err.code not in ("CAPACITY_UNAVAILABLE", "CONCURRENCY_LIMITED"):
                    raise
                if anyio.current_time() >= deadline:
                    raise WaitTimeoutError("WAIT_TIMEOUT", 0, f"timed out waiting for {units} unit(s) of {self.name or pool_id!r} after {timeout_ms} ms") from err
                low, high = LIMITED_RETRY_S if err.code == "CONCURRENCY_LIMITED" else CAPACITY_RETRY_S
                await _runtime.sleep_before(_runtime.uniform(low, high, self._ctx.requester.rng), deadline)
                continue
            return PoolLease._start_grant(self._ctx, reply.body, lease_seconds, sent)

    async def try_acquire(self, *, units: int = 1, lease_seconds: int = 30) -> dict[str, Any]:
        """`{"kind": "acquired", "lease": lease}` or `{"kind": "capacity-unavailable"}`."""
        try:
            lease = await self.acquire(units=units, lease_seconds=lease_seconds, wait=False)
        except ConflictError as err:
            if err.code == "CAPACITY_UNAVAILABLE":
                return {"kind": "capacity-unavailable"}
            raise
        return {"kind": "acquired", "lease": lease}

    async def run(self, fn: Callable[["PoolLease"], Any], **acquire: Any) -> Any:
        """Acquire, return `fn(lease)` while the lease is renewed, release in a `finally`; a lost
        lease cancels `fn` and raises `LeaseLostError`, and so does a release refused as stale
        (as `ClaimRef.run`)."""
        lease = await self.acquire(**acquire)
        return await lease._hold(cast(Any, fn))


class PoolLease(ClaimLease):
    """Units of a pool held under a lease: `grant_id`, `units`, `token()`, loss reporting,
    `renew()`, `release()`. Renewal and loss work exactly as for a claim lease."""

    def __init__(self, ctx: Context, grant: dict[str, Any], lease_seconds: int, sent_at: float | None = None) -> None:
        super().__init__(ctx, grant["grantId"], {**grant, "generation": None}, lease_seconds, sent_at)
        self.grant_id: str = grant["grantId"]
        self.units: int = grant.get("units", 1)

    @classmethod
    def _start_grant(cls, ctx: Context, grant: dict[str, Any], lease_seconds: int, sent_at: float) -> "PoolLease":
        lease = cls(ctx, grant, lease_seconds, sent_at)
        lease._start_renewal(f"pool grant {lease.grant_id}")
        return lease

    def __repr__(self) -> str:
        return f"PoolLease(grant_id={self.grant_id!r}, units={self.units}, token='[redacted]')"

    def _renewal_request(self, lease_seconds: int | None) -> tuple[str, dict[str, Any]]:
        return f"/grants/{self.grant_id}/renew", {"token": self._token, "leaseSeconds": lease_seconds}

    def _release_suffix(self) -> str:
        return f"/grants/{self.grant_id}/release"

    def _what(self) -> str:
        return f"grant {self.grant_id}"


# -- quotas --------------------------------------------------------------------------------------------


class QuotaRef(_Named):
    """A quota for a run (`run.quota(name)`): `take()`, `try_take()`, `cooldown()`."""

    _suffix, _key, _what = "/allowances", "allowances", "allowance"

    async def status(self) -> dict[str, Any] | None:
        """The quota's view (its window and what is used of it), or None if it is gone."""
        allowance_id = await self.resolve_id()
        try:
            answer: dict[str, Any] = (await self._ctx.call("GET", f"/allowances/{allowance_id}")).body
            return answer
        except NotFoundError:
            return None

    async def try_take(self, *, units: int = 1) -> dict[str, Any]:
        """`{"kind": "consumed", "consumption": ...}` or `{"kind": "exhausted"}` (used up, or cooling
        down). Cancelled as the answer comes, the units it was given are refunded."""
        allowance_id = await self.resolve_id()
        body = {"scopeId": self.scope_id, "units": units, "holder": self._ctx.holder}

        async def give_back(reply: Any) -> None:
            await self._refund(allowance_id, reply.body.get("consumptionId"))

        try:
            # Not cut by a cancellation: the server consumes all the same, and the units would be
            # used by no one until the window ended. Taken after a cancellation, they are refunded.
            reply = await let_finish(lambda: self._ctx.call("POST", f"/allowances/{allowance_id}/consume", body=body), give_back)
        except RateLimitError as err:
            if err.code in _EXHAUSTED:
                return {"kind": "exhausted"}
            raise
        return {"kind": "consumed", "consumption": reply.body}

    async def take(self, *, units: int = 1, wait: bool = True, timeout_ms: int = QUOTA_TIMEOUT_MS) -> dict[str, Any]:
        """Consume `units`, waiting through one durable waiter (served FIFO) when the window is used
        up; `WaitTimeoutError` at `timeout_ms` (the waiter is cancelled; one granted as the time ran out is
        taken and returned, not left consumed for no one),
        or at once with `wait=False` when the window has not the units now. Cancelled while it
        waits, it cancels its waiter too, and a waiter's creation is let finish (2 s at most) so
        that one made after the cancellation leaves the line; units granted to a take cancelled
        before it returns are refunded (see docs/python.md)."""
        deadline = _runtime.deadline_in(timeout_ms)
        waiter_id: str | None = None
        while True:
            attempt = await self.try_take(units=units)
            if attempt["kind"] == "consumed":
                return cast(dict[str, Any], attempt["consumption"])
            if not wait:
                raise WaitTimeoutError("WAIT_TIMEOUT", 0, f"allowance exhausted and wait disabled ({units} unit(s))")
            left_ms = (deadline - anyio.current_time()) * 1000
            if left_ms <= 0:
                await self._cancel_quietly(waiter_id)
                raise WaitTimeoutError("WAIT_TIMEOUT", 0, f"timed out waiting for {units} unit(s) after {timeout_ms} ms")
            if waiter_id is None:
                allowance_id = await self.resolve_id()
                low, high = WAITER_TTL_S
                body = {
                    "scopeId": self.scope_id, "units": units, "holder": self._ctx.holder,
                    "ttlSeconds": min(high, max(low, int(left_ms // 1000) + 1)),
                }

                async def leave_line(reply: Any) -> None:
                    if reply.body.get("state") == "GRANTED":
                        await self._refund(allowance_id, reply.body.get("consumptionId"))
                    elif reply.body.get("state") == "WAITING":
                        await self._leave_or_refund(allowance_id, reply.body.get("waiterId"))

                # Not cut by a cancellation: the server makes the waiter all the same, and it would
                # stay in line (and consume units for no one when served) with this side never
                # knowing its id. One made after a cancellation leaves the line, or, granted at
                # once, is refunded (`let_finish`).
                sending = functools.partial(self._ctx.call, "POST", f"/allowances/{allowance_id}/wait", body=body)
                waiter = (await let_finish(sending, leave_line)).body
                if waiter["state"] == "GRANTED" and waiter.get("consumptionId"):
                    return await self._consumption(allowance_id, waiter["consumptionId"], units)
                waiter_id = waiter["waiterId"]
            try:
                waiter = await self._poll(waiter_id, deadline, timeout_ms)
            except anyio.get_cancelled_exc_class():
                # Given up on: leave the line, so the waiter is not served (its units consumed) for
                # no one; granted meanwhile, its units are refunded.
                with anyio.move_on_after(ABORT_GRACE_S, shield=True):
                    await self._leave_or_refund(self._id, waiter_id)
                raise
            if waiter["state"] == "GRANTED" and waiter.get("consumptionId"):
                return await self._consumption(waiter["allowanceId"], waiter["consumptionId"], waiter["units"])
            waiter_id = None  # EXPIRED or CANCELLED: start again

    async def cooldown(self, seconds: int, reason: str | None = None) -> dict[str, Any]:
        """Report a provider's back-off: nothing is consumed or granted until it ends."""
        allowance_id = await self.resolve_id()
        answer: dict[str, Any] = (await self._ctx.call("POST", f"/allowances/{allowance_id}/cooldown", body={"seconds": seconds, "reason": reason})).body
        return answer

    async def _consumption(self, allowance_id: str, consumption_id: str, units: int) -> dict[str, Any]:
        try:
            status = await self.status()
        except anyio.get_cancelled_exc_class():
            # Cancelled before the take returned: the units go back (shielded, bounded).
            with anyio.move_on_after(ABORT_GRACE_S, shield=True):
                await self._refund(allowance_id, consumption_id)
            raise
        return {
            "consumptionId": consumption_id, "units": units,
            "windowStart": status["windowStart"] if status else "", "remaining": status["remaining"] if status else 0,
        }

    async def _poll(self, waiter_id: str, deadline: float, timeout_ms: int) -> dict[str, Any]:
        while True:
            if anyio.current_time() >= deadline:
                left = await self._cancel_quietly(waiter_id)
                if left is not None and left.get("state") == "GRANTED":
                    return left  # granted as the time ran out: the units are the caller's, not no one's
                raise WaitTimeoutError("WAIT_TIMEOUT", 0, f"timed out waiting for allowance waiter after {timeout_ms} ms")
            waiter = (await self._ctx.call("GET", f"/allowance-waiters/{waiter_id}")).body
            if waiter["state"] != "WAITING":
                return cast(dict[str, Any], waiter)
            await _runtime.sleep_before(_runtime.uniform(*WAITER_POLL_S, self._ctx.requester.rng), deadline)

    async def _cancel_quietly(self, waiter_id: str | None) -> dict[str, Any] | None:
        """Cancel a waiter: it as it then stands (GRANTED if a grant came first), or None when
        the server could not be told."""
        if waiter_id is None:
            return None
        try:
            left: dict[str, Any] = (await self._ctx.call("POST", f"/allowance-waiters/{waiter_id}/cancel")).body
            return left
        except Exception:  # best effort: the waiter's TTL ends it anyway
            return None

    async def _leave_or_refund(self, allowance_id: str | None, waiter_id: str | None) -> None:
        """For a caller that will not use the units: cancel the waiter, and refund its grant if one
        came first."""
        left = await self._cancel_quietly(waiter_id)
        if left is not None and left.get("state") == "GRANTED":
            await self._refund(allowance_id or left.get("allowanceId"), left.get("consumptionId"))

    async def _refund(self, allowance_id: str | None, consumption_id: str | None) -> None:
        """Give a consumption back (`POST .../consumptions/{id}/refund`); a failure is logged, not
        raised: one the server no longer keeps (409) or cannot be told of counts until its window ends."""
        if not allowance_id or not consumption_id:
            return
        try:
            await self._ctx.call("POST", f"/allowances/{allowance_id}/consumptions/{consumption_id}/refund", body={})
        except Exception as err:
            _runtime.log.warning("could not give back consumption %s (its units count until their window ends): %s", consumption_id, err)


# -- budgets -------------------------------------------------------------------------------------------


class BudgetReservation:
    """Money held from a budget until settled or voided: its `id`, `reserved_minor` (what is
    still reserved, a digit string of minor units; `reserved` in major units) and `state`."""

    def __init__(self, ctx: Context, budget_id: str, scale: int, view: dict[str, Any]) -> None:
        self._ctx = ctx
        self._budget_id = budget_id
        self._scale = scale
        self.id: str = view["reservationId"]
        self.reserved_minor: str = view["reservedMinor"]
        self.state: str = view["state"]

    def __repr__(self) -> str:
        return f"BudgetReservation(id={self.id!r}, reserved={self.reserved!r}, state={self.state!r})"

    @property
    def reserved(self) -> str:
        """What is still reserved, in major units."""
        return minor_to_decimal(self.reserved_minor, self._scale)

    async def settle(self, *, amount: str, usage_key: str) -> dict[str, Any]:
        """Charge what was spent (at most what is reserved); repeating a `usage_key` changes nothing."""
        body = {"reservationId": self.id, "amountMinor": decimal_to_minor(amount, self._scale), "workKey": usage_key}
        return self._update((await self._ctx.call("POST", f"/budgets/{self._budget_id}/settle", body=body)).body)

    async def void(self, *, usage_key: str) -> dict[str, Any]:
        """Give back what is still reserved."""
        body = {"reservationId": self.id, "workKey": usage_key}
        return self._update((await self._ctx.call("POST", f"/budgets/{self._budget_id}/void", body=body)).body)

    def _update(self, view: dict[str, Any]) -> dict[str, Any]:
        self.reserved_minor, self.state = view.get("reservedMinor", self.reserved_minor), view.get("state", self.state)
        return view


class BudgetRef(_Named):
    """A budget for a run (`run.budget(name)`): `reserve()` money, then settle or void it."""

    _suffix, _key, _what = "/budgets", "budgets", "budget"

    async def status(self) -> dict[str, Any]:
        """The budget's view: its limit, what is spent and what is reserved (minor units)."""
        budget_id = await self.resolve_id()
        answer: dict[str, Any] = (await self._ctx.call("GET", f"/budgets/{budget_id}")).body
        return answer

    async def reserve(self, *, amount: str, settle_by: str | None = None) -> BudgetReservation:
        """Reserve `amount` (major units) until settled, voided, or `settle_by` passes."""
        budget = await self.status()
        body = {
            "scopeId": self.scope_id, "holder": self._ctx.holder,
            "amountMinor": decimal_to_minor(amount, budget["scale"]), "settleBy": settle_by,
        }

        async def give_back(reply: Any) -> None:
            reservation = BudgetReservation(self._ctx, budget["id"], budget["scale"], reply.body)
            await reservation.void(usage_key=f"void:{reservation.id}")

        # Not cut by a cancellation: the server reserves all the same, and the money would stay
        # held from every other caller until `settle_by` (see `let_finish`).
        reply = await let_finish(lambda: self._ctx.call("POST", f"/budgets/{budget['id']}/reserve", body=body), give_back)
        return BudgetReservation(self._ctx, budget["id"], budget["scale"], reply.body)


# -- admission -----------------------------------------------------------------------------------------


class AdmittedWork:
    """An admitted task delivery and what was taken with it: `task`, `delivery`, `resources`
    (`grants`, `consumptions`, `reservations`), `attempt`. The grants share the delivery's lease:
    renew the delivery (`delivery.renew()`) and they stay held; settle it and they are given back."""

    __slots__ = ("task", "delivery", "resources", "attempt")

    def __init__(self, task: Any, delivery: Any, resources: dict[str, Any], attempt: int) -> None:
        self.task = task
        self.delivery = delivery
        self.resources = resources
        self.attempt = attempt

    def __repr__(self) -> str:
        task_id = None if self.task is None else self.task.id  # (a plain message admitted has no task)
        return f"AdmittedWork(task={task_id!r}, attempt={self.attempt})"


async def admit(mailbox: Any, *, lease_seconds: int = 30, wait_ms: int = 0) -> AdmittedWork | None:
    """`MailboxRef.admit`: the oldest task delivery whose requirements all fit, with them; None when
    nothing can be admitted (within `wait_ms`, a long poll the server wakes when capacity frees)."""
    from ._consume import give_back
    from .tasks import TaskTicket

    ctx = mailbox._ctx
    body = {
        "scopeId": mailbox.scope_id, "mailboxId": await mailbox.resolve_id(), "holder": ctx.holder,
        "holderSession": ctx.session, "leaseSeconds": lease_seconds, "waitMs": wait_ms if wait_ms > 0 else None,
    }

    async def give_back_admitted(reply: Any) -> None:
        if reply.status != 204:  # its grants, consumptions and reservations go back with it
            delivery = _admitted_delivery(ctx, mailbox.scope_id, reply.body, lease_seconds, None)
            await give_back(delivery, retry=True, unhandled=True)

    # A first look without a wait, which a cancellation does not cut: the server admits even to a
    # request whose connection was cut, its grants with it, and the delivery would stay leased to
    # no one until its lease ran out, an attempt spent. What it admitted after a cancellation is
    # given back at once (`let_finish`). Only a wait for work is cut.
    sent = anyio.current_time()
    reply = await let_finish(
        lambda: ctx.call("POST", "/tasks/admit", body={**body, "waitMs": None}), give_back_admitted
    )
    held = False
    if reply.status == 204 and wait_ms > 0:
        sent, held = anyio.current_time(), True
        reply = await ctx.call("POST", "/tasks/admit", body=body, wait_ms=wait_ms)
    if reply.status == 204:
        return None
    admitted = reply.body
    task = TaskTicket(ctx, admitted["taskId"], mailbox.scope_id) if admitted["taskId"] else None
    began = anyio.current_time() if held else sent  # a held admission leases as it answers
    delivery = _admitted_delivery(ctx, mailbox.scope_id, admitted, lease_seconds, began)
    resources = {k: admitted.get(k, []) for k in ("grants", "consumptions", "reservations")}
    return AdmittedWork(task, delivery, resources, admitted["attempt"])


def _admitted_delivery(ctx: Any, scope_id: str, admitted: dict[str, Any], lease_seconds: int, began: float | None) -> Any:
    from .mailboxes import Delivery

    raw = {
        "message": {
            "id": admitted["messageId"], "scopeId": scope_id, "payload": admitted["payload"],
            "attempt": admitted["attempt"], "deadline": None, "taskId": admitted["taskId"],
        },
        "token": admitted["token"],
    }
    return Delivery(ctx, raw, lease_seconds=lease_seconds, sent_at=began)
