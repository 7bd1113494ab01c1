"""The request layer, configuration, errors and the HTTP transport."""

from __future__ import annotations

import json
import re

import httpx
import pytest
import trio

import runstate
from runstate import errors as errors_module
from runstate._request import parse_retry_after
from runstate.transport import HTTPTransport, TransportError
from sdk_fakes import API_KEY, GRANT, SPACE, error, make_client, ok

HEX24 = re.compile(r"^[0-9a-f]{24}$")


# -- headers, bodies, keys --------------------------------------------------------------------


@pytest.mark.anyio
async def test_post_carries_bearer_key_idempotency_key_and_compact_json():
    """A POST sends the bearer key, a 24-hex idempotency key, a content-type and compact JSON."""
    rs, transport = make_client(lambda sent: ok({"id": "sc_1"}))
    await rs.scopes.create(name="run é", child_limit=0)
    sent = transport.sent[0]
    assert (sent.method, sent.path) == ("POST", f"/v1/spaces/{SPACE}/scopes")
    assert sent.headers["authorization"] == f"Bearer {API_KEY}"
    assert HEX24.match(sent.headers["idempotency-key"])
    assert sent.headers["content-type"] == "application/json"
    assert sent.raw == '{"name":"run é","childLimit":0}'.encode()


@pytest.mark.anyio
async def test_get_sends_no_idempotency_key_and_no_body():
    """A GET has the bearer key but neither an idempotency key nor a body."""
    rs, transport = make_client(lambda sent: ok({"id": "sc_1", "storedState": "ACTIVE"}))
    view = await rs.scope("sc_1").status()
    sent = transport.sent[0]
    assert view["storedState"] == "ACTIVE"
    assert (sent.method, sent.path, sent.raw) == ("GET", f"/v1/spaces/{SPACE}/scopes/sc_1", None)
    assert "idempotency-key" not in sent.headers and "content-type" not in sent.headers


@pytest.mark.anyio
async def test_top_level_none_is_dropped_but_nested_none_false_and_zero_stay():
    """Top-level None fields are left out; nested None, False and 0 are sent as written."""
    rs, transport = make_client(lambda sent: ok({"id": "m1"}))
    mailbox = rs.scope("sc_1").mailbox_by_id("mb_1")
    await mailbox.send({"a": None, "b": False, "c": 0})
    await mailbox.send(None)
    assert transport.sent[0].json == {"scopeId": "sc_1", "payload": {"a": None, "b": False, "c": 0}}
    assert transport.sent[1].json == {"scopeId": "sc_1"}


@pytest.mark.anyio
async def test_scope_cancel_and_complete_are_bodyless_posts():
    """Scope cancel and complete are POSTs with no body and no content-type."""
    rs, transport = make_client(lambda sent: ok({"id": "sc_1"}))
    await rs.scope("sc_1").cancel()
    await rs.scope("sc_1").complete()
    for sent, action in zip(transport.sent, ("cancel", "complete")):
        assert sent.suffix == f"/scopes/sc_1/{action}"
        assert sent.raw is None and "content-type" not in sent.headers
        assert HEX24.match(sent.headers["idempotency-key"])


@pytest.mark.anyio
async def test_each_logical_call_gets_a_new_idempotency_key():
    """Two logical calls never share an idempotency key."""
    rs, transport = make_client(lambda sent: ok({"id": "sc_1"}))
    await rs.scopes.create()
    await rs.scopes.create()
    keys = [s.headers["idempotency-key"] for s in transport.sent]
    assert len(set(keys)) == 2


# -- retries ----------------------------------------------------------------------------------


