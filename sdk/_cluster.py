"""Requests to their partition's leader: the client's view of a cluster (`GET /v1/cluster`).

A cluster spreads spaces over partitions (`1 + CRC-32(space id) mod partitions`; partition 0 for
what belongs to no space), each led by one node. Any node answers any request: one that does not
lead the request's partition passes it on to the leader and passes the answer back, with
`x-runstate-forwarded-by` naming itself. That costs a hop, so `ClusterRouter` learns the map and
sends each request of a space to its partition's leader itself:

- it starts as a plain transport to the configured URL, and looks at the map (`GET /v1/cluster`,
  with the caller's key) the first time an answer says it was passed on: a single node never
  passes anything on, so there nothing changes at all;
- a request of a space goes to the leader the map names for its partition, on a transport of its
  own to that node (the same kind as for the configured URL); anything else (no space, a
  partition without a leader in the map, a leader at the configured URL) goes to the configured
  URL;
- when a leader cannot be reached, or answers 503 (it stopped leading, it cannot serve), the
  request is sent again at once to the configured URL, whose node passes it on to whoever leads
  now (the request's idempotency key makes that safe), and the map is looked at again; a node
  that could not be reached is left alone for `NODE_DOWN_S`. The map is looked at again too when
  an answer was passed on although the map sent it to the leader (the map is a moment old); no
  more than once every `REFRESH_MIN_S`.
"""

from __future__ import annotations

import zlib
from typing import Any, Callable, Mapping
from urllib.parse import unquote

import anyio

from . import _runtime
from .transport import Exchange, Transport, TransportError

__all__ = ["ClusterRouter", "partition_of", "FORWARDED_BY", "REFRESH_MIN_S", "NODE_DOWN_S"]

FORWARDED_BY = "x-runstate-forwarded-by"
# The map is looked at again at most this often.
REFRESH_MIN_S = 1.0
# A node that could not be reached is not sent anything for this long (its requests go through
# the configured URL).
NODE_DOWN_S = 2.0
_SPACES = "/v1/spaces/"


def partition_of(space_id: str, partitions: int) -> int:
    """The partition that holds `space_id` in a cluster of `partitions` data partitions (the
    server's `actors/layout.py`)."""
    return 1 + zlib.crc32(space_id.encode("utf-8", "surrogatepass")) % partitions


class ClusterRouter:
    """A transport that sends each request to its partition's leader (see the module docstring).

    `make(url)` gives the transport to one node; `base` is the one to the configured URL."""

    def __init__(self, base_url: str, base: Transport, make: Callable[[str], Transport]) -> None:
        self.base_url = base_url
        self._base = base
        self._make = make
        self._nodes: dict[str, Transport] = {}
        self._partitions = 0
        self._leaders: dict[int, str] = {}
        self._down: dict[str, float] = {}
        self._learned_at = -float("inf")
        self._learning = False
        self.learned = 0  # how many times the map was read (for tests)

    @property
    def requests(self) -> int:
        """Requests written by this transport's connections, to every node (for the bench)."""
        return sum(int(getattr(t, "requests", 0)) for t in (self._base, *self._nodes.values()))

    def leader_url(self, path: str) -> str | None:
        """The URL of the node to send `path` to, when the map names one other than the configured URL."""
        if not self._leaders or not path.startswith(_SPACES):
            return None
        segment = path[len(_SPACES):].split("/", 1)[0].split("?", 1)[0]
        url = self._leaders.get(partition_of(unquote(segment), self._partitions))
        if url is None or url == self.base_url:
            return None
        until = self._down.get(url)
        if until is not None:
            if anyio.current_time() < until:
                return None
            del self._down[url]
        return url

    async def send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Exchange:
        url = self.leader_url(path)
        if url is not None:
            node = self._nodes.get(url)
            if node is None:
                node = self._nodes[url] = self._make(url)
            try:
                answer = await node.send(method, path, headers, body, timeout_s)
            except TransportError as error:
                _runtime.log.info("cluster node %s could not be reached (%s): sending through %s", url, error, self.base_url)
                self._down[url] = anyio.current_time() + NODE_DOWN_S
                self._learn_soon(headers)
            else:
                if answer[0] != 503:
                    if FORWARDED_BY in answer[1]:
                        self._learn_soon(headers)  # the map sent it to a node that no longer leads
                    return answer
                self._learn_soon(headers)
        answer = await self._base.send(method, path, headers, body, timeout_s)
        if FORWARDED_BY in answer[1]:
            self._learn_soon(headers)
        return answer

    def _learn_soon(self, headers: Mapping[str, str]) -> None:
        now = anyio.current_time()
        if self._learning or now - self._learned_at < REFRESH_MIN_S:
            return
        authorization = headers.get("authorization")
        if authorization is None:
            return
        self._learning = True
        self._learned_at = now
        _runtime.spawn_background(self._learn, authorization, name="runstate-cluster-map")

    async def _learn(self, authorization: str) -> None:
        """Read the map from the configured URL; on any failure keep the one known."""
        import json

        try:
            status, _, data = await self._base.send("GET", "/v1/cluster", {"authorization": authorization}, None, 10.0)
            if status != 200:
                _runtime.log.info("could not read the cluster map from %s: answered %s", self.base_url, status)
                return
            document = json.loads(data)
            self._read_map(document)
        except (TransportError, ValueError, KeyError, TypeError) as error:
            _runtime.log.info("could not read the cluster map from %s: %s", self.base_url, error)
        finally:
            self._learning = False
            self.learned += 1

    def _read_map(self, document: Any) -> None:
        if document.get("cluster") is None or document.get("layout") != "crc32":
            self._partitions, self._leaders = 0, {}  # one node: everything goes to it
            return
        leaders: dict[int, str] = {}
        for entry in document["map"]:
            leader = entry.get("leader") or {}
            if leader.get("url"):
                leaders[int(entry["partition"])] = str(leader["url"]).rstrip("/")
        self._partitions = int(document["partitions"])
        self._leaders = leaders

    async def aclose(self) -> None:
        for transport in (*self._nodes.values(), self._base):
            close = getattr(transport, "aclose", None)
            if close is not None:
                await close()
