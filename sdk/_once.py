"""`@runstate.once`: the first caller with given arguments runs the function; every other caller in
the run, in any process, waits for that run and gets its result.

How one call goes (`POST /once/acquire`, the server's once slots):

- the slot of (run, work key) is `DONE`: its recorded result comes back at once, nothing runs;
- it is `FAILED` (every allowed attempt failed): `OnceFailedError` with the last error, nothing runs;
- another caller holds it: wait for it (a long poll of `GET /once`, 25 s at a time); when it
  settles, take its result, its failure, or the slot itself if that caller gave up or died;
- otherwise this caller holds it, under a lease renewed while the function runs (riding through
  an outage like every lease here). A return records the result (at most 64 KiB of JSON); an
  exception records a failed attempt (`Type: message`) and is raised, until `attempts` (default 3)
  are used, after which `OnceFailedError` is raised here and to every later caller. A cancellation
  or Ctrl-C records nothing: the lease lapses and another caller takes the work over.

A caller cancelled while its acquire is on its way does not leave the key held for no one: the
server applies the acquire all the same, so it is let finish (`let_finish`) and a key it got is
given back unused (`POST /once/release`: open again at once, the attempt not counted).

The result and failure are sent again through an outage until the lease's local end. If the
lease was lost meanwhile (or the run stopped), `LeaseLostError` (or `StoppedError`) is raised
instead of the result: another caller may be doing the work now.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, Callable

import anyio

from . import _runtime
from ._bound import (
    Call, Done, Held, RunBinding, RunContext, check_count, error_message, until_set, wrap,
)
from ._keys import check_name, work_key
from ._renewal import send_through
from ._units import Duration, lease_seconds
from .errors import ConfigError, LeaseLostError, OnceFailedError, ResultTooLargeError, RunstateError, StoppedError

__all__ = ["make_once", "RESULT_BYTES_MAX", "WAIT_MS"]

RESULT_BYTES_MAX = 65536
# How long one wait for another caller's run is held by the server.
WAIT_MS = 25_000
DEFAULT_ATTEMPTS = 3


def make_once(
    binding: RunBinding,
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    key: Callable[..., str] | None = None,
    attempts: int | None = None,
    lease: Duration | None = None,
) -> Callable[..., Any]:
    if not callable(fn):
        raise ConfigError("once() needs a function")
    fn_name = getattr(fn, "__name__", "")
    if name is None and (not fn_name or fn_name == "<lambda>"):
        raise ConfigError('once() needs a named function or a name, e.g. runstate.once(fn, name="research")')
    work_name = check_name(name if name is not None else fn_name, "once")
    max_attempts = check_count(DEFAULT_ATTEMPTS if attempts is None else attempts, "attempts", 1, 100)
    lease_s = lease_seconds(lease)
    try:
        signature: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None

    def make_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
        if key is not None:
            work = work_key(work_name, args, key, kwargs)
        else:
            work = work_key(work_name, *_as_called(signature, args, kwargs))
        return _OnceCall(binding, work_name, work, max_attempts, lease_s)

    wrapper = wrap(binding, fn, make_call)
    if name is not None:
        wrapper.__name__ = name
    return wrapper


def _as_called(
    signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], None, dict[str, Any]]:
    """The arguments as the function sees them, so `f("a")` and `f(name="a")` are the same work;
    keyword-only ones (and `**kwargs`) are hashed as one object after the positional ones."""
    if signature is None or not kwargs:
        return args, None, kwargs
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return args, None, kwargs
    return bound.args, None, bound.kwargs


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8"))


class _OnceCall:
    def __init__(self, binding: RunBinding, name: str, key: str, attempts: int, lease_s: int) -> None:
        self.binding = binding
        self.name = name
        self.key = key
        self.attempts = attempts
        self.lease_s = lease_s
        self.context: RunContext
        self.held: Held | None = None
        self.token = ""
        self.slot: dict[str, Any] = {}

    async def enter(self) -> Done | None:
        binding = self.binding
        run = await binding.run()
        client = binding.client()
        self.slot = {"scopeId": run.id, "key": self.key}
        while True:
            binding.throw_if_stopped()
            sent = anyio.current_time()
            body = {**self.slot, "holder": client.holder, "holderSession": client.session, "leaseSeconds": self.lease_s}
            got = await binding.call("POST", "/once/acquire", body=body, undo=self._give_back)
            state = got["state"]
            if state == "DONE":
                return Done(got.get("result"))
            if state == "FAILED":
                raise OnceFailedError(got.get("lastError") or "", got.get("attempts", 0))
            if state == "HELD":
                view = await until_set(
                    binding.signal,
                    binding.call("GET", "/once", query={**self.slot, "waitMs": WAIT_MS}, wait_ms=WAIT_MS),
                )
                if view["state"] == "DONE":
                    return Done(view.get("result"))
                if view["state"] == "FAILED":
                    raise OnceFailedError(view.get("lastError") or "", view.get("attempts", 0))
                continue  # OPEN (its holder gave up or died: try to take it) or still HELD
            self.token = token = got["token"]

            async def renew(seconds: int) -> None:
                await binding.call("POST", "/once/renew", body={**self.slot, "token": token, "leaseSeconds": seconds})

            self.held = Held(binding, self.lease_s, renew, sent, f"once {self.key}")
            self.context = RunContext(run=run, signal=self.held.signal, attempt=got.get("attempts", 0) + 1, key=self.key)
            return None

    async def _give_back(self, got: dict[str, Any]) -> None:
        """An acquire answered after its caller was cancelled: the key it got goes back unused."""
        if got.get("state") not in ("DONE", "FAILED", "HELD") and got.get("token"):
            await self.binding.call("POST", "/once/release", body={**self.slot, "token": got["token"]})

    async def _send(self, action: str, body: dict[str, Any]) -> Any:
        held = self.held
        assert held is not None

        async def send(idempotency_key: str) -> Any:
            return await self.binding.call("POST", f"/once/{action}", body=body, idempotency_key=idempotency_key)

        return await send_through(send, held.clock, f"once {self.key}: {action}", self.binding.client()._ctx.requester.rng)

    async def exit(self, ok: bool, value: Any) -> Any:
        held = self.held
        assert held is not None
        lost = held.stop()
        if not ok:
            if lost is not None:
                raise _lost_error(lost) from value
            if not isinstance(value, Exception):
                raise value  # cancelled or interrupted: record nothing, the lease lapses
            failed = await self._fail(error_message(value), quietly=True)
            if isinstance(failed, dict) and failed.get("state") == "FAILED":
                raise OnceFailedError(error_message(value), failed.get("attempts", 0)) from value
            raise value
        if lost is not None:
            raise _lost_error(lost)
        try:
            size = _json_bytes(value)
        except (TypeError, ValueError) as err:
            problem = ConfigError(f"{self.name} returned a value that is not JSON: {error_message(err)}")
            await self._fail(problem.message, quietly=True)
            raise problem from err
        if size > RESULT_BYTES_MAX:
            too_large = ResultTooLargeError(
                "RESULT_TOO_LARGE", 0,
                f"{self.name} returned {size} bytes; once results are at most {RESULT_BYTES_MAX} bytes. "
                "Store it elsewhere and return a reference.",
            )
            await self._fail(too_large.message, quietly=True)
            raise too_large
        try:
            await self._send("complete", {**self.slot, "token": self.token, "result": value})
        except LeaseLostError as err:
            raise _lost_error(err) from err
        return value

    async def _fail(self, message: str, *, quietly: bool) -> Any:
        body = {**self.slot, "token": self.token, "error": message, "maxAttempts": self.attempts}
        try:
            return await self._send("fail", body)
        except Exception as err:
            if not quietly:
                raise
            _runtime.log.warning(
                "once %s: could not record the failed attempt (%s); its lease lapses and the next caller tries again",
                self.key, err,
            )
            return None


def _lost_error(lost: BaseException) -> RunstateError:
    if isinstance(lost, StoppedError):
        return lost
    error = LeaseLostError(
        "LEASE_LOST", 0, "lost the hold on this work before it finished; another caller may have taken it over"
    )
    error.__cause__ = lost
    return error
