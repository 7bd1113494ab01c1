"""Agents of one process sharing one client: what goes out in batches (`POST .../batch`, `recv-many`).

A swarm runs many agents in a few processes, each process with one client: its calls made at the
same moment go out as one batch request, every lease it holds is renewed by one renewal batch per
interval, and its workers take deliveries a few at a time (`consume(prefetch=N)`). These agents
drive exactly that through the real server, next to the agents that send one request per call,
and tell the oracle what each was granted, kept and let go, so the same invariants hold them:

- `crew`: one client and five `with_holder` views of it that acquire, hold and release claims
  on the keys the claimers fight over, all at the same ticks (so their acquires and releases are
  coalesced into one batch, and their leases renewed together);
- `prefetcher`: one client consuming the work mailbox with `prefetch` above one (deliveries taken
  several in one `recv-many`, held with their leases renewed in the client's batch until a slot
  is free, their completions coalesced).
"""

from __future__ import annotations

import math
from typing import Any

import trio

from .agents import World, grant, hold, wall_ms_of
from .cluster import now_ms

__all__ = ["crew", "prefetcher"]

# The tick the members of a crew act on together (virtual seconds).
TICK_S = 2.0


async def crew(world: World, name: str) -> None:
    """Five agents of one process, on one client."""
    rs = world.client(name)
    await world.ready.wait()
    async with trio.open_nursery() as members:
        for number in range(5):
            member = f"{name}.{number}"
            members.start_soon(crew_member, world, member, rs.with_holder(member))
    await rs.aclose()


async def crew_member(world: World, name: str, rs: Any) -> None:
    rng, oracle = world.rng(name), world.oracle
    while world.running:
        await trio.sleep(rng.expovariate(1 / 1.0))
        await trio.sleep_until(math.ceil(trio.current_time() / TICK_S) * TICK_S)  # with the others
        scope_id, key = rng.choice(world.scopes), f"k{rng.randint(0, 2)}"
        lease_s = rng.choice([5, 10])
        wait = rng.random() < 0.3  # (a wait goes out alone; the rest in the crew's batch)
        ref = rs.scope(scope_id).claim(key)
        ok, lease = await world.call(name, f"acquire {key}", lambda: ref.acquire(lease_seconds=lease_s, wait=wait, timeout_ms=4_000))
        if not ok:
            if lease.code == "SCOPE_CANCELLED":
                world.scope_gone(scope_id)
            continue
        grant(world, name, scope_id, key, lease, lease_s)
        await hold(world, lease, rng.uniform(0, 1.5 * lease_s))  # renewed in the client's one batch
        oracle.extended(lease.token(), wall_ms_of(lease))
        await trio.sleep_until(math.ceil(trio.current_time() / TICK_S) * TICK_S)
        oracle.letting_go(lease.token())
        ok, _ = await world.call(name, f"release {key}", lease.release)
        if ok and not lease.is_lost:
            oracle.released(lease.token(), now_ms())
        world.log(name, f"released {key} g{lease.generation}" if ok else f"release {key} failed")


async def prefetcher(world: World, name: str) -> None:
    """Consumes the work mailbox of a run for a while, taking several deliveries per request."""
    rng, oracle = world.rng(name), world.oracle
    rs = world.client(name)
    await world.ready.wait()
    while world.running:
        scope_id = rng.choice(world.scopes)
        lease_s = rng.choice([5, 10])
        stop = trio.Event()

        async def handle(data: Any, delivery: Any) -> Any:
            if delivery.is_lost or delivery.expires_at is None:
                return None  # (consume settles nothing for a lost lease)
            end = round(delivery.expires_at.timestamp() * 1000)
            token = delivery._token
            # Its start is not known here: the lease's length before its end (no later than it was).
            oracle.granted(("message", delivery.id), name, token, delivery.attempt, end - lease_s * 1000, end)
            world.log(name, f"prefetched {delivery.id} attempt {delivery.attempt} until {end % 10**7}")
            await trio.sleep(rng.uniform(0, 0.6 * lease_s))
            oracle.letting_go(token)
            return f"{name}:{delivery.id}:{delivery.attempt}"

        def on_error(error: BaseException, delivery: Any) -> None:
            world.log(name, f"consume: {type(error).__name__} {getattr(error, 'code', '')}")

        mailbox = rs.scope(scope_id).mailbox_by_id(world.mailboxes["work"])
        shutdown_s = 2 * lease_s
        with trio.move_on_after(20 + shutdown_s + 60) as watchdog:
            async with trio.open_nursery() as running:
                running.start_soon(_stop_after, stop, rng.uniform(5, 20))
                await mailbox.consume(
                    handle, concurrency=rng.choice([1, 2]), prefetch=rng.choice([2, 3, 4]), lease_seconds=lease_s,
                    wait_ms=rng.choice([0, 2_000]), poll_ms=200, shutdown_timeout=shutdown_s, stop_event=stop,
                    on_error=on_error,
                )
                running.cancel_scope.cancel()
        if watchdog.cancelled_caught:
            world.log(name, "consume did not return after it was stopped")
    await rs.aclose()


async def _stop_after(stop: trio.Event, seconds: float) -> None:
    await trio.sleep(seconds)
    stop.set()
