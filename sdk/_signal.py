"""`Signal`: set when the run stops or the hold behind a call is lost, readable from anywhere.

A run-bound call's work may run in the caller's thread (a plain function), in a worker thread (a
plain queue handler) or in a task of the caller's event loop (asyncio or trio), while what sets
the signal (a lost renewal, the run seen to stop) runs on an event loop of its own. So a signal
is a thread-safe flag with three ways to read it:

- `signal.is_set()` (or `bool(signal)`): a cheap check for loops;
- `signal.wait(timeout)`: blocks in plain code, like `threading.Event.wait`; where an event loop
  runs in the calling thread it returns an awaitable instead: `await ctx.signal.wait()`;
- `signal.add_callback(fn)`: `fn()` once set, called from whichever thread sets it.

`reason` is the error that set it (a `StoppedError`, a `LeaseLostError`). A signal is never
cleared: a run that stopped stays stopped, a lease that was lost stays lost.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable

import anyio

from . import _runtime

__all__ = ["Signal", "Flag", "AnyOf", "wake_from_any_thread", "call_soon_from_any_thread"]

Callback = Callable[[], None]


def call_soon_from_any_thread(fn: Callback) -> Callback:
    """A function that, called from any thread (the loop's own included), runs `fn` soon on the
    event loop running now (asyncio or trio). Once that loop has ended it does nothing."""
    if _runtime.current_library() == "trio":
        import trio

        token = trio.lowlevel.current_trio_token()

        def in_trio() -> None:
            try:
                token.run_sync_soon(fn)
            except trio.RunFinishedError:
                pass  # the run is over: nobody waits any more

        return in_trio
    import asyncio

    loop = asyncio.get_running_loop()

    def in_asyncio() -> None:
        try:
            loop.call_soon_threadsafe(fn)
        except RuntimeError:
            pass  # the loop has closed: nobody waits any more

    return in_asyncio


def wake_from_any_thread(event: anyio.Event) -> Callback:
    """A function that sets `event` (of the running loop) when called from any thread."""
    return call_soon_from_any_thread(event.set)


class Signal:
    """Set when the run stops, a deadline passes, or the hold behind a call is lost."""

    def is_set(self) -> bool:
        """True once set; it stays set. Safe to read from any thread."""
        raise NotImplementedError

    @property
    def reason(self) -> BaseException | None:
        """Why it was set (a `StoppedError`, a `LeaseLostError`...), or None while it is not."""
        raise NotImplementedError

    def add_callback(self, callback: Callback) -> Callback:
        """Call `callback` once the signal is set (at once if it is); returns a function that removes it."""
        raise NotImplementedError

    def wait(self, timeout: float | None = None) -> Any:
        """Wait until set; True if it is. Blocks in plain code; awaitable where a loop runs."""
        try:
            _runtime.current_library()
        except Exception:  # no event loop in this thread: block it
            return self._wait_blocking(timeout)
        return self._wait_async(timeout)

    def _wait_blocking(self, timeout: float | None) -> bool:
        event = threading.Event()
        remove = self.add_callback(event.set)
        try:
            return event.wait(timeout)
        finally:
            remove()

    async def _wait_async(self, timeout: float | None) -> bool:
        if self.is_set():
            return True
        event = anyio.Event()
        remove = self.add_callback(wake_from_any_thread(event))
        try:
            with anyio.move_on_after(timeout if timeout is not None else float("inf")):
                await event.wait()
        finally:
            remove()
        return self.is_set()

    def __bool__(self) -> bool:
        return self.is_set()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} set={self.is_set()}>"


class Flag(Signal):
    """A signal the SDK sets with `abort(reason)`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self._reason: BaseException | None = None
        self._callbacks: dict[int, Callback] = {}
        self._next = 0

    def is_set(self) -> bool:
        return self._set

    @property
    def reason(self) -> BaseException | None:
        return self._reason

    def abort(self, reason: BaseException | None = None) -> None:
        """Set the signal (once: later calls change nothing) and run its callbacks."""
        with self._lock:
            if self._set:
                return
            self._reason, self._set = reason, True
            callbacks, self._callbacks = list(self._callbacks.values()), {}
        for callback in callbacks:
            try:
                callback()
            except Exception:
                _runtime.log.exception("a signal callback failed")

    def add_callback(self, callback: Callback) -> Callback:
        with self._lock:
            if not self._set:
                handle = self._next
                self._next += 1
                self._callbacks[handle] = callback

                def remove() -> None:
                    with self._lock:
                        self._callbacks.pop(handle, None)

                return remove
        callback()
        return lambda: None


class AnyOf(Signal):
    """Set as soon as any of its parts is; its reason is the first set part's."""

    def __init__(self, parts: Iterable[Signal]) -> None:
        self._parts = tuple(parts)

    def is_set(self) -> bool:
        return any(part.is_set() for part in self._parts)

    @property
    def reason(self) -> BaseException | None:
        return next((part.reason for part in self._parts if part.is_set()), None)

    def add_callback(self, callback: Callback) -> Callback:
        fired = threading.Lock()

        def once() -> None:
            if fired.acquire(blocking=False):
                callback()

        removers = [part.add_callback(once) for part in self._parts]

        def remove() -> None:
            for remover in removers:
                remover()

        return remove
