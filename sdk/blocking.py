"""`Runstate`: the blocking client, for code that is not async.

It runs an `AsyncRunstate` on an event loop of its own, in one daemon thread per client, and
forwards every call to it: a method that returns a coroutine is run on that loop and waited for;
anything else that is not a plain value comes back wrapped the same way, so
`rs.scope(id).claim(key).run(fn)` blocks and returns `fn`'s result. Lease renewal runs on the
client's loop, so a slow blocking caller never starves it.

Functions handed to the client (`run(fn)`, `consume(handler)`) are plain functions here; they run
in worker threads, and the objects they receive (the lease, the delivery) are wrapped too, so
`delivery.complete()` blocks as expected inside a handler. Do not call blocking methods from a
coroutine running on the client's own loop: that would wait on itself, and raises instead.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import inspect
import threading
from typing import Any, Awaitable, Iterator

from ._runtime import is_async_callable
from .client import AsyncRunstate

__all__ = ["Runstate"]

_PLAIN = (str, bytes, int, float, bool, type(None), dict, list, tuple, set, frozenset, datetime.datetime, BaseException)


class _Loop:
    """The client's private event loop and its thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._main, name="runstate-blocking", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, awaitable: Awaitable[Any], timeout: float | None = None) -> Any:
        if threading.current_thread() is self.thread:
            raise RuntimeError("a blocking runstate call was made on the client's own event loop; await the async API there")

        async def main() -> Any:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(main(), self.loop).result(timeout)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()

    def wrap(self, value: Any) -> Any:
        if isinstance(value, dict):  # e.g. try_acquire()'s {"kind": ..., "lease": lease}
            return {k: self.wrap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.wrap(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.wrap(v) for v in value)
        if isinstance(value, _PLAIN) or isinstance(value, _Blocking):
            return value
        return _Blocking(value, self)

    def adapt(self, value: Any) -> Any:
        """A plain function given to the client gets wrapped objects as its arguments."""
        if callable(value) and not isinstance(value, type) and not isinstance(value, _Blocking) and not is_async_callable(value):

            @functools.wraps(value)
            def adapted(*args: Any, **kwargs: Any) -> Any:
                return value(*(self.wrap(a) for a in args), **{k: self.wrap(v) for k, v in kwargs.items()})

            return adapted
        return value


class _Blocking:
    """Forwards attribute access to an async object; coroutines are run to completion."""

    __slots__ = ("_target", "_loop")

    def __init__(self, target: Any, loop: _Loop) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_loop", loop)

    def __getattr__(self, name: str) -> Any:
        loop: _Loop = object.__getattribute__(self, "_loop")
        value = getattr(object.__getattribute__(self, "_target"), name)
        if not callable(value) or isinstance(value, type):
            return loop.wrap(value)

        def call(*args: Any, **kwargs: Any) -> Any:
            args = tuple(loop.adapt(a) for a in args)
            kwargs = {k: loop.adapt(v) for k, v in kwargs.items()}
            if inspect.iscoroutinefunction(value):
                return loop.wrap(loop.run(value(*args, **kwargs)))
            result = value(*args, **kwargs)
            if inspect.isawaitable(result):
                result = loop.run(result)
            return loop.wrap(result)

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("blocking wrappers are read-only")

    def __repr__(self) -> str:
        return f"<blocking {object.__getattribute__(self, '_target')!r}>"


class Runstate:
    """The blocking client: the same arguments and methods as `AsyncRunstate`, without `await`."""

    def __init__(self, **kwargs: Any) -> None:
        self._loop = _Loop()
        try:
            self._async: AsyncRunstate = self._loop.run(_build(kwargs))
        except BaseException:
            self._loop.stop()
            raise
        self._proxy = _Blocking(self._async, self._loop)

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_proxy"), name)

    def __repr__(self) -> str:
        return f"Runstate(space_id={self._async.space_id!r}, holder={self._async.holder!r})"

    def new_event(self) -> threading.Event:
        """A thread-safe stop flag for `consume(stop_event=...)`: call `.set()` from any thread."""
        return threading.Event()

    def watch(self, **kwargs: Any) -> Iterator[dict]:
        """A blocking iterator over `events.watch(...)`; `stop_event=rs.new_event()` ends it."""
        stream = self._async.events.watch(**kwargs)
        try:
            while True:
                try:
                    yield self._loop.run(stream.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._loop.run(stream.aclose())

    def close(self) -> None:
        """Close the async client (best effort, at most 5 s) and stop the loop thread."""
        if self._loop.loop.is_closed():
            return
        try:
            self._loop.run(self._async.aclose(), timeout=5)
        except Exception:
            pass
        finally:
            self._loop.stop()

    def __enter__(self) -> "Runstate":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


async def _build(kwargs: dict) -> AsyncRunstate:
    return AsyncRunstate(**kwargs)
