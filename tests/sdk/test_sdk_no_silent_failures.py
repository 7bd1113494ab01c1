"""consume(), receive() and Delivery never fail silently.

Each of the first three tests reproduces a failure that once went unseen: a lease length the
server refuses, a server that is not there, a completion the server refused. The rest pin the
rules around them: what stops consume(), what it waits out and says so, and when a delivery
counts as settled.
"""

from __future__ import annotations

import logging

import anyio
import pytest
import trio

import runstate
from runstate import testing
from tests.ports import free_port
from runstate.transport import TransportError
from sdk_fakes import QueueServer, error, make_client, settlements

BIG_RESULT = {"payload": "y" * 100_000}


async def _make_work(rs, name="research", payload=None):
    await rs.mailboxes.ensure(name, mode="WORK")
    run = await rs.scopes.create()
    ticket = await run.mailbox(name).submit(payload or {"company": "acme"}, key="research:acme")
    return run, ticket


class Refusing:
    """Wraps a transport: the first `times` requests whose path ends with `suffix` get `answer`."""

    def __init__(self, inner, suffix: str, answer, times: int = 1) -> None:
        self.inner = inner
        self.suffix = suffix
        self.answer = answer
        self.left = times
        self.base_url = getattr(inner, "base_url", "")

    async def send(self, method, path, headers, body, timeout_s):
        if self.left and path.endswith(self.suffix):
            self.left -= 1
            return self.answer
        return await self.inner.send(method, path, headers, body, timeout_s)


def _dead_url() -> str:
    """A local URL where nothing listens (and that no other process is given meanwhile)."""
    return f"http://127.0.0.1:{free_port()}"


# -- the three failures -----------------------------------------------------------------------


@pytest.mark.trio
async def test_consume_with_a_lease_the_server_refuses_raises_at_once_in_the_servers_words(autojump_clock):
    """consume(lease_seconds=3) raises ValidationError before sending anything, with the server's message."""
    async with testing.serve() as rs:
        run, _ = await _make_work(rs)
        mailbox_id = await run.mailbox("research").resolve_id()
        with pytest.raises(runstate.ValidationError) as refused_here:
            await run.mailbox("research").consume(lambda data, delivery: None, lease_seconds=3)
        # The server's own answer to the same lease, sent raw.
        with pytest.raises(runstate.ValidationError) as refused_there:
            await rs._ctx.call(
                "POST", f"/mailboxes/{mailbox_id}/recv",
                body={"scopeId": run.id, "holder": "h", "holderSession": "s", "leaseSeconds": 3},
            )
        assert refused_here.value.message == refused_there.value.message == "leaseSeconds must be between 5 and 600, got 3"
        assert refused_here.value.code == "VALIDATION_FAILED" and refused_here.value.status == 400