@pytest.mark.trio
async def test_transport_failures_are_retried_with_the_same_key_then_unavailable(autojump_clock):
    """Transport failures are retried `retries` times with one key, 25-100 ms apart, then UNAVAILABLE with the cause chained."""

    def refuse(sent):
        raise TransportError("connection refused")

    rs, transport = make_client(refuse, retries=3)
    with pytest.raises(runstate.UnavailableError) as caught:
        await rs.scopes.create()
    assert len(transport.sent) == 4
    assert len({s.headers["idempotency-key"] for s in transport.sent}) == 1
    gaps = [b.at - a.at for a, b in zip(transport.sent, transport.sent[1:])]
    assert all(0.025 <= gap <= 0.100 for gap in gaps)
    err = caught.value
    assert (err.code, err.status) == ("UNAVAILABLE", 503)
    assert err.message.startswith("cannot reach the runstate server at http://localhost:8080; is it running?")
    assert type(err) is runstate.UnreachableError and err.base_url == "http://localhost:8080"
    assert isinstance(err.__cause__, TransportError)


@pytest.mark.trio
async def test_a_retry_that_gets_through_returns_its_answer(autojump_clock):
    """A call whose first attempt fails at the transport and second succeeds returns the second answer."""
    attempts = []

    def flaky(sent):
        attempts.append(sent)
        if len(attempts) == 1:
            raise httpx.ReadTimeout("slow")
        return ok({"id": "sc_9"})

    rs, transport = make_client(flaky)
    scope = await rs.scopes.create()
    assert scope.id == "sc_9"
    assert transport.sent[0].headers["idempotency-key"] == transport.sent[1].headers["idempotency-key"]


@pytest.mark.anyio
async def test_http_errors_are_never_retried():
    """A 503 answer is raised at once: only transport failures are retried."""
    rs, transport = make_client(lambda sent: error(503, "UNAVAILABLE", "busy"), retries=5)
    with pytest.raises(runstate.UnavailableError):
        await rs.scopes.create()
    assert len(transport.sent) == 1


@pytest.mark.anyio
async def test_retries_zero_means_one_attempt():
    """With retries=0 a transport failure is reported after a single attempt."""

    def refuse(sent):
        raise TransportError("down")

    rs, transport = make_client(refuse, retries=0)
    with pytest.raises(runstate.UnavailableError):
        await rs.scopes.create()
    assert len(transport.sent) == 1


# -- answers ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_204_is_an_empty_answer():
    """A 204 from recv is `None`, not a parse error."""
    rs, transport = make_client(
        lambda sent: ok({"mailboxes": [{"name": "q", "id": "mb_1"}]}) if sent.method == "GET" else (204, {}, b"")
    )
    assert await rs.scope("sc_1").mailbox("q").receive() is None


@pytest.mark.anyio
async def test_non_json_success_reads_as_an_empty_object():
    """A 2xx body that is not JSON is treated as `{}`."""
    rs, _ = make_client(lambda sent: (200, {}, b"<html>"))
    assert await rs.scope("sc_1").status() == {}


@pytest.mark.anyio
async def test_redirect_status_is_a_success_body():
    """A 3xx is handed back as a success body, not followed."""
    rs, _ = make_client(lambda sent: (307, {"location": "/elsewhere"}, b'{"moved":true}'))
    assert await rs.scope("sc_1").status() == {"moved": True}


CODE_CLASSES = {
    "VALIDATION_FAILED": (400, runstate.ValidationError),
    "METHOD_NOT_ALLOWED": (405, runstate.ValidationError),
    "REQUEST_TIMEOUT": (408, runstate.UnavailableError),
    "INTERNAL": (500, runstate.InternalError),
    "UNAUTHENTICATED": (401, runstate.AuthenticationError),
    "FORBIDDEN": (403, runstate.AuthenticationError),
    "ENTITLEMENT_EXCEEDED": (403, runstate.AuthenticationError),
    "SPACE_SUSPENDED": (403, runstate.AuthenticationError),
    "NOT_FOUND": (404, runstate.NotFoundError),
    "CONFLICT": (409, runstate.ConflictError),
    "CLAIM_HELD": (409, runstate.ConflictError),
    "IDEMPOTENCY_CONFLICT": (409, runstate.ConflictError),
    "SCOPE_CANCELLED": (409, runstate.ScopeCancelledError),
    "DEADLINE_EXCEEDED": (409, runstate.DeadlineExceededError),
    "STALE_CLAIM": (409, runstate.LeaseLostError),
    "CAPACITY_UNAVAILABLE": (409, runstate.ConflictError),
    "BACKLOG_FULL": (409, runstate.ConflictError),
    "BARRIER_RELEASED": (409, runstate.ConflictError),
    "BARRIER_CANCELLED": (409, runstate.BarrierCancelledError),
    "INSUFFICIENT_BUDGET": (409, runstate.BudgetExceededError),
    "LEASE_RENEWALS_EXHAUSTED": (409, runstate.LeaseLostError),
    "RATE_LIMITED": (429, runstate.RateLimitError),
    "SERVICE_RATE_LIMITED": (429, runstate.RateLimitError),
    "ALLOWANCE_EXHAUSTED": (429, runstate.RateLimitError),
    "ALLOWANCE_COOLDOWN": (429, runstate.RateLimitError),
    "CONCURRENCY_LIMITED": (429, runstate.RateLimitError),
    "OPERATIONS_EXHAUSTED": (429, runstate.RateLimitError),
    "UNAVAILABLE": (503, runstate.UnavailableError),
    "CURSOR_EXPIRED": (410, runstate.CursorExpiredError),
    "SOMETHING_NEW": (418, runstate.RunstateError),
}


