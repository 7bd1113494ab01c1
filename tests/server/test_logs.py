"""Logs: one line per request whose request id is the error envelope's `requestId`; lifecycle events; no secrets."""

from __future__ import annotations

import logging

import orjson
import pytest

import runstate.testing
from runstate.server.app import create_app
from runstate.server.logs import FLUSH_S, AccessLog, event, setup
from runstate.server.settings import Settings
from runstate.server.telemetry import Telemetry
from runstate.testing import call_asgi

KEY = "secret-bearer-key-123"


class Lines(list):
    def __call__(self, line: bytes) -> None:
        assert line.endswith(b"\n") and line.count(b"\n") == 1  # one whole line per write
        self.append(line.decode())


def app_with(lines: Lines, **access):
    telemetry = Telemetry(access=AccessLog(lines, **access))
    return create_app(Settings(api_key=KEY, seed=1), telemetry=telemetry)


async def send(app, method, path, body=None, key=KEY):
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    status, answer_headers, raw = await call_asgi(app, method, path, headers, body)
    return status, {k.lower(): v for k, v in dict(answer_headers).items()}, orjson.loads(raw) if raw else None


@pytest.mark.trio
async def test_each_request_has_one_json_line_whose_id_is_the_envelope_request_id():
    """A 201, a 409 and a 400: three lines; the refusals' lines carry the envelope's requestId and code."""
    lines = Lines()
    async with runstate.testing.serve_app(app_with(lines)) as rs:
        _, _, run = await send(rs.app, "POST", "/v1/spaces/default/scopes", b"{}")
        claim = orjson.dumps({"key": "k", "scopeId": run["id"], "holder": "a", "holderSession": "s"})
        await send(rs.app, "POST", "/v1/spaces/default/claims", claim)
        lines.clear()
        status, headers, held = await send(rs.app, "POST", "/v1/spaces/default/claims", claim)
        bad_status, bad_headers, bad = await send(rs.app, "POST", "/v1/spaces/default/claims", b"{broken")
    assert (status, bad_status) == (409, 400)
    records = [orjson.loads(line) for line in lines]
    assert [r["status"] for r in records] == [409, 400]
    for record, envelope, answer_headers in ((records[0], held, headers), (records[1], bad, bad_headers)):
        assert record["requestId"] == envelope["error"]["requestId"] == answer_headers["x-request-id"]
        assert record["code"] == envelope["error"]["code"]
        assert record["event"] == "request" and record["logger"] == "runstate.access" and record["level"] == "info"
        assert record["method"] == "POST" and record["route"] == "/v1/spaces/{space}/claims"
        assert record["ms"] >= 0 and record["ts"].endswith("Z")
    assert not any(KEY in line for line in lines)


@pytest.mark.trio
async def test_text_lines_errors_only_and_off():
    """Text format carries the same facts; `errors` skips answers under 400; `off` and level warning write nothing."""
    text, errors, off, quiet = Lines(), Lines(), Lines(), Lines()
    for lines, access in ((text, {"log_format": "text"}), (errors, {"log_requests": "errors"}), (off, {"log_requests": "off"}), (quiet, {"log_level": "warning"})):
        async with runstate.testing.serve_app(app_with(lines, **access)) as rs:
            await send(rs.app, "POST", "/v1/spaces/default/scopes", b"{}")
            status, headers, _ = await send(rs.app, "GET", "/v1/spaces/default/scopes/sc_missing")
            assert status == 404
            if lines is text:
                request_id = headers["x-request-id"]
    assert len(text) == 2
    assert text[1].split(" ")[1:] == ["INFO", "runstate.access", "request", "GET", "/v1/spaces/{space}/scopes/{scope_id}", "404", text[1].split(" ")[7], request_id, "NOT_FOUND\n"]
    assert len(errors) == 1 and '"status":404' in errors[0]
    assert off == [] and quiet == []


@pytest.fixture
def root_logger():
    root = logging.getLogger()
    saved = list(root.handlers), root.level
    yield root
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


def test_lifecycle_events_are_json_lines_with_their_fields(root_logger):
    """`event()` writes `event`, `msg` and the fields as keys; exceptions come with their traceback."""
    lines = Lines()
    setup("json", "info", lines)
    log = logging.getLogger("runstate.server")
    event(log, "ready", "ready", spaces=2, binds=["http://127.0.0.1:1"])
    event(log, "noise", level=logging.DEBUG)
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("it failed")
    first, second = (orjson.loads(line) for line in lines)
    assert first["event"] == "ready" and first["spaces"] == 2 and first["binds"] == ["http://127.0.0.1:1"]
    assert first["level"] == "info" and first["logger"] == "runstate.server"
    assert second["level"] == "error" and "ValueError: boom" in second["exception"]
    text = Lines()
    setup("text", "info", text)
    event(log, "shutdown", "shutting down (SIGTERM)", reason="SIGTERM", binds=["a", "b"])
    assert text[0].split(" ", 1)[1] == "INFO runstate.server shutting down (SIGTERM) reason=SIGTERM binds=a,b\n"
    event(log, "journal_flushed", "journal flushed", partitions={"0": 4, "1": 48})
    assert text[1].split(" ", 1)[1] == "INFO runstate.server journal flushed partitions=0:4,1:48\n"


