"""Requests to their partition's leader (`runstate._cluster.ClusterRouter`), against scripted nodes.

The router starts as a transport to the configured URL and reads the map only when an answer
says it was passed on by another node; then each request of a space goes to its partition's
leader (CRC-32 of the space id mod the partitions, plus one), and back through the configured
URL, which passes it on, when the leader cannot be reached or answers 503, the map then read
again. A single node never passes anything on: nothing changes there. In virtual time.
"""

from __future__ import annotations

import json
from typing import Callable, Mapping

import pytest
import trio

from runstate._cluster import NODE_DOWN_S, REFRESH_MIN_S, ClusterRouter, partition_of
from runstate.transport import Exchange, TransportError

pytestmark = pytest.mark.trio

BASE = "http://n0:8080"
AUTH = {"authorization": "Bearer k"}


class Node:
    """A scripted node: answers `answer(method, path)` and keeps what it was sent."""

    def __init__(self, name: str, answer: Callable[[str, str], Exchange | None] | None = None) -> None:
        self.name = name
        self.answer = answer
        self.sent: list[tuple[str, str]] = []
        self.down = False

    async def send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Exchange:
        if self.down:
            raise TransportError(f"{self.name}: connection refused")
        self.sent.append((method, path))
        answer = self.answer(method, path) if self.answer else None
        return answer if answer is not None else (200, {}, b'{"ok":true}')


def cluster_map(leaders: dict[int, str], partitions: int = 4) -> Exchange:
    entries = [{"partition": p, "leader": {"node": url, "url": url, "epoch": 1}} for p, url in leaders.items()]
    document = {"cluster": "c", "node": "n0", "partitions": partitions, "layout": "crc32", "map": entries, "nodes": []}
    return 200, {}, json.dumps(document).encode()


def spaces_by_partition(partitions: int = 4) -> dict[int, str]:
    found: dict[int, str] = {}
    n = 0
    while len(found) < partitions:
        space = f"space-{n}"
        found.setdefault(partition_of(space, partitions), space)
        n += 1
    return found


def make_router(base: Node, nodes: dict[str, Node]) -> ClusterRouter:
    return ClusterRouter(BASE, base, lambda url: nodes[url])


async def test_a_single_node_is_never_asked_for_the_map_and_gets_everything():
    base = Node("n0")
    router = make_router(base, {})
    for path in ("/v1/spaces/a/claims", "/v1/spaces/b/tasks", "/v1/key"):
        await router.send("POST", path, AUTH, b"{}", 5)
    assert [path for _, path in base.sent] == ["/v1/spaces/a/claims", "/v1/spaces/b/tasks", "/v1/key"]
    assert router.learned == 0


async def test_after_a_passed_on_answer_each_space_goes_to_its_leader(autojump_clock):
    spaces = spaces_by_partition()
    leaders = {1: BASE, 2: "http://n1:8080", 3: "http://n2:8080", 4: "http://n1:8080"}
    forwarded = {"x-runstate-forwarded-by": "n0"}

    def base_answer(method: str, path: str) -> Exchange | None:
        if path == "/v1/cluster":
            return cluster_map(leaders)
        return 200, forwarded, b"{}"

    base, n1, n2 = Node("n0", base_answer), Node("n1"), Node("n2")
    router = make_router(base, {"http://n1:8080": n1, "http://n2:8080": n2})
    await router.send("POST", f"/v1/spaces/{spaces[2]}/claims", AUTH, b"{}", 5)  # passed on by n0
    await trio.sleep(0.01)
    assert router.learned == 1 and ("GET", "/v1/cluster") in base.sent
    for partition, space in spaces.items():
        await router.send("POST", f"/v1/spaces/{space}/claims", AUTH, b"{}", 5)
    await router.send("GET", "/v1/key", AUTH, None, 5)
    assert [p for _, p in n1.sent] == [f"/v1/spaces/{spaces[2]}/claims", f"/v1/spaces/{spaces[4]}/claims"]
    assert [p for _, p in n2.sent] == [f"/v1/spaces/{spaces[3]}/claims"]
    assert base.sent[-2:] == [("POST", f"/v1/spaces/{spaces[1]}/claims"), ("GET", "/v1/key")]