@pytest.mark.anyio
@pytest.mark.parametrize("code", sorted(CODE_CLASSES))
async def test_error_envelope_maps_code_to_exception_class(code):
    """The envelope's code alone picks the exception class; status, message and request id are kept."""
    status, cls = CODE_CLASSES[code]
    rs, _ = make_client(lambda sent: error(status, code, "nope", request_id="req_1"))
    with pytest.raises(runstate.RunstateError) as caught:
        await rs.scope("sc_1").status()
    err = caught.value
    assert type(err) is cls
    assert (err.code, err.status, err.request_id) == (code, status, "req_1")
    # A refused key also says where the key came from and where it was sent.
    hint = " (the key passed as api_key=, sent to http://localhost:8080)" if code == "UNAUTHENTICATED" else ""
    assert err.message == "nope" + hint


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (404, "NOT_FOUND", runstate.NotFoundError),
        (405, "METHOD_NOT_ALLOWED", runstate.ValidationError),
        (400, "VALIDATION_FAILED", runstate.ValidationError),
        (418, "VALIDATION_FAILED", runstate.ValidationError),
        (403, "FORBIDDEN", runstate.AuthenticationError),
    ],
)
async def test_a_4xx_without_envelope_is_a_permanent_error_naming_status_and_body(status, code, cls):
    """A 4xx without an envelope (a proxy's HTML page) is sent once and raised as the family its
    status names, permanent, with the status and the start of the body in its message."""
    page = b"<html>\n  <head><title>Not here</title></head>" + b"x" * 500
    rs, transport = make_client(lambda sent: (status, {"content-type": "text/html"}, page))
    with pytest.raises(runstate.RunstateError) as caught:
        await rs.scope("sc_1").status()
    err = caught.value
    assert (type(err), err.code, err.status) == (cls, code, status)
    assert err.message.startswith(f"HTTP {status} without an error envelope")
    assert "'<html> <head><title>Not here</title></head>xxx" in err.message and err.message.endswith("...'")
    assert runstate.is_permanent(err)
    assert len(transport.sent) == 1


@pytest.mark.anyio
@pytest.mark.parametrize(("status", "cls"), [(502, runstate.UnavailableError), (503, runstate.UnavailableError),
                                              (504, runstate.UnavailableError), (429, runstate.RateLimitError),
                                              (408, runstate.UnavailableError)])
async def test_a_gateway_error_without_envelope_stays_transient(status, cls):
    """A 502/503/504 (and a 408 or 429) without an envelope is an outage that may pass."""
    rs, _ = make_client(lambda sent: (status, {}, b"Bad Gateway"))
    with pytest.raises(cls) as caught:
        await rs.scope("sc_1").status()
    assert caught.value.status == status and not runstate.is_permanent(caught.value)
    assert "'Bad Gateway'" in caught.value.message