@pytest.mark.anyio
async def test_consume_against_a_dead_url_warns_naming_it_calls_on_error_and_can_give_up(caplog):
    """A server that is not running: a warning names the URL, on_error gets each failure, give_up_after_s ends it."""
    url = _dead_url()
    errors = []
    caplog.set_level(logging.WARNING, logger="runstate")
    async with runstate.AsyncRunstate(api_key="k", space_id="s", base_url=url, retries=0) as rs:
        mailbox = rs.scope("sc_1").mailbox_by_id("mb_1")
        with anyio.fail_after(10):
            with pytest.raises(runstate.UnreachableError) as caught:
                await mailbox.consume(
                    lambda data, delivery: None, poll_ms=20, give_up_after_s=0.3,
                    on_error=lambda err, delivery: errors.append((err, delivery)),
                )
    assert url in str(caught.value) and "is it running?" in str(caught.value)
    warnings = [r.getMessage() for r in caplog.records if r.name == "runstate" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and url in warnings[0]
    assert len(errors) >= 2
    assert all(isinstance(err, runstate.UnreachableError) and delivery is None for err, delivery in errors)


@pytest.mark.trio
async def test_a_refused_completion_leaves_the_delivery_unsettled_so_the_next_call_works(autojump_clock):
    """complete() with a result over the limit raises and settles nothing; a small complete() then succeeds."""
    async with testing.serve() as rs:
        run, ticket = await _make_work(rs)
        delivery = await run.mailbox("research").receive()
        assert delivery is not None
        with pytest.raises(runstate.ValidationError) as caught:
            await delivery.complete(result=BIG_RESULT)
        assert "result" in caught.value.message and "65536" in caught.value.message
        assert not delivery.settled
        await delivery.complete(result={"payload": "y"})
        assert delivery.settled
        assert await ticket.result(timeout_ms=1_000) == {"state": "SUCCEEDED", "outcome": "y", "reason": None}


@pytest.mark.trio
async def test_a_completion_the_server_cannot_take_yet_is_sent_again_until_it_does(autojump_clock, pinned_jitter):
    """The handler's complete() meets three 503s (a server draining): it is sent again, with the
    same idempotency key, 0.2, 0.4 and 0.8 s apart, and the fourth try is recorded; no on_error."""
    async with testing.serve() as rs:
        run, ticket = await _make_work(rs)
        refusing = Refusing(rs.transport, "/complete", error(503, "UNAVAILABLE", "draining"), times=3)
        worker = runstate.AsyncRunstate(api_key="test-key", space_id="default", transport=refusing)
        errors, stop = [], trio.Event()
        start = trio.current_time()

        async def handle(data, delivery):
            await delivery.complete(result={"payload": f"done on attempt {delivery.attempt}"})
            stop.set()

        await worker.scope(run.id).mailbox("research").consume(
            handle, lease_seconds=60, stop_event=stop, on_error=lambda err, d: errors.append(err),
        )
        assert errors == [] and trio.current_time() - start == pytest.approx(1.4)
        assert await ticket.result(timeout_ms=1_000) == {"state": "SUCCEEDED", "outcome": "done on attempt 1", "reason": None}
        await worker.aclose()


@pytest.mark.trio
async def test_a_completion_that_never_gets_through_goes_to_on_error_and_a_warning(autojump_clock, caplog, pinned_jitter):
    """A completion refused (503) until the delivery's lease runs out by the local clock (10 s
    less its 1 s margin): on_error gets the last error, a warning says the settlement did not get
    through, nothing else is sent for it, and the server hands the task on at its lease end."""
    async with testing.serve() as rs:
        run, ticket = await _make_work(rs)
        refusing = Refusing(rs.transport, "/complete", error(503, "UNAVAILABLE", "draining"), times=1_000)
        worker = runstate.AsyncRunstate(api_key="test-key", space_id="default", transport=refusing)
        errors, stop = [], trio.Event()
        caplog.set_level(logging.WARNING, logger="runstate")
        start = trio.current_time()

        async def handle(data, delivery):
            stop.set()
            return "done"

        renewals = {"n": 0}
        inner_send = refusing.send

        async def no_renewals(method, path, headers, body, timeout_s):
            if path.endswith("/renew"):  # the renewals fail as well: the lease ends where it began
                renewals["n"] += 1
                return error(503, "UNAVAILABLE", "draining")
            return await inner_send(method, path, headers, body, timeout_s)

        refusing.send = no_renewals
        await worker.scope(run.id).mailbox("research").consume(
            handle, lease_seconds=10, stop_event=stop, on_error=lambda err, d: errors.append((err.code, d.id)),
        )
        assert trio.current_time() - start == pytest.approx(9)
        assert len(errors) == 1 and errors[0][0] in ("UNAVAILABLE", "LEASE_LOST")
        assert renewals["n"] > 0
        warnings = [r.getMessage() for r in caplog.records if r.name == "runstate"]
        assert any("sending it again until the lease runs out" in w for w in warnings)
        assert any(errors[0][1] in w and ("could not settle" in w or "was lost" in w) for w in warnings)
        view = await ticket.status()
        assert view["state"] == "RUNNING"  # the server still holds it for the last second of its lease
        await trio.sleep(1.5)
        assert (await ticket.status())["state"] == "QUEUED"
        await worker.aclose()


@pytest.mark.trio
async def test_a_result_over_the_limit_inside_consume_fails_the_task_at_once(autojump_clock):
    """A completion that can never be accepted (too large) goes to on_error and the task is rejected at once."""
    async with testing.serve() as rs:
        run, ticket = await _make_work(rs)
        errors, stop = [], trio.Event()

        async def handle(data, delivery):
            try:
                await delivery.complete(result=BIG_RESULT)
            finally:
                stop.set()

        start = trio.current_time()
        await run.mailbox("research").consume(
            handle, lease_seconds=60, stop_event=stop, on_error=lambda err, d: errors.append(type(err)),
        )
        outcome = await ticket.result(timeout_ms=1_000)
        assert errors == [runstate.ResultTooLargeError] and issubclass(runstate.ResultTooLargeError, runstate.ValidationError)
        assert outcome["state"] == "FAILED" and trio.current_time() - start < 2


# -- what stops consume() and what it waits out ------------------------------------------------


@pytest.mark.trio
async def test_consume_stops_on_a_validation_error_from_the_server(autojump_clock):
    """A 400 from recv (a server with other limits) ends consume with ValidationError after one request."""
    server = QueueServer([], recv_error=lambda n: error(400, "VALIDATION_FAILED", "leaseSeconds must be between 60 and 600, got 30"))
    rs, _ = make_client(server)
    with pytest.raises(runstate.ValidationError, match="between 60 and 600"):
        await rs.scope("sc_1").mailbox("research").consume(lambda d, x: None)
    assert server.recvs == 1


@pytest.mark.trio
async def test_an_unknown_4xx_stops_consume_but_an_unknown_5xx_is_waited_out(autojump_clock):
    """A code the SDK does not know stops consume when it is a 4xx (same answer again), not when it is a 5xx."""
    rs, _ = make_client(QueueServer([], recv_error=lambda n: error(422, "BRAND_NEW")))
    with pytest.raises(runstate.RunstateError) as caught:
        await rs.scope("sc_1").mailbox("research").consume(lambda d, x: None)
    assert caught.value.code == "BRAND_NEW"
    answers = {1: error(502, "BRAND_NEW_5XX")}
    rs, transport = make_client(QueueServer([(1, "x")], recv_error=lambda n: answers.get(n)))
    stop = trio.Event()
    await rs.scope("sc_1").mailbox("research").consume(lambda d, x: stop.set(), stop_event=stop)
    assert settlements(transport) == [("/messages/msg_1/complete", {"token": "t1"})]


@pytest.mark.trio
async def test_an_outage_is_logged_when_it_starts_and_when_it_ends(autojump_clock, caplog, pinned_jitter):
    """Three transport failures, then answers: one warning naming the URL, one on recovery, on_error three times."""
    failures = {"left": 3}
    queue = QueueServer([(1, "x")])

    async def flaky(sent):
        if sent.suffix.endswith("/recv") and failures["left"]:
            failures["left"] -= 1
            raise TransportError("connection refused")
        return await queue(sent)

    caplog.set_level(logging.WARNING, logger="runstate")
    rs, transport = make_client(flaky, retries=0, base_url="http://runstate.example:8080")
    stop, seen = trio.Event(), []
    start = trio.current_time()
    await rs.scope("sc_1").mailbox("research").consume(
        lambda d, x: stop.set(), stop_event=stop, poll_ms=250, on_error=lambda err, d: seen.append(type(err)),
    )
    warnings = [r.getMessage() for r in caplog.records if r.name == "runstate"]
    assert len(warnings) == 2
    assert "http://runstate.example:8080 failed to answer" in warnings[0]
    assert "http://runstate.example:8080 answers again, after 1.8 s and 3 failed tries" in warnings[1]
    assert seen == [runstate.UnreachableError] * 3
    # The pause doubles: 0.25, 0.5, 1.0 s.
    assert [round(s.at - start, 6) for s in transport.sent if s.suffix.endswith("/recv")] == [0, 0.25, 0.75, 1.75]


@pytest.mark.trio
async def test_receive_checks_its_wait_before_sending(autojump_clock):
    """receive(wait_ms=-1) raises ValidationError and sends nothing."""
    rs, transport = make_client(QueueServer([]))
    with pytest.raises(runstate.ValidationError, match="waitMs must not be negative"):
        await rs.scope("sc_1").mailbox("research").receive(wait_ms=-1)
    assert transport.sent == []


# -- settling -----------------------------------------------------------------------------------


@pytest.mark.trio
async def test_a_complete_that_cannot_reach_the_server_is_sent_again_until_the_lease_ends(autojump_clock, pinned_jitter):
    """complete() on a received delivery (a 30 s lease) that meets transport failures is sent again
    with one idempotency key until the lease's local end (28 s), then raises; the delivery stays
    unsettled, and a retry() afterwards is still sent and settles it."""
    queue = QueueServer([(1, "x")])

    async def handler(sent):
        if sent.suffix.endswith("/complete"):
            raise TransportError("reset by peer")
        return await queue(sent)

    rs, transport = make_client(handler, retries=0)
    delivery = await rs.scope("sc_1").mailbox("research").receive()
    start = trio.current_time()
    with pytest.raises(runstate.UnreachableError):
        await delivery.complete("r")
    assert trio.current_time() - start == pytest.approx(28)
    completes = [s for s in transport.sent if s.suffix.endswith("/complete")]
    assert len(completes) > 20 and len({s.headers["idempotency-key"] for s in completes}) == 1
    assert not delivery.settled and delivery.is_lost
    await delivery.retry()
    assert delivery.settled
    await delivery.reject()  # settled: sends nothing
    assert settlements(transport)[-1] == ("/messages/msg_1/nack", {"token": "t1", "retry": True})


@pytest.mark.trio
async def test_a_stale_settlement_marks_the_delivery_lost(autojump_clock):
    """A STALE_CLAIM answer to complete() raises LeaseLostError and the delivery reports itself lost."""
    queue = QueueServer([(1, "x")])

    async def handler(sent):
        if sent.suffix.endswith("/complete"):
            return error(409, "STALE_CLAIM", "the delivery's lease has moved on")
        return await queue(sent)

    rs, _ = make_client(handler)
    delivery = await rs.scope("sc_1").mailbox("research").receive()
    with pytest.raises(runstate.LeaseLostError):
        await delivery.complete()
    assert delivery.is_lost and not delivery.settled



@pytest.mark.trio
async def test_keys_are_checked_on_this_side_with_the_servers_messages(autojump_clock):
    """An empty or overlong claim key, task key or work key raises what the server would say, before sending."""
    async with testing.serve() as rs:
        run, _ = await _make_work(rs)
        cases = [
            (run.claim("").acquire(), "key must not be empty"),
            (run.claim("k" * 513).acquire(), "key is longer than 512 characters"),
            (run.mailbox("research").submit({}, key=""), "taskKey must not be empty"),
            (run.mailbox("research").send({}, work_key="w" * 513), "workKey is longer than 512 characters"),
        ]
        for call, message in cases:
            with pytest.raises(runstate.ValidationError) as caught:
                await call
            assert caught.value.message == message
        # The server says the same about the same claim key.
        with pytest.raises(runstate.ValidationError) as server_said:
            await rs._ctx.call("POST", "/claims", body={"key": "", "scopeId": run.id, "holder": "h", "holderSession": "s"})
        assert server_said.value.message == "key must not be empty"


@pytest.mark.trio
@pytest.mark.parametrize("option", ["poll_ms", "shutdown_timeout", "give_up_after_s"])
async def test_a_nan_wait_setting_is_refused(autojump_clock, option):
    """A NaN is no number of seconds: every comparison with it is false, so it passed as one (and
    consume() ran on, polling an empty queue)."""
    async with testing.serve() as rs:
        await rs.mailboxes.ensure("research")
        run = await rs.scopes.create()

        async def handle(data, delivery):  # never called
            return None

        with trio.fail_after(60):
            with pytest.raises(ValueError, match="must be a number"):
                await run.mailbox("research").consume(handle, **{option: float("nan")})


@pytest.mark.trio
async def test_a_run_by_an_empty_name_is_refused_as_the_server_refuses_an_empty_name(autojump_clock):
    """`scopes.ensure("")` is VALIDATION_FAILED "name must not be empty", the server's words at a
    create; its path ended in / and the answer was a NotFoundError saying no such route."""
    async with testing.serve() as rs:
        with pytest.raises(runstate.ValidationError) as caught:
            await rs.scopes.ensure("")
        assert caught.value.message == "name must not be empty"
        with pytest.raises(runstate.ValidationError) as server_said:
            await rs._ctx.call("POST", "/permits", body={"name": "", "units": 1})
        assert server_said.value.message == "name must not be empty"
