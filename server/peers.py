"""Requests to the other nodes of a cluster: HTTP/1.1 on connections kept open between requests.

A node passes a request for a partition led elsewhere to its leader (`forward.py`). That is one
request and one answer, whole, on a connection to a handful of peers, so it goes on the small
HTTP/1.1 client of `snapshots/http1.py` (which the etcd client uses too): connections kept open
per peer, each request's head and body in one write (the leader then reads it whole with its head
and answers it on its plain path, `connection.py`), answers read by their plainest shape, and
what went wrong told apart, since the caller decides from it whether to send again: `NotReached`
(the request never left), `Broken` (it may or may not have been done), `PeerError` (an answer
that cannot be read, a request that cannot be sent). A request cancelled on its way (a leader
change, a client gone, a timeout) closes its connection.
"""

from __future__ import annotations

from ..snapshots.http1 import IDLE_S_MAX, Answer, Broken, Connections, LinkError, NotReached

__all__ = ["Peers", "Answer", "PeerError", "NotReached", "Broken", "CONNECTIONS_MAX", "IDLE_PER_PEER_MAX", "IDLE_S_MAX"]

# Requests on their way to peers at once (each on its own connection).
CONNECTIONS_MAX = 256
# Idle connections kept per peer; more are closed once answered.
IDLE_PER_PEER_MAX = 64

PeerError = LinkError


class Peers(Connections):
    """Requests to peers by their advertised base URL (`http://host:port`), on kept connections.
    An idle connection older than `IDLE_S_MAX` is closed rather than taken: well before a peer's
    keep-alive could end it under a request that, without an Idempotency-Key, could then only be
    answered 503."""

    def __init__(self, connections_max: int = CONNECTIONS_MAX, idle_per_peer_max: int = IDLE_PER_PEER_MAX) -> None:
        super().__init__(connections_max, idle_per_peer_max, IDLE_S_MAX)
