"""A short soak (`bench/soak.py`): 200 parked long polls, 10 workers, claims and tasks for 6 s
against a real server; every request is answered and the server's fds and trio tasks stay flat.

The trio tasks are counted apart from the kernel's actors and its pooled actor tasks: an actor is
a task given to a key when it is used and taken back (into the partition's pool of idle actor
tasks, which is bounded) when it has been idle a moment, so how many are alive at one instant
follows which of the load's 50 claim keys were touched in the last second or two, not a leak.
Every other task is the server's own or a connection's (one each: a parked request costs none), so
under a steady load their number is flat; the actors are bounded by the keys the load uses.
"""

from __future__ import annotations

import pytest

from bench.soak import run

pytestmark = pytest.mark.e2e

# The keys the soak's load touches (50 claim keys, its mailboxes and run), a bound on live actors.
ACTORS_MAX = 60


def test_a_short_soak_answers_everything_and_stays_flat():
    report = run(seconds=6, receivers=200, workers=10, rate=10, settle_s=2, wait_ms=3_000)
    requests = report["requests"]
    assert requests["failed"] == 0 and requests["answered"] == requests["sent"] > 200, requests
    assert report["healthy_after"] and report["server_alive"]
    start, end = report["under_load_start"], report["under_load_end"]
    print(f"\nsoak: {requests['answered']} answered; fds {start['fds']:.0f} -> {end['fds']:.0f}, "
          f"trio tasks {start['trio_tasks']:.0f} -> {end['trio_tasks']:.0f} (actors {start['actors']:.0f} -> {end['actors']:.0f}, "
          f"pooled {start['actor_tasks_pooled']:.0f} -> {end['actor_tasks_pooled']:.0f}), "
          f"RSS {start['rss_mb']} -> {end['rss_mb']} MB")
    assert start["fds"] >= 200 and abs(end["fds"] - start["fds"]) <= 25

    def others(counts: dict) -> float:
        return counts["trio_tasks"] - counts["actors"] - counts["actor_tasks_pooled"]

    # Connections and the server's own tasks: no growth (a task per connection, none per parked request).
    assert others(end) <= 1.1 * others(start)
    assert others(start) <= start["fds"] + 50
    assert end["actors"] <= ACTORS_MAX and end["actor_tasks_pooled"] <= ACTORS_MAX
    assert end["rss_mb"] - start["rss_mb"] < 30
