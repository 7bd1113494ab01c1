"""The simulated operator: forced claim releases, with the invariants they must keep.

The operator goes through the SDK's request layer over the simulation's transport, with crashes
and lost replies like every other agent. What it sent may have been applied even when no answer
came back, so a claim it tries to force free counts as let go from the moment the request is sent;
what it was told is checked against the other agents' view:

- **one-holder** and **generations** (the oracle's): after a forced release the next holder's
  lease starts after it was sent and has a greater generation;
- **stale-token**: once a forced release is acknowledged, the old holder's token is refused for
  renewals, releases and completions (the oracle's `stale_for_certain`), and no renewal of it made
  after that is answered.
"""

from __future__ import annotations

from urllib.parse import quote

import trio

from .agents import World
from .cluster import now_ms

__all__ = ["operator"]


async def operator(world: World, name: str) -> None:
    """Now and then, forces free a claim that some agent holds right now."""
    rng, oracle = world.rng(name), world.oracle
    rs = world.client(name)
    await world.ready.wait()
    while world.running:
        await trio.sleep(rng.expovariate(1 / 12))
        now = now_ms()
        held = sorted(
            (lease for subject, leases in oracle.leases.items() if subject[0] == "claim" for lease in leases
             if lease.released_ms is None and lease.forced_ms is None and lease.end_ms > now),
            key=lambda lease: (lease.start_ms, lease.token),
        )
        if not held:
            continue
        lease = rng.choice(held)
        _, scope_id, key = lease.subject
        oracle.forcing(lease.subject, lease.generation, now)
        path = f"/claims/{quote(key, safe='')}/force-release"
        body = {"scopeId": scope_id, "reason": f"{name} frees {lease.owner}'s claim"}
        ok, reply = await world.call(name, f"force-release {key}", lambda: rs._ctx.call("POST", path, body=body))
        if not ok:
            continue
        view = reply.body
        world.log(name, f"forced {key} in {scope_id[-4:]} free from {view['holder']} g{view['generation']}")
        oracle.forced(lease.subject, view["generation"], now_ms())
    await rs.aclose()
