"""Fault campaigns against a real cluster: three etcd members, three `runstate serve` nodes, the
official clients working through every node, and faults injected one after another while they
work. Every acknowledged change is checked afterwards (`history.py`).

    python -m tests.cluster.chaos --seconds 600      # what `make chaos SECONDS=600` runs
    python -m tests.cluster.chaos --plan             # each fault once (`make test` runs CI_FAULTS)

The faults (`FAULTS`):

- `kill_leader`: SIGKILL of the node leading a partition the workers use; restarted a moment later.
- `pause_leader`: SIGSTOP of such a leader for longer than its session, then SIGCONT: another node
  must have won the partition meanwhile (a new epoch), and the resumed one is fenced.
- `kill_etcd_leader`: SIGKILL of the etcd member that leads Raft; restarted a moment later.
- `kill_node_and_etcd`: SIGKILL of a partition's leader and of the etcd Raft leader at once.
- `rolling_restart`: every node in turn stopped (SIGTERM) and started again, each once the cluster
  is whole again.
- `cut_node` (as root): a partition's leader cut off the network (its bridge port drops every
  frame, both ways), then joined again. Nodes run in network namespaces for this (`network.py`).
- `late_campaign_answer`: etcd's answers to the next campaigns held past the client's 1 s limit
  (or lost once etcd has made the key) while a partition's leader is killed: the nodes that take
  its partitions over must resolve their own campaigns and serve. The nodes reach etcd through a
  relay in front of each member (`etcd_proxy.py`) the whole time, which passes everything else on.

After each fault the cluster must be whole again: every node answers /healthz 200, every
partition is led by a live node, and every partition answers a request through a node (one that
only names a leader which serves nothing is not whole).

The workers (`workload.py`) run the whole time: four on the official 0.2.0 client (runs, claims,
tasks and their deliveries, in two spaces on two partitions) and two on the official 0.3.0 client
(`once`, in a third). A reader follows each space's event log through the nodes meanwhile. After
the last fault the cluster must become whole again; then the workers stop, and the report says the
violations found (none, or the run fails), the faults injected by kind and the changes checked.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx

from ..etcd import EtcdCluster, EtcdMember
from ..servers import OFFICIAL_SDK, OFFICIAL_SDK_030, official_client_dir
from .etcd_proxy import EtcdProxy, Rule, campaign
from .history import Final, Report, check
from .network import Network, network_available
from .nodes import ADMIN_KEY, ClusterNodes, Node
from .workload import Workload

__all__ = ["CI_FAULTS", "Campaign", "FAULTS", "Outcome", "main"]

PARTITIONS = 4
# Whole again (every node answering /healthz 200, every partition led by a live node) within this
# long after a fault ends, or the campaign reports it.
RECOVERY_S = 30.0
# Server settings for the nodes: snapshots often enough that logs are trimmed and a node that comes
# back may need a peer's snapshot (each one is a child process: more often starves two cores),
# every event kept (the checker reads the whole log).
NODE_SETTINGS = ("--snapshot-every-records", "2000", "--snapshot-every-s", "20", "--events-kept-max", "1000000",
                 "--log-level", "info", "--log-requests", "errors")


@dataclass
class Outcome:
    report: Report
    faults: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"chaos: {sum(self.faults.values())} fault(s) in {self.seconds:.0f} s: "
                 + ", ".join(f"{name} {count}" for name, count in sorted(self.faults.items()))]
        lines.append(f"chaos: {self.report.changes} acknowledged change(s) checked: "
                     + ", ".join(f"{name} {count}" for name, count in sorted(self.report.checked.items())))
        if self.report.refused:
            lines.append("chaos: calls not acknowledged (not relied on): "
                         + ", ".join(f"{name} {count}" for name, count in sorted(self.report.refused.items())))
        lines.extend(f"chaos: note: {note}" for note in self.notes)
        lines.append(f"chaos: {len(self.report.violations)} violation(s)")
        lines.extend(f"chaos: VIOLATION: {text}" for text in self.report.violations)
        return "\n".join(lines)


class Campaign:
    """One cluster, its workers, and the faults injected into it. Use as a context manager."""

    def __init__(self, root: Path, clients: dict[str, Path], *, seed: int = 0, netns: bool | None = None,
                 say: Callable[[str], None] = lambda text: None) -> None:
        self.root = root
        self.clients = clients
        self.random = random.Random(seed)
        self.seed = seed
        self.say = say
        if netns is None:
            netns = network_available() is None
        self.network: Network | None = Network.make(3) if netns else None
        self.etcd: EtcdCluster | None = None
        self.proxies: list[EtcdProxy] = []
        self.nodes: ClusterNodes | None = None
        self.workload: Workload | None = None
        self.faults: Counter = Counter()
        self.notes: list[str] = []
        self.violations: list[str] = []
        self.started = time.monotonic()

    # -- the cluster ------------------------------------------------------------------------------

    def __enter__(self) -> "Campaign":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        host = "127.0.0.1" if self.network is None else self.network.host
        self.etcd = EtcdCluster(3, root=self.root / "etcd", host=host)
        (self.root / "etcd").mkdir(parents=True, exist_ok=True)
        self.etcd.start()
        self.proxies = [EtcdProxy(url, host).start() for url in self.etcd.endpoints]
        self.nodes = ClusterNodes(self.etcd, 3, self.root / "nodes", partitions=PARTITIONS, extra=NODE_SETTINGS,
                                  network=self.network, endpoints=[proxy.url for proxy in self.proxies])
        self.nodes.start()
        self.nodes.wait_ready(60)
        self.workload = Workload(self.nodes, self.clients, self.root / "work", seed=self.seed)
        self.workload.start()
        self.say(f"chaos: cluster up ({'network namespaces' if self.network else 'loopback'}), "
                 f"spaces {', '.join(f'{s.space} (partition {s.partition})' for s in self.workload.spaces)}")

    def close(self) -> None:
        if self.workload is not None:
            self.workload.close()
        if self.nodes is not None:
            if self.network is not None:
                for node in self.nodes.nodes:
                    self.network.heal(node.number)
            self.nodes.close()
            for node in self.nodes.nodes:
                node.save_log(self.root / f"{node.name}.log")
        for proxy in self.proxies:
            proxy.close()
        if self.etcd is not None:
            self.etcd.close()
        if self.network is not None:
            self.network.close()

    def finish(self) -> Outcome:
        """Wait for the cluster to be whole, stop the workers, read what it holds and check."""
        assert self.workload is not None
        if not self.recovered("the last fault"):
            report = Report()
            report.violations[:] = self.violations + self.crashes()
            return Outcome(report, self.faults, time.monotonic() - self.started, self.notes)
        calls, final = self.workload.finish()
        report = check(calls, final)
        report.violations[:0] = self.violations + self.crashes()
        return Outcome(report, self.faults, time.monotonic() - self.started, self.notes)

    def crashes(self) -> list[str]:
        """An exception a node logged (a bug met on the way, whatever the clients saw)."""
        assert self.nodes is not None
        found = []
        for node in self.nodes.nodes:
            for line in [*node.earlier_lines, *node.lines]:
                if '"exception":' in line or line.startswith("Traceback"):
                    found.append(f"{node.name} logged an exception: {line[:1500]}")
        return found

    # -- looking at it ----------------------------------------------------------------------------

    def cluster_map(self) -> dict[int, tuple[str, int] | None]:
        """Partition -> (leading node, epoch), as a live node sees it."""
        assert self.nodes is not None
        for node in self.nodes.live():
            try:
                with node.client(timeout_s=3) as http:
                    answer = http.get("/v1/cluster").json()
            except (httpx.HTTPError, ValueError):
                continue
            return {entry["partition"]: entry["leader"] and (entry["leader"]["node"], entry["leader"]["epoch"])
                    for entry in answer["map"]}
        return {}

    def node(self, name: str) -> Node:
        assert self.nodes is not None
        return next(node for node in self.nodes.nodes if node.name == name)

    def victim(self) -> tuple[int, Node, int]:
        """A partition the workers use, its leader and the leader's epoch."""
        assert self.workload is not None
        for _ in range(100):
            partition = self.random.choice([space.partition for space in self.workload.spaces])
            leader = self.cluster_map().get(partition)
            if leader is not None:
                node = self.node(leader[0])
                if node in self.nodes.live():  # type: ignore[union-attr]
                    return partition, node, leader[1]
            time.sleep(0.1)
        raise AssertionError("no partition of the workers has a live leader")

    def recovered(self, after: str) -> bool:
        """Wait until every node answers /healthz 200 and every partition is led by a live node;
        False (and a violation) if that takes longer than RECOVERY_S."""
        assert self.nodes is not None
        deadline = time.monotonic() + RECOVERY_S
        while time.monotonic() < deadline:
            live = {node.name for node in self.nodes.live()}
            if all(node.healthy() for node in self.nodes.live()):
                leaders = self.cluster_map()
                if leaders and all(leader is not None and leader[0] in live for leader in leaders.values()):
                    if self.serves_every_partition():
                        return True
            time.sleep(0.2)
        self.violations.append(f"the cluster was not whole again {RECOVERY_S:g} s after {after}: {self.cluster_map()}")
        return False

    def serves_every_partition(self) -> bool:
        """Whether every partition answers a request through a live node: for a data partition a
        read of a space of it (the admin key reads any space; a space nobody used answers 404,
        which its leader gives as well), for the system partition an admin change its leader
        refuses as invalid. Only 503 (nobody serves it) fails; each is asked with a short wait."""
        assert self.nodes is not None
        live = self.nodes.live()
        if not live:
            return False
        layout = self.nodes.layout
        probes = {0: ("POST", "/v1/admin/keys", {})}
        for index in range(100_000):
            number = layout.of(f"probe-{index}")
            probes.setdefault(number, ("GET", f"/v1/spaces/probe-{index}/scopes", None))
            if len(probes) == layout.count + 1:
                break
        for number, (method, path, body) in sorted(probes.items()):
            node = self.random.choice(live)
            try:
                answer = httpx.request(method, node.url + path, json=body, timeout=10,
                                       headers={"authorization": f"Bearer {ADMIN_KEY}"})
            except httpx.HTTPError:
                return False
            if answer.status_code == 503:
                return False
        return True

    def _tails(self) -> str:
        assert self.nodes is not None
        return " | ".join(f"{node.name}: " + " / ".join(node.lines[-6:]) for node in self.nodes.nodes)

    def pause(self, low: float, high: float) -> None:
        time.sleep(self.random.uniform(low, high))

    def etcd_leader(self) -> EtcdMember:
        assert self.etcd is not None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            leader = self.etcd.leader()
            if leader is not None:
                return leader
            time.sleep(0.1)
        raise AssertionError("etcd has no leader")

    # -- the faults -------------------------------------------------------------------------------

    def inject(self, name: str) -> bool:
        """Inject one fault and wait for the cluster to be whole again (False: it was not)."""
        started = time.monotonic()
        detail = FAULTS[name](self)
        self.faults[name] += 1
        whole = self.recovered(name)
        self.say(f"chaos: {name}: {detail} (" + (f"whole again after {time.monotonic() - started:.1f} s)" if whole else "NOT whole again)"))
        with open(self.root / "faults.jsonl", "a") as out:  # beside the workers' lines, on the same clock
            out.write(json.dumps({"fault": name, "detail": detail, "ts": started, "ta": time.monotonic()}) + "\n")
        return whole

    def kill_leader(self) -> str:
        partition, node, _ = self.victim()
        node.kill()
        self.pause(0.5, 4.0)
        node.start()
        return f"SIGKILL of {node.name}, leader of partition {partition}"

    def pause_leader(self) -> str:
        assert self.nodes is not None
        partition, node, epoch = self.victim()
        self.nodes.pause(node)
        try:
            self.pause(2.5, 5.0)
            after = self.cluster_map().get(partition)
        finally:
            self.nodes.resume(node)
        if after is None or after[1] == epoch:
            self.violations.append(f"partition {partition}: its leader {node.name} was paused past its session and "
                                   f"no other node took the partition over (map: {after})")
        return f"SIGSTOP of {node.name}, leader of partition {partition} (epoch {epoch}), then SIGCONT; now {after}"

    def kill_etcd_leader(self) -> str:
        assert self.etcd is not None
        member = self.etcd_leader()
        member.kill()
        self.pause(1.0, 4.0)
        self.etcd.restart(member)
        return f"SIGKILL of etcd member {member.name} (the Raft leader)"

    def kill_node_and_etcd(self) -> str:
        assert self.etcd is not None
        partition, node, _ = self.victim()
        member = self.etcd_leader()
        node.kill()
        member.kill()
        self.pause(1.0, 4.0)
        self.etcd.restart(member)
        node.start()
        return f"SIGKILL of {node.name} (leader of partition {partition}) and etcd member {member.name} (the Raft leader)"

    def rolling_restart(self) -> str:
        assert self.nodes is not None
        for node in self.nodes.nodes:
            node.stop()
            node.start()
            if not self.recovered(f"restarting {node.name}"):
                break
        return "every node stopped (SIGTERM) and started again, one at a time"

    def cut_node(self) -> str:
        assert self.nodes is not None and self.network is not None
        partition, node, epoch = self.victim()
        self.network.cut(node.number)
        node.cut = True  # type: ignore[attr-defined]
        try:
            self.pause(2.5, 6.0)
            after = self.cluster_map().get(partition)
        finally:
            self.network.heal(node.number)
            node.cut = False  # type: ignore[attr-defined]
        if after is None or after[1] == epoch:
            self.violations.append(f"partition {partition}: its leader {node.name} was cut off and no other node took "
                                   f"the partition over (map: {after})")
        return f"{node.name}, leader of partition {partition} (epoch {epoch}), cut off the network, then joined again; now {after}"

    def late_campaign_answer(self) -> str:
        partition, node, _ = self.victim()
        led = sorted(number for number, leader in self.cluster_map().items() if leader and leader[0] == node.name)
        lost = self.random.random() < 0.5
        hold_s = self.random.uniform(1.2, 2.0)
        rule = Rule(campaign(), hold_s=hold_s, drop=lost, times=len(led))
        for proxy in self.proxies:
            proxy.add(rule)
        try:
            node.kill()
            deadline = time.monotonic() + 10
            while rule.times > 0 and time.monotonic() < deadline:  # every partition it led campaigned for
                time.sleep(0.05)
        finally:
            for proxy in self.proxies:
                proxy.clear()
        self.pause(0.5, 2.0)
        node.start()
        how = "lost once etcd had made the key" if lost else f"held {hold_s:.1f} s"
        return (f"SIGKILL of {node.name}, leader of partition(s) {','.join(map(str, led))}, with etcd's answers to "
                f"{len(rule.seen)} campaign(s) {how}")

    def faults_here(self, names: tuple[str, ...] | None = None) -> list[str]:
        """The faults (of `names`, or every one) this machine can inject."""
        return [name for name in names or FAULTS if name != "cut_node" or self.network is not None]

    # -- campaigns --------------------------------------------------------------------------------

    def plan(self, names: list[str] | None = None) -> Outcome:
        """Each fault once, in order, with a quiet moment between them."""
        for name in names or self.faults_here():
            self.pause(1.0, 2.5)
            if not self.inject(name):
                break
        self.pause(1.0, 2.0)
        return self.finish()

    def run_for(self, seconds: float) -> Outcome:
        """Faults at random until `seconds` have passed (every kind at least once when there is time)."""
        deadline = time.monotonic() + seconds
        names = self.faults_here()
        order = self.random.sample(names, len(names))
        while time.monotonic() < deadline:
            name = order.pop() if order else self.random.choice(names)
            self.pause(1.0, 4.0)
            if not self.inject(name):
                break
        self.pause(1.0, 2.0)
        return self.finish()


