"""What metrics and request lines cost per request, measured in-process on the HTTP shell's own path.

    .venv/bin/python bench/request_cost.py [requests_per_round] [rounds]

Runs `serve_http` (routing, auth, the kernel read, the JSON answer) for a `GET /scopes/{id}` with
a fake ASGI connection, so hypercorn and the network are out of the picture and only the shell's
work is timed: once with no instrumentation, then with metrics, then with metrics and request
lines (written to /dev/null, so the `os.write` is counted). CPU time of this process, median and
minimum over the rounds, so other load on the machine disturbs it little.
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import time

import trio

from runstate.server.app import create_app
from runstate.server.http import serve_http
from runstate.server.logs import AccessLog, fd_writer
from runstate.server.routes import ROUTER
from runstate.server.settings import Settings
from runstate.server.telemetry import Telemetry
from runstate.actors import commands as c


class NoTelemetry:
    in_flight = 0

    def begin(self) -> float:
        return 0.0

    def end(self, *args: object) -> None:
        pass


async def measure(per_round: int, rounds: int) -> None:
    logging.disable(logging.WARNING)  # the in-memory warning is expected here
    app = create_app(Settings(api_key="k", seed=1))
    async with trio.open_nursery() as nursery:
        await nursery.start(app.lifecycle.run_runtime)
        runtime = app.runtime
        while not runtime.ready:
            await trio.sleep(0.01)
        run = await runtime.kernel.submit(runtime.kernel.parse(c.CreateScope, {}, {"space": "default"}))
        path = f"/v1/spaces/default/scopes/{run.id}"
        scope = {
            "type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"",
            "headers": [(b"authorization", b"Bearer k"), (b"host", b"x")], "client": ("127.0.0.1", 1),
        }

        async def receive() -> dict:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict) -> None:
            pass

        devnull = os.open(os.devnull, os.O_WRONLY)
        variants = {
            "no instrumentation": NoTelemetry(),
            "metrics (request lines off)": Telemetry(),
            "metrics + JSON request lines": Telemetry(access=AccessLog(fd_writer(devnull))),
            "metrics + text request lines": Telemetry(access=AccessLog(fd_writer(devnull), log_format="text")),
        }
        timings: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(rounds):
            for name, telemetry in variants.items():
                runtime.telemetry = telemetry  # type: ignore[assignment]
                started = time.process_time()
                for _ in range(per_round):
                    await serve_http(runtime, ROUTER, scope, receive, send)
                timings[name].append((time.process_time() - started) / per_round * 1e6)
        base = statistics.median(timings["no instrumentation"])
        for name, values in timings.items():
            median = statistics.median(values)
            print(f"{name:30s} {median:6.2f} µs/request (median; {median - base:+5.2f} µs), min {min(values):6.2f}")
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(measure, int(sys.argv[1]) if len(sys.argv) > 1 else 20_000, int(sys.argv[2]) if len(sys.argv) > 2 else 9)
