"""What every run-bound call shares: settings, a client per event loop, the run, the call's context.

The run-bound API (`@runstate.once`, `runstate.stop()`, `@runstate.queue`...; `runstate.verbs`)
is the official 0.3.0 client's, written on this SDK's `AsyncRunstate`. Its pieces:

- **`Shared`**: the options of one `Runstate` and of every client made from it with `run()` or
  `child()`. Nothing is checked or sent until the first call (so importing `runstate` and making a
  client never raise); `configure()` replaces options and the next call uses them. Calls run on
  the caller's own event loop (asyncio or trio) through an `AsyncRunstate` made for that loop, or,
  for the blocking forms, on the client's own loop thread (`runstate._loop`).
- **`RunBinding`**: the run a client works in: the named root run (`RUNSTATE_RUN`, else
  `"default"`; `PUT /runs/{name}` joins it or makes it), or a child run made under another. It is
  resolved once and cached. Once the binding has seen its run end (a call refused with
  `SCOPE_CANCELLED`, a look at the run while calls are active, `stop()`), it stays stopped: every
  later call raises `StoppedError` rather than quietly joining a new run, and the `signal` of every
  call in flight is set.
- **`RunContext`**: what a wrapped call or a queue job runs under (`runstate.context()`): the
  run, the `signal` (run stopped, or the hold behind the call lost), the attempt, the work key.
- **`Held`**: a lease kept alive while a wrapped function runs (once, slots), riding through
  outages as every lease of this SDK does (`runstate._renewal`).
- **`wrap`**: turns a verb into a wrapper of the function's own shape: a coroutine function for
  an `async def`, a plain function otherwise (its coordination runs on the client's loop thread
  and the function itself in the caller's thread).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import os
import random
import socket
import threading
import weakref
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable, Iterator, Mapping, Protocol, TypeVar
from urllib.parse import quote

import anyio

from . import _runtime
from ._config import Config, resolve_config
from ._grace import let_finish
from ._loop import Loop
from ._renewal import LeaseClock, keep_alive, ran_out
from ._request import Reply
from ._signal import AnyOf, Flag, Signal, wake_from_any_thread
from .client import AsyncRunstate
from .errors import ConfigError, RunstateError, StoppedError, WaitTimeoutError
from .transport import Transport
from ._units import Duration, parse_duration

__all__ = [
    "Resources", "Shared", "Settings", "RunSpec", "RunInfo", "RunBinding", "RunContext", "Held", "Done", "Call", "wrap",
    "current_context", "use_context", "run_context", "in_async_context", "enc", "iso_time", "parse_time",
    "error_message", "check_count", "deadline_after", "poll_pause", "sleep_unless", "until_set", "set_context",
    "exit_quietly", "request", "OPTION_NAMES", "ENV_RUN", "DEFAULT_RUN",
]

T = TypeVar("T")

ENV_RUN = "RUNSTATE_RUN"
DEFAULT_RUN = "default"
# What `Runstate(...)` and `configure(...)` take: 0.3.0's options, then this SDK's own.
OPTION_NAMES = (
    "api_key", "space_id", "base_url", "run", "worker", "timeout", "retries",
    "holder", "request_timeout_ms", "transport", "ca_bundle",
)
# How often a binding looks at its run while calls are active, to set their signals on a stop.
WATCH_S = 5.0
# Contention (rate limits, a full backlog) is waited out this long, with this backoff, then raised.
CONTENTION_S = 60.0
CONTENTION_FIRST_S, CONTENTION_MAX_S = 0.25, 5.0
CONTENTION_CODES = frozenset({"RATE_LIMITED", "SERVICE_RATE_LIMITED", "CONCURRENCY_LIMITED", "BACKLOG_FULL"})
# A wrapped call's clean-up after a cancellation may take at most this long.
CLEANUP_S = 10.0
# Polls of a waiter, a barrier or a timer: a short first pause, growing to a second.
POLL_FIRST_S, POLL_GROWTH, POLL_MAX_S = 0.15, 1.5, 1.0
# An error message sent to the server (a handler's or a once function's failure) is cut to this.
ERROR_MESSAGE_LEN_MAX = 2000


# -- small helpers --------------------------------------------------------------------------------


def enc(segment: str) -> str:
    """A name in a path segment, percent-encoded as JavaScript's encodeURIComponent does."""
    return quote(segment, safe="-_.!~*'()")


