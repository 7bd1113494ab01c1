"""The doors of a real server: refusals below the router carry the envelope, bodies cost nothing unasked.

Each test drives a `runstate serve` subprocess over real sockets, since what is tested here happens
in the HTTP layer before any of our code that an in-process client reaches.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import httpx
import orjson
import pytest

from tests.servers import ServerProcess

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def server():
    with ServerProcess() as running:
        yield running


def _address(server: ServerProcess) -> tuple[str, int]:
    host, port = server.base_url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def _exchange(server: ServerProcess, data: bytes, timeout_s: float = 10) -> bytes:
    """Send `data` on a fresh connection and read until the server closes it."""
    with socket.create_connection(_address(server), timeout=timeout_s) as sock:
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


def _envelope(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"content-type: application/json" in head.lower(), head
    return status, orjson.loads(body)["error"]


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize(
    "data, status, words",
    [
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n", 431, "16384 bytes"),
        (b"GET /" + b"p" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 431, "16384 bytes"),
        (b"GARBAGE\r\n\r\n", 400, "not valid HTTP/1.1"),
        (b"POST /v1/spaces/default/scopes HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400, "Content-Length"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64), 400, "not TLS"),
        (b"GET /healthz\r\n", 400, "HTTP/0.9"),
    ],
    ids=["header-100kb", "path-100kb", "request-line", "content-length", "tls", "http-0.9"],
)
def test_refusals_of_the_http_layer_carry_the_envelope(server, data, status, words):
    """Oversized heads, malformed request lines, bad Content-Length, TLS and HTTP/0.9: status and envelope."""
    got_status, error = _envelope(_exchange(server, data))
    assert got_status == status
    assert error["code"] == "VALIDATION_FAILED"
    assert words in error["message"]
    assert error["requestId"].startswith("req_")


def test_a_16_mib_body_gets_its_413_through_an_async_client(server):
    """httpx.AsyncClient sends the whole body before reading: it reads the 413, 20 times out of 20."""

    async def main() -> list[int]:
        statuses = []
        async with httpx.AsyncClient(base_url=server.base_url, headers={"authorization": f"Bearer {server.api_key}"}, timeout=30) as client:
            for _ in range(20):
                answer = await client.post("/v1/spaces/default/scopes", content=b"x" * (16 * MIB), headers={"content-type": "application/json"})
                assert answer.json()["error"]["message"] == "request body exceeds 1048576 bytes"
                statuses.append(answer.status_code)
            assert (await client.post("/v1/spaces/default/scopes", json={})).status_code == 201  # the pool still works
        return statuses

    assert asyncio.run(main()) == [413] * 20


def test_an_unknown_key_is_refused_before_its_body_is_read(server):
    """100 connections each sending 1 MiB without a key: 401 for all, the server's RSS barely moves."""
    assert server.proc is not None
    host, port = _address(server)
    head = b"POST /v1/spaces/default/scopes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % MIB
    body = b"x" * MIB
    before = _rss_bytes(server.proc.pid)

    async def one(sent: asyncio.Event, count: list[int]) -> int:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(head + body)
        await writer.drain()
        count.append(1)
        if len(count) == 100:
            sent.set()
        await sent.wait()
        status = int((await reader.readline()).split()[1])
        writer.close()
        return status

    async def main() -> tuple[list[int], int]:
        sent, count = asyncio.Event(), []
        tasks = [asyncio.create_task(one(sent, count)) for _ in range(100)]
        await asyncio.wait_for(sent.wait(), 60)
        peak = _rss_bytes(server.proc.pid)  # every body sent, no answer read yet
        return await asyncio.gather(*tasks), peak

    statuses, during = asyncio.run(main())
    assert statuses == [401] * 100
    print(f"RSS before {before} during {during} bytes: +{(during - before) / MIB:.1f} MiB")
    assert during - before < 8 * MIB, (before, during)