@pytest.mark.trio
async def test_a_renewal_answered_by_a_proxy_404_loses_the_lease_at_once(autojump_clock):
    """A renewal that meets a 4xx without an envelope is not ridden through as an outage: the
    lease is lost at the first answer, not at its end by the local clock."""
    def handler(sent):
        if sent.suffix.endswith("/renew"):
            return 404, {}, b"<h1>404 Not Found</h1>"
        return ok(GRANT)

    rs, transport = make_client(handler)
    lease = await rs.scope("sc_1").claim("k").acquire(lease_seconds=30)
    await lease.lost_event.wait()
    assert trio.current_time() < 12, "lost at the first renewal (10 s in), not near the lease's end"
    assert isinstance(lease.lost_error, runstate.NotFoundError)
    assert len(transport.to("/claims/k/renew")) == 1


@pytest.mark.anyio
async def test_retry_after_is_exposed_in_milliseconds():
    """A Retry-After of 1.5 seconds on an error answer becomes retry_after_ms=1500."""
    rs, _ = make_client(lambda sent: error(429, "RATE_LIMITED", headers={"retry-after": "1.5"}))
    with pytest.raises(runstate.RateLimitError) as caught:
        await rs.scope("sc_1").status()
    assert caught.value.retry_after_ms == 1500


def test_retry_after_parsing():
    """Retry-After is decimal seconds; an HTTP date or junk gives None."""
    assert parse_retry_after("2") == 2000
    assert parse_retry_after("0.25") == 250
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert parse_retry_after("") is None
    assert parse_retry_after(None) is None


@pytest.mark.anyio
async def test_long_poll_timeout_is_wait_plus_request_timeout():
    """A recv with waitMs gets wait + request timeout per attempt; a plain call the request timeout."""
    rs, transport = make_client(
        lambda sent: ok({"mailboxes": [{"name": "q", "id": "mb_1"}]}) if sent.method == "GET" else (204, {}, b""),
        request_timeout_ms=4000,
    )
    await rs.scope("sc_1").mailbox("q").receive(wait_ms=1500)
    assert transport.sent[0].timeout_s == 4.0
    assert transport.sent[1].timeout_s == 4.0  # the first look, without a wait
    assert transport.sent[2].timeout_s == 5.5
    assert transport.sent[2].json["waitMs"] == 1500


# -- configuration and identity ---------------------------------------------------------------


def test_config_comes_from_the_environment(monkeypatch):
    """Without arguments the key, space and base URL come from RUNSTATE_* variables."""
    monkeypatch.setenv("RUNSTATE_API_KEY", "env-key")
    monkeypatch.setenv("RUNSTATE_SPACE_ID", "env-space")
    monkeypatch.setenv("RUNSTATE_BASE_URL", "http://h:9/pfx/")
    config = runstate.resolve_config()
    assert (config.api_key, config.space_id, config.base_url) == ("env-key", "env-space", "http://h:9/pfx")
    assert (config.request_timeout_ms, config.retries) == (10_000, 2)
    assert "env-key" not in repr(config)


@pytest.mark.parametrize("missing", ["RUNSTATE_API_KEY", "RUNSTATE_SPACE_ID"])
def test_missing_key_or_space_is_a_config_error(monkeypatch, missing):
    """A missing API key or space id raises ConfigError (CONFIG_ERROR, status 0) at construction."""
    monkeypatch.setenv("RUNSTATE_API_KEY", "k")
    monkeypatch.setenv("RUNSTATE_SPACE_ID", "s")
    monkeypatch.delenv(missing)
    with pytest.raises(runstate.ConfigError) as caught:
        runstate.AsyncRunstate()
    assert (caught.value.code, caught.value.status) == ("CONFIG_ERROR", 0)


def test_default_base_url_and_identity(monkeypatch):
    """The base URL defaults to localhost:8080; holder is worker-+6 hex; each client has its own 12-hex session."""
    monkeypatch.delenv("RUNSTATE_BASE_URL", raising=False)
    a = runstate.AsyncRunstate(api_key="k", space_id="s")
    b = runstate.AsyncRunstate(api_key="k", space_id="s", holder="me")
    assert a.transport.base_url == "http://localhost:8080"
    assert re.match(r"^worker-[0-9a-f]{6}$", a.holder) and b.holder == "me"
    assert re.match(r"^[0-9a-f]{12}$", a.session) and a.session != b.session


