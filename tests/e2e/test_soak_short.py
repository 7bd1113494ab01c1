"""A short soak (`bench/soak.py`): 200 parked long polls, 10 workers, claims and tasks for 6 s
against a real server; every request is answered and the server's fds and trio tasks stay flat."""

from __future__ import annotations

import pytest

from bench.soak import run

pytestmark = pytest.mark.e2e


def test_a_short_soak_answers_everything_and_stays_flat():
    report = run(seconds=6, receivers=200, workers=10, rate=10, settle_s=2, wait_ms=3_000)
    requests = report["requests"]
    assert requests["failed"] == 0 and requests["answered"] == requests["sent"] > 200, requests
    assert report["healthy_after"] and report["server_alive"]
    start, end = report["under_load_start"], report["under_load_end"]
    print(f"\nsoak: {requests['answered']} answered; fds {start['fds']:.0f} -> {end['fds']:.0f}, "
          f"trio tasks {start['trio_tasks']:.0f} -> {end['trio_tasks']:.0f}, RSS {start['rss_mb']} -> {end['rss_mb']} MB")
    assert start["fds"] >= 200 and abs(end["fds"] - start["fds"]) <= 25
    assert end["trio_tasks"] <= 1.1 * start["trio_tasks"]  # how many polls are parked varies; no growth
    assert end["rss_mb"] - start["rss_mb"] < 30
