"""A cluster of three real nodes on a real etcd: any node answers, a dead leader is replaced within
seconds with nothing acknowledged lost, and a leader paused past its session is fenced off.
"""

from __future__ import annotations

import time
import uuid

import pytest

from ..etcd import EtcdCluster
from .nodes import ClusterNodes

pytestmark = pytest.mark.e2e

SPACE = "default"


@pytest.fixture
def cluster(tmp_path):
    with EtcdCluster(1) as etcd:
        nodes = ClusterNodes(etcd, 3, tmp_path).start()
        try:
            nodes.wait_ready()
            yield nodes
        finally:
            nodes.close()


def _claim(http, run: str, key: str, holder: str, lease_s: int = 30):  # type: ignore[no-untyped-def]
    body = {"scopeId": run, "key": key, "holder": holder, "holderSession": holder, "leaseSeconds": lease_s}
    return http.post(f"/v1/spaces/{SPACE}/claims", json=body, headers={"idempotency-key": uuid.uuid4().hex})


def test_every_node_answers_for_every_partition_and_the_map_says_who_leads(cluster):
    """A run made through one node is read through each; the map names one live leader per
    partition, spread over the three nodes."""
    first, *others = cluster.nodes
    with first.client() as http:
        run = http.post(f"/v1/spaces/{SPACE}/scopes", json={"name": "r"}).json()["id"]
    for node in cluster.nodes:
        with node.client() as http:
            answer = http.get(f"/v1/spaces/{SPACE}/scopes/{run}")
            assert answer.status_code == 200 and answer.json()["name"] == "r"
            assert http.get("/v1/cluster").json()["partitions"] == cluster.partitions
    leaders = cluster.map()
    assert set(leaders) == set(range(cluster.partitions + 1))
    assert set(leaders.values()) == {"n0", "n1", "n2"}


def test_a_killed_leader_is_replaced_and_nothing_it_acknowledged_is_lost(cluster):
    """SIGKILL the leader of the space's partition: writes through another node succeed again
    within a few seconds, every run acknowledged before is there, and a claim taken before keeps
    its token and generation (the next holder's generation is greater)."""
    victim = cluster.leader_of(SPACE)
    survivor = next(node for node in cluster.nodes if node is not victim)
    with survivor.client() as http:
        runs = [http.post(f"/v1/spaces/{SPACE}/scopes", json={}).json()["id"] for _ in range(20)]
        held = _claim(http, runs[0], "k", "a", lease_s=30).json()
    victim.kill()
    killed = time.monotonic()
    with survivor.client() as http:
        while True:
            answer = http.post(f"/v1/spaces/{SPACE}/scopes", json={}, headers={"idempotency-key": uuid.uuid4().hex})
            if answer.status_code == 201:
                break
            assert answer.status_code == 503 and time.monotonic() - killed < 15, (answer.text, _errors(survivor))
        took = time.monotonic() - killed
        assert took < 5, f"the first write after the kill took {took:.2f} s"
        for run in runs:
            assert http.get(f"/v1/spaces/{SPACE}/scopes/{run}").status_code == 200
        renewed = http.post(f"/v1/spaces/{SPACE}/claims/k/renew", json={"token": held["token"]})
        assert renewed.status_code == 200 and renewed.json()["generation"] == held["generation"]
    assert cluster.leader_of(SPACE) is not victim


def test_a_leader_paused_past_its_session_is_fenced_off(cluster):
    """SIGSTOP the leader: another node takes the partition; a new holder takes the claim once its
    lease and grace have run; the paused node, resumed, refuses the old holder's renewal (it no
    longer leads, and the new leader knows the newer generation)."""
    victim = cluster.leader_of(SPACE)
    survivor = next(node for node in cluster.nodes if node is not victim)
    with survivor.client() as http:
        run = http.post(f"/v1/spaces/{SPACE}/scopes", json={}).json()["id"]
        old = _claim(http, run, "k", "a", lease_s=5).json()
    cluster.pause(victim)
    try:
        with survivor.client() as http:
            deadline = time.monotonic() + 40
            while True:  # the lease, then the restart's grace, must run out first
                answer = _claim(http, run, "k", "b", lease_s=30)
                if answer.status_code == 200:
                    break
                assert answer.status_code in (409, 503) and time.monotonic() < deadline, answer.text
                time.sleep(0.5)
            new = answer.json()
            assert new["generation"] > old["generation"]
    finally:
        cluster.resume(victim)
    with victim.client() as http:
        stale = http.post(f"/v1/spaces/{SPACE}/claims/k/renew", json={"token": old["token"]})
        assert stale.status_code == 409 and stale.json()["error"]["code"] == "STALE_CLAIM", stale.text
        current = http.post(f"/v1/spaces/{SPACE}/claims/k/renew", json={"token": new["token"]})
        assert current.status_code == 200 and current.json()["generation"] == new["generation"]


def _errors(node) -> str:  # type: ignore[no-untyped-def]
    return "\n".join(line for line in node.lines if '"level":"error"' in line or "Traceback" in line)[-4000:]