@pytest.mark.trio
async def test_request_lines_go_out_together_at_most_flush_s_after_the_first(autojump_clock):
    """With `write_in_batches` running, the first line after a write waits `FLUSH_S` for the
    others and they all go out in one write; the last ones on its way out; then each as it comes."""
    import trio
    import trio.testing

    writes: list[bytes] = []
    access = AccessLog(writes.append)

    def line(number: int) -> None:
        access.line("GET", "/v1/spaces/{space}/claims", 200, 0.001, f"req_{number}", None)

    def ids(write: bytes) -> list[str]:
        return [orjson.loads(x)["requestId"] for x in write.splitlines()]

    async with trio.open_nursery() as nursery:
        nursery.start_soon(access.write_in_batches)
        await trio.testing.wait_all_tasks_blocked()
        began = trio.current_time()
        line(0)
        await trio.sleep(FLUSH_S / 2)
        line(1)
        line(2)
        assert writes == []  # the first line waits for others
        await trio.sleep(FLUSH_S / 2 + 0.001)
        assert len(writes) == 1 and ids(writes[0]) == ["req_0", "req_1", "req_2"]
        assert trio.current_time() - began <= FLUSH_S + 0.002
        await trio.sleep(1)  # nothing to write: nothing written
        assert len(writes) == 1
        line(3)
        await trio.sleep(FLUSH_S + 0.001)
        assert len(writes) == 2 and ids(writes[1]) == ["req_3"]
        line(4)
        nursery.cancel_scope.cancel()
    assert len(writes) == 3 and ids(writes[2]) == ["req_4"]  # written on the way out
    line(5)
    assert len(writes) == 4 and ids(writes[3]) == ["req_5"]  # without the task, each as it comes


@pytest.mark.trio
async def test_request_lines_are_these_bytes_each_stamped_with_its_own_time(monkeypatch, autojump_clock):
    """The four forms of a request line, byte for byte; lines that go out in one write each carry
    their own request's time to the millisecond, across a second's end and a clock stepped back,
    as the lifecycle lines write it (`format_ms`)."""
    import runstate.server.logs as logs
    from runstate.actors.timestamps import format_ms

    now_ms = [1_800_000_000_998]
    monkeypatch.setattr(logs, "_wall_ns", lambda: now_ms[0] * 1_000_000 + 999_999)
    forms = {}
    for log_format in ("json", "text"):
        writes: list[bytes] = []
        access = AccessLog(writes.append, log_format=log_format)
        access.line("POST", "/v1/spaces/{space}/claims", 200, 0.0004125, "req_1f0c2a9e5b7d4c31", None)
        access.line("POST", "/v1/spaces/{space}/claims", 409, 12.3456789, "req_1f0c2a9e5b7d4c32", "CLAIM_HELD")
        forms[log_format] = writes
    assert forms["json"] == [
        b'{"ts":"2027-01-15T08:00:00.998Z","level":"info","logger":"runstate.access","event":"request","method":"POST",'
        b'"route":"/v1/spaces/{space}/claims","status":200,"ms":0.412,"requestId":"req_1f0c2a9e5b7d4c31"}\n',
        b'{"ts":"2027-01-15T08:00:00.998Z","level":"info","logger":"runstate.access","event":"request","method":"POST",'
        b'"route":"/v1/spaces/{space}/claims","status":409,"ms":12345.679,"requestId":"req_1f0c2a9e5b7d4c32","code":"CLAIM_HELD"}\n',
    ]
    assert forms["text"] == [
        b"2027-01-15T08:00:00.998Z INFO runstate.access request POST /v1/spaces/{space}/claims 200 0.412ms req_1f0c2a9e5b7d4c31\n",
        b"2027-01-15T08:00:00.998Z INFO runstate.access request POST /v1/spaces/{space}/claims 409 12345.679ms "
        b"req_1f0c2a9e5b7d4c32 CLAIM_HELD\n",
    ]

    import trio
    import trio.testing

    writes = []
    access = AccessLog(writes.append)
    times = [1_800_000_000_998, 1_800_000_000_999, 1_800_000_001_000, 1_800_000_001_007, 1_800_000_000_500, 1_800_000_003_042]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(access.write_in_batches)
        await trio.testing.wait_all_tasks_blocked()
        for number, at in enumerate(times):
            now_ms[0] = at
            access.line("GET", "/v1/spaces/{space}/claims", 200, 0.001, f"req_{number}", None)
        await trio.sleep(FLUSH_S + 0.001)
        nursery.cancel_scope.cancel()
    assert len(writes) == 1
    assert [orjson.loads(line)["ts"] for line in writes[0].splitlines()] == [format_ms(at) for at in times]
    assert format_ms(times[2]) == "2027-01-15T08:00:01.000Z"
