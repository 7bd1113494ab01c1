"""The transport seam: how one HTTP exchange reaches a server.

A transport does one thing: send a request and hand back the status, the headers and the body
bytes. Everything the wire contract says about a *logical call* (authentication, idempotency keys,
retries, JSON, the error envelope) lives one layer up, in `runstate._request`, so every transport
gets it for free and a test can swap the network for a script or for the server's ASGI app
(`runstate.testing`).

A transport signals a failure to exchange (no connection, a timeout, a broken response) by raising
`TransportError`; the request layer retries those and nothing else. Any HTTP answer, even a 503, is
a successful exchange and is returned, not raised.
"""

from __future__ import annotations

import ssl
from typing import Mapping, Protocol, runtime_checkable

import httpx

from .errors import ConfigError

__all__ = ["Transport", "TransportError", "HTTPTransport", "SocketTransport", "Exchange", "default_transport"]

# status, headers (names in lower case), body bytes.
Exchange = tuple[int, Mapping[str, str], bytes]
"""What a transport returns: the status, the headers (names in lower case) and the body's bytes."""
# Connections one transport keeps to its server at most (each long poll in flight holds one).
CONNECTIONS_MAX = 256


class TransportError(Exception):
    """The request could not be exchanged with the server; it is safe to send again.

    The request layer retries it (with the same idempotency key) and, when the retries are used
    up, raises `UnavailableError` with this error as its cause.
    """


@runtime_checkable
class Transport(Protocol):
    """One HTTP exchange. `path` starts with `/` and already carries any query string.

    The seam a test (or a proxy of your own) plugs into: `AsyncRunstate(transport=...)` sends every
    request through it. `runstate.testing` has one that runs the server in-process.

    A transport may also offer `new_jitter()`, returning a `random.Random` (or None): a client made
    on it draws its jitter (renewal intervals, retry pauses, wait loops) from what it returns,
    rather than from the process's generator. The in-process one seeds it from the server's seed."""

    async def send(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout_s: float,
    ) -> Exchange:
        """Send one request and return `(status, headers, body)`; raise `TransportError` when no
        answer came (the request layer sends it again, with the same idempotency key)."""
        ...


class HTTPTransport:
    """HTTP/1.1 to a server through one `httpx.AsyncClient` (a keep-alive connection pool).

    Redirects are not followed: a 3xx is handed back as it is, as the wire contract expects.
    `timeout_s` bounds each phase (connect, write, each read, waiting for a pooled connection), not
    the whole exchange, so a long poll needs a value above its wait.
    """

    def __init__(
        self, base_url: str, *, client: httpx.AsyncClient | None = None, ca_bundle: str | None = None,
        connections_max: int = CONNECTIONS_MAX,
    ) -> None:
        """`ca_bundle`: a PEM file of the certificates to trust for an https server (a self-signed
        one, or a private CA's), instead of the system's roots."""
        self.base_url = base_url
        """The server's URL, which every path is sent under."""
        if client is None:
            # Every connection may stay open for the next request: a client shared by many agents
            # holds one per long poll in flight, and closing those past httpx's 20 kept-alive
            # would open a new connection for most requests. A plain http:// server needs no
            # TLS context (building one loads the system's certificates).
            verify: ssl.SSLContext | bool = not base_url.startswith("http://")
            if ca_bundle is not None:
                try:
                    verify = ssl.create_default_context(cafile=ca_bundle)
                except (OSError, ssl.SSLError) as err:
                    raise ConfigError(f"cannot load the CA bundle {ca_bundle}: {err}") from err
            limits = httpx.Limits(max_connections=connections_max, max_keepalive_connections=connections_max)
            client = httpx.AsyncClient(base_url=base_url, follow_redirects=False, limits=limits, verify=verify)
            self._owns_client = True
        else:
            self._owns_client = False
        self._client = client

    async def send(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout_s: float,
    ) -> Exchange:
        """One request through httpx; a failure to exchange it raises `TransportError`."""
        try:
            response = await self._client.request(
                method,
                path,
                content=body,
                headers=dict(headers),
                timeout=timeout_s,
                follow_redirects=False,
            )
        except httpx.HTTPError as err:
            raise TransportError(f"{type(err).__name__}: {err}") from err
        return response.status_code, {k.lower(): v for k, v in response.headers.items()}, response.content

    async def aclose(self) -> None:
        """Close the connections (of an httpx client this transport made; one passed in stays open)."""
        if self._owns_client:
            await self._client.aclose()


def default_transport(base_url: str, ca_bundle: str | None = None) -> Transport:
    """The transport a client makes for `base_url`: `SocketTransport` (HTTP/1.1 on plain sockets,
    `runstate._wire`) for an `http://` server with no proxy set for its host; `HTTPTransport`
    (httpx) for `https://` (trusting `ca_bundle` when given), or when the environment names a
    proxy for it, as httpx honours."""
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass

    parts = urlsplit(base_url)
    if parts.scheme == "http" and parts.hostname:
        proxies = getproxies()
        if not (proxies.get("http") or proxies.get("all")) or proxy_bypass(parts.hostname):
            return SocketTransport(base_url)
    return HTTPTransport(base_url, ca_bundle=ca_bundle)


def cluster_transport(base_url: str, ca_bundle: str | None = None) -> Transport:
    """What a client makes for `base_url`: `default_transport` to it, in a `ClusterRouter` that
    sends each request to its partition's leader once it learns the cluster's map."""
    from ._cluster import ClusterRouter

    def make(url: str) -> Transport:
        return default_transport(url, ca_bundle=ca_bundle)

    return ClusterRouter(base_url.rstrip("/"), make(base_url), make)



# Defined with the wire code, which imports the names above from this module.
from ._wire import SocketTransport  # noqa: E402
