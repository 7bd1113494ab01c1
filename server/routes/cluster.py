"""The cluster as clients and peers see it: the partition map, and a partition's snapshot for a peer.

`GET /v1/cluster` (our extension; any valid key) answers the partition map, so that our SDKs send
each request to its partition's leader directly (`layout` names the hash: CRC-32 of the space id,
mod `partitions`, plus one). On a single node it answers the same shape, one node leading every
partition. `GET /v1/cluster/partitions/{partition}/snapshot` gives the newest snapshot this node
has of a partition to a node of the same cluster (it shows the cluster's secret), which needs it
when the log was trimmed past its own copy.
"""

from __future__ import annotations

import hmac

import trio

from ...actors.errors import NOT_FOUND, UNAUTHENTICATED, UNAVAILABLE, VALIDATION_FAILED
from ..api import Doc, Reply, endpoint
from .. import cluster_view
from ..cluster_view import ClusterMapView, LeaderView, NodeView, PartitionView
from ..cluster_log import SECRET_HEADER
from ..errors import ApiError
from ..http import Raw, Request, Router, ascii_digits
from ..runtime import Runtime

router = Router()

G = "Cluster"


async def cluster_map(services: Runtime, request: Request) -> tuple[int, ClusterMapView]:
    if not services.ready:
        raise ApiError(UNAVAILABLE, "the server is recovering its state; try again shortly", headers={"retry-after": "1"})
    if not services.key_is_known(request.bearer()):
        raise ApiError(UNAUTHENTICATED, "the API key is not valid")
    cluster = services.cluster
    if cluster is not None:
        return 200, cluster_view.status(cluster)
    kernel = services.kernel
    node = NodeView("local", None, tuple(p.number for p in kernel.partitions), True, {}, {})
    partitions = tuple(
        PartitionView(p.number, LeaderView("local", None, 0), p.journal.durable_lsn, p.journal.durable_lsn, 0, 0, 0, 0, 0, ())
        for p in kernel.partitions
    )
    return 200, ClusterMapView(None, "local", kernel.layout.count, "crc32", partitions, (node,))


async def partition_snapshot(services: Runtime, request: Request, partition: str) -> tuple[int, Raw]:
    cluster = services.cluster
    if cluster is None:
        raise ApiError(NOT_FOUND, "this server is not a node of a cluster")
    shown = request.headers.get(SECRET_HEADER, "")
    if not cluster.secret or not hmac.compare_digest(shown.encode(), cluster.secret.encode()):
        raise ApiError(UNAUTHENTICATED, "only a node of this cluster may ask for a partition's snapshot")
    if not ascii_digits(partition, 6) or int(partition) not in cluster.followers:
        raise ApiError(VALIDATION_FAILED, f"no partition {partition[:20]!r} in this cluster")
    path = cluster.newest_snapshot(int(partition))
    if path is None:
        raise ApiError(NOT_FOUND, f"this node has no snapshot of partition {partition}")
    data = await trio.to_thread.run_sync(_read, path)
    lsn = int(path.rsplit("/", 1)[1].split(".")[0])
    return 200, Raw(data, "application/octet-stream", {"x-runstate-snapshot-lsn": str(lsn)})


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


endpoint(router, "GET", "/v1/cluster", Doc(
    "The partition map: which node leads each partition, and the nodes (our extension; any valid key)",
    (Reply(200, "ClusterMap"),), errors=("401", "503"), group=G, takes_key=True,
), cluster_map, public=True)
endpoint(router, "GET", "/v1/cluster/partitions/{partition}/snapshot", Doc(
    "A partition's newest snapshot, for a node of the same cluster", (Reply(200, None, content_type="application/octet-stream"),),
    errors=("400", "401", "404"), group=G,
), partition_snapshot, public=True)
