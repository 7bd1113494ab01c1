"""What differs between asyncio and trio, kept in one place.

The SDK is written on anyio, so almost everything runs unchanged under either library. Three
things cannot be written once:

- **Native events.** `lease.lost_event` is promised to be the running library's own event (an
  `asyncio.Event` under asyncio, a `trio.Event` under trio), so users can await it with the tools
  they already use.
- **Background tasks that outlive a call.** A claim's lease renewal starts in `acquire()` and runs
  until `release()`, so it cannot live in a task group owned by `acquire()`. Under asyncio it is an
  `asyncio` task we keep a reference to; under trio it is a system task inside a cancel scope of
  our own, which catches every error: a system task that raises crashes the whole run.
- **Randomness**, kept behind `uniform()` so tests can pin the jitter and assert exact times.

Time is never read from `time.monotonic()` here or anywhere in the SDK: waits and deadlines use
`anyio.current_time()`, so under trio's `MockClock` every SDK wait runs in virtual time.
"""

from __future__ import annotations

import functools
import inspect
import logging
import random
from typing import Any, Awaitable, Callable

import anyio
import anyio.to_thread
import sniffio

__all__ = ["uniform", "current_library", "clock", "deadline_in", "sleep_before", "new_native_event", "spawn_background", "Background", "invoke"]

log = logging.getLogger("runstate")

_rng = random.Random()

# asyncio keeps only weak references to tasks: this set keeps the running ones alive.
_asyncio_tasks: set[Any] = set()


def uniform(low: float, high: float, rng: random.Random | None = None) -> float:
    """A uniform random number in [low, high]; the one source of jitter in the SDK. From `rng`, a
    client's own generator when it has one (`Requester.rng`: seeded, in process, from the
    server's seed), else from the process's."""
    return (_rng if rng is None else rng).uniform(low, high)


def deadline_in(timeout_ms: float) -> float:
    """When a wait of `timeout_ms` from now ends, on the running library's clock. A wait keeps
    this one deadline, compares the clock with it and sleeps until at most it (`sleep_before`): a
    pause worked out each time as what is left (a difference of two clock readings) can come out
    too small to move a virtual clock on, and a wait that then asks again never reaches its end."""
    return anyio.current_time() + timeout_ms / 1000


async def sleep_before(seconds: float, deadline: float) -> None:
    """Sleep `seconds`, or until `deadline` if that comes first."""
    await anyio.sleep_until(min(anyio.current_time() + seconds, deadline))


def current_library() -> str:
    """`"trio"` or `"asyncio"`: the async library running the current task."""
    return sniffio.current_async_library()


def clock() -> Callable[[], float]:
    """The running library's clock as a function that any thread may call: trio's clock object
    (virtual under `MockClock`) or the asyncio loop's `time`. The same time as
    `anyio.current_time()`, for code (a lease's `is_lost`) that is read outside the event loop."""
    if current_library() == "trio":
        import trio

        now: Callable[[], float] = trio.lowlevel.current_clock().current_time
        return now
    import asyncio

    return asyncio.get_running_loop().time


def new_native_event() -> Any:
    """An event of the running library: `trio.Event` under trio, `asyncio.Event` otherwise."""
    if current_library() == "trio":
        import trio

        return trio.Event()
    import asyncio

    return asyncio.Event()


class Background:
    """A handle on a task started by `spawn_background`: cancel it, wait for it to end."""

    def __init__(self, cancel: Callable[[], None], wait: Callable[[], Awaitable[Any]], done: Callable[[], bool]):
        self._cancel = cancel
        self._wait = wait
        self._done = done

    def cancel(self) -> None:
        """Ask the task to stop; it ends at its next checkpoint. Safe to call more than once."""
        self._cancel()

    @property
    def done(self) -> bool:
        return self._done()

    async def wait(self) -> None:
        """Wait until the task has ended (after `cancel()` that is at its next checkpoint)."""
        if not self._done():
            await self._wait()


def spawn_background(async_fn: Callable[..., Awaitable[Any]], *args: Any, name: str) -> Background:
    """Start `async_fn(*args)` as a task that outlives the caller; errors are logged, never raised."""
    if current_library() == "trio":
        return _spawn_trio(async_fn, args, name)
    return _spawn_asyncio(async_fn, args, name)


def _spawn_trio(async_fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], name: str) -> Background:
    import trio

    scope = trio.CancelScope()
    ended = trio.Event()

    async def runner() -> None:
        try:
            with scope:
                await async_fn(*args)
        except Exception:  # a system task that raises would crash the run
            log.exception("background task %s failed", name)
        finally:
            ended.set()

    trio.lowlevel.spawn_system_task(runner, name=name)
    return Background(scope.cancel, ended.wait, ended.is_set)


def _spawn_asyncio(async_fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], name: str) -> Background:
    import asyncio

    async def runner() -> None:
        try:
            await async_fn(*args)
        except Exception:
            log.exception("background task %s failed", name)

    task = asyncio.get_running_loop().create_task(runner(), name=name)
    _asyncio_tasks.add(task)
    task.add_done_callback(_asyncio_tasks.discard)

    async def wait() -> None:
        await asyncio.wait({task})

    def cancel() -> None:
        task.cancel()

    return Background(cancel, wait, task.done)


def single_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one real error inside a task group's exception group, or the group itself.

    Cancellations are not counted: a handler that raised `KeyboardInterrupt` while its siblings
    were being cancelled gives back the `KeyboardInterrupt`, so the caller can catch it as such.
    """
    cancelled = anyio.get_cancelled_exc_class()
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        error = pending.pop()
        if isinstance(error, BaseExceptionGroup):
            pending.extend(error.exceptions)
        elif not isinstance(error, cancelled):
            leaves.append(error)
    return leaves[0] if len(leaves) == 1 else group


def is_async_callable(fn: Any) -> bool:
    """True for coroutine functions, partials of them and objects with an async `__call__`."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)
    return call is not None and inspect.iscoroutinefunction(call)


async def invoke(fn: Callable[..., Any], *args: Any) -> Any:
    """Call a user function: await a coroutine function in this task, run a plain one in a thread.

    A plain function cannot be interrupted: when the caller is cancelled, the caller stops
    waiting (the thread is abandoned) and the thread runs on to its end on its own.
    """
    if is_async_callable(fn):
        return await fn(*args)
    if not callable(fn):
        raise TypeError(f"expected a function, got {type(fn).__name__}")
    result = await anyio.to_thread.run_sync(functools.partial(fn, *args), abandon_on_cancel=True)
    if inspect.isawaitable(result):
        result = await result
    return result
