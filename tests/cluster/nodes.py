"""Real `runstate serve` nodes of a cluster on a real etcd, for the cluster's tests.

`ClusterNodes(etcd, count)` starts `count` server processes on free ports of 127.0.0.1, each with
its own data directory, all on the given etcd (`tests/etcd.py`, or relays in front of its members:
`etcd_proxy.py`); `wait_ready()` waits until every
node answers `/healthz` 200 (a session, and a leader for every partition) and the partitions have
settled on their preferred nodes. A node can be killed, stopped, continued and restarted on its
directory and port. Every process is killed on the way out.

With a `Network` (`network.py`, root only) each node runs in a network namespace of its own and
listens on its address there, so that the fault tests can cut it off and join it again.
"""

from __future__ import annotations

import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

from runstate.actors.layout import Layout

from ..etcd import EtcdCluster
from ..ports import free_port
from ..servers import ServerProcess
from .network import Network

ADMIN_KEY = "admin-key-for-the-cluster-tests"
API_KEY = "e2e-key"


class Node:
    def __init__(self, etcd: EtcdCluster, number: int, root: Path, partitions: int, extra: tuple[str, ...],
                 network: Network | None = None, endpoints: list[str] | None = None) -> None:
        self.name = f"n{number}"
        self.number = number
        self.port = free_port()
        self.network = network
        self.host = "127.0.0.1" if network is None else network.address(number)
        self.url = f"http://{self.host}:{self.port}"
        self.data_dir = root / self.name
        self.args = (
            "--etcd", ",".join(endpoints or etcd.endpoints), "--node-id", self.name, "--port", str(self.port), "--advertise", self.url,
            "--data-dir", str(self.data_dir), "--partitions", str(partitions), *extra,
        )
        self.process: ServerProcess | None = None
        self.earlier_lines: list[str] = []  # what the node's earlier processes printed

    def start(self) -> "Node":
        if self.process is not None:
            self.earlier_lines += [*self.process.lines, f"---- {self.name} started again"]
        process = ServerProcess(*self.args, api_key=API_KEY, env={"RUNSTATE_ADMIN_KEY": ADMIN_KEY})
        process.wait_healthy = lambda *args, **kwargs: None  # type: ignore[method-assign]  # see ClusterNodes
        process.host = self.host
        if self.network is not None:
            process.prefix = self.network.prefix(self.number)
        self.process = process.start()
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.proc is not None and self.process.proc.poll() is None

    def client(self, api_key: str = API_KEY, timeout_s: float = 15) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"authorization": f"Bearer {api_key}"}, timeout=timeout_s)

    def healthy(self) -> bool:
        try:
            return httpx.get(self.url + "/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def signal(self, number: int) -> None:
        assert self.process is not None and self.process.proc is not None
        self.process.proc.send_signal(number)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()

    def stop(self) -> int | None:
        return None if self.process is None else self.process.stop()

    @property
    def lines(self) -> list[str]:
        return [] if self.process is None else self.process.lines

    def save_log(self, path: Path) -> None:
        """Everything the node's processes printed, into `path`."""
        path.write_text("\n".join([*self.earlier_lines, *self.lines]) + "\n")


@contextmanager
def ready_cluster(root: Path, count: int = 3, *, partitions: int = 4) -> Iterator["ClusterNodes"]:
    """`count` nodes on a one-member etcd, started and ready (`wait_ready`); all gone on the way out."""
    with EtcdCluster(1) as etcd:
        nodes = ClusterNodes(etcd, count, root, partitions=partitions).start()
        try:
            nodes.wait_ready()
            yield nodes
        finally:
            nodes.close()


class ClusterNodes:
    def __init__(self, etcd: EtcdCluster, count: int, root: Path, *, partitions: int = 4, extra: tuple[str, ...] = (),
                 network: Network | None = None, endpoints: list[str] | None = None) -> None:
        self.etcd = etcd
        self.partitions = partitions
        self.layout = Layout(partitions)
        self.network = network
        # `endpoints`: how the nodes reach etcd, when not straight (relays of `etcd_proxy.py`).
        self.nodes = [Node(etcd, number, root, partitions, extra, network, endpoints) for number in range(count)]

    def start(self) -> "ClusterNodes":
        for node in self.nodes:
            node.start()
        return self

    def wait_ready(self, timeout_s: float = 30, settle: bool = True) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(node.healthy() for node in self.nodes if node.process is not None and node.process.proc.poll() is None):
                if not settle or self.balanced():
                    return
            time.sleep(0.1)
        raise AssertionError("the cluster did not become ready:\n" + "\n".join(
            line for node in self.nodes for line in node.lines[-15:]))

    def map(self, through: Node | None = None) -> dict[int, str | None]:
        with (through or self.live()[0]).client() as http:
            answer = http.get("/v1/cluster").json()
        return {entry["partition"]: entry["leader"] and entry["leader"]["node"] for entry in answer["map"]}

    def balanced(self) -> bool:
        """Every partition led by a live node, none leading more than its share."""
        live = {node.name for node in self.live()}
        leaders = self.map()
        if any(leader not in live for leader in leaders.values()):
            return False
        share = -(-len(leaders) // len(live))
        return all(list(leaders.values()).count(name) <= share for name in live)

    def live(self) -> list[Node]:
        return [node for node in self.nodes if node.process is not None and node.process.proc.poll() is None
                and not getattr(node, "paused", False) and not getattr(node, "cut", False)]

    def leader_of(self, space: str) -> Node:
        name = self.map()[self.layout.of(space)]
        return next(node for node in self.nodes if node.name == name)

    def pause(self, node: Node) -> None:
        node.signal(signal.SIGSTOP)
        node.paused = True  # type: ignore[attr-defined]

    def resume(self, node: Node) -> None:
        node.signal(signal.SIGCONT)
        node.paused = False  # type: ignore[attr-defined]

    def close(self) -> None:
        for node in self.nodes:
            if getattr(node, "paused", False):
                node.signal(signal.SIGCONT)
            node.kill()
