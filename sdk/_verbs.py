"""The run-bound API of the official 0.3.0 client, as methods of `Runstate` (and, through its
default client, as `runstate.once`, `runstate.stop()`...).

    import runstate

    @runstate.once
    def research_company(name: str) -> dict: ...

    @runstate.limit("search-api", max=60, per="minute")
    async def search_web(query: str) -> list: ...

    research_company("acme")   # looks like a normal call
    runstate.stop()            # every worker stops taking new work

Every method belongs to a run: the client's own (`RUNSTATE_RUN`, else `"default"`), or the one
picked with `run(name)` / `child()`. Decorators work on plain and `async def` functions alike, and
every direct call has an `a`-prefixed async form (`await runstate.astop()`), which runs on the
caller's own event loop, asyncio or trio. The machinery is in `runstate._bound`; each verb in its
module (`_once`, `_limits`, `_budget`, `_queues`, `_timing`, `_observe`).
"""

from __future__ import annotations

import signal as signals
import threading
from datetime import datetime
from typing import Any, AsyncIterator, Callable, Iterator, Mapping, Sequence, TypeVar, overload

from ._bound import RunBinding, RunContext, RunSpec, Shared, current_context
from ._docs import async_forms
from ._budget import budget_sizes, make_budget
from ._keys import check_name
from ._limits import Slots, make_limit, pool_sizes, quota_sizes, take
from ._observe import RunEvent, RunStatus, aevents, events, status
from ._once import make_once
from ._queues import Queue, QueueImpl, ResourceRef, StopWhen, serve
from ._signal import Flag
from ._timing import sleep_named, together
from ._units import Amount, Duration, Per
from .errors import ConfigError, StoppedError

__all__ = ["RunVerbs"]

F = TypeVar("F", bound=Callable[..., Any])
V = TypeVar("V", bound="RunVerbs")


