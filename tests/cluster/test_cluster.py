"""A cluster of three real nodes on a real etcd: any node answers, a dead leader is replaced within
seconds with nothing acknowledged lost, and a leader paused past its session is fenced off.
"""

from __future__ import annotations

import threading
import time
import uuid

import httpx
import pytest

from runstate.server.cluster import preference

from ..etcd import EtcdCluster
from .nodes import ADMIN_KEY, ClusterNodes, ready_cluster

pytestmark = pytest.mark.e2e

SPACE = "default"


@pytest.fixture
def cluster(tmp_path):
    with ready_cluster(tmp_path) as nodes:
        yield nodes


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
            # Forwarded or not, the answer says its length (the harness and simple clients need it).
            assert answer.headers["content-length"] == str(len(answer.content)) and "transfer-encoding" not in answer.headers
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
    # Started again, the node gets its share back: no node leads more than its share, whatever
    # the partitions prefer.
    victim.start()
    cluster.wait_ready(timeout_s=60)


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


def _admin(node, method: str, path: str, body: dict | None = None):  # type: ignore[no-untyped-def]
    return httpx.request(method, node.url + path, json=body, headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=15)


def test_a_key_made_through_one_node_opens_its_space_through_every_node_at_once(cluster):
    """The admin API's changes go to the system partition's leader wherever they arrive; a key it
    made is accepted by every node at once, even one whose copy of the keys is a moment behind."""
    for maker in cluster.nodes:
        made = _admin(maker, "POST", "/v1/admin/keys", {"spaces": [f"made-by-{maker.name}"]})
        assert made.status_code == 201, made.text
        for node in cluster.nodes:
            with node.client(made.json()["key"]) as http:
                answer = http.post(f"/v1/spaces/made-by-{maker.name}/scopes", json={}, headers={"idempotency-key": uuid.uuid4().hex})
                assert answer.status_code == 201, (maker.name, node.name, answer.text)


def _moving(nodes: ClusterNodes, late: str) -> tuple[str, int]:
    """A space of the partition that is handed to the node `late` when it joins (a node leading
    more than its share gives one it leads to the node that partition prefers), and its number."""
    leaders = nodes.map()
    share = -(-len(leaders) // len(nodes.nodes))
    over = {node for node in leaders.values() if list(leaders.values()).count(node) > share}
    names = [node.name for node in nodes.nodes]
    moving = sorted(number for number, leader in leaders.items() if leader in over and number != 0
                    and sorted(names, key=lambda node: (-preference(node, number), node))[0] == late)
    assert moving, f"no partition is handed to {late} in {leaders}"
    space = next(f"handed-{index}" for index in range(10_000) if nodes.layout.of(f"handed-{index}") == moving[0])
    return space, moving[0]


def test_a_receive_waiting_at_a_leader_that_hands_its_partition_over_is_answered_by_the_next(tmp_path):
    """A third node joins: the partitions it is preferred for are handed to it. A receive parked
    at the old leader is then not refused: it goes on at the new leader, and gets the message sent
    there."""
    with EtcdCluster(1) as etcd:
        nodes = ClusterNodes(etcd, 3, tmp_path)
        first, second, late = nodes.nodes
        try:
            first.start()
            second.start()
            nodes.wait_ready(settle=False)
            space, number = _moving(nodes, late.name)
            key = _admin(first, "POST", "/v1/admin/keys", {"spaces": [space]}).json()["key"]
            with first.client(key) as http:
                run = http.post(f"/v1/spaces/{space}/scopes", json={}).json()["id"]
                mailbox = http.post(f"/v1/spaces/{space}/mailboxes", json={"name": "m"}).json()["id"]
            got: list[httpx.Response] = []

            def receive() -> None:
                with second.client(key, timeout_s=40) as http:
                    got.append(http.post(f"/v1/spaces/{space}/mailboxes/{mailbox}/recv", headers={"idempotency-key": "r1"},
                                         json={"scopeId": run, "holder": "w", "holderSession": "s", "waitMs": 25000}))

            waiter = threading.Thread(target=receive)
            waiter.start()
            time.sleep(1)
            late.start()
            deadline = time.monotonic() + 30
            while nodes.map(first).get(number) != late.name:
                assert time.monotonic() < deadline, "the partition was not handed over"
                time.sleep(0.2)
            time.sleep(0.5)
            assert not got, got[0].text  # still waiting, at the new leader
            with first.client(key) as http:
                sent = http.post(f"/v1/spaces/{space}/mailboxes/{mailbox}/messages", json={"scopeId": run, "payload": {"n": 1}})
                assert sent.status_code == 201, sent.text
            waiter.join(30)
            assert got and got[0].status_code == 200, got and got[0].text
            assert got[0].json()["message"]["payload"] == {"n": 1}
            assert first.stop() == 0  # SIGTERM: the partitions it gave up are no journal failure of its own
            assert not [line for line in first.lines if "could not write" in line]
        finally:
            nodes.close()


def test_etcd_electing_a_new_leader_does_not_move_any_partition(tmp_path):
    """SIGKILL of etcd's Raft leader: no keepalive is answered until the others elect one, then the
    new leader extends every lease. The nodes wait for that instead of giving their partitions up:
    every partition keeps its leader and epoch, and writes go through again within seconds."""
    with EtcdCluster(3) as etcd:
        nodes = ClusterNodes(etcd, 3, tmp_path).start()
        try:
            nodes.wait_ready()
            before = _epochs(nodes)
            member = etcd.wait_healthy()
            member.kill()
            killed = time.monotonic()
            for node in nodes.nodes:
                with node.client() as http:
                    while True:
                        answer = http.post(f"/v1/spaces/{SPACE}/scopes", json={}, headers={"idempotency-key": uuid.uuid4().hex})
                        if answer.status_code == 201:
                            break
                        assert answer.status_code == 503 and time.monotonic() - killed < 10, answer.text
            etcd.restart(member)
            assert _epochs(nodes) == before
        finally:
            nodes.close()


def _epochs(nodes: ClusterNodes) -> dict[int, tuple[str, int]]:
    with nodes.live()[0].client() as http:
        return {e["partition"]: (e["leader"]["node"], e["leader"]["epoch"]) for e in http.get("/v1/cluster").json()["map"]}
