"""What the error envelope costs a refusal, as the wire writes it against the dict it was built as.

    .venv/bin/python bench/envelope_cost.py [refusals_per_round] [rounds]

Every refusal (a held claim, a 404, a bad field) is answered with the envelope, so its encoder is
on a hot path. In one run, rounds alternating: `dict` is `errors.envelope` as it was before the
envelope was a typed view (a dict, written by `wire.dumps`, kept here as it was); `wire` is
`errors.envelope` now (`ErrorEnvelopeView`, written by its declared shape). Each for a refusal
without details (a 404) and one with a typed view as details (CLAIM_HELD). For scale, a whole
refused request through the HTTP shell (`serve_http`, a GET of a run that does not exist: routing,
auth, the read, the 404) with a fake ASGI connection, as `bench/request_cost.py` times one.
CPU time of this process, median and minimum over the rounds.
"""

from __future__ import annotations

import logging
import statistics
import sys
import time
from typing import Any, Callable

import trio

from runstate.actors.claims import ClaimHeldView
from runstate.actors.errors import CLAIM_HELD, NOT_FOUND, KernelError
from runstate.server import wire
from runstate.server.app import create_app
from runstate.server.errors import ApiError, envelope, status_of
from runstate.server.http import serve_http
from runstate.server.routes import ROUTER
from runstate.server.settings import Settings


def envelope_as_a_dict(error: KernelError, request_id: str) -> tuple[int, bytes, dict[str, str]]:
    """`errors.envelope` as it was."""
    body: dict[str, Any] = {"code": error.code, "message": error.message, "requestId": request_id}
    if error.details:
        body["details"] = error.details
    headers: dict[str, str] = {}
    if error.retry_after_s is not None:
        headers["retry-after"] = f"{error.retry_after_s:.3f}".rstrip("0").rstrip(".") or "0"
    status = status_of(error.code)
    if isinstance(error, ApiError):
        status = error.status or status
        headers.update(error.headers or {})
    return status, wire.dumps({"error": body}), headers


REFUSALS = {
    "404": KernelError(NOT_FOUND, "scope 'sc_nothing' not found"),
    "CLAIM_HELD": KernelError(
        CLAIM_HELD, "claim 'k' is held by worker-1", details=ClaimHeldView("worker-1", 7, 1_700_000_000_000), retry_after_s=2.5,
    ),
}
WAYS: dict[str, Callable[[KernelError, str], tuple[int, bytes, dict[str, str]]]] = {"dict": envelope_as_a_dict, "wire": envelope}


def encoders(per_round: int, rounds: int) -> None:
    for refusal, error in REFUSALS.items():
        assert envelope(error, "req_1") == envelope_as_a_dict(error, "req_1"), "the same answer both ways"
        timings: dict[str, list[float]] = {way: [] for way in WAYS}
        for _ in range(rounds):
            for way, write in WAYS.items():  # (A, then B, every round)
                started = time.process_time()
                for _ in range(per_round):
                    write(error, "req_0123456789abcdef")
                timings[way].append((time.process_time() - started) / per_round * 1e6)
        before = statistics.median(timings["dict"])
        for way, values in timings.items():
            median = statistics.median(values)
            print(f"envelope {refusal:10s} {way:4s} {median:6.3f} µs (median; {median - before:+6.3f} µs, x{median / before:4.2f}), min {min(values):6.3f}")


async def whole_refusal(per_round: int, rounds: int) -> None:
    logging.disable(logging.WARNING)  # the in-memory warning is expected here
    app = create_app(Settings(api_key="k", seed=1))
    async with trio.open_nursery() as nursery:
        await nursery.start(app.lifecycle.run_runtime)
        runtime = app.runtime
        while not runtime.ready:
            await trio.sleep(0.01)
        path = "/v1/spaces/default/scopes/sc_nothing"
        scope = {
            "type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"",
            "headers": [(b"authorization", b"Bearer k"), (b"host", b"x")], "client": ("127.0.0.1", 1),
        }
        statuses: list[int] = []

        async def receive() -> dict:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        timings: list[float] = []
        for _ in range(rounds):
            started = time.process_time()
            for _ in range(per_round):
                await serve_http(runtime, ROUTER, scope, receive, send)
            timings.append((time.process_time() - started) / per_round * 1e6)
        assert set(statuses) == {404}, set(statuses)
        print(f"whole 404 through serve_http {statistics.median(timings):6.2f} µs/request (median), min {min(timings):6.2f}")
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    per_round = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    encoders(per_round, rounds)
    trio.run(whole_refusal, max(1, per_round // 10), rounds)
