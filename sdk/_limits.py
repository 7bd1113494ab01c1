"""Shared capacity for the run-bound API: `limit`/`take` (a quota: N units per window) and `slots`
(a pool: at most N held at once), both by name, both waiting in the server's fair line.

- **Resources by name** (`runstate._bound.Resources`): declared sizes create a quota or a pool
  when it is missing and check it when it exists (`ConflictError` names what differs).
- **take**: join the quota's line (`POST /allowances/{id}/wait`); granted at once, or look at the
  waiter (pauses growing from 0.15 s to 1 s) until it is granted, `WaitTimeoutError` after
  `timeout` (60 s by default, the waiter withdrawn), `StoppedError` if the run stops. Cancelled
  before it returns, it leaves the line, and units it was granted meanwhile are refunded
  (`POST /allowances/{id}/consumptions/{consumptionId}/refund`); `limit()` takes as `take` does.
- **slots**: acquire units of the pool under a lease; when it is full, join its line, acquire when
  signalled; the lease is renewed while the function (or the `with` block) runs, and the units go
  back when it ends. A lease lost meanwhile sets the call's `signal`, and `LeaseLostError` is
  raised when the function returns.
"""

from __future__ import annotations

import contextlib
import functools
import math
from contextvars import ContextVar
from dataclasses import replace
from typing import Any, AsyncIterator, Awaitable, Callable

import anyio

from . import _runtime
from ._grace import ABORT_GRACE_S
from ._bound import (
    Done, Held, RunBinding, RunContext, check_count, deadline_after, exit_quietly, poll_pause,
    run_context, use_context, wrap,
)
from ._renewal import send_through
from ._signal import AnyOf
from ._keys import check_name
from ._units import Duration, Per, lease_seconds, parse_per
from .errors import ConfigError, LeaseLostError, RunstateError, WaitTimeoutError

__all__ = ["quota_sizes", "pool_sizes", "take", "make_limit", "Slots", "WAITER_TTL_S"]

# The time to live a quota waiter asks for: what is left of the wait, within these bounds.
WAITER_TTL_S = (5, 3600)
DEFAULT_TIMEOUT_S = 60.0


def quota_sizes(max: int | None, per: Per | None) -> dict[str, int] | None:  # noqa: A002 - 0.3.0's name
    if max is None and per is None:
        return None
    if max is None or per is None:
        raise ConfigError("declare a limit with both max and per")
    return {"unitsLimit": check_count(max, "max"), "windowSeconds": parse_per(per)}


def pool_sizes(max: int | None) -> dict[str, int] | None:  # noqa: A002
    return None if max is None else {"units": check_count(max, "max")}


def _units(value: int | None) -> int:
    return check_count(1 if value is None else value, "units")


async def take(
    binding: RunBinding,
    name: str,
    *,
    units: int | None = None,
    timeout: Duration | None = None,
    max: int | None = None,  # noqa: A002
    per: Per | None = None,
) -> None:
    """Take `units` of the quota `name`, waiting in its line while the window is used up."""
    check_name(name, "limit")
    count = _units(units)
    sizes = quota_sizes(max, per)
    deadline = deadline_after(timeout, DEFAULT_TIMEOUT_S)

    async def body() -> None:
        run = await binding.run()
        client = binding.client()
        quota = await binding.shared.resources.ensure(binding, "allowances", name, sizes)
        give_back = functools.partial(_refund_grant, binding, quota["id"])
        while True:
            left = deadline - anyio.current_time()
            if left <= 0:
                raise WaitTimeoutError(f"waited too long for {count} unit(s) of limit {name}")
            ttl = min(WAITER_TTL_S[1], max_(WAITER_TTL_S[0], math.ceil(left)))
            # Not cut by a cancellation: the server makes the waiter all the same, and it would
            # stay in line and be served (its units consumed) for no one. One made after a
            # cancellation leaves the line, or, granted at once, is refunded (see `let_finish`).
            waiter = await binding.call(
                "POST", f"/allowances/{quota['id']}/wait",
                body={"scopeId": run.id, "units": count, "holder": client.holder, "ttlSeconds": ttl},
                undo=functools.partial(_leave_line, binding, "/allowance-waiters", granted=give_back),
            )
            if waiter["state"] == "GRANTED":
                return
            async with _leaving_line_if_cancelled(binding, f"/allowance-waiters/{waiter['waiterId']}/cancel", granted=give_back):
                if await _wait_granted(binding, waiter["waiterId"], deadline, f"{count} unit(s) of limit {name}"):
                    return

    await binding.track(body)