@pytest.mark.anyio
async def test_with_space_shares_transport_and_identity():
    """A with_space view talks to another space with the same transport, holder and session."""
    rs, transport = make_client(lambda sent: ok({"id": "sc_1"}))
    other = rs.with_space("sp2")
    assert (other.space_id, other.holder, other.session, other.transport) == ("sp2", rs.holder, rs.session, rs.transport)
    await other.scopes.create()
    assert transport.sent[0].path == "/v1/spaces/sp2/scopes"
    await other.aclose()  # a view closes nothing


# -- errors module ----------------------------------------------------------------------------


def test_every_error_class_derives_directly_from_runstate_error():
    """Each SDK exception is a direct subclass of RunstateError (LeaseLostError is not a
    ConflictError), except the refinements the errors module draws: each is a subclass of the
    family a caller of the 0.3.0 client catches (StoppedError, ConflictError, ValidationError)."""
    for name in ("ConfigError", "ValidationError", "AuthenticationError", "NotFoundError", "ConflictError",
                 "StoppedError", "LeaseLostError", "RateLimitError", "UnavailableError",
                 "InternalError", "CursorExpiredError", "OnceFailedError", "TaskFailedError"):
        assert getattr(errors_module, name).__bases__ == (runstate.RunstateError,)
    assert not issubclass(runstate.LeaseLostError, runstate.ConflictError)
    assert runstate.ScopeCancelledError.__bases__ == (runstate.StoppedError,)
    assert runstate.BudgetExceededError.__bases__ == (runstate.ConflictError,)
    assert runstate.ResultTooLargeError.__bases__ == (runstate.ValidationError,)
    for name in ("DeadlineExceededError", "BarrierCancelledError"):
        assert getattr(errors_module, name).__bases__ == (runstate.ConflictError, runstate.StoppedError)
    assert runstate.WaitTimeoutError.__bases__ == (runstate.RunstateError, TimeoutError)
    assert runstate.TimeoutError is runstate.WaitTimeoutError and runstate.AuthError is runstate.AuthenticationError


def test_map_error_fills_status_only_when_zero():
    """map_error keeps a real status and uses the code's table status only for status 0."""
    assert runstate.map_error("CLAIM_HELD", 0, "m").status == 409
    assert runstate.map_error("CLAIM_HELD", 418, "m").status == 418
    unknown = runstate.map_error("BRAND_NEW", 0, "m")
    assert type(unknown) is runstate.RunstateError and (unknown.code, unknown.status) == ("BRAND_NEW", 503)


# -- the HTTP transport -----------------------------------------------------------------------


def _http_client(handler, base_url="http://server:8080/pfx"):
    mock = httpx.AsyncClient(base_url=base_url, transport=httpx.MockTransport(handler))
    return runstate.AsyncRunstate(api_key="k", space_id="s", transport=HTTPTransport(base_url, client=mock))


@pytest.mark.anyio
async def test_http_transport_keeps_the_base_path_and_the_encoded_key():
    """Over httpx the base URL's path is kept and a claim key's %2F reaches the server unchanged."""
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=RENEWED_ANSWER)

    rs = _http_client(handler)
    lease = runstate.ClaimLease(rs._ctx, "a/b c", GRANT_ANSWER, 30)
    await lease.renew()
    assert seen[0].url.raw_path == b"/pfx/v1/spaces/s/claims/a%2Fb%20c/renew"
    assert json.loads(seen[0].content) == {"token": "t"}


@pytest.mark.anyio
async def test_http_transport_sends_content_length_zero_on_bodyless_post():
    """A bodyless POST goes out with Content-Length: 0 and no content-type."""
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"id": "sc_1"})

    await _http_client(handler).scope("sc_1").cancel()
    assert seen[0].headers["content-length"] == "0"
    assert "content-type" not in seen[0].headers