def iso_time(moment: datetime) -> str:
    """UTC, milliseconds, `Z`: the timestamps the server takes."""
    moment = moment.astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_time(text: str) -> datetime:
    """A timestamp from the server, as an aware datetime."""
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def error_message(error: BaseException) -> str:
    """`Type: message`, cut to what the server keeps: how a failure is recorded for other processes."""
    return f"{type(error).__name__}: {error}"[:ERROR_MESSAGE_LEN_MAX]


def check_count(value: Any, what: str, low: int = 1, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        span = f"of {low} or more" if high is None else f"from {low} to {high}"
        raise ConfigError(f"{what} must be a whole number {span}")
    return value


def deadline_after(timeout: Duration | None, default_s: float | None) -> float:
    """A deadline on the running library's clock for `timeout` (or the default); inf for none."""
    seconds = default_s if timeout is None else parse_duration(timeout, "timeout")
    return math.inf if seconds is None else anyio.current_time() + seconds


async def poll_pause(polls: int, signal: Signal, rng: random.Random | None = None) -> None:
    """The pause before the next look at something waited for; ends early if `signal` is set.
    Its jitter comes from `rng` (the client's generator, see `_runtime.uniform`)."""
    pause = min(POLL_MAX_S, POLL_FIRST_S * POLL_GROWTH**polls) * _runtime.uniform(0.8, 1.2, rng)
    await sleep_unless(signal, pause)


async def sleep_unless(signal: Signal, seconds: float) -> None:
    """Sleep, ending early (raising the signal's reason) once `signal` is set."""
    await until_set(signal, anyio.sleep(max(0.0, seconds)))


async def until_set(signal: Signal, awaitable: Awaitable[T]) -> T:
    """Await `awaitable`, abandoning it (and raising the signal's reason) once `signal` is set."""
    if signal.is_set():
        close = getattr(awaitable, "close", None)
        if close is not None:
            close()
        raise _reason(signal)
    outcome: dict[str, Any] = {}
    async with anyio.create_task_group() as group:
        woken = anyio.Event()
        remove = signal.add_callback(wake_from_any_thread(woken))

        async def watch() -> None:
            await woken.wait()
            group.cancel_scope.cancel()

        group.start_soon(watch)
        try:
            outcome["value"] = await awaitable
        except Exception as err:
            outcome["error"] = err
        finally:
            remove()
            group.cancel_scope.cancel()
    if "error" in outcome:
        raise outcome["error"]
    if "value" not in outcome:
        raise _reason(signal)
    value: T = outcome["value"]
    return value


def _reason(signal: Signal) -> BaseException:
    reason = signal.reason
    return reason if isinstance(reason, BaseException) else StoppedError("the operation was stopped")


def in_async_context() -> bool:
    """True when an event loop (asyncio or trio) runs the calling thread."""
    try:
        _runtime.current_library()
    except Exception:
        return False
    return True


# -- settings and clients -------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    config: Config
    run: str
    transport: Transport | None


def resolve_settings(options: Mapping[str, Any]) -> Settings:
    """Options over the environment: `ConfigError` for a missing key or space, a bad run name."""
    run = options.get("run") or (os.environ.get(ENV_RUN) or "").strip() or DEFAULT_RUN
    if not isinstance(run, str) or not 1 <= len(run) <= 256:
        raise ConfigError("run names are 1 to 256 characters")
    worker, holder = options.get("worker"), options.get("holder")
    if worker and holder and worker != holder:  # (one would be dropped without a word)
        raise ConfigError(f"worker={worker!r} and holder={holder!r} name the same thing (worker is 0.3.0's name for holder): give one")
    worker = worker or holder or f"{socket.gethostname()}-{os.getpid()}"
    timeout_ms = options.get("request_timeout_ms")
    if options.get("timeout") is not None:
        timeout_ms = max(1, round(parse_duration(options["timeout"], "timeout") * 1000))
    retries = options.get("retries")
    if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int) or retries < 0):
        raise ConfigError("retries must be a whole number of 0 or more")
    config = resolve_config(
        api_key=options.get("api_key"), space_id=options.get("space_id"), base_url=options.get("base_url"),
        request_timeout_ms=timeout_ms, retries=retries, holder=str(worker), ca_bundle=options.get("ca_bundle"),
    )
    return Settings(config=config, run=run, transport=options.get("transport"))