def test_connections_past_the_cap_get_503_with_the_envelope():
    """With connections_max 4 held by clients that showed a valid key, a fifth connection is answered
    503 UNAVAILABLE and closed; a freed slot serves again."""
    with ServerProcess("--connections-max", "4") as capped:
        held = []
        for _ in range(4):  # one after the other, each seen served: they hold the four slots
            sock = socket.create_connection(_address(capped), timeout=10)
            sock.sendall(b"GET /v1/key HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer e2e-key\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            held.append(sock)
        try:
            status, error = _envelope(_exchange(capped, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
            assert status == 503
            assert error["code"] == "UNAVAILABLE"
            assert "connections_max" in error["message"]
        finally:
            for sock in held:
                sock.close()
        capped.wait_healthy(10)


# -- request smuggling shapes and hostile heads ------------------------------------------------------


@pytest.mark.parametrize(
    "data, status, words",
    [
        (b"POST /v1/spaces/default/scopes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer e2e-key\r\nContent-Length: 5\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "RFC 9112 6.3"),
        (b"GET /v1/key HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer e2e-key\r\nAuthorization: Bearer other\r\n\r\n", 400,
         "more than one Authorization"),
        (b"GET /healthz HTTP/3.0\r\nHost: x\r\n\r\n", 505, "HTTP/3.0 is not served"),
        (b"POST /v1/spaces/default/scopes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "Transfer-Encoding"),
        (b"POST /v1/spaces/default/scopes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer e2e-key\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"2\r\n{}\r\nzz\r\n", 400, "chunked body is malformed"),
    ],
    ids=["content-length-and-chunked", "two-authorizations", "http-3.0", "transfer-coding-not-chunked", "malformed-chunk"],
)
def test_heads_that_could_smuggle_are_refused_and_the_connection_closed(server, data, status, words):
    """h11 let these through: both framings (one proxy reads one, we the other), two keys (which
    wins?), another HTTP version on an HTTP/1 connection. Refused, the connection closed."""
    answer = _exchange(server, data)  # reads until the server closes
    got_status, error = _envelope(answer)
    assert got_status == status and words in error["message"]
    assert answer.count(b"HTTP/1.1 ") == 1  # nothing answered after the refusal


def test_a_malformed_header_line_is_never_echoed(server):
    """The 400 for a broken header line quoted the line back, a bearer key in it included."""
    secret = b"rs_very_secret_key_0123456789"
    answer = _exchange(server, b"GET /v1/key HTTP/1.1\r\nHost: x\r\nAuthorization Bearer " + secret + b"\r\n\r\n")
    status, error = _envelope(answer)
    assert status == 400 and "header line is malformed" in error["message"]
    assert secret not in answer and b"Authorization" not in answer.partition(b"\r\n\r\n")[2]


def test_expect_100_continue_is_answered_only_with_a_valid_key(server):
    """Without a valid key: 401 at once, no 100 Continue, the body never waited for (it was 5 s);
    with one: 100 Continue, then the answer to the body sent after it."""
    import time

    head = b"POST /v1/spaces/default/scopes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nExpect: 100-continue\r\n"
    with socket.create_connection(_address(server), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(head + b"Authorization: Bearer wrong-key\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        assert time.monotonic() - started < 2
    assert not answer.startswith(b"HTTP/1.1 100") and answer.startswith(b"HTTP/1.1 401")
    with socket.create_connection(_address(server), timeout=10) as sock:
        sock.sendall(head + b"Authorization: Bearer e2e-key\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 ")
        sock.sendall(b"{}")
        assert sock.recv(65536).startswith(b"HTTP/1.1 201")


def test_a_slowloris_holds_no_slot_a_client_with_a_key_needs():
    """With connections_max 5, five sockets that send a header line every half second held every
    slot (a real client got 503 for about 15 s). Now a client gets in at once, in the place of the
    oldest socket that has shown no key, and each trickling head ends after header_timeout_s."""
    import threading
    import time

    with ServerProcess("--connections-max", "5", "--header-timeout-s", "3") as capped:
        stop = threading.Event()
        answers: list[bytes] = []

        def trickle() -> None:
            with socket.create_connection(_address(capped), timeout=10) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\n")
                got = b""
                try:
                    while not stop.is_set():
                        sock.sendall(b"X-Slow: 1\r\n")
                        sock.settimeout(0.5)
                        try:
                            chunk = sock.recv(65536)
                        except socket.timeout:
                            continue
                        if not chunk:
                            break
                        got += chunk
                except OSError:
                    pass
                answers.append(got)

        threads = [threading.Thread(target=trickle) for _ in range(5)]
        for thread in threads:
            thread.start()
            time.sleep(0.1)
        time.sleep(0.5)
        try:
            started = time.monotonic()
            with httpx.Client(base_url=capped.base_url, headers={"authorization": "Bearer e2e-key"}, timeout=5) as http:
                assert http.get("/v1/key").status_code == 200
            assert time.monotonic() - started < 1.5
            time.sleep(4)  # past header_timeout_s: every trickling head has been ended
        finally:
            stop.set()
            for thread in threads:
                thread.join(10)
        assert len(answers) == 5
        timed_out = [a for a in answers if a.startswith(b"HTTP/1.1 408")]
        assert len(timed_out) >= 4 and b"did not all arrive within 3 s" in timed_out[0]


def _answers(sock: socket.socket, count: int) -> list[tuple[int, bytes]]:
    """Read `count` whole answers (each with its Content-Length) from a kept-alive socket."""
    buffer, answers = b"", []
    while len(answers) < count:
        head_end = buffer.find(b"\r\n\r\n")
        if head_end >= 0:
            head = buffer[:head_end]
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
            if len(buffer) >= head_end + 4 + length:
                answers.append((int(head.split(b" ", 2)[1]), buffer[head_end + 4:head_end + 4 + length]))
                buffer = buffer[head_end + 4 + length:]
                continue
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection before answering"
        buffer += chunk
    return answers


def _post(server: ServerProcess, path: str, body: bytes) -> bytes:
    return (
        b"POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (path.encode(), server.api_key.encode(), len(body), body)
    )


def test_a_body_that_comes_after_its_head_and_pipelined_requests_are_answered_in_order(server):
    """An API request is answered the same whether its body came with its head or later, and
    requests sent back to back on one connection are answered in the order sent."""
    with server.client() as http:
        scope_id = http.post(f"/v1/spaces/{server.space_id}/scopes", json={}).json()["id"]
    claims = f"/v1/spaces/{server.space_id}/claims"
    acquire = lambda key: orjson.dumps({"key": key, "scopeId": scope_id, "holder": "h", "holderSession": "s"})  # noqa: E731
    with socket.create_connection(_address(server), timeout=10) as sock:
        request = _post(server, claims, acquire("late-body"))
        head, _, body = request.partition(b"\r\n\r\n")
        sock.sendall(head + b"\r\n\r\n" + body[:5])
        time.sleep(0.3)
        sock.sendall(body[5:])
        [(status, answer)] = _answers(sock, 1)
        assert status == 200 and orjson.loads(answer)["key"] == "late-body"
        sock.sendall(b"".join(_post(server, claims, acquire(f"piped-{n}")) for n in range(5)))
        answers = _answers(sock, 5)
        assert [orjson.loads(answer)["key"] for _, answer in answers] == [f"piped-{n}" for n in range(5)]
        assert {status for status, _ in answers} == {200}
        sock.sendall(_post(server, claims, acquire("piped-0")))  # held now: the envelope, same connection
        [(status, answer)] = _answers(sock, 1)
        assert status == 409 and orjson.loads(answer)["error"]["code"] == "CLAIM_HELD"


def test_plain_and_other_requests_mixed_on_one_connection_are_answered_in_order(server):
    """Requests the doors parse themselves (plain heads) and one h11 reads (a chunked body), sent
    back to back in one write: each is answered, in order, with the same headers either way."""
    with server.client() as http:
        scope_id = http.post(f"/v1/spaces/{server.space_id}/scopes", json={}).json()["id"]
    claims = f"/v1/spaces/{server.space_id}/claims"
    acquire = lambda key: orjson.dumps({"key": key, "scopeId": scope_id, "holder": "h", "holderSession": "s"})  # noqa: E731
    body = acquire("mixed-chunked")
    chunked = (
        b"POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (claims.encode(), server.api_key.encode(), len(body), body)
    )
    with socket.create_connection(_address(server), timeout=10) as sock:
        sock.sendall(_post(server, claims, acquire("mixed-0")) + chunked + _post(server, claims, acquire("mixed-1")))
        buffer, answers = b"", []
        while len(answers) < 3:
            head_end = buffer.find(b"\r\n\r\n")
            if head_end >= 0:
                head = buffer[:head_end]
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
                if len(buffer) >= head_end + 4 + length:
                    answers.append((head, buffer[head_end + 4:head_end + 4 + length]))
                    buffer = buffer[head_end + 4 + length:]
                    continue
            chunk = sock.recv(65536)
            assert chunk, "the server closed the connection before answering"
            buffer += chunk
    assert [orjson.loads(answer)["key"] for _, answer in answers] == ["mixed-0", "mixed-chunked", "mixed-1"]
    assert all(head.startswith(b"HTTP/1.1 200 ") for head, _ in answers)
    names = [sorted(line.split(b":")[0].lower() for line in head.split(b"\r\n")[1:]) for head, _ in answers]
    assert names[0] == names[1] == names[2]


def test_a_refused_100_continue_followed_by_a_request_in_the_same_write_is_answered_every_time(server):
    """`Expect: 100-continue` with no valid key, then a second request in the same write: two
    writers on one socket left about half of these connections with no answer at all (and a
    BusyResourceError in the log). Now each of 200 connections gets both answers, in order."""
    data = (b"GET /v1/nx/1 HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n"
            b"GET /v1/nx/2 HTTP/1.1\r\nHost: a\r\n\r\n")
    answered = 0
    for _ in range(200):
        with socket.create_connection(_address(server), timeout=10) as sock:
            sock.sendall(data)
            answers = _answers(sock, 2)
        assert [status for status, _ in answers] == [404, 404]
        assert [orjson.loads(body)["error"]["message"] for _, body in answers] == [
            "no such route: GET /v1/nx/1", "no such route: GET /v1/nx/2"]
        answered += 1
    assert answered == 200
    assert not [line for line in server.lines if "Traceback" in line or '"exception"' in line or "BusyResourceError" in line]


def test_a_long_poll_whose_client_leaves_is_withdrawn(server):
    """A receive waits in its connection's task; its client gives up after a second and closes the
    connection: the hang-up watcher withdraws the wait at once, so the next message goes to the
    next receive rather than to nobody."""
    with server.client() as http:
        run = http.post("/v1/spaces/default/scopes", json={}).json()["id"]
        box = http.post("/v1/spaces/default/mailboxes", json={"name": "left-behind"}).json()["id"]
        body = {"scopeId": run, "holder": "gone", "holderSession": "s", "waitMs": 20_000}
        with pytest.raises(httpx.ReadTimeout):
            http.post(f"/v1/spaces/default/mailboxes/{box}/recv", json=body, timeout=1)
        deadline = time.monotonic() + 5
        while http.get("/v1/spaces/default/ops/waits").json()["waits"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert http.get("/v1/spaces/default/ops/waits").json()["waits"] == []
        assert time.monotonic() < deadline
        assert http.post(f"/v1/spaces/default/mailboxes/{box}/messages", json={"scopeId": run, "payload": {"n": 1}}).status_code == 201
        got = http.post(f"/v1/spaces/default/mailboxes/{box}/recv", json={**body, "holder": "here", "waitMs": 0})
        assert got.status_code == 200 and got.json()["message"]["payload"] == {"n": 1}
