"""Graceful shutdown of a real `runstate serve` process: SIGTERM under load, requests in flight, a second signal."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from urllib.parse import urlparse

import httpx
import pytest

from ..servers import ServerProcess

pytestmark = pytest.mark.e2e

KEY = "e2e-key"


def events(process: ServerProcess) -> list[dict]:
    found = []
    for line in process.lines:
        if line.startswith("{"):
            record = json.loads(line)
            if "event" in record and record["logger"] != "runstate.access":
                found.append(record)
    return found


def address(process: ServerProcess) -> tuple[str, int]:
    url = urlparse(process.base_url)
    return url.hostname, url.port  # type: ignore[return-value]


def start_slow_request(process: ServerProcess) -> socket.socket:
    """A POST whose body is one byte short: the server is reading it, the request is in flight."""
    sock = socket.create_connection(address(process), timeout=10)
    head = (
        "POST /v1/spaces/default/scopes HTTP/1.1\r\nhost: x\r\n"
        f"authorization: Bearer {KEY}\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{{"
    )
    sock.sendall(head.encode())
    time.sleep(0.3)  # the server has the headers and waits for the body
    return sock


def read_answer(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def wait_exit(process: ServerProcess, timeout_s: float) -> int:
    assert process.proc is not None
    code = process.proc.wait(timeout_s)
    if process._reader is not None:
        process._reader.join(5)
    return code


def test_sigterm_during_load_answers_everything_it_applied_and_exits_0():
    """Eight clients create runs as fast as they can; SIGTERM mid-stream. Every request either got its full answer
    or a connection error, none got a 5xx, the server exits 0 at once (no waiting out the grace period), and every
    acknowledged operation was applied.

    Applied may exceed acknowledged by the few requests that reached a keep-alive connection the instant it
    was closed: the client sees a transport error, and a retry with the same Idempotency-Key (what the SDKs
    do) returns the recorded answer."""
    process = ServerProcess().start()
    acknowledged: list[str] = []
    failures: list[str] = []
    stop = threading.Event()

    def client() -> None:
        with httpx.Client(base_url=process.base_url, headers={"authorization": f"Bearer {KEY}"}, timeout=10) as http:
            while not stop.is_set():
                try:
                    answer = http.post("/v1/spaces/default/scopes", json={"name": "load"})
                except httpx.TransportError:
                    return  # refused or closed: not acknowledged, and the client knows it
                if answer.status_code != 201:
                    failures.append(f"{answer.status_code} {answer.text}")
                    return
                acknowledged.append(answer.json()["id"])

    threads = [threading.Thread(target=client) for _ in range(8)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while len(acknowledged) < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    process.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    started = time.monotonic()
    code = wait_exit(process, 15)
    stop.set()
    for thread in threads:
        thread.join(10)
    assert code == 0
    assert time.monotonic() - started < 5
    assert failures == []
    assert len(acknowledged) >= 200 and len(set(acknowledged)) == len(acknowledged)
    named = {record["event"]: record for record in events(process)}
    assert {"shutdown", "drained", "journal_flushed", "stopped"} <= set(named)
    assert named["shutdown"]["reason"] == "SIGTERM"
    assert len(acknowledged) <= named["drained"]["operations"] <= len(acknowledged) + len(threads)
    assert named["stopped"]["forced"] is False


def test_a_request_in_flight_at_sigterm_finishes_and_new_connections_are_refused():
    """A request whose body is still arriving when SIGTERM comes is answered 201; the listener is closed meanwhile."""
    process = ServerProcess().start()
    sock = start_slow_request(process)
    process.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    time.sleep(0.5)
    assert process.proc.poll() is None  # still draining  # type: ignore[union-attr]
    with pytest.raises(httpx.ConnectError):
        httpx.get(process.base_url + "/healthz", timeout=2)
    sock.sendall(b"}")
    answer = read_answer(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 201")
    assert b'"effective":"ACTIVE"' in answer
    assert wait_exit(process, 10) == 0
    assert [r["event"] for r in events(process)][-4:] == ["shutdown", "drained", "journal_flushed", "stopped"]


def test_the_drain_ends_at_the_grace_period():
    """A request that never completes holds the drain only for --shutdown-grace-s; then the server exits 0."""
    process = ServerProcess("--shutdown-grace-s", "1").start()
    sock = start_slow_request(process)
    process.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    started = time.monotonic()
    assert wait_exit(process, 10) == 0
    assert 0.8 <= time.monotonic() - started < 6
    sock.close()


def test_a_second_signal_stops_at_once_with_status_1():
    """SIGTERM then SIGINT while a request holds the drain: no waiting for the grace period, exit status 1."""
    process = ServerProcess("--shutdown-grace-s", "30").start()
    sock = start_slow_request(process)
    process.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    time.sleep(0.5)
    process.proc.send_signal(signal.SIGINT)  # type: ignore[union-attr]
    started = time.monotonic()
    assert wait_exit(process, 10) == 1
    assert time.monotonic() - started < 5
    assert "shutdown_forced" in [r["event"] for r in events(process)]
    sock.close()


def test_sigint_shuts_down_gracefully_too():
    process = ServerProcess().start()
    process.proc.send_signal(signal.SIGINT)  # type: ignore[union-attr]
    assert wait_exit(process, 10) == 0
    assert next(r for r in events(process) if r["event"] == "shutdown")["reason"] == "SIGINT"


def test_a_parked_long_poll_is_answered_204_at_sigterm_and_the_server_exits_at_once():
    """A receive waiting up to 30 s on an empty queue gets 204 as soon as SIGTERM arrives; the server exits 0."""
    process = ServerProcess().start()
    with process.client() as http:
        run = http.post("/v1/spaces/default/scopes", json={}).json()
        mailbox = http.post("/v1/spaces/default/mailboxes", json={"name": "empty"}).json()
    answers: list[httpx.Response] = []

    def poll() -> None:
        with process.client() as http:
            body = {"scopeId": run["id"], "holder": "w", "holderSession": "s", "waitMs": 30_000}
            answers.append(http.post(f"/v1/spaces/default/mailboxes/{mailbox['id']}/recv", json=body, timeout=40))

    poller = threading.Thread(target=poll)
    poller.start()
    with process.client() as http:
        _parked(http, 1)  # the server holds the receive (not a sleep: a loaded machine may take longer)
    process.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    started = time.monotonic()
    poller.join(10)
    assert answers and answers[0].status_code == 204
    assert time.monotonic() - started < 5
    assert wait_exit(process, 10) == 0
    assert next(r for r in events(process) if r["event"] == "shutdown")["long_polls_ended"] == 1


def _tracebacks(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("Traceback") or '"exception":' in line or "Error:" in line]


def _park(node_url: str, path: str, body: dict, answers: list, name: str) -> threading.Thread:
    """A long poll through `node_url` in a thread of its own; its answer (or transport error) lands in `answers`."""

    def poll() -> None:
        try:
            with httpx.Client(base_url=node_url, headers={"authorization": f"Bearer {KEY}"}, timeout=40) as http:
                answers.append((name, http.post(path, json=body)))
        except httpx.HTTPError as error:
            answers.append((name, error))

    thread = threading.Thread(target=poll)
    thread.start()
    return thread


def _parked(http: httpx.Client, count: int, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        waits = http.get("/v1/spaces/default/ops/waits").json()["waits"]
        if sum(wait["calls"] for wait in waits) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} calls parked: {waits}")


def test_sigterm_with_long_polls_parked_here_and_passed_on_answers_each_and_logs_no_traceback(tmp_path):
    """Three nodes of a cluster; receives parked at the leader of the space's partition, four on it
    and four passed on through each of the two other nodes. SIGTERM to a node that passed four on:
    they are answered 503 UNAVAILABLE with the envelope at once (that node is going; their waits
    at the leader are withdrawn), it exits 0. SIGTERM to the leader: its own four and the four
    passed on through the third node are answered 204, as any parked receive at a stop. Every
    poll has its answer, and no node logs a traceback (a cancelled wait once met the hang-up
    watcher already closed)."""
    from ..cluster.nodes import ready_cluster

    with ready_cluster(tmp_path) as cluster:
        leader = cluster.leader_of("default")
        second, third = [node for node in cluster.nodes if node is not leader]
        with leader.client() as http:
            run = http.post("/v1/spaces/default/scopes", json={}).json()
            mailbox = http.post("/v1/spaces/default/mailboxes", json={"name": "parked"}).json()
        path = f"/v1/spaces/default/mailboxes/{mailbox['id']}/recv"
        body = {"scopeId": run["id"], "holder": "w", "holderSession": "s", "waitMs": 30_000}
        answers: list = []
        threads = [_park(node.url, path, body, answers, node.name) for node in (leader, second, third) for _ in range(4)]
        with leader.client() as http:
            _parked(http, 12)
        started = time.monotonic()
        assert second.stop() == 0
        assert time.monotonic() - started < 5
        for thread in threads[4:8]:
            thread.join(5)
        passed_on = [answer for name, answer in answers if name == second.name]
        assert len(passed_on) == 4 and all(isinstance(answer, httpx.Response) for answer in passed_on), passed_on
        assert {answer.status_code for answer in passed_on} == {503}
        assert {answer.json()["error"]["code"] for answer in passed_on} == {"UNAVAILABLE"}
        assert all(answer.headers["connection"] == "close" for answer in passed_on)
        started = time.monotonic()
        assert leader.stop() == 0
        assert time.monotonic() - started < 10
        for thread in threads:
            thread.join(10)
        assert len(answers) == 12
        rest = [(name, answer) for name, answer in answers if name != second.name]
        assert all(isinstance(answer, httpx.Response) for _, answer in rest), rest
        assert all(answer.status_code == 204 for name, answer in rest if name == leader.name), rest
        # Passed on through the third node: 204 as the leader answered it, or, when the third node
        # heard of the new leader first (it cuts a request held by the old one), 503 UNAVAILABLE with
        # the envelope ("may or may not have been made"; the old leader leased nothing, having ended
        # its waits), and the client asks again.
        for name, answer in rest:
            if name == third.name and answer.status_code != 204:
                assert answer.status_code == 503 and answer.json()["error"]["code"] == "UNAVAILABLE", answer
        for node in cluster.nodes:
            assert _tracebacks([*node.earlier_lines, *node.lines]) == [], node.name


def test_sigterm_with_many_parked_long_polls_answers_each_and_logs_no_traceback():
    """Twenty receives parked on one server: each is answered 204 at SIGTERM, the server exits 0
    at once, and its log holds no traceback."""
    process = ServerProcess().start()
    with process.client() as http:
        run = http.post("/v1/spaces/default/scopes", json={}).json()
        mailbox = http.post("/v1/spaces/default/mailboxes", json={"name": "many"}).json()
        body = {"scopeId": run["id"], "holder": "w", "holderSession": "s", "waitMs": 30_000}
        answers: list = []
        threads = [_park(process.base_url, f"/v1/spaces/default/mailboxes/{mailbox['id']}/recv", body, answers, "p")
                   for _ in range(20)]
        _parked(http, 20)
    process.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    assert wait_exit(process, 10) == 0
    for thread in threads:
        thread.join(5)
    assert len(answers) == 20 and all(isinstance(a, httpx.Response) and a.status_code == 204 for _, a in answers), answers
    assert _tracebacks(process.lines) == []
