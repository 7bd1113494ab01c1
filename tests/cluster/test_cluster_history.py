"""History on a cluster: every node answers a history read of any partition from its own copy.

A claim is taken through one node by agent-a, force-released and taken by agent-b through
another. Each of the three nodes (the partition's leader and both standbys) then answers the
space's claims as they stood before the takeover (agent-a) and after it (agent-b), and says how
much history its copy keeps: what retention needs lives in each node's data directory, and the
trimming of the log in etcd does not wait for it (docs/history.md).
"""

from __future__ import annotations

import time

import pytest

from runstate.actors.timestamps import format_ms

from .nodes import ADMIN_KEY, ready_cluster

pytestmark = pytest.mark.e2e

SPACE = "default"


def test_every_node_answers_a_history_read_of_the_partition_from_its_own_copy(tmp_path):
    with ready_cluster(tmp_path) as cluster:
        leader = cluster.leader_of(SPACE)
        standbys = [node for node in cluster.nodes if node is not leader]
        with standbys[0].client() as http:
            run = http.post(f"/v1/spaces/{SPACE}/scopes", json={"name": "r"}).json()["id"]
            taken = http.post(f"/v1/spaces/{SPACE}/claims", json={"scopeId": run, "key": "company:acme", "holder": "agent-a",
                                                                  "holderSession": "a", "leaseSeconds": 300})
            assert taken.status_code == 200, taken.text
        before = format_ms(int(time.time() * 1000))
        time.sleep(0.05)
        with standbys[1].client(ADMIN_KEY) as admin:
            freed = admin.post(f"/v1/spaces/{SPACE}/claims/company:acme/force-release", json={"scopeId": run, "reason": "hung"})
            assert freed.status_code == 200, freed.text
        with standbys[1].client() as http:
            again = http.post(f"/v1/spaces/{SPACE}/claims", json={"scopeId": run, "key": "company:acme", "holder": "agent-b",
                                                                  "holderSession": "b", "leaseSeconds": 300})
            assert again.status_code == 200, again.text
        after = format_ms(int(time.time() * 1000))
        for node in cluster.nodes:
            with node.client() as http:
                for at, holder in ((before, "agent-a"), (after, "agent-b")):
                    answer = http.get(f"/v1/spaces/{SPACE}/history/scopes/{run}/claims", params={"at": at})
                    assert answer.status_code == 200, (node.name, answer.text)
                    claims = answer.json()["claims"]
                    assert [claim["holder"] for claim in claims] == [holder], (node.name, at, claims)
                    assert answer.json()["asOf"]["partition"] == cluster.layout.of(SPACE)
                kept = http.get(f"/v1/spaces/{SPACE}/history").json()["kept"]
                assert kept["retentionSeconds"] == 86_400 and kept["diskBytes"] > 0, (node.name, kept)
                changed = http.get(f"/v1/spaces/{SPACE}/history/diff", params={"from": before, "to": after}).json()
                assert changed["events"].get("claim.force_released") == 1 and changed["events"].get("claim.acquired") == 1, changed