@async_forms
class RunVerbs:
    """The run-bound methods; a class that mixes them in sets `_shared` and `_binding`."""

    _shared: Shared
    _binding: RunBinding

    def _bound_to(self: V, spec: RunSpec) -> V:
        """A client of the same class and settings, bound to another run."""
        client = object.__new__(type(self))
        client._init_bound(self._shared, spec)
        return client

    def _init_bound(self, shared: Shared, spec: RunSpec) -> None:
        self._shared = shared
        self._binding = RunBinding(shared, spec)

    def configure(self, **options: Any) -> None:
        """Change settings: the options given replace the current ones, the rest stay."""
        self._shared.configure(options)

    # -- runs --

    def run(self: V, name: str, *, deadline: Duration | None = None) -> V:
        """A client bound to the root run of this name (joined, or made, on first use)."""
        check_name(name, "run")
        return self._bound_to(RunSpec(kind="named", name=name, deadline=deadline))

    def child(self: V, name: str | None = None, *, deadline: Duration | None = None) -> V:
        """A client bound to a new child run of this client's run (made on first use)."""
        if name is not None:
            check_name(name, "run")
        return self._bound_to(RunSpec(kind="child", name=name, deadline=deadline, parent=self._binding))

    def run_id(self) -> str:
        """The id of this client's run, joining or making it if needed."""
        return self._shared.run_blocking(self._binding.id())

    async def arun_id(self) -> str:
        return await self._binding.id()

    def stop(self) -> None:
        """Stop the run: nothing new starts anywhere, and the signal of running work is set."""
        self._shared.run_blocking(self._end("cancel"))

    async def astop(self) -> None:
        await self._end("cancel")

    def finish(self) -> None:
        """Mark the run finished."""
        self._shared.run_blocking(self._end("complete"))

    async def afinish(self) -> None:
        await self._end("complete")

    async def _end(self, action: str) -> None:
        if self._binding.stopped:
            return
        run_id = await self._binding.id()
        await self._binding.call("POST", f"/scopes/{run_id}/{action}", body={})
        self._binding.mark_stopped(StoppedError(f"the run was {'stopped' if action == 'cancel' else 'finished'}"))

    def context(self) -> RunContext | None:
        """What the current wrapped call or queue job runs under; None outside one."""
        return current_context()

    # -- once --

    @overload
    def once(self, fn: F) -> F: ...

    @overload
    def once(
        self, fn: None = None, *, name: str | None = None, key: Callable[..., str] | None = None,
        attempts: int | None = None, lease: Duration | None = None,
    ) -> Callable[[F], F]: ...

    def once(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        key: Callable[..., str] | None = None,
        attempts: int | None = None,
        lease: Duration | None = None,
    ) -> Any:
        """Run the function once per run for the same arguments; every caller gets its result.
        `@runstate.once`, or `@runstate.once(name=, key=, attempts=3, lease=30)`."""
        options: dict[str, Any] = {"name": name, "key": key, "attempts": attempts, "lease": lease}
        if fn is None:
            return lambda f: make_once(self._binding, f, **options)
        return make_once(self._binding, fn, **options)

    # -- capacity --

    def limit(
        self,
        name: str,
        fn: Callable[..., Any] | None = None,
        *,
        max: int | None = None,  # noqa: A002 - 0.3.0's name
        per: Per | None = None,
        units: int | None = None,
        timeout: Duration | None = None,
    ) -> Any:
        """Take units of a shared quota before each call: `@runstate.limit("search", max=60, per="minute")`."""
        options: dict[str, Any] = {"max": max, "per": per, "units": units, "timeout": timeout}
        check_name(name, "limit")
        quota_sizes(max, per)
        if fn is None:
            return lambda f: make_limit(self._binding, name, f, **options)
        return make_limit(self._binding, name, fn, **options)

    def take(self, name: str, *, units: int | None = None, timeout: Duration | None = None) -> None:
        """Take quota units without wrapping a function."""
        self._shared.run_blocking(take(self._binding, name, units=units, timeout=timeout))

    async def atake(self, name: str, *, units: int | None = None, timeout: Duration | None = None) -> None:
        await take(self._binding, name, units=units, timeout=timeout)

    def slots(
        self,
        name: str,
        fn: Callable[..., Any] | None = None,
        *,
        max: int | None = None,  # noqa: A002
        units: int | None = None,
        timeout: Duration | None = None,
        lease: Duration | None = None,
    ) -> Any:
        """Hold slots of a pool while each call runs, at most `max` at once across every worker:
        a decorator, and a `with` / `async with` block."""
        held = Slots(self._binding, name, max=max, units=units, timeout=timeout, lease=lease)
        return held if fn is None else held(fn)

    def budget(
        self,
        name: str,
        fn: Callable[..., Any] | None = None,
        *,
        reserve: Amount | None = None,
        cost: Callable[[Any], Amount] | None = None,
        limit: Amount | None = None,
        currency: str | None = None,
        scale: int | None = None,
    ) -> Any:
        """Reserve money before each call and charge the real cost after it."""
        options: dict[str, Any] = {"reserve": reserve, "cost": cost, "limit": limit, "currency": currency, "scale": scale}
        check_name(name, "budget")
        if reserve is None:
            raise ConfigError("budget() needs a reserve amount")
        budget_sizes(limit, currency, scale)
        if fn is None:
            return lambda f: make_budget(self._binding, name, f, **options)
        return make_budget(self._binding, name, fn, **options)

    # -- queues --

    def queue(
        self,
        name: str,
        handler: Callable[[Any], Any] | None = None,
        *,
        slots: ResourceRef | None = None,
        limit: ResourceRef | None = None,
        budget: Mapping[str, Any] | None = None,
        attempts: int | None = None,
        lease: Duration | None = None,
        concurrency: int | None = None,
        key: Callable[[Any], str] | None = None,
    ) -> Queue:
        """A queue of work for worker processes. `@runstate.queue("review", ...)` makes the
        function the handler that serve() runs; `runstate.queue("review")` alone is producer-only."""
        if handler is not None and not callable(handler):
            raise ConfigError("queue() takes a handler function")
        impl = QueueImpl(
            self._binding, name, None, slots=slots, limit=limit, budget=budget, attempts=attempts, lease=lease,
            concurrency=concurrency, key=key,
        )
        queue = Queue(impl, self._shared.add_queue)
        result: Queue = queue if handler is None else queue(handler)
        return result

    def serve(self, *, concurrency: int | None = None, queues: Sequence[Queue] | None = None, signal: Any = None) -> None:
        """Run the handlers of the queues defined through this client until the run stops,
        `signal` is set, or the process gets SIGTERM or SIGINT (a second Ctrl-C stops waiting
        for the running handlers)."""
        exit_flag = Flag()
        restore: list[tuple[int, Any]] = []
        if threading.current_thread() is threading.main_thread():

            def on_signal(signum: int, frame: Any) -> None:
                if exit_flag.is_set() and signum == signals.SIGINT:
                    raise KeyboardInterrupt
                exit_flag.abort(StoppedError("the worker was asked to exit"))

            for asked in (signals.SIGTERM, signals.SIGINT):
                try:
                    restore.append((asked, signals.signal(asked, on_signal)))
                except (ValueError, OSError):
                    pass
        stop = StopWhen(exit_flag, signal)
        try:
            self._shared.run_blocking(
                serve(self._binding, list(self._shared.queues.values()), concurrency=concurrency, queues=queues, signal=stop)
            )
        finally:
            for which, previous in restore:
                try:
                    signals.signal(which, previous)
                except (ValueError, OSError, TypeError):
                    pass

    async def aserve(self, *, concurrency: int | None = None, queues: Sequence[Queue] | None = None, signal: Any = None) -> None:
        """As serve(); it also stops when its task is cancelled."""
        await serve(self._binding, list(self._shared.queues.values()), concurrency=concurrency, queues=queues, signal=signal)

    # -- timing --

    def sleep(self, name: str, duration: Duration | None = None, *, until: datetime | None = None) -> None:
        """A durable sleep: a process that restarts and sleeps under the same name waits only for what is left."""
        self._shared.run_blocking(sleep_named(self._binding, name, duration, until=until))

    async def asleep(self, name: str, duration: Duration | None = None, *, until: datetime | None = None) -> None:
        await sleep_named(self._binding, name, duration, until=until)

    def together(self, name: str, count: int, *, timeout: Duration | None = None) -> None:
        """Go on once `count` workers have called together() with this name."""
        self._shared.run_blocking(together(self._binding, name, count, timeout=timeout))

    async def atogether(self, name: str, count: int, *, timeout: Duration | None = None) -> None:
        await together(self._binding, name, count, timeout=timeout)

    # -- setup --

    def setup(
        self,
        *,
        limits: Mapping[str, Mapping[str, Any]] | None = None,
        slots: Mapping[str, Mapping[str, Any]] | None = None,
        budgets: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """Create or check resources without calling anything or spending units."""
        self._shared.run_blocking(self.asetup(limits=limits, slots=slots, budgets=budgets))

    async def asetup(
        self,
        *,
        limits: Mapping[str, Mapping[str, Any]] | None = None,
        slots: Mapping[str, Mapping[str, Any]] | None = None,
        budgets: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        wanted: list[tuple[str, str, Any]] = []  # everything is checked before anything is sent
        for name, declared in (limits or {}).items():
            wanted.append(("allowances", check_name(name, "limit"), quota_sizes(declared.get("max"), declared.get("per"))))
        for name, declared in (slots or {}).items():
            wanted.append(("permits", check_name(name, "slots"), pool_sizes(declared.get("max"))))
        for name, declared in (budgets or {}).items():
            sizes = budget_sizes(declared.get("limit"), declared.get("currency"), declared.get("scale"))
            wanted.append(("budgets", check_name(name, "budget"), sizes))
        resources, binding = self._shared.resources, self._binding
        for kind, name, sizes in wanted:
            await resources.ensure(binding, kind, name, sizes)

    # -- watching --

    def events(self, *, types: Sequence[str] | None = None, signal: Any = None) -> Iterator[RunEvent]:
        """The run's events as they happen, resuming after network errors, until `signal` is set."""
        return events(self._binding, types, signal)

    def aevents(self, *, types: Sequence[str] | None = None, signal: Any = None) -> AsyncIterator[RunEvent]:
        return aevents(self._binding, types, signal)

    def status(self) -> RunStatus:
        """The run's state, the workers holding work in it, and what waits."""
        return self._shared.run_blocking(status(self._binding))

    async def astatus(self) -> RunStatus:
        return await status(self._binding)