FAULTS: dict[str, Callable[[Campaign], str]] = {
    "kill_leader": Campaign.kill_leader,
    "pause_leader": Campaign.pause_leader,
    "kill_etcd_leader": Campaign.kill_etcd_leader,
    "kill_node_and_etcd": Campaign.kill_node_and_etcd,
    "rolling_restart": Campaign.rolling_restart,
    "cut_node": Campaign.cut_node,
    "late_campaign_answer": Campaign.late_campaign_answer,
}


# The faults `make test` injects once each (`test_faults.py`), to stay well within a test's two
# minutes: a partition's leader killed, paused past its session, and cut off the network, with the
# official clients working through them. The others are checked on their own by a test each and
# are left to `make chaos`, which injects every fault: `kill_etcd_leader`
# (`test_cluster.py::test_etcd_electing_a_new_leader_does_not_move_any_partition`),
# `late_campaign_answer` (`test_etcd_answers.py`, late and lost answers to the campaigns),
# `rolling_restart` (SIGTERM hand-offs, `test_cluster.py`) and `kill_node_and_etcd` (the sum of two).
CI_FAULTS = ("kill_leader", "pause_leader", "cut_node")
assert set(CI_FAULTS) <= set(FAULTS)


def official_clients(cache: Path) -> dict[str, Path]:
    cache.mkdir(parents=True, exist_ok=True)
    return {"0.2.0": official_client_dir(cache, OFFICIAL_SDK), "0.3.0": official_client_dir(cache, OFFICIAL_SDK_030)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600, help="inject faults for this long (default 600)")
    parser.add_argument("--plan", action="store_true", help="each fault once instead, in order")
    parser.add_argument("--seed", type=int, default=None, help="the seed of the faults' choices (default: random)")
    parser.add_argument("--loopback", action="store_true", help="no network namespaces (and no cut_node), even as root")
    parser.add_argument("--keep", action="store_true", help="keep the folder of the run (logs, data) and say where")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    why = None if args.loopback else network_available()
    if why is not None and not args.loopback:
        print(f"chaos: {why}: running without cut_node", flush=True)
    root = Path(tempfile.mkdtemp(prefix="runstate-chaos-"))
    clients = official_clients(Path(__file__).resolve().parents[2] / ".pytest_cache" / "d" / "official-client")
    print(f"chaos: seed {seed}; folder {root}", flush=True)
    try:
        with Campaign(root, clients, seed=seed, netns=why is None and not args.loopback,
                      say=lambda text: print(text, flush=True)) as campaign:
            outcome = campaign.plan() if args.plan else campaign.run_for(args.seconds)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(outcome.render(), flush=True)
    return 1 if outcome.report.violations else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