@pytest.mark.anyio
async def test_http_transport_does_not_follow_redirects():
    """A 302 is returned as an answer, and its location is not fetched."""
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(302, headers={"location": "http://server:8080/other"}, json={"x": 1})

    assert await _http_client(handler).scope("sc_1").status() == {"x": 1}
    assert len(seen) == 1


@pytest.mark.anyio
async def test_http_transport_errors_become_unavailable_with_the_httpx_error_in_the_chain():
    """A connect error is retried, then raised as UnavailableError caused by TransportError caused by httpx's error."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(runstate.UnavailableError) as caught:
        await _http_client(handler).scope("sc_1").status()
    assert isinstance(caught.value.__cause__, TransportError)
    assert isinstance(caught.value.__cause__.__cause__, httpx.ConnectError)


GRANT_ANSWER = {"token": "t", "generation": 1, "leaseExpiresAt": "2030-01-01T00:00:00.000Z"}
RENEWED_ANSWER = {"leaseExpiresAt": "2030-01-01T00:00:30.000Z"}


def test_public_names_are_exported():
    """`runstate.__all__` lists the public API and each name resolves."""
    expected = {
        "AsyncRunstate", "Runstate", "Config", "resolve_config", "ScopesAPI", "MailboxesAPI", "ScopeHandle",
        "ClaimRef", "ClaimLease", "MailboxRef", "Delivery", "TaskTicket", "Transport", "TransportError",
        "HTTPTransport", "SocketTransport", "RunstateError", "ConfigError", "AuthenticationError", "NotFoundError", "ConflictError",
        "ScopeCancelledError", "LeaseLostError", "WaitTimeoutError", "RateLimitError", "UnavailableError",
        "CursorExpiredError", "map_error", "ValidationError", "UnreachableError", "InternalError", "ERRORS",
        "is_permanent", "TaskView", "TaskResult", "ScopeView", "MailboxRow", "MessageView", "AcquireAttempt",
        "CursorExpiredError", "map_error",
        "BarrierHandle", "BarriersAPI", "TimerHandle", "TimersAPI", "GroupHandle", "GroupsAPI", "EventsAPI", "DiagnosticsAPI",
    }
    expected |= {"PoolRef", "PoolLease", "QuotaRef", "BudgetRef", "BudgetReservation"}  # -- capacity --
    expected |= {  # the error families of the official 0.3.0 client
        "StoppedError", "DeadlineExceededError", "BarrierCancelledError", "BudgetExceededError", "ResultTooLargeError",
        "OnceFailedError", "TaskFailedError", "AuthError", "TimeoutError", "is_runstate_error",
    }
    expected |= {  # the run-bound API, with the official 0.3.0 client's names
        "__version__", "configure", "run", "child", "run_id", "arun_id", "context", "once", "limit", "take", "atake",
        "slots", "budget", "queue", "serve", "aserve", "sleep", "asleep", "together", "atogether", "setup", "asetup",
        "stop", "astop", "finish", "afinish", "events", "aevents", "status", "astatus", "RunContext", "RunInfo",
        "Signal", "Queue", "Job", "RunEvent", "RunStatus", "RunState", "WorkerStatus", "Waiting", "Amount", "Duration",
        "Per",
    }
    assert set(runstate.__all__) == expected
    for name in expected:
        assert getattr(runstate, name) is not None


def test_cli_without_the_server_says_how_to_install_it(monkeypatch, capsys):
    """`runstate` exits 2 with an install hint when the server package cannot be imported."""
    import sys

    from runstate import _cli

    monkeypatch.setitem(sys.modules, "runstate.server.cli", None)
    assert _cli.main(["serve"]) == 2
    assert "pip install 'runstate[server]'" in capsys.readouterr().err


@pytest.mark.trio
async def test_trio_is_supported_by_the_request_layer():
    """The same client runs under trio: a call goes through and returns its answer."""
    rs, transport = make_client(lambda sent: ok({"id": "sc_t"}))
    assert (await rs.scopes.create()).id == "sc_t"
    assert trio.current_time() >= 0
