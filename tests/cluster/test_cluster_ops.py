"""Operating a cluster of three real nodes: `runstate cluster status`, the cluster's metrics, what
/healthz says when a node cannot serve, and the web console's actions taken through a node that
does not lead the partition they change.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from .nodes import ADMIN_KEY, API_KEY, ClusterNodes, Node, ready_cluster

ROOT = Path(__file__).parents[2]

pytestmark = pytest.mark.e2e

SPACE = "default"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterNodes]:
    with ready_cluster(tmp_path_factory.mktemp("ops")) as nodes:
        yield nodes


def _cli(*args: str, key: str = ADMIN_KEY) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RUNSTATE_ADMIN_KEY": key}
    return subprocess.run([sys.executable, "-m", "runstate.server.cli", *args], capture_output=True, text=True, env=env, timeout=30)


def test_cluster_status_lists_the_nodes_the_leaders_and_each_standbys_lag(cluster: ClusterNodes) -> None:
    """Through any node: every node, every partition with its leader and epoch, and the two other
    nodes as its standbys with how many records each is behind (0 once they have published)."""
    with cluster.nodes[0].client() as http:  # something to replicate, then a publication period
        http.post(f"/v1/spaces/{SPACE}/scopes", json={}, headers={"idempotency-key": uuid.uuid4().hex})
    time.sleep(2.5)
    leaders = cluster.map()
    for node in cluster.nodes:
        done = _cli("cluster", "status", "--url", node.url, "--json")
        assert done.returncode == 0, done.stderr
        data = json.loads(done.stdout)
        assert data["cluster"] == "runstate" and data["node"] == node.name and data["partitions"] == cluster.partitions
        assert sorted(n["node"] for n in data["nodes"]) == ["n0", "n1", "n2"]
        for entry in data["map"]:
            assert entry["leader"]["node"] == leaders[entry["partition"]]
            assert sorted(s["node"] for s in entry["standbys"]) == sorted({"n0", "n1", "n2"} - {entry["leader"]["node"]})
            assert all(s["lagRecords"] == 0 for s in entry["standbys"]), entry
            assert entry["leaderLsn"] >= 1
    text = _cli("cluster", "status", "--url", cluster.nodes[1].url)
    assert text.returncode == 0, text.stderr
    assert "cluster runstate: 4 data partition(s) and the system partition, 3 node(s); asked n1" in text.stdout
    for number, leader in leaders.items():
        assert re.search(rf"^{number}\s+{leader}\s+\d+\s+\d+\s+\d+\s+\d+\s+n\d:0 n\d:0$", text.stdout, re.M), text.stdout
    for node in ("n0", "n1", "n2"):  # what each node leads, as the map says
        led = ",".join(str(number) for number, leader in sorted(leaders.items()) if leader == node) or "-"
        assert re.search(rf"^{node}\s+http://\S+\s+{re.escape(led)}$", text.stdout, re.M), text.stdout
    refused = _cli("cluster", "status", "--url", cluster.nodes[0].url, key="not-a-key")
    assert refused.returncode == 1 and "UNAUTHENTICATED" in refused.stderr


def _metrics(url: str) -> str:
    answer = httpx.get(url + "/metrics", timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.text


def _value(text: str, name: str, partition: int | None = None) -> float | None:
    label = "" if partition is None else rf'\{{partition="{partition}"\}}'
    found = re.search(rf"^{name}{label} (\S+)$", text, re.M)
    return None if found is None else float(found.group(1))


def test_metrics_say_each_partitions_role_lag_leader_changes_and_etcds_latency(cluster: ClusterNodes) -> None:
    with cluster.nodes[2].client() as http:
        http.post(f"/v1/spaces/{SPACE}/scopes", json={}, headers={"idempotency-key": uuid.uuid4().hex})
    texts = {node.name: _metrics(node.url) for node in cluster.nodes}
    leaders = cluster.map()
    for number, leader in leaders.items():
        for name, text in texts.items():
            assert _value(text, "runstate_cluster_partition_leader", number) == (1 if name == leader else 0), (name, number)
            assert _value(text, "runstate_cluster_partition_applied_lsn", number) is not None
            assert _value(text, "runstate_cluster_partition_lag_records", number) is not None
            assert _value(text, "runstate_cluster_leader_changes_total", number) is not None
            assert _value(text, "runstate_cluster_takeovers_total", number) is not None
    for text in texts.values():
        assert _value(text, "runstate_cluster_session_up") == 1 and _value(text, "runstate_cluster_nodes") == 3
        assert _value(text, "runstate_cluster_sessions_total") == 1
        keepalives = re.search(r'^runstate_etcd_request_duration_seconds_count\{request="keepalive"\} (\S+)$', text, re.M)
        assert keepalives and float(keepalives.group(1)) > 0
    assert any(re.search(r'^runstate_etcd_request_duration_seconds_count\{request="txn"\} [1-9]', text, re.M) for text in texts.values())
    # docs/cluster.md names each of a node's own metrics as a query spells it, and every one it exports.
    documented = set(re.findall(r"runstate_(?:cluster|etcd)_[a-z_]+[a-z]", (ROOT / "docs" / "cluster.md").read_text()))
    exported = {
        family.name + ("_total" if family.type == "counter" else "")
        for family in text_string_to_metric_families(texts["n0"]) if family.name.startswith(("runstate_cluster_", "runstate_etcd_"))
    }
    assert documented == exported
    # and deploy/'s alerting rules name only metrics a node exports
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "runstate-alerts.yml").read_text())
    named = {name for group in rules["groups"] for rule in group["rules"]
             for name in re.findall(r"runstate_(?:cluster|etcd)_[a-z_]+[a-z]", rule["expr"])}
    assert named and named <= exported


def test_healthz_says_a_node_cannot_serve_while_etcd_does_not_answer_it(cluster: ClusterNodes) -> None:
    """etcd stopped: no keepalive is answered, every node's session deadline passes, and /healthz
    answers 503 saying so (a load balancer sends nothing there); etcd back (it ends the leases that
    ran out while it was stopped), /healthz is 200 again with every partition led."""
    member = cluster.etcd.members[0]
    member.stop()
    try:
        deadline = time.monotonic() + 10
        for node in cluster.nodes:
            while True:
                answer = httpx.get(node.url + "/healthz", timeout=5)
                if answer.status_code == 503:
                    assert "no session with etcd" in answer.json()["error"]["message"]
                    break
                assert time.monotonic() < deadline, answer.text
                time.sleep(0.1)
    finally:
        member.cont()
    cluster.wait_ready(20, settle=False)
    # /healthz was 200 on each node with every partition led as that node saw it; a leader key
    # whose lease etcd ends a moment later (it ran out while etcd was stopped, and etcd revokes
    # such leases in its own time after it resumes) leaves its partition without a leader until
    # the next campaign: the map may show that for a moment, never for long
    started = time.monotonic()
    while None in (seen := cluster.map()).values():
        assert time.monotonic() - started < 10, seen
        time.sleep(0.1)


def test_a_partitions_snapshot_is_given_to_a_peer_only_and_for_a_partition_of_the_cluster(cluster: ClusterNodes) -> None:
    """`GET /v1/cluster/partitions/{n}/snapshot` answers a caller that shows the cluster's secret
    (401 otherwise), for a partition number of the cluster: anything else in its place (a number
    out of range, a word, a digit that is not ASCII, too many digits) is 400 naming it, never a 500."""
    import base64

    found = httpx.post(cluster.etcd.endpoints[0] + "/v3/kv/range", timeout=10,
                       json={"key": base64.b64encode(b"/rs/runstate/secret").decode()}).json()
    secret = base64.b64decode(found["kvs"][0]["value"]).decode()
    node = cluster.nodes[0]
    url = node.url + "/v1/cluster/partitions/{}/snapshot"
    refused = httpx.get(url.format(1), timeout=10)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "UNAUTHENTICATED", refused.text
    shown = {"x-runstate-cluster-secret": secret}
    for text in ("999", "one", "%C2%B2", "%D9%A1", "1" * 5000):  # "²", "١" (ARABIC-INDIC DIGIT ONE)
        answer = httpx.get(url.format(text), headers=shown, timeout=10)
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "VALIDATION_FAILED", (text[:8], answer.text)
        assert "no partition" in answer.json()["error"]["message"]
    given = httpx.get(url.format(1), headers=shown, timeout=10)
    assert given.status_code in (200, 404), given.text  # a snapshot, or none written yet: said so
    if given.status_code == 404:
        assert "has no snapshot of partition 1" in given.json()["error"]["message"]


def test_a_console_action_taken_through_a_follower_is_done_by_the_leader(cluster: ClusterNodes) -> None:
    """Cancelling a run from the console of a node that does not lead the run's partition: the
    action goes to the leader, as the API request would, and the run is cancelled everywhere."""
    follower = next(node for node in cluster.nodes if node is not cluster.leader_of(SPACE))
    with follower.client() as http:
        run = http.post(f"/v1/spaces/{SPACE}/scopes", json={"name": "to-cancel"}).json()["id"]
    with httpx.Client(base_url=follower.url, follow_redirects=False, timeout=15) as browser:
        signed = browser.post("/console/login", data={"key": API_KEY}, headers={"origin": follower.url})
        assert signed.status_code == 303, signed.text
        page = browser.get(f"/console/s/{SPACE}/runs/{run}/cancel")
        assert page.status_code == 200, page.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf, page.text[:500]
        done = browser.post(f"/console/s/{SPACE}/runs/{run}/cancel", data={"csrf": csrf.group(1)}, headers={"origin": follower.url})
        assert done.status_code == 303 and done.headers["location"] == f"/console/s/{SPACE}/runs/{run}", done.text
        # The run's page on the same node says it once (the notice waits in that node's session).
        assert "Run cancelled." in browser.get(done.headers["location"]).text
    for node in cluster.nodes:
        with node.client() as http:
            assert http.get(f"/v1/spaces/{SPACE}/scopes/{run}").json()["effective"] == "CANCELLED"


def test_cluster_status_of_a_single_node_says_it_is_not_a_cluster(tmp_path: Path) -> None:
    from ..servers import ServerProcess

    with ServerProcess(env={"RUNSTATE_ADMIN_KEY": ADMIN_KEY}) as server:
        done = _cli("cluster", "status", "--url", server.base_url)
    assert done.returncode == 0, done.stderr
    assert "a single node (not a cluster): 1 data partition(s)" in done.stdout
    assert re.search(r"^0\s+local\s+0\s+\d+\s+0\s+0\s+-$", done.stdout, re.M), done.stdout


def _log_keys(etcd_url: str, partition: int) -> tuple[int, int]:
    """How many batches the partition's log holds in etcd, and their bytes."""
    import base64

    prefix = f"/rs/runstate/p/{partition:03d}/log/".encode()
    end = prefix[:-1] + bytes([prefix[-1] + 1])
    found = httpx.post(etcd_url + "/v3/kv/range", timeout=10, json={
        "key": base64.b64encode(prefix).decode(), "range_end": base64.b64encode(end).decode()}).json()
    values = [base64.b64decode(kv["value"]) for kv in found.get("kvs", [])]
    return len(values), sum(len(value) for value in values)


