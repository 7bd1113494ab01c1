"""The server's wall clock follows the host's, in virtual time, with a wall source that steps and drifts.

A `HostClock` stands for the operating system's clock: it runs with trio's (virtual) clock, at a
rate that can be off (drift), and can be set (a step). The server's `Clock` reads it on every
decision, so timestamps and deadlines agree with it whenever it runs ahead, and a backward step
never makes a lease outlast its grant.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from runstate.actors import Clock
from runstate.actors.clock import WALL_RECHECK_S
from runstate.actors.timestamps import format_ms, parse_timestamp
from runstate.server.runtime import Runtime
from runstate.server.settings import Settings

from .asgi_client import API_KEY, SPACE, T0, AsgiClient

pytestmark = pytest.mark.trio


class HostClock:
    """Wall milliseconds: `T0` at trio time 0, advancing at `rate` per second of trio time, plus steps."""

    def __init__(self) -> None:
        self.rate = 1.0
        self._base_ms = float(T0)
        self._since = trio.current_time()

    def __call__(self) -> float:
        return self._base_ms + (trio.current_time() - self._since) * 1000 * self.rate

    def step(self, delta_ms: float) -> None:
        self._rebase()
        self._base_ms += delta_ms

    def drift(self, rate: float) -> None:
        self._rebase()
        self.rate = rate

    def _rebase(self) -> None:
        self._base_ms = self()
        self._since = trio.current_time()


async def test_a_forward_step_is_followed_at_once(autojump_clock):
    """A host clock set 7 s ahead after the start shows in the very next reading, to the millisecond."""
    host = HostClock()
    clock = Clock(wall_source=host)
    await trio.sleep(60)
    assert clock.now_ms() == T0 + 60_000
    host.step(7_000)
    assert clock.now_ms() == round(host()) == T0 + 67_000
    await trio.sleep(2400)  # 40 minutes on: still the host's time
    assert clock.now_ms() == round(host()) == T0 + 67_000 + 2_400_000


async def test_a_fast_host_is_followed_and_a_slow_one_never_slows_time_below_trio_pace(autojump_clock):
    """Drift: a host running fast is followed; one running slow leaves the server at trio's pace, ahead."""
    host = HostClock()
    clock = Clock(wall_source=host)
    host.drift(1.001)  # 1000 ppm fast
    await trio.sleep(1000)
    assert clock.now_ms() == round(host()) == T0 + 1_001_000
    host.drift(0.999)  # 1000 ppm slow: it loses 1 ms per second against the monotonic clock
    await trio.sleep(1000)
    assert clock.now_ms() == T0 + 2_001_000
    assert round(host()) == T0 + 2_000_000
    assert clock.ahead_of_host_ms == 1000


async def test_a_backward_step_is_not_followed_and_time_never_goes_back(autojump_clock):
    """Host set back 5 s: the server keeps counting at trio's pace, ahead by 5 s, until the host catches up."""
    host = HostClock()
    clock = Clock(wall_source=host)
    await trio.sleep(10)
    before = clock.now_ms()
    host.step(-5_000)
    assert clock.now_ms() == before
    await trio.sleep(1)
    assert clock.now_ms() == before + 1000
    assert round(clock.ahead_of_host_ms) == 5_000
    host.step(8_000)  # a correction the other way: followed again
    assert clock.now_ms() == round(host()) == before + 1000 + 3_000
    assert clock.ahead_of_host_ms == 0
    assert clock.steps == 2


async def test_without_a_source_mock_clock_time_is_virtual_and_exact(autojump_clock):
    """Under MockClock the wall time is a function of trio's clock alone: tests stay deterministic."""
    clock = Clock(wall_anchor_ms=T0)
    start = trio.current_time()
    await trio.sleep(1.25)
    assert clock.now_ms() == T0 + round((trio.current_time() - start) * 1000) == T0 + 1250
    assert clock.deadline_for(T0 + 5000) == start + 5  # no recheck cap for a source that cannot step
    assert Clock().deadline_for(Clock().now_ms() + 60_000) > trio.current_time() + 59