async def test_a_leader_that_cannot_be_reached_is_skipped_and_the_map_read_again(autojump_clock):
    spaces = spaces_by_partition()
    leaders = {2: "http://n1:8080"}
    maps = [0]

    def base_answer(method: str, path: str) -> Exchange | None:
        if path == "/v1/cluster":
            maps[0] += 1
            return cluster_map(leaders)
        return 200, {"x-runstate-forwarded-by": "n0"}, b'{"via":"n0"}'

    base, n1 = Node("n0", base_answer), Node("n1")
    router = make_router(base, {"http://n1:8080": n1})
    path = f"/v1/spaces/{spaces[2]}/claims"
    await router.send("POST", path, AUTH, b"{}", 5)
    await trio.sleep(REFRESH_MIN_S)  # (the map is read at most once a second)
    n1.down = True
    started = trio.current_time()
    status, _, body = await router.send("POST", path, AUTH, b"{}", 5)
    assert (status, body) == (200, b'{"via":"n0"}')  # sent again at once through the configured URL
    await trio.sleep(0.01)
    assert maps[0] == 2  # and the map read again
    await router.send("POST", path, AUTH, b"{}", 5)  # n1 is left alone for a while
    assert not n1.sent
    n1.down = False
    await trio.sleep(NODE_DOWN_S - (trio.current_time() - started))
    await router.send("POST", path, AUTH, b"{}", 5)
    assert n1.sent == [("POST", path)]


async def test_a_503_from_the_leader_goes_through_the_configured_url(autojump_clock):
    spaces = spaces_by_partition()

    def base_answer(method: str, path: str) -> Exchange | None:
        if path == "/v1/cluster":
            return cluster_map({2: "http://n1:8080"})
        return 200, {"x-runstate-forwarded-by": "n0"}, b'{"via":"n0"}'

    base = Node("n0", base_answer)
    n1 = Node("n1", lambda method, path: (503, {}, b'{"error":{"code":"UNAVAILABLE","message":"not leading"}}'))
    router = make_router(base, {"http://n1:8080": n1})
    path = f"/v1/spaces/{spaces[2]}/claims"
    await router.send("POST", path, AUTH, b"{}", 5)
    await trio.sleep(0.01)
    assert (await router.send("POST", path, AUTH, b"{}", 5))[2] == b'{"via":"n0"}'
    assert n1.sent == [("POST", path)]


async def test_a_map_of_one_node_routes_nothing(autojump_clock):
    single = {"cluster": None, "node": "local", "partitions": 1, "layout": "crc32",
              "map": [{"partition": 1, "leader": {"node": "local", "url": None, "epoch": 0}}], "nodes": []}

    def base_answer(method: str, path: str) -> Exchange | None:
        if path == "/v1/cluster":
            return 200, {}, json.dumps(single).encode()
        return 200, {"x-runstate-forwarded-by": "n0"}, b"{}"

    base = Node("n0", base_answer)
    router = make_router(base, {})
    await router.send("POST", "/v1/spaces/a/claims", AUTH, b"{}", 5)
    await trio.sleep(0.01)
    await router.send("POST", "/v1/spaces/a/claims", AUTH, b"{}", 5)
    assert [p for _, p in base.sent].count("/v1/spaces/a/claims") == 2


@pytest.mark.anyio
async def test_the_hash_is_the_servers():
    """CRC-32 of the UTF-8 id, mod the partitions, plus one: the server's own `Layout.of`."""
    from runstate.actors.layout import Layout

    for space in ("default", "research", "team-7", "é", "x" * 300):
        for partitions in (1, 3, 4, 16):
            assert partition_of(space, partitions) == Layout(partitions).of(space)