async def _wait_granted(binding: RunBinding, waiter_id: str, deadline: float, what: str) -> bool:
    """Look at a quota waiter until granted (True) or no longer waiting (False: join again)."""
    polls = 0
    while True:
        if anyio.current_time() >= deadline:
            left = await _withdraw(binding, f"/allowance-waiters/{waiter_id}/cancel")
            if left is not None and left.get("state") == "GRANTED":
                return True  # granted as the time ran out: the units are the caller's, not no one's
            raise WaitTimeoutError(f"waited too long for {what}")
        await poll_pause(polls, binding.signal, binding.client()._ctx.requester.rng)
        polls += 1
        view = await binding.call("GET", f"/allowance-waiters/{waiter_id}")
        if view["state"] == "GRANTED":
            return True
        if view["state"] == "CANCELLED":
            binding.throw_if_stopped()
        if view["state"] != "WAITING":
            return False  # expired or cancelled: queue again


Granted = Callable[[dict[str, Any]], Awaitable[None]]


@contextlib.asynccontextmanager
async def _leaving_line_if_cancelled(binding: RunBinding, suffix: str, granted: Granted | None = None) -> AsyncIterator[None]:
    """A caller cancelled while its waiter is in line takes it out of the line (shielded, bounded):
    left there, a quota waiter would be served at its turn, the window's units consumed for no one,
    and a pool waiter's turn would go to no one until it ran out. A quota waiter granted before it
    left (the cancel answers GRANTED: the grant stands) has its units refunded by `granted`."""
    try:
        yield
    except anyio.get_cancelled_exc_class():
        with anyio.move_on_after(ABORT_GRACE_S, shield=True):
            left = await _withdraw(binding, suffix)
            if granted is not None and left is not None and left.get("state") == "GRANTED":
                await granted(left)
        raise


async def _withdraw(binding: RunBinding, suffix: str) -> dict[str, Any] | None:
    """Leave a line (best effort: a waiter left behind ends at its time to live): the waiter as
    it then stands, or None when the server could not be told."""
    try:
        left: dict[str, Any] = await binding.call("POST", suffix, body={})
        return left
    except Exception as err:
        _runtime.log.debug("could not leave the line (%s): %s", suffix, err)
        return None


async def _refund_grant(binding: RunBinding, allowance_id: str, waiter: dict[str, Any]) -> None:
    """Give back the units a quota waiter was granted for a caller that will not use them
    (`POST /allowances/{id}/consumptions/{consumptionId}/refund`), its failures swallowed: units the
    server no longer keeps (409) or cannot be told of count until their window ends."""
    consumption_id = waiter.get("consumptionId")
    if not consumption_id:
        return
    try:
        await binding.call("POST", f"/allowances/{allowance_id}/consumptions/{consumption_id}/refund", body={})
    except Exception as err:
        _runtime.log.warning("could not give back consumption %s (its units count until their window ends): %s", consumption_id, err)


async def _leave_line(binding: RunBinding, prefix: str, waiter: dict[str, Any], *, granted: Granted | None = None) -> None:
    """A waiter made for a caller cancelled meanwhile: out of the line, if it is still in it; a
    quota waiter granted at once has its units refunded by `granted`."""
    if waiter.get("state") == "GRANTED" and granted is not None:
        await granted(waiter)
    elif waiter.get("state") in ("WAITING", "SIGNALED") and waiter.get("waiterId"):
        left = await _withdraw(binding, f"{prefix}/{waiter['waiterId']}/cancel")
        if granted is not None and left is not None and left.get("state") == "GRANTED":
            await granted(left)


def max_(a: int, b: int) -> int:
    return a if a > b else b


def make_limit(
    binding: RunBinding,
    name: str,
    fn: Callable[..., Any],
    *,
    max: int | None = None,  # noqa: A002
    per: Per | None = None,
    units: int | None = None,
    timeout: Duration | None = None,
) -> Callable[..., Any]:
    if not callable(fn):
        raise ConfigError("limit() needs a function; take() takes units without one")
    check_name(name, "limit")
    quota_sizes(max, per)
    _units(units)
    options = {"units": units, "timeout": timeout, "max": max, "per": per}
    return wrap(binding, fn, lambda args, kwargs: _LimitCall(binding, name, options))


class _LimitCall:
    def __init__(self, binding: RunBinding, name: str, options: dict[str, Any]) -> None:
        self.binding = binding
        self.name = name
        self.options = options
        self.context: RunContext

    async def enter(self) -> Done | None:
        await take(self.binding, self.name, **self.options)
        self.context = await run_context(self.binding)
        return None

    async def exit(self, ok: bool, value: Any) -> Any:
        if not ok:
            raise value
        return value


