"""The official clients' compatibility suites (`tests/compat`) against a cluster of three nodes.

Each module here imports one suite's tests as they are and gives them, in place of a single
server, a `ClusterServer`: three `runstate serve` nodes on one etcd member (made once for all the
modules) and a space of the module's own, with its key (the suites give the same names to
different things, as each had a server of its own).
Its `base_url` names the next node each time it is read, so the clients of one test (each script,
each process) reach the cluster through different nodes, and every request for a partition led
elsewhere is forwarded: any node answers. Tests that start a server of their own (a restart, a
second server) or read one server's files or process stay with the single-node suites.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from ..nodes import ADMIN_KEY, ClusterNodes, ready_cluster


class ClusterServer:
    """Stands where a test expects a `ServerProcess`: a space of its own and its key, any node's URL."""

    def __init__(self, nodes: ClusterNodes, space_id: str, api_key: str) -> None:
        self.nodes = nodes
        self.api_key = api_key
        self.space_id = space_id
        self._next = itertools.cycle(nodes.nodes)

    @property
    def base_url(self) -> str:
        return next(self._next).url

    def client(self, api_key: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers={"authorization": f"Bearer {api_key or self.api_key}"}, timeout=10)

    def data_dir(self) -> Path:
        """The data directory of the node that leads this space's partition: its copy of every
        partition's log, to which each batch is handed as it commits, before the node answers."""
        return Path(self.nodes.leader_of(self.space_id).data_dir)


# Each module's space is on one of the four data partitions, so their requests go to every leader.
# 030_capacity has partition 1 to itself: it reads the partitions' logs back in their order and
# looks for its allowance by a name another suite (030_readme) gives to an allowance of its own.
MODULES = ("030_capacity", "030", "030_coord", "030_readme", "capacity", "claims", "coordination", "queues")
PARTITIONS = 4


def _partition(module: str) -> int:
    index = MODULES.index(module)
    return 1 if index == 0 else 2 + index % (PARTITIONS - 1)


@pytest.fixture(scope="package")
def cluster_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterNodes]:
    with ready_cluster(tmp_path_factory.mktemp("compat-cluster"), partitions=PARTITIONS) as nodes:
        yield nodes


@pytest.fixture(scope="module")
def cluster_server(cluster_nodes: ClusterNodes, request: pytest.FixtureRequest) -> ClusterServer:
    """A space for this module alone (the suites use the same names for different things), and a
    key for it made through the admin API of one node."""
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_official_").removesuffix("_cluster")
    partition = _partition(module)
    space = next(name for name in (f"compat-{module.replace('_', '-')}-{n}" for n in range(10_000))
                 if cluster_nodes.layout.of(name) == partition)
    made = httpx.post(cluster_nodes.nodes[0].url + "/v1/admin/keys", json={"spaces": [space]},
                      headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=15)
    assert made.status_code == 201, made.text
    return ClusterServer(cluster_nodes, space, made.json()["key"])


@pytest.fixture(scope="module")
def module_server(cluster_server: ClusterServer) -> ClusterServer:
    return cluster_server


@pytest.fixture(scope="module")
def server(cluster_server: ClusterServer) -> ClusterServer:
    return cluster_server