def _loop_key() -> Any:
    """The running event loop (asyncio) or trio run, as a weakly referable object."""
    if _runtime.current_library() == "trio":
        import trio

        return trio.lowlevel.current_trio_token()
    import asyncio

    return asyncio.get_running_loop()


class Shared:
    """Options, the clients made from them (one per event loop), the loop thread, the queues."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self._lock = threading.RLock()
        self._options = {name: value for name, value in options.items() if value is not None}
        self.generation = 0
        self._settings: Settings | None = None
        self._clients: weakref.WeakKeyDictionary[Any, AsyncRunstate] = weakref.WeakKeyDictionary()
        self._loop: Loop | None = None
        self._blocking: tuple[int, AsyncRunstate] | None = None
        # Queues with a handler, in the order they were defined: what serve() serves.
        self.queues: dict[int, Any] = {}
        self.resources = Resources()

    def configure(self, options: Mapping[str, Any]) -> None:
        unknown = set(options) - set(OPTION_NAMES)
        if unknown:
            raise ConfigError(f"unknown option(s): {', '.join(sorted(unknown))}")
        with self._lock:
            self._options = {**self._options, **{k: v for k, v in options.items() if v is not None}}
            self._settings = None
            self._clients = weakref.WeakKeyDictionary()
            self.generation += 1

    def settings(self) -> Settings:
        with self._lock:
            if self._settings is None:
                self._settings = resolve_settings(self._options)
            return self._settings

    def client(self) -> AsyncRunstate:
        """The client for the event loop running the caller (made on first use there)."""
        key = _loop_key()
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                settings = self.settings()
                config = settings.config
                client = AsyncRunstate(
                    api_key=config.api_key, space_id=config.space_id, base_url=config.base_url,
                    request_timeout_ms=config.request_timeout_ms, retries=config.retries, holder=config.holder,
                    transport=settings.transport, ca_bundle=config.ca_bundle,
                )
                self._clients[key] = client
            return client

    def loop(self) -> Loop:
        """The loop thread of the blocking forms, started on first use (after the settings check)."""
        self.settings()
        with self._lock:
            if self._loop is None or not self._loop.thread.is_alive():
                self._loop = Loop()
            return self._loop

    def run_blocking(self, awaitable: Awaitable[T]) -> T:
        try:
            loop = self.loop()
        except BaseException:
            close = getattr(awaitable, "close", None)
            if close is not None:
                close()  # never started: a settings error, raised before anything was sent
            raise
        return loop.run(awaitable)

    def blocking_client(self) -> AsyncRunstate:
        """The client of the loop thread (the blocking forms' and the handles' own)."""
        with self._lock:
            found = self._blocking
            if found is not None and found[0] == self.generation:
                return found[1]

        async def on_the_loop() -> AsyncRunstate:
            return self.client()

        client = self.run_blocking(on_the_loop())
        with self._lock:
            self._blocking = (self.generation, client)
        return client

    def close(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
            clients = list(self._clients.items())
        if loop is None:
            return
        for key, client in clients:
            if key is loop.loop:
                try:
                    loop.run(client.aclose(), timeout=5)
                except Exception:
                    pass
        loop.stop()

    def add_queue(self, queue: Any) -> None:
        with self._lock:
            self.queues[id(queue)] = queue


async def request(
    client: AsyncRunstate,
    method: str,
    suffix: str,
    *,
    body: Mapping[str, Any] | None = None,
    query: Mapping[str, Any] | None = None,
    wait_ms: int = 0,
    idempotency_key: str | None = None,
    contention_s: float = CONTENTION_S,
    undo: Callable[[Any], Awaitable[Any]] | None = None,
) -> Reply:
    """One call, with contention waited out: a rate limit or a full backlog is tried again after
    `Retry-After` (else 0.25 s doubling to 5 s) for up to `contention_s`, then `WaitTimeoutError`.

    With `undo`, a request the server grants at once (a reservation, a grant, a waiter) is not cut
    by a cancellation of the caller: the server applies it all the same, and what it got would be
    held for no one. Each try is let finish (`let_finish`, 2 s at most) and `undo(body)` gives back
    what a try got after the cancellation; the pauses between tries are cut as any wait is."""
    give_up_at = anyio.current_time() + contention_s
    pause = CONTENTION_FIRST_S
    send = functools.partial(
        client._ctx.call, method, suffix, body=body, query=query, wait_ms=wait_ms, idempotency_key=idempotency_key
    )
    give_back = None if undo is None else _on_body(undo)
    while True:
        try:
            return await (send() if give_back is None else let_finish(send, give_back))
        except RunstateError as err:
            if err.code not in CONTENTION_CODES or contention_s <= 0:
                raise
            wait_s = err.retry_after if err.retry_after is not None else pause
            if anyio.current_time() + wait_s > give_up_at:
                raise WaitTimeoutError("WAIT_TIMEOUT", 0, f"still busy after waiting: {err.message}") from err
            await anyio.sleep(wait_s * _runtime.uniform(0.8, 1.2, client._ctx.requester.rng))
            pause = min(2 * pause, CONTENTION_MAX_S)


class Resources:
    """Named resources (quotas, pools, budgets, queues): `PUT /{kind}/by-name/{name}` with the
    sizes the code declares creates one when it is missing and checks it when it exists
    (`ConflictError` names what differs); without sizes it only looks it up. Each answer is kept
    for the life of the client's settings, so a resource is declared once per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: dict[str, Any] = {}

    async def ensure(self, binding: "RunBinding", kind: str, name: str, sizes: Mapping[str, Any] | None) -> Any:
        body = dict(sizes or {})
        key = f"{binding.shared.generation} {kind} {name} {sorted(body.items())!r}"
        with self._lock:
            found = self._found.get(key)
        if found is None:
            found = await binding.call("PUT", f"/{kind}/by-name/{enc(name)}", body=body)
            with self._lock:
                self._found[key] = found
        return found


