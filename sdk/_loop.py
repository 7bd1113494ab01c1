"""The event loop behind the blocking API, in a daemon thread of its own (one per client).

Blocking calls (`Runstate`'s methods, and the plain-function forms of the run-bound API:
`@runstate.once` on a `def`, `runstate.stop()`, `job.result()`...) run their coroutine on this loop
and wait for it in the caller's thread, while lease renewals keep running here between calls. The
caller's context variables are copied into each coroutine, so `runstate.context()` reads the same
in both threads.

Ctrl-C (`KeyboardInterrupt`) while a call blocks cancels that call on the loop and waits (at most
`INTERRUPT_WAIT_S`) for its clean-up, so a `consume()` gives back the deliveries it holds and a
`claim(...).run()` releases its claim before the interrupt goes on. A blocking call made from a
coroutine running on this same loop would wait on itself: it raises `ConfigError` instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from typing import Awaitable, TypeVar

from .errors import ConfigError

__all__ = ["Loop", "INTERRUPT_WAIT_S"]

T = TypeVar("T")

# After Ctrl-C, how long a blocked call waits for its cancelled coroutine to give back what it held.
INTERRUPT_WAIT_S = 10.0
# How often a blocked caller wakes, so that Ctrl-C reaches the main thread promptly.
WAKE_S = 0.25


class Loop:
    """One asyncio loop in one daemon thread."""

    def __init__(self, name: str = "runstate-blocking") -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def running_here(self) -> bool:
        return threading.current_thread() is self.thread

    def run(self, awaitable: Awaitable[T], timeout: float | None = None) -> T:
        """Run `awaitable` on the loop, in a copy of the caller's context, and wait for its result."""
        if self.running_here:
            close = getattr(awaitable, "close", None)
            if close is not None:
                close()
            raise ConfigError(
                "a blocking runstate call was made on the client's own event loop; "
                "use the async form there (an `async def` function, or the a-prefixed call)"
            )
        ended = threading.Event()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        started: list[asyncio.Task[T]] = []
        context = contextvars.copy_context()

        async def main() -> T:
            try:
                return await awaitable
            finally:
                ended.set()

        def finish(task: asyncio.Task[T]) -> None:
            if task.cancelled():
                done.set_exception(concurrent.futures.CancelledError())
            elif task.exception() is not None:
                done.set_exception(task.exception())
            else:
                done.set_result(task.result())

        def start() -> None:
            if not done.set_running_or_notify_cancel():
                ended.set()
                return
            task = context.run(self.loop.create_task, main())  # the task runs in the caller's context
            started.append(task)
            task.add_done_callback(finish)

        self.loop.call_soon_threadsafe(start)
        try:
            waited = 0.0
            while not done.done():
                concurrent.futures.wait([done], timeout=WAKE_S)
                waited += WAKE_S
                if timeout is not None and waited >= timeout and not done.done():
                    raise TimeoutError(f"the call did not finish within {timeout} s")
            return done.result()
        except BaseException:
            # Ctrl-C (or a timeout): cancel the call where it runs and let its clean-up finish.
            def cancel() -> None:
                if started:
                    started[0].cancel()

            if not done.done():
                self.loop.call_soon_threadsafe(cancel)
                ended.wait(INTERRUPT_WAIT_S)
            raise

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()
