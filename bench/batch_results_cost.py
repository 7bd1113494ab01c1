"""What writing a batch's results costs, as the wire writes them against the dicts they were built as.

    .venv/bin/python bench/batch_results_cost.py [batches_per_round] [rounds]

A client's renewal loop renews every lease of its process in one batch request, so a batch's
results are written on a hot path, one result per operation. In one run, rounds alternating:
`dict` is the batch route's results as they were before they were typed views (a dict per
result, the kernel's reply as its body, written by `wire.dumps`, kept here as it was); `wire` is
the route's `BatchView` now (`BatchResultView`s, written by their declared shape). Each for a
batch of 100 renewals (a `ClaimView` each) and one of 100 operations of which every tenth is
refused with Retry-After. Building the results is counted with writing them, as the route does
both. CPU time of this process, median and minimum over the rounds.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any, Callable

from runstate.actors.claims import ClaimView
from runstate.actors.errors import CLAIM_HELD
from runstate.server import wire
from runstate.server.views import BatchResultView, BatchView, ErrorView

OPERATIONS = 100
CLAIM = ClaimView("k", "sc_1", "tok_0123456789", 7, "worker-1", "session-1", 30_000, 1_700_000_030_000, 1_700_000_000_000)
REFUSED = ErrorView(CLAIM_HELD, "claim 'k' is held by worker-2", "req_0123456789abcdef")
# (status, reply or None, refusal or None, retry-after or None) per operation
BATCHES: dict[str, list[tuple[int, Any, ErrorView | None, float | None]]] = {
    "renewals": [(200, CLAIM, None, None)] * OPERATIONS,
    "mixed": [(409, None, REFUSED, 2.5) if index % 10 == 9 else (200, CLAIM, None, None) for index in range(OPERATIONS)],
}


def as_dicts(operations: list[tuple[int, Any, ErrorView | None, float | None]]) -> bytes:
    """`batch` and `_refusal` as they were."""
    results: list[Any] = []
    for status, reply, refused, retry_after in operations:
        if refused is not None:
            result: dict[str, Any] = {"status": status, "error": refused}
            if retry_after is not None:
                result["retryAfter"] = retry_after
            results.append(result)
        else:
            results.append({"status": status, "body": reply})
    return wire.dumps({"results": results})


def as_views(operations: list[tuple[int, Any, ErrorView | None, float | None]]) -> bytes:
    results = [
        BatchResultView(status, error=refused, retry_after=retry_after) if refused is not None else BatchResultView(status, reply)
        for status, reply, refused, retry_after in operations
    ]
    return wire.dumps(BatchView(tuple(results)))


WAYS: dict[str, Callable[[list[tuple[int, Any, ErrorView | None, float | None]]], bytes]] = {"dict": as_dicts, "wire": as_views}


def main(per_round: int, rounds: int) -> None:
    for name, operations in BATCHES.items():
        assert as_dicts(operations) == as_views(operations), "the same bytes both ways"
        timings: dict[str, list[float]] = {way: [] for way in WAYS}
        for _ in range(rounds):
            for way, write in WAYS.items():  # (A, then B, every round)
                started = time.process_time()
                for _ in range(per_round):
                    write(operations)
                timings[way].append((time.process_time() - started) / per_round * 1e6)
        before = statistics.median(timings["dict"])
        for way, values in timings.items():
            median = statistics.median(values)
            print(f"batch of {OPERATIONS} {name:8s} {way:4s} {median:7.2f} µs (median; {median - before:+6.2f} µs, x{median / before:4.2f}), min {min(values):7.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2_000, int(sys.argv[2]) if len(sys.argv) > 2 else 9)