# -- runs -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSpec:
    kind: str  # "named" or "child"
    name: str | None = None
    deadline: Duration | None = None
    parent: "RunBinding | None" = None


@dataclass(frozen=True)
class RunInfo:
    """A run: its `id` and its `name`."""

    id: str
    name: str


def _on_body(undo: Callable[[Any], Awaitable[Any]]) -> Callable[[Reply], Awaitable[Any]]:
    async def give_back(reply: Reply) -> Any:
        return await undo(reply.body)

    return give_back


class RunBinding:
    """One client's run (see the module docstring)."""

    def __init__(self, shared: Shared, spec: RunSpec) -> None:
        self.shared = shared
        self.spec = spec
        self._lock = threading.Lock()
        self._info: RunInfo | None = None
        self._generation = -1
        self._resolving = False
        self._stopped: StoppedError | None = None
        self._flag = Flag()
        self._active = 0
        self._watching = False

    @property
    def signal(self) -> Signal:
        """Set when the run is seen to stop."""
        return self._flag

    @property
    def stopped(self) -> bool:
        return self._stopped is not None

    def client(self) -> AsyncRunstate:
        return self.shared.client()

    async def call(self, method: str, suffix: str, **kwargs: Any) -> Any:
        """A call through this loop's client; returns the answer's body (None for a 204). With
        `undo=`, what a grant answered after the caller was cancelled is given back (`request`)."""
        return (await request(self.client(), method, suffix, **kwargs)).body

    def display_name(self) -> str:
        if self.spec.name is not None:
            return self.spec.name
        return self.shared.settings().run if self.spec.kind == "named" else "(child run)"

    async def run(self) -> RunInfo:
        """The run, joined or made on first use (one request however many callers ask at once)."""
        self.throw_if_stopped()
        while True:
            with self._lock:
                if self._info is not None and self._generation == self.shared.generation:
                    return self._info
                mine = not self._resolving
                self._resolving = True
            if not mine:  # another caller (maybe on another loop) is resolving it: wait for it
                await anyio.sleep(0.01)
                continue
            generation = self.shared.generation
            try:
                info = await self._resolve()
            except BaseException as err:
                self.note_error(err)
                raise
            finally:
                with self._lock:
                    self._resolving = False
            with self._lock:
                self._info, self._generation = info, generation
            return info

    async def id(self) -> str:
        return (await self.run()).id

    async def known_run(self) -> RunInfo:
        """The run, even once it has stopped (for status and events)."""
        if self._info is not None and self._stopped is not None:
            return self._info
        return await self.run()

    def resolved_id(self) -> str | None:
        info = self._info
        return None if info is None else info.id

    async def _resolve(self) -> RunInfo:
        deadline = None
        if self.spec.deadline is not None:
            seconds = parse_duration(self.spec.deadline, "deadline")
            deadline = iso_time(datetime.now(timezone.utc) + timedelta(seconds=seconds))
        if self.spec.kind == "named":
            name = self.display_name()
            body = {} if deadline is None else {"deadline": deadline}
            answer = await self.call("PUT", f"/runs/{enc(name)}", body=body)
            return RunInfo(id=answer["id"], name=answer.get("name") or name)
        assert self.spec.parent is not None
        parent_id = await self.spec.parent.id()
        answer = await self.call("POST", "/scopes", body={"name": self.spec.name, "parentId": parent_id, "deadline": deadline})
        return RunInfo(id=answer["id"], name=answer.get("name") or self.display_name())

    def reset(self) -> None:
        """Forget the run and any stop seen (`runstate.testing.use` starts and ends with this)."""
        with self._lock:
            self._info, self._generation, self._stopped = None, -1, None
            self._flag = Flag()

    def throw_if_stopped(self) -> None:
        stopped = self._stopped
        if stopped is not None:
            raise StoppedError("STOPPED", 0, stopped.message) from stopped

    def mark_stopped(self, reason: BaseException | None = None) -> None:
        with self._lock:
            if self._stopped is not None:
                return
            if isinstance(reason, StoppedError):
                self._stopped = reason
            else:
                message = reason.message if isinstance(reason, RunstateError) else "the run has stopped"
                self._stopped = StoppedError(message)
            stopped = self._stopped
        self._flag.abort(stopped)

    def note_error(self, error: BaseException) -> None:
        """A `StoppedError` from a call in this run means the run has ended."""
        if isinstance(error, StoppedError):
            self.mark_stopped(error)

    # -- watching the run while calls are active --

    def begin(self) -> None:
        """A call starts (on the running loop); the first one starts a look at the run every 5 s."""
        with self._lock:
            self._active += 1
            start = not self._watching and self._stopped is None
            self._watching = self._watching or start
        if start:
            _runtime.spawn_background(self._watch, name="runstate-watch-run")

    def end(self) -> None:
        with self._lock:
            self._active -= 1

    async def track(self, body: Callable[[], Awaitable[T]]) -> T:
        """Run `body` as a call of this run: watched, and a stop it meets marks the run stopped."""
        self.begin()
        try:
            return await body()
        except BaseException as err:
            self.note_error(err)
            raise
        finally:
            self.end()

    async def _watch(self) -> None:
        try:
            while True:
                await anyio.sleep(WATCH_S)
                with self._lock:
                    if self._active <= 0 or self._stopped is not None:
                        return
                run_id = self.resolved_id()
                if run_id is None:
                    continue
                try:
                    view = await self.client()._ctx.call("GET", f"/scopes/{run_id}")
                except Exception as err:  # the calls themselves meet the stop too; say it and go on
                    _runtime.log.debug("could not look at run %s: %s", run_id, err)
                    continue
                if view.body.get("effective") != "ACTIVE":
                    state = str(view.body.get("storedState") or view.body.get("effective")).lower()
                    self.mark_stopped(StoppedError(f"the run is {state}"))
        finally:
            with self._lock:
                self._watching = False


