"""The server's lifetime around the runtime: start, expiry-storm watch, signals and a graceful stop.

Shutdown, on the first SIGTERM or SIGINT:

1. `/healthz` answers 503 (load balancers stop sending), and every parked long poll is answered
   204 at once (`Kernel.end_waits`); from now on no call parks, so a new long poll answers 204.
   A node of a cluster hands the partitions it leads to the other nodes (`Cluster.hand_over`).
2. The server stops accepting (`listener.py`): the listening sockets close; a connection waiting
   for its next request closes (one whose request came meanwhile answers it first); a busy one
   answers what it has read, with `Connection: close`, then closes; a request passed on to
   another node and still waiting there is answered 503 (this node is going).
3. Requests in flight get `shutdown_grace_s` to finish (mutations finish their journal write
   first either way: a decided change is never abandoned half-acknowledged); the serving ends
   when the last connection has closed, or at the end of the grace period.
4. The runtime stops: the journal is flushed (`Runtime.flush`), a final snapshot is written when
   the journal keeps them, and the kernel ends.
5. The process exits 0. A second signal skips what is left of the drain and exits 1.

Each step is logged as a lifecycle event (`shutdown`, `drained`, `stopped`).
"""

from __future__ import annotations

import logging
import signal

import trio

from .console.charts import sample_every_interval
from .logs import event
from .runtime import Runtime

__all__ = ["Lifecycle"]

log = logging.getLogger("runstate.server")

# How often the expiry rate is looked at.
STORM_WINDOW_S = 1.0


class Lifecycle:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        # Set to make the server stop accepting and drain (the listener's shutdown trigger).
        self.stop = trio.Event()
        self.forced = False
        # True when `serve` runs the runtime itself instead of the ASGI lifespan.
        self.external = False
        self._scope: trio.CancelScope | None = None

    # -- the runtime's lifetime (the ASGI lifespan) ---------------------------------------------

    async def run_runtime(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the runtime and its watchers until `stop_runtime` ends them."""
        with trio.CancelScope() as self._scope:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.runtime.run)
                nursery.start_soon(self.watch_expiries)
                nursery.start_soon(sample_every_interval, self.runtime.telemetry.charts, self.runtime)
                nursery.start_soon(self._watch_fatal)
                task_status.started()

    async def _watch_fatal(self) -> None:
        """A state that cannot be made ready (a damaged or locked data directory) stops the server."""
        await self.runtime.stopped.wait()
        self.begin_shutdown("the state could not be made ready")

    async def stop_runtime(self) -> None:
        """After the drain: flush the journal, write the final snapshot, end the kernel."""
        runtime = self.runtime
        kernel = runtime.kernel_if_open
        operations = 0 if kernel is None else sum(space.usage.total for space in kernel.spaces())
        event(log, "drained", "requests drained", in_flight=runtime.telemetry.in_flight, operations=operations)
        if kernel is not None:
            kernel.end_waits()
            try:
                await runtime.flush()
            except Exception:
                log.exception("the final journal flush failed")
        if self._scope is not None:
            self._scope.cancel()

    # -- signals ----------------------------------------------------------------------------------

    def begin_shutdown(self, reason: str) -> None:
        """Stop taking new work: health 503, long polls answered 204, then tell the listener to drain."""
        if self.stop.is_set():
            return
        runtime = self.runtime
        runtime.draining = True
        kernel = runtime.kernel_if_open
        # The parked polls' answers first: one passed on by another node is on its way back there
        # before that node hears of the new leader (which cuts what it still waits for, 503).
        ended = kernel.end_waits() if kernel is not None else 0
        if runtime.cluster is not None:  # its partitions go to the other nodes now
            runtime.cluster.hand_over()
        event(
            log, "shutdown", f"shutting down ({reason})", reason=reason,
            in_flight=runtime.telemetry.in_flight, long_polls_ended=ended, grace_s=runtime.settings.shutdown_grace_s,
        )
        self.stop.set()

    async def watch_signals(self, cancel: trio.CancelScope, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """First SIGTERM/SIGINT: a graceful shutdown. Second: stop now (`cancel`), exit status 1."""
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for signum in signals:
                name = signal.Signals(signum).name
                if not self.stop.is_set():
                    self.begin_shutdown(name)
                    continue
                event(log, "shutdown_forced", f"{name} again: stopping without finishing the drain", level=logging.WARNING)
                self.forced = True
                cancel.cancel()
                return

    # -- expiry storms ----------------------------------------------------------------------------

    async def watch_expiries(self) -> None:
        """Log when expiries per second reach `expiry_storm_per_s`, and when the storm is over."""
        threshold = self.runtime.settings.expiry_storm_per_s
        last = None
        storm_total = 0
        while True:
            await trio.sleep(STORM_WINDOW_S)
            kernel = self.runtime.kernel_if_open
            if kernel is None:
                continue
            total = sum(space.usage.expiries for space in kernel.spaces())
            if last is None:
                last = total
                continue
            rate, last = total - last, total
            if rate >= threshold:
                if not storm_total:
                    event(log, "expiry_storm", f"{rate} expiries in {STORM_WINDOW_S:g} s", level=logging.WARNING, expiries=rate, window_s=STORM_WINDOW_S)
                storm_total += rate
            elif storm_total:
                event(log, "expiry_storm_over", f"expiry storm over after {storm_total} expiries", expiries=storm_total)
                storm_total = 0
