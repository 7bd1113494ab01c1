"""Slow clients cannot hold the server: raw sockets against a real `runstate serve` process.

The server runs with its slow-client timeouts shortened (`--keep-alive-s 1`, `--read-timeout-s
2.5`, `--body-timeout-s 1`, and long polls capped at 2 s so they stay under the read timeout, as
the defaults do: 30 s under 90 s). Each test proves two things: the hostile connection is closed
within its bound, and other clients are served normally meanwhile and afterwards.
"""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from runstate.actors import Limits
from runstate.server.settings import Settings

from ..servers import ServerProcess

pytestmark = pytest.mark.e2e

KEEP_ALIVE_S = 1.0
READ_TIMEOUT_S = 2.5
BODY_TIMEOUT_S = 1.0
WAIT_MS_MAX = 2000
# How much later than its bound a connection may be closed on a loaded machine.
SLACK_S = 3.0


@pytest.fixture(scope="module")
def slow_server():
    args = [
        "--keep-alive-s", str(KEEP_ALIVE_S),
        "--read-timeout-s", str(READ_TIMEOUT_S),
        "--body-timeout-s", str(BODY_TIMEOUT_S),
        "--wait-ms-max", str(WAIT_MS_MAX),
    ]
    with ServerProcess(*args) as server:
        yield server


def _address(server: ServerProcess) -> tuple[str, int]:
    host, port = server.base_url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Read until the server closes the connection (True) or `seconds` pass (False)."""
    deadline = time.monotonic() + seconds
    received = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return True, received
        if not chunk:
            return True, received
        received += chunk
    return False, received


def _healthy(server: ServerProcess) -> None:
    started = time.monotonic()
    assert httpx.get(server.base_url + "/healthz", timeout=5).status_code == 200
    assert time.monotonic() - started < 2


def test_the_defaults_keep_long_polls_and_keep_alive_under_the_read_timeout():
    """Out of the box a long poll (30 s) and an idle keep-alive (15 s) both fit inside the read timeout."""
    settings = Settings()
    assert settings.read_timeout_s > Limits().wait_ms_max / 1000 + 10
    assert settings.read_timeout_s > settings.keep_alive_s
    assert settings.body_timeout_s < settings.read_timeout_s


def test_slowloris_headers_are_cut_off(slow_server):
    """Forty connections sending their headers a few bytes at a time are all closed within the
    keep-alive bound, while a normal client is served at once."""
    sockets = []
    for number in range(40):
        sock = socket.create_connection(_address(slow_server), timeout=5)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow-%d: " % number)
        sockets.append(sock)
    _healthy(slow_server)
    started = time.monotonic()
    for _ in range(3):  # keep trickling: a byte now and then does not buy more time
        for sock in sockets:
            try:
                sock.sendall(b"a")
            except OSError:
                pass
        time.sleep(0.3)
    for sock in sockets:
        closed, _ = _closed_within(sock, KEEP_ALIVE_S + READ_TIMEOUT_S + SLACK_S - (time.monotonic() - started))
        assert closed
        sock.close()
    _healthy(slow_server)


def test_a_body_that_never_ends_gets_408_and_the_connection_closes(slow_server):
    """Headers promise 1000 bytes, 10 arrive: 408 with the envelope after the body timeout, then close."""
    sock = socket.create_connection(_address(slow_server), timeout=5)
    sock.sendall(
        b"POST /v1/spaces/default/scopes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer e2e-key\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"name\": \""
    )
    started = time.monotonic()
    _healthy(slow_server)
    closed, received = _closed_within(sock, BODY_TIMEOUT_S + SLACK_S)
    elapsed = time.monotonic() - started
    sock.close()
    assert closed and BODY_TIMEOUT_S * 0.8 <= elapsed <= BODY_TIMEOUT_S + SLACK_S
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    assert json.loads(body)["error"]["code"] == "REQUEST_TIMEOUT"
    _healthy(slow_server)


def test_a_client_that_never_reads_its_answers_is_dropped(slow_server):
    """A client pipelining requests for a large document with a tiny receive buffer and never reading
    fills the socket; the server does not wait on it past the read timeout, and others are served."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(_address(slow_server))
    request = b"GET /v1/openapi.json HTTP/1.1\r\nHost: x\r\n\r\n"
    sock.settimeout(2)
    try:  # about 20 MB of answers: far more than the socket buffers on both sides hold
        for _ in range(400):
            sock.sendall(request)
    except (socket.timeout, OSError):
        pass
    started = time.monotonic()
    _healthy(slow_server)
    time.sleep(READ_TIMEOUT_S + 0.5)  # not reading at all
    closed, _ = _closed_within(sock, SLACK_S + 5)  # now drain what was sent; the server has given up
    sock.close()
    assert closed and time.monotonic() - started < READ_TIMEOUT_S + SLACK_S + 6
    _healthy(slow_server)


def test_a_long_poll_under_the_cap_is_not_cut_by_the_read_timeout(slow_server):
    """A recv that waits the whole (capped) 2 s while the client sends nothing is answered 204."""
    with slow_server.client() as http:
        scope_id = http.post("/v1/spaces/default/scopes", json={}).json()["id"]
        mailbox_id = http.post("/v1/spaces/default/mailboxes", json={"name": "slow"}).json()["id"]
        started = time.monotonic()
        answer = http.post(
            f"/v1/spaces/default/mailboxes/{mailbox_id}/recv",
            json={"scopeId": scope_id, "holder": "h", "holderSession": "s", "waitMs": 20_000},
        )
        assert answer.status_code == 204
        assert WAIT_MS_MAX / 1000 * 0.9 <= time.monotonic() - started < READ_TIMEOUT_S
        # The same keep-alive connection still works afterwards.
        assert http.get(f"/v1/spaces/default/scopes/{scope_id}").status_code == 200


def _ask_health(sock: socket.socket) -> bytes:
    """One GET /healthz on a kept-alive socket; the whole answer (its Content-Length read)."""
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    sock.settimeout(5)
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        assert chunk, "the server closed a connection in the middle of an answer"
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")).split(b":")[1])
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_an_idle_connection_closes_after_keep_alive_and_a_busy_one_stays_open(slow_server):
    """The keep-alive bound counts from the end of a connection's last answer: a connection asked
    nothing for `keep_alive_s` is closed, one that keeps asking (each request inside the bound) is
    served on the same socket for several times that bound, its head and body in one answer."""
    idle = socket.create_connection(_address(slow_server), timeout=5)
    assert _ask_health(idle).startswith(b"HTTP/1.1 200")
    answered = time.monotonic()
    closed, _ = _closed_within(idle, KEEP_ALIVE_S + SLACK_S)
    assert closed and time.monotonic() - answered >= KEEP_ALIVE_S * 0.9
    idle.close()
    busy = socket.create_connection(_address(slow_server), timeout=5)
    started = time.monotonic()
    asked = 0
    while time.monotonic() - started < 3 * KEEP_ALIVE_S:
        answer = _ask_health(busy)
        assert answer.startswith(b"HTTP/1.1 200") and b"content-length" in answer.lower()
        asked += 1
        time.sleep(KEEP_ALIVE_S / 4)
    assert asked >= 6
    closed, _ = _closed_within(busy, KEEP_ALIVE_S + SLACK_S)
    assert closed
    busy.close()