# -- the context of a call ------------------------------------------------------------------------


@dataclass(frozen=True)
class RunContext:
    """What the current wrapped call or queue job runs under (`runstate.context()`): the `run`
    (a `RunInfo`), the `signal` (set when the run stops or the hold behind the call is lost), the
    `attempt` (1 for the first try) and the work `key` (None outside `once` and queue jobs)."""

    run: RunInfo
    #: Set when the run stops or the hold behind this call is lost.
    signal: Signal
    #: 1 for the first try; more after failed tries.
    attempt: int
    #: The work key for once and queue calls; None otherwise.
    key: str | None


_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar("runstate_context", default=None)


def current_context() -> RunContext | None:
    return _current.get()


@contextlib.contextmanager
def use_context(context: RunContext) -> Iterator[None]:
    token = _current.set(context)
    try:
        yield
    finally:
        _current.reset(token)


def set_context(context: RunContext) -> None:
    _current.set(context)


async def run_context(binding: RunBinding) -> RunContext:
    """The context a wrapper without a hold of its own passes on: the enclosing one, or the run's."""
    outer = current_context()
    if outer is not None:
        return outer
    return RunContext(run=await binding.run(), signal=binding.signal, attempt=1, key=None)


# -- leases held while a function runs -------------------------------------------------------------


