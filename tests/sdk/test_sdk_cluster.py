"""Our SDK against a real cluster of three nodes on a real etcd: requests go to their leader.

Given the URL of a node that does not lead the space's partition, the client's first request is
passed on by that node; from then on its requests go to the leader directly (the configured node
sees none of them). When that leader is killed, requests go back through the configured node,
which passes them on to the new leader once there is one, and the client learns the new map.
"""

from __future__ import annotations

import time

import anyio
import pytest

from runstate import AsyncRunstate

from tests.cluster.nodes import API_KEY, ready_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

SPACE = "default"


@pytest.fixture
def cluster(tmp_path):
    with ready_cluster(tmp_path) as nodes:
        yield nodes


async def until(predicate, poke=None, timeout_s: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    """Wait for `predicate()`, calling `poke()` (a request that lets the client learn) meanwhile."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        if poke is not None:
            await poke()
        await anyio.sleep(0.05)


async def test_requests_go_to_the_leader_and_follow_it_through_a_failover(cluster):
    leader = cluster.leader_of(SPACE)
    entry = next(node for node in cluster.nodes if node is not leader)
    rs = AsyncRunstate(api_key=API_KEY, space_id=SPACE, base_url=entry.url, holder="sdk", request_timeout_ms=15_000)
    router = rs.transport
    try:
        run = await rs.scopes.create(name="routed")  # passed on by the entry node
        await until(lambda: router.leader_url(f"/v1/spaces/{SPACE}/claims") == leader.url)
        through_entry = router._base.requests
        for n in range(10):
            lease = await rs.scope(run.id).claim(f"k{n}").acquire(lease_seconds=30)
            await lease.release()
        assert router._base.requests == through_entry  # none through the configured node
        assert router._nodes[leader.url].requests >= 20
        leader.kill()
        started = time.monotonic()
        lease = await rs.scope(run.id).claim("after").acquire(lease_seconds=30, wait=True, timeout_ms=20_000)
        assert time.monotonic() - started < 15
        new_leader = cluster.leader_of(SPACE)
        assert new_leader is not leader
        expected = None if new_leader is entry else new_leader.url
        await until(lambda: router.leader_url(f"/v1/spaces/{SPACE}/claims") == expected, rs.scope(run.id).status)
        await lease.release()
        assert (await rs.scope(run.id).status())["id"] == run.id
    finally:
        await rs.aclose()