def _snapshots_logged(node: Node, partition: int) -> int:
    """How many snapshots of `partition` the node has written (its "snapshot" lines)."""
    return sum(1 for line in node.lines if '"event":"snapshot"' in line and f'"partition":{partition}' in line)


def test_the_logs_in_etcd_stay_within_their_budget_and_etcds_history_is_compacted(tmp_path: Path) -> None:
    """With a budget of 1 MiB for the logs (a share of about 200 KiB for each of the 5 partitions)
    and a trim every second, 2.4 MB of messages into one partition: each node snapshots the
    partition by bytes (far from 1,000,000 records or an hour), the leader trims the log below the
    snapshots, and the leader of partition 0 compacts etcd's history, so an old revision can no
    longer be read. Everything stays readable through both nodes."""
    from ..etcd import EtcdCluster

    share = (1 << 20) // 5
    with EtcdCluster(1) as etcd:
        nodes = ClusterNodes(etcd, 2, tmp_path, extra=("--cluster-log-bytes-max", str(1 << 20), "--cluster-trim-every-s", "1"))
        try:
            nodes.start()
            nodes.wait_ready(60)
            partition = nodes.layout.of(SPACE)
            with nodes.nodes[0].client() as http:
                run = http.post(f"/v1/spaces/{SPACE}/scopes", json={}).json()["id"]
                mailbox = http.post(f"/v1/spaces/{SPACE}/mailboxes", json={"name": "big"}).json()["id"]
                for number in range(300):
                    sent = http.post(f"/v1/spaces/{SPACE}/mailboxes/{mailbox}/messages",
                                     json={"scopeId": run, "payload": {"n": number, "pad": "x" * 8000}})
                    assert sent.status_code == 201, sent.text
            deadline = time.monotonic() + 30
            while True:
                batches, size = _log_keys(etcd.endpoints[0], partition)
                if size <= 2 * share:
                    break
                assert time.monotonic() < deadline, f"the log still holds {batches} batches, {size} bytes"
                time.sleep(0.5)
            # Past twice its share the leader trims the log below its own snapshot, leaving out a
            # node whose snapshot is older (`trim_floor`): the log is short while that node may
            # still be writing its next snapshot (2-3 s on a busy machine). Wait until each node
            # has written the snapshots it is due, however long its disk takes.
            deadline = time.monotonic() + 30
            while True:
                taken = {node.name: _snapshots_logged(node, partition) for node in nodes.nodes}
                if min(taken.values()) >= 2:
                    break
                assert time.monotonic() < deadline, f"snapshots of partition {partition} by node: {taken}"
                time.sleep(0.2)
            old = httpx.post(etcd.endpoints[0] + "/v3/kv/range", timeout=10,
                             json={"key": "L3JzL3J1bnN0YXRlL21ldGE=", "revision": "2"}).json()  # /rs/runstate/meta
            assert "compacted" in str(old), old
            compacted = [_value(_metrics(node.url), "runstate_etcd_compacted_revision") for node in nodes.nodes]
            assert max(v or 0 for v in compacted) > 2, compacted
            for node in nodes.nodes:
                with node.client() as http:
                    listed = http.get(f"/v1/spaces/{SPACE}/mailboxes/{mailbox}").json()
                    assert listed["name"] == "big", listed
                    assert http.post(f"/v1/spaces/{SPACE}/scopes", json={}, headers={"idempotency-key": uuid.uuid4().hex}).status_code == 201
        finally:
            nodes.close()


