"""Any node answers: a request for a partition led elsewhere is sent on to its leader.

The official clients follow no redirects and know nothing of partitions, so a node that does not
lead a request's partition passes the request on, as it came (method, path and query, body,
headers: the bearer key, the Idempotency-Key, the user agent), to the leader's advertised URL, and
answers with what the leader answered, status, headers and body alike. Our SDKs learn the map
(`GET /v1/cluster`) and go to the leader directly, so for them this is the exception.

While the partition has no leader (a failover: about the session's TTL), the request waits for
the new one, up to `cluster_forward_wait_s`, rather than failing; then 503 UNAVAILABLE with
Retry-After. When the leader dies while a request is on its way, the request is sent again to the
next leader only if sending it twice is harmless: a read, or a change with an Idempotency-Key
(which the SDKs and the official clients send on every change); any other change is answered
503, since it may or may not have been made. The same holds for a request this node took as the
leader and could not run because it stopped leading first (a hand-off, a lost session): refused
before anything was done, it goes to the new leader (`lead_or_forward`).

A forwarded request carries `x-runstate-forwarded-by`, the nodes it went through: a node that
gets one for a partition it does not lead (its map was a moment old) waits for the leader as any
request would, and sends it on once more at most. The answer passed back carries it too, naming
the node that passed it: an SDK that sees it learns the map again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, TypeVar

import trio

from ..actors.errors import UNAVAILABLE, KernelError
from . import cluster_view
from .errors import ApiError
from .peers import Answer, Broken, NotReached, PeerError, Peers

if TYPE_CHECKING:
    from ..actors.kernel import Kernel

T = TypeVar("T")

__all__ = ["Forwarded", "forward", "lead_or_forward", "FORWARDED_BY", "partition_of_request"]

FORWARDED_BY = "x-runstate-forwarded-by"
# Hop-by-hop and per-connection headers, never passed on (RFC 9110 7.6.1), and what `peers` sets itself.
_NOT_PASSED = frozenset({
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host",
    "content-length", "expect",
})
_NOT_RETURNED = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"date", b"server"})
# How long a forwarded request may take at the leader: above the longest long poll (30 s).
FORWARD_TIMEOUT_S = 75.0


def partition_of_request(kernel: Kernel, method: str, pattern: str, params: dict[str, str]) -> int | None:
    """The partition a request belongs to, for the leader to answer; None: any node answers it.

    A space's routes belong to the space's partition; the admin API's changes (keys) to the system
    partition. Everything else is answered where it arrives: the probes, the metrics, this node's
    view of the cluster, the admin API's reads (they read the keys and spaces this node follows,
    committed and at most a moment old)."""
    space = params.get("space")
    if space is not None:
        if pattern.startswith("/v1/spaces/{space}/history"):
            return None  # read from this node's own copy of the partition (`routes/history.py`)
        return int(kernel.layout.of(space))
    if pattern.startswith("/v1/admin/") and method != "GET":
        return 0
    return None


async def _send_unless(sending: set[trio.CancelScope], peers: Peers, method: str, url: str, target: str,
                       headers: list[tuple[bytes, bytes]], body: bytes) -> Answer | None:
    """Send the request; None if the partition's leader changes first (the cluster cancels every
    scope in `sending` then: no task per request watches for it)."""
    with trio.CancelScope() as watched:
        sending.add(watched)
        try:
            return await peers.request(method, url, target, headers, body)
        finally:
            sending.discard(watched)
    return None


# The leader's answer, passed back as it came (its per-connection headers left out): a peer's answer.
Forwarded = Answer


async def forward(cluster: Any, number: int, method: str, path: str, headers: dict[str, str], body: bytes,
                  wait_s: float) -> Forwarded | None:
    """The answer of partition `number`'s leader to this request; None when this node leads it."""
    through = [node for node in headers.get(FORWARDED_BY, "").split(",") if node.strip()]
    hops = len(through)
    repeatable = method == "GET" or "idempotency-key" in headers
    sent = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items() if name not in _NOT_PASSED]
    sent.append((FORWARDED_BY.encode(), ",".join([*through, cluster.node_id]).encode("latin-1")))
    while True:
        if cluster.leads(number):
            return None
        # The wait counts from now: a request held by a leader that went away may have been
        # on its way for longer than that already.
        leader = await cluster.wait_for_leader(number, trio.current_time() + wait_s)
        if leader is None:
            raise ApiError(UNAVAILABLE, cluster_view.unserved(cluster, number), headers={"retry-after": "1"})
        if leader.node == cluster.node_id:
            return None
        if hops >= 2:
            raise ApiError(UNAVAILABLE, f"partition {number}: the nodes disagree on its leader for now; try again",
                           headers={"retry-after": "1"})
        try:
            with trio.fail_after(FORWARD_TIMEOUT_S):
                answer = await _send_unless(cluster.sending(number), cluster.peers, method, leader.url, path, sent, body)
        except NotReached:
            # The leader is gone and the request never reached it: wait for the next one.
            cluster.forget_leader(number, leader)
            continue
        except Broken as error:
            # Gone while answering: the change may or may not have been made. Send it again only
            # if that is harmless.
            if not repeatable:
                raise ApiError(UNAVAILABLE, f"partition {number}'s leader went away while answering; the change "
                               "may or may not have been made", headers={"retry-after": "1"}) from error
            cluster.forget_leader(number, leader)
            continue
        except (PeerError, trio.TooSlowError) as error:
            raise ApiError(UNAVAILABLE, f"partition {number}'s leader did not answer: {type(error).__name__}",
                           headers={"retry-after": "1"}) from error
        if answer is None:
            # A new leader was elected while the old one held the request (paused, or cut off):
            # the old one can no longer commit it (its fence names the old epoch).
            if not repeatable:
                raise ApiError(UNAVAILABLE, f"partition {number}'s leader changed while answering; the change "
                               "may or may not have been made", headers={"retry-after": "1"}) from None
            continue
        returned = [(name, value) for name, value in answer.headers if name.lower() not in _NOT_RETURNED]
        # Its length, as the leader (and any node serving it itself) says it: not sent in chunks.
        if answer.status not in (204, 304) and method != "HEAD":
            returned.append((b"content-length", b"%d" % len(answer.body)))
        return Forwarded(answer.status, returned, answer.body)


async def lead_or_forward(cluster: Any, number: int, method: str, path: str, headers: dict[str, str], body: bytes,
                          wait_s: float, serve: Callable[[], Awaitable[T]]) -> Forwarded | T:
    """The leader's answer: `serve()`'s here while this node leads partition `number`, else the
    answer of the node that does. A request refused here because this node stopped leading
    before running it is passed to the new leader when sending it again is harmless."""
    repeatable = method == "GET" or "idempotency-key" in headers
    while True:
        answer = await forward(cluster, number, method, path, headers, body, wait_s)
        if answer is not None:
            return answer
        try:
            return await serve()
        except KernelError as error:
            if not (repeatable and cluster.refused_as_follower(number, error)):
                raise