# -- slots ----------------------------------------------------------------------------------------


async def _acquire_slots(
    binding: RunBinding, name: str, count: int, lease_s: int, sizes: dict[str, int] | None, deadline: float,
) -> tuple[dict[str, Any], float]:
    """Units of the pool `name` (the grant, and when it was asked for), waiting in line when full."""
    run = await binding.run()
    client = binding.client()
    pool = await binding.shared.resources.ensure(binding, "permits", name, sizes)
    body = {"scopeId": run.id, "units": count, "holder": client.holder, "holderSession": client.session, "leaseSeconds": lease_s}

    async def give_back(grant: dict[str, Any]) -> None:
        await binding.call("POST", f"/grants/{grant['grantId']}/release", body={"token": grant["token"]})

    async def acquire(waiter_id: str | None = None) -> tuple[dict[str, Any], float] | None:
        sent = anyio.current_time()
        try:
            # Not cut by a cancellation: the server grants all the same, and the units would stay
            # held, renewed by no one, for the whole lease. A grant that came after a cancellation
            # is released at once (see `let_finish`).
            grant = await binding.call(
                "POST", f"/permits/{pool['id']}/acquire", body={**body, "waiterId": waiter_id}, undo=give_back
            )
        except RunstateError as err:
            if err.code == "CAPACITY_UNAVAILABLE":
                return None
            raise
        return grant, sent

    got = await acquire()
    if got is not None:
        return got
    while True:
        waiter = await binding.call(
            "POST", f"/permits/{pool['id']}/wait", body={"scopeId": run.id, "units": count, "holder": client.holder},
            undo=functools.partial(_leave_line, binding, "/permit-waiters"),
        )
        waiter_id = waiter["waiterId"]
        got = await acquire()  # units may have come back between the refusal and joining the line
        if got is not None:
            await _withdraw(binding, f"/permit-waiters/{waiter_id}/cancel")
            return got
        async with _leaving_line_if_cancelled(binding, f"/permit-waiters/{waiter_id}/cancel"):
            got = await _wait_turn(binding, waiter_id, deadline, f"{count} slot(s) of {name}", acquire)
        if got is not None:
            return got


async def _wait_turn(
    binding: RunBinding, waiter_id: str, deadline: float, what: str,
    acquire: Callable[[str], Awaitable[tuple[dict[str, Any], float] | None]],
) -> tuple[dict[str, Any], float] | None:
    """Look at a pool waiter until its turn gives the units (the grant), or it is no longer in line
    (None: join again)."""
    polls = 0
    while True:
        if anyio.current_time() >= deadline:
            await _withdraw(binding, f"/permit-waiters/{waiter_id}/cancel")
            raise WaitTimeoutError(f"waited too long for {what}")
        await poll_pause(polls, binding.signal, binding.client()._ctx.requester.rng)
        polls += 1
        view = await binding.call("GET", f"/permit-waiters/{waiter_id}")
        if view["state"] == "SIGNALED":
            got = await acquire(waiter_id)
            if got is not None:
                return got
            continue  # someone else took the units: this waiter was put back in line
        if view["state"] == "CANCELLED":
            binding.throw_if_stopped()
        if view["state"] != "WAITING":
            return None  # expired or cancelled: join again


