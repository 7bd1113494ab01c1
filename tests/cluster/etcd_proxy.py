"""A relay between the nodes and one etcd member that holds back or drops chosen answers, for the tests.

    with EtcdProxy(member.client_url) as proxy:
        proxy.url                                # a node's etcd endpoint, instead of the member's
        rule = Rule(campaign(3), hold_s=1.5)     # etcd's answer to the next campaign for partition 3
        proxy.add(rule)                          # comes 1.5 s late (drop=True: never; the put is made)
        rule.seen                                # when each request it caught was passed on (monotonic)

Each connection a client opens gets a connection of its own to the member, and bytes flow both
ways as they come. What the client sends is read as HTTP/1.1 requests (head, then a body of its
Content-Length) to find the ones a rule catches; etcd's answer to such a request is held for
`hold_s` before its first byte goes back, or, with `drop`, the connection is closed once etcd has
answered, so the request was carried out and the client never hears how. This needs no HTTP
parsing of the answers: our etcd client sends a request on a connection only once it has
read the answer to the one before, so the bytes the member sends after a request are its answer.
A watch is a request like another; its answer is a stream that lasts as long as the watch.

A rule may be shared by several relays (one per member): its count of requests to catch is one
count across them, as a fault on "the next campaign" should be. A relay whose member is down
closes the connections it accepts at once (the client hears nothing, as after a member's crash).
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

__all__ = ["EtcdProxy", "Rule", "campaign"]

# A request's head or body larger than this is passed on unread (the relay looks at etcd's JSON only).
READ_BYTES_MAX = 4 << 20


def campaign(partition: int | None = None) -> Callable[[str, dict], bool]:
    """Catches a campaign: a txn whose success branch puts a partition's leader key (`partition`'s, or any)."""
    suffix = b"/leader" if partition is None else f"/p/{partition:03d}/leader".encode()

    def match(path: str, body: dict) -> bool:
        if path != "/v3/kv/txn":
            return False
        for op in body.get("success") or ():
            put = op.get("request_put") if isinstance(op, dict) else None
            if put and base64.b64decode(put.get("key", "")).endswith(suffix):
                return True
        return False

    return match


@dataclass
class Rule:
    match: Callable[[str, dict], bool]
    hold_s: float = 0.0
    drop: bool = False
    times: int = 1  # requests to catch, across every relay that has the rule (then it does nothing)
    seen: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, path: str, body: dict) -> bool:
        if not self.match(path, body):
            return False
        with self._lock:
            if self.times <= 0:
                return False
            self.times -= 1
            self.seen.append(time.monotonic())
            return True


class _Link:
    """One client connection and its connection to the member."""

    def __init__(self, proxy: "EtcdProxy", client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.caught: Rule | None = None  # the rule that caught the request whose answer comes next
        self.lock = threading.Lock()

    def start(self) -> None:
        threading.Thread(target=self._requests, daemon=True).start()
        threading.Thread(target=self._answers, daemon=True).start()

    def close(self) -> None:
        for sock in (self.client, self.upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _requests(self) -> None:
        buffer = b""
        try:
            while True:
                data = self.client.recv(65536)
                if not data:
                    break
                buffer += data
                while True:
                    request, buffer = _one_request(buffer)
                    if request is None:
                        break
                    raw, path, body = request
                    rule = self.proxy.catch(path, body)
                    if rule is not None:
                        with self.lock:
                            self.caught = rule
                    self.upstream.sendall(raw)
                if len(buffer) > READ_BYTES_MAX:  # not ours to read: pass it on as it is
                    self.upstream.sendall(buffer)
                    buffer = b""
        except OSError:
            pass
        self.close()

    def _answers(self) -> None:
        try:
            while True:
                data = self.upstream.recv(65536)
                if not data:
                    break
                with self.lock:
                    rule, self.caught = self.caught, None
                if rule is not None:
                    if rule.drop:
                        break  # etcd answered: the request was carried out, and nobody hears it
                    time.sleep(rule.hold_s)
                self.client.sendall(data)
        except OSError:
            pass
        self.close()


def _one_request(buffer: bytes) -> tuple[tuple[bytes, str, dict] | None, bytes]:
    """The first whole request in `buffer` (raw bytes, path, JSON body or {}) and what follows it."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None, buffer
    head = buffer[:end].decode("latin-1")
    lines = head.split("\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    total = end + 4 + length
    if len(buffer) < total:
        return None, buffer
    parts = lines[0].split(" ")
    path = parts[1] if len(parts) > 1 else ""
    try:
        body = json.loads(buffer[end + 4:total] or b"{}")
    except ValueError:
        body = {}
    return (buffer[:total], path, body if isinstance(body, dict) else {}), buffer[total:]


class EtcdProxy:
    """A relay on a free port of `host` in front of the member at `upstream` (its client URL)."""

    def __init__(self, upstream: str, host: str = "127.0.0.1") -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 2379)
        self.listener = socket.create_server((host, 0))
        self.url = f"http://{host}:{self.listener.getsockname()[1]}"
        self.rules: list[Rule] = []
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self._closed = False

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self.rules = []

    def catch(self, path: str, body: dict) -> Rule | None:
        with self._lock:
            rules = list(self.rules)
        return next((rule for rule in rules if rule.take(path, body)), None)

    def start(self) -> "EtcdProxy":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=2)
                upstream.settimeout(None)
            except OSError:
                client.close()  # the member is down
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(self, client, upstream)
            with self._lock:
                self._links = [*(known for known in self._links if known.client.fileno() >= 0), link]
            link.start()

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()

    def __enter__(self) -> "EtcdProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