def test_a_cluster_status_never_lists_a_partition_twice_and_start_up_hand_offs_are_not_failovers(tmp_path: Path) -> None:
    """Three nodes started one after another: the first leads every partition, then hands the
    others their share as they catch up. Asked all along, through every node, a status lists each
    partition under one node at most, and each node's LEADS is what the map says. At the end the
    hand-offs are counted as such (none as a failover) and a node's routine "leading" lines are
    info, not warnings. Then a node killed: the partitions it led count one failover each."""
    import threading

    from ..etcd import EtcdCluster

    seen: list[str] = []
    problems: list[str] = []
    stop = threading.Event()

    def watch(nodes: ClusterNodes) -> None:
        while not stop.is_set():
            for node in nodes.nodes:
                if not node.running:
                    continue
                try:
                    data = httpx.get(node.url + "/v1/cluster", headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=5).json()
                except (httpx.HTTPError, ValueError):
                    continue
                if "map" not in data:
                    continue
                seen.append(node.name)
                listed = [number for entry in data["nodes"] for number in entry["leads"]]
                if len(listed) != len(set(listed)):
                    problems.append(f"{node.name}: a partition under two nodes: {data['nodes']}")
                by_map = {entry["partition"]: (entry["leader"] or {}).get("node") for entry in data["map"]}
                for entry in data["nodes"]:
                    if sorted(entry["leads"]) != sorted(n for n, leader in by_map.items() if leader == entry["node"]):
                        problems.append(f"{node.name}: {entry['node']} leads {entry['leads']}, the map says {by_map}")
            time.sleep(0.05)

    with EtcdCluster(1) as etcd:
        nodes = ClusterNodes(etcd, 3, tmp_path)
        watcher = threading.Thread(target=watch, args=(nodes,))
        try:
            watcher.start()
            for node in nodes.nodes:
                node.start()
                nodes.wait_ready(60, settle=False)
                time.sleep(1)
            nodes.wait_ready(60)
            time.sleep(2.5)  # (the last hand-off seen by every node)
            stop.set()
            watcher.join(10)
            assert len(seen) > 20 and not problems, problems[:5]
            data = _cli("cluster", "status", "--url", nodes.nodes[0].url, "--json")
            entries = json.loads(data.stdout)["map"]
            assert sum(entry["handoffs"] for entry in entries) > 0 and all(entry["failovers"] == 0 for entry in entries), entries
            for node in nodes.nodes:
                leading = [line for line in node.lines if '"event":"leading"' in line]
                assert leading and all('"level":"info"' in line for line in leading), leading[:2]
            victim = nodes.leader_of(SPACE)
            led = [number for number, leader in nodes.map().items() if leader == victim.name]
            victim.kill()
            survivor = next(node for node in nodes.nodes if node is not victim)
            deadline = time.monotonic() + 30
            while True:
                entries = {entry["partition"]: entry for entry in
                           json.loads(_cli("cluster", "status", "--url", survivor.url, "--json").stdout)["map"]}
                if all(entries[number]["failovers"] == 1 for number in led):
                    break
                assert time.monotonic() < deadline, entries
                time.sleep(0.5)
        finally:
            stop.set()
            nodes.close()


def test_a_node_that_cannot_reach_etcd_says_so_in_one_line(tmp_path: Path) -> None:
    """No etcd member answers: the start ends with exit 1 and the reason, not a traceback."""
    from ..ports import free_port

    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTATE_")}
    done = subprocess.run(
        [sys.executable, "-m", "runstate.server.cli", "serve", "--port", "0", "--advertise", "http://127.0.0.1:9",
         "--data-dir", str(tmp_path / "node"), "--etcd", nowhere, "--cluster", "unreached"],
        capture_output=True, text=True, env=environ, timeout=120,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"runstate: cannot join cluster unreached: no etcd member answered: {nowhere}")