async def test_a_wall_deadline_sleep_wakes_to_read_the_host_again(autojump_clock):
    """With a real source, a sleep towards a wall instant lasts at most WALL_RECHECK_S."""
    clock = Clock(wall_source=HostClock())
    assert clock.deadline_for(T0 + 60_000) == trio.current_time() + WALL_RECHECK_S


# -- the same, through the server's routes ------------------------------------------------------


async def _server(nursery: trio.Nursery, host: HostClock) -> AsgiClient:
    runtime = Runtime(Settings(api_key=API_KEY, space_id=SPACE, seed=7), clock=Clock(wall_source=host))
    await nursery.start(runtime.run)
    while not runtime.ready:
        await trio.testing.wait_all_tasks_blocked()
    return AsgiClient(runtime)


async def test_timestamps_follow_a_host_clock_corrected_after_the_start(nursery, autojump_clock):
    """createdAt and leaseExpiresAt agree with the host after it was set 7 s ahead, 40 minutes later."""
    host = HostClock()
    client = await _server(nursery, host)
    await trio.sleep(120)
    host.step(7_000)
    await trio.sleep(2400)
    scope = await client.post("/scopes", {})
    assert parse_timestamp(scope.json["createdAt"]) == round(host())
    claim = await client.post(
        "/claims", {"key": "k", "scopeId": scope.json["id"], "holder": "h", "holderSession": "s", "leaseSeconds": 30}
    )
    assert claim.status == 200, claim
    assert parse_timestamp(claim.json["leaseExpiresAt"]) == round(host()) + 30_000


async def test_a_deadline_the_host_clock_passed_is_past(nursery, autojump_clock):
    """A run with a 2 s deadline is no longer ACTIVE once the host's clock is 3 s on, however trio's went."""
    host = HostClock()
    client = await _server(nursery, host)
    await trio.sleep(30)
    scope = await client.post("/scopes", {"deadline": format_ms(round(host()) + 2_000)})
    assert (await client.get(f"/scopes/{scope.json['id']}")).json["effective"] == "ACTIVE"
    host.step(3_000)  # no trio time passes: only the host's clock moved
    assert (await client.get(f"/scopes/{scope.json['id']}")).json["effective"] == "EXPIRED"


async def test_a_lease_expires_when_a_forward_step_makes_it_due(nursery, autojump_clock):
    """The supervisor reads the host again while it sleeps: a lease a step made due expires, unasked."""
    host = HostClock()
    client = await _server(nursery, host)
    scope = (await client.post("/scopes", {})).json["id"]
    body = {"key": "k", "scopeId": scope, "holder": "a", "holderSession": "s", "leaseSeconds": 30}
    first = await client.post("/claims", body)
    assert first.status == 200, first
    host.step(31_000)
    started = trio.current_time()
    await trio.sleep(WALL_RECHECK_S + 0.001)
    again = await client.post("/claims", {**body, "holder": "b"})
    assert again.status == 200, again
    assert again.json["generation"] > first.json["generation"]
    assert trio.current_time() - started < 30


async def test_a_backward_step_does_not_lengthen_a_lease(nursery, autojump_clock):
    """Host set back 20 s during a 30 s lease: the lease still ends 30 s (of trio time) after its grant."""
    host = HostClock()
    client = await _server(nursery, host)
    scope = (await client.post("/scopes", {})).json["id"]
    body = {"key": "k", "scopeId": scope, "holder": "a", "holderSession": "s", "leaseSeconds": 30}
    granted_at = trio.current_time()
    first = await client.post("/claims", body)
    assert first.status == 200, first
    host.step(-20_000)
    await trio.sleep(29.9 - (trio.current_time() - granted_at))
    assert (await client.post("/claims", {**body, "holder": "b"})).status == 409
    await trio.sleep(0.2)
    assert (await client.post("/claims", {**body, "holder": "b"})).status == 200