class Held:
    """A lease kept alive (`runstate._renewal`) while wrapped work runs; its `signal` is set when
    it is lost or the run stops."""

    def __init__(
        self, binding: RunBinding, lease_seconds: int, renew: Callable[[int], Awaitable[Any]], sent_at: float, what: str
    ) -> None:
        self._lost = Flag()
        self._clock = LeaseClock(lease_seconds, sent_at)
        self._what = what

        def on_lost(error: BaseException) -> None:
            self._lost.abort(error)
            binding.note_error(error)  # a renewal refused because the run ended

        rng = binding.client()._ctx.requester.rng
        self._renewal = _runtime.spawn_background(
            keep_alive, renew, self._clock, on_lost, what, rng, name=f"runstate-renew:{what}"
        )
        self.signal: Signal = AnyOf([self._lost, binding.signal])

    @property
    def clock(self) -> LeaseClock:
        return self._clock

    def stop(self) -> BaseException | None:
        """Stop renewing; the loss, if the lease was lost (or has run out by the local clock)."""
        self._renewal.cancel()
        if self._lost.is_set():
            return self._lost.reason
        if self._clock.expired():
            return ran_out(self._what, self._clock, None)
        return None


# -- the wrapper driver ---------------------------------------------------------------------------


class Done:
    """What `Call.enter` returns when the result is known without calling the function."""

    def __init__(self, value: Any) -> None:
        self.value = value


class Call(Protocol):
    """One wrapped call, in two halves around the function: `enter` takes what the verb needs and
    sets `context` (or returns `Done`); `exit` gets the function's outcome and returns the result
    or raises (the function's own error, or what replaces it)."""

    context: RunContext

    async def enter(self) -> Done | None: ...

    async def exit(self, ok: bool, value: Any) -> Any: ...


MakeCall = Callable[[tuple[Any, ...], dict[str, Any]], Call]


def wrap(binding: RunBinding, fn: Callable[..., Any], make_call: MakeCall) -> Callable[..., Any]:
    """A wrapper of `fn`'s own shape: a coroutine function for an `async def`, a plain one otherwise."""
    if _runtime.is_async_callable(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return await drive_async(binding, make_call(args, kwargs), lambda: fn(*args, **kwargs))

        return async_wrapper

    @functools.wraps(fn)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        return drive_sync(binding, make_call(args, kwargs), lambda: fn(*args, **kwargs))

    return sync_wrapper


async def drive_async(binding: RunBinding, call: Call, invoke: Callable[[], Awaitable[Any]]) -> Any:
    binding.begin()
    try:
        done = await call.enter()
        if done is not None:
            return done.value
        try:
            with use_context(call.context):
                result = await invoke()
        except Exception as err:
            return await call.exit(False, err)
        except BaseException as err:  # cancelled: clean up (shielded, bounded), then go on
            with anyio.move_on_after(CLEANUP_S, shield=True):
                await exit_quietly(call, err)
            raise
        return await call.exit(True, result)
    except BaseException as err:
        binding.note_error(err)
        raise
    finally:
        binding.end()


def drive_sync(binding: RunBinding, call: Call, invoke: Callable[[], Any]) -> Any:
    run = binding.shared.run_blocking

    async def enter() -> Done | None:
        binding.begin()
        try:
            return await call.enter()
        except BaseException:
            binding.end()
            raise

    try:
        done = run(enter())
    except BaseException as err:
        binding.note_error(err)
        raise
    try:
        if done is not None:
            return done.value
        try:
            with use_context(call.context):
                result = invoke()
        except Exception as err:
            return run(call.exit(False, err))
        except BaseException as err:  # Ctrl-C in the function: clean up on the loop, raise it here
            run(exit_quietly(call, err))
            raise
        return run(call.exit(True, result))
    except BaseException as err:
        binding.note_error(err)
        raise
    finally:
        binding.end()


async def exit_quietly(call: Call, error: BaseException) -> None:
    """`exit` for an interruption: its clean-up runs; the interruption itself is raised by the caller."""
    try:
        await call.exit(False, error)
    except BaseException as raised:
        if raised is not error and isinstance(raised, Exception):
            _runtime.log.warning("clean-up after an interrupted call failed: %s", raised)