class _SlotsCall:
    def __init__(self, slots: "Slots") -> None:
        self.slots = slots
        self.binding = slots._binding
        self.context: RunContext
        self.grant: dict[str, Any] = {}
        self.held: Held | None = None

    async def enter(self) -> Done | None:
        slots, binding = self.slots, self.binding
        deadline = deadline_after(slots._timeout, DEFAULT_TIMEOUT_S)
        self.grant, sent = await _acquire_slots(binding, slots.name, slots._units, slots._lease_s, slots._sizes, deadline)
        grant = self.grant

        async def renew(seconds: int) -> None:
            await binding.call("POST", f"/grants/{grant['grantId']}/renew", body={"token": grant["token"], "leaseSeconds": seconds})

        self.held = Held(binding, slots._lease_s, renew, sent, f"slots {slots.name}")
        try:
            outer = await run_context(binding)
        except BaseException:
            await self._release()
            raise
        self.context = replace(outer, signal=AnyOf([outer.signal, self.held.signal]))
        return None

    async def exit(self, ok: bool, value: Any) -> Any:
        refused: BaseException | None = None
        try:
            assert self.held is not None
            lost = self.held.stop()
            if not ok:
                raise value
            if isinstance(lost, LeaseLostError):
                raise LeaseLostError("LEASE_LOST", 0, f"lost the {self.slots.name} slot while the function ran") from lost
        finally:
            # Shielded, so that a cancelled call still gives the units back; for a cancelled one
            # only for as long as one call's tries take (see `ClaimLease._release_quietly`).
            cancelled = not ok and not isinstance(value, Exception)
            bound_s = self.binding.client()._ctx.cleanup_bound_s() if cancelled else math.inf
            with anyio.move_on_after(bound_s, shield=True):
                refused = await self._release()
        # A grant taken away between two renewals (its run ended elsewhere, an operator's purge)
        # is learned only here: the function's result was made while another caller may have
        # held the slot. A run this client saw stop says so itself; its result stands, as 0.3.0's.
        if refused is not None and not self.binding.stopped:
            raise LeaseLostError(
                "LEASE_LOST", 0, f"lost the {self.slots.name} slot while the function ran (its release was refused)"
            ) from refused
        return value

    async def _release(self) -> BaseException | None:
        """Give the units back; returns the refusal that says the grant had already gone."""
        held, grant = self.held, self.grant
        if held is not None:
            held.stop()

        async def send(idempotency_key: str) -> None:
            path, body = f"/grants/{grant['grantId']}/release", {"token": grant["token"]}
            await self.binding.call("POST", path, body=body, idempotency_key=idempotency_key)

        try:
            # Sent again through an outage until the lease's end by the local clock (a claim's too).
            rng = self.binding.client()._ctx.requester.rng
            await send_through(send, None if held is None else held.clock, f"slots {self.slots.name}: release", rng)
        except LeaseLostError as err:
            return err
        except Exception as err:  # the units come back when the lease runs out
            _runtime.log.warning("could not give back %s slot(s) of %s (%s); they come back when the lease runs out",
                                 self.slots._units, self.slots.name, err)
        return None


class Slots:
    """`slots(name, ...)`: a decorator, and a `with` / `async with` block that holds the slots."""

    def __init__(
        self,
        binding: RunBinding,
        name: str,
        *,
        max: int | None = None,  # noqa: A002
        units: int | None = None,
        timeout: Duration | None = None,
        lease: Duration | None = None,
    ) -> None:
        self._binding = binding
        self.name = check_name(name, "slots")
        self._units = _units(units)
        self._sizes = pool_sizes(max)
        self._lease_s = lease_seconds(lease)
        self._timeout = timeout
        self._held: ContextVar[tuple[Any, ...]] = ContextVar(f"runstate_slots_{name}", default=())

    def __repr__(self) -> str:
        return f"<Slots {self.name} units={self._units}>"

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(fn):
            raise ConfigError("slots() needs a function")
        return wrap(self._binding, fn, lambda args, kwargs: _SlotsCall(self))

    def __enter__(self) -> RunContext:
        binding = self._binding
        call = _SlotsCall(self)

        async def enter() -> None:
            binding.begin()
            try:
                await call.enter()
            except BaseException:
                binding.end()
                raise

        try:
            binding.shared.run_blocking(enter())
        except BaseException as err:
            binding.note_error(err)
            raise
        return self._push(call)

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        call, scope = self._pop()
        scope.__exit__(None, None, None)
        run = self._binding.shared.run_blocking
        try:
            if exc is not None and not isinstance(exc, Exception):
                run(exit_quietly(call, exc))
                return
            run(call.exit(exc is None, exc))
        except BaseException as err:
            if err is exc:
                return  # the block's own error goes on as it is
            self._binding.note_error(err)
            raise
        finally:
            self._binding.end()

    async def __aenter__(self) -> RunContext:
        binding = self._binding
        binding.begin()
        call = _SlotsCall(self)
        try:
            await call.enter()
        except BaseException as err:
            binding.note_error(err)
            binding.end()
            raise
        return self._push(call)

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        call, scope = self._pop()
        scope.__exit__(None, None, None)
        try:
            if exc is not None and not isinstance(exc, Exception):
                with anyio.CancelScope(shield=True):
                    await exit_quietly(call, exc)
                return
            await call.exit(exc is None, exc)
        except BaseException as err:
            if err is exc:
                return
            self._binding.note_error(err)
            raise
        finally:
            self._binding.end()

    def _push(self, call: _SlotsCall) -> RunContext:
        scope = use_context(call.context)
        scope.__enter__()
        self._held.set(self._held.get() + ((call, scope),))
        return call.context

    def _pop(self) -> tuple[_SlotsCall, Any]:
        stack = self._held.get()
        if not stack:
            raise RuntimeError("a slots block was exited without being entered")
        self._held.set(stack[:-1])
        popped: tuple[_SlotsCall, Any] = stack[-1]
        return popped
