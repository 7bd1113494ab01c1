"""Mailboxes, deliveries, consume() and task tickets against a scripted server."""

from __future__ import annotations

import asyncio
import logging
import threading

import anyio
import pytest
import trio

import runstate
from sdk_fakes import MAILBOXES, QueueServer, error, make_client, ok, settlements, task_server

# -- ensure, lookup, producers ----------------------------------------------------------------


@pytest.mark.anyio
async def test_ensure_lists_first_and_creates_only_a_missing_mailbox():
    """ensure() lists, POSTs {name, mode} only when missing, and returns the existing row otherwise."""
    rows = []

    def handler(sent):
        if sent.method == "GET":
            return ok({"mailboxes": list(rows)})
        rows.append({"id": "mb_9", "name": sent.json["name"], "mode": "WORK"})
        return ok(rows[-1], status=201)

    rs, transport = make_client(handler)
    created = await rs.mailboxes.ensure("research", mode="WORK")
    again = await rs.mailboxes.ensure("research", mode="work")
    assert created == again == {"id": "mb_9", "name": "research", "mode": "WORK"}
    assert [(s.method, s.suffix) for s in transport.sent] == [("GET", "/mailboxes"), ("POST", "/mailboxes"), ("GET", "/mailboxes")]
    assert transport.sent[1].json == {"name": "research", "mode": "WORK"}


@pytest.mark.anyio
async def test_ensure_recovers_from_a_lost_create_race_and_checks_the_mode():
    """A CONFLICT on create lists again; a stored mode that differs raises ConflictError CONFLICT."""
    lists = iter([{"mailboxes": []}, {"mailboxes": [{"id": "mb_1", "name": "q", "mode": "FANOUT"}]}])

    def handler(sent):
        return ok(next(lists)) if sent.method == "GET" else error(409, "CONFLICT", "exists")

    rs, _ = make_client(handler)
    with pytest.raises(runstate.ConflictError) as caught:
        await rs.mailboxes.ensure("q", mode="WORK", backlog_limit=10)
    assert caught.value.code == "CONFLICT" and caught.value.status == 409 and "FANOUT" in caught.value.message


@pytest.mark.anyio
async def test_mailbox_name_is_resolved_once_and_unknown_names_are_not_found():
    """One GET /mailboxes serves every later call; an unknown name raises NotFoundError, which
    says how to create the queue."""
    rs, transport = make_client(lambda sent: ok(MAILBOXES) if sent.method == "GET" else ok({"id": "m", "replay": False}))
    mailbox = rs.scope("sc_1").mailbox("research")
    await mailbox.send({"company": "acme"}, work_key="crawl:acme")
    await mailbox.send({"company": "beta"}, deadline="2030-01-01T00:00:00Z")
    assert [s.method for s in transport.sent] == ["GET", "POST", "POST"]
    assert transport.sent[1].suffix == "/mailboxes/mb_1/messages"
    assert transport.sent[1].json == {"scopeId": "sc_1", "payload": {"company": "acme"}, "workKey": "crawl:acme"}
    with pytest.raises(runstate.NotFoundError) as caught:
        await rs.scope("sc_1").mailbox("nope").send(1)
    assert (caught.value.code, caught.value.status) == ("NOT_FOUND", 404)
    assert "rs.mailboxes.ensure('nope', mode=\"WORK\")" in caught.value.message


@pytest.mark.anyio
async def test_submit_creates_a_task_and_returns_its_ticket():
    """submit() POSTs /tasks with scope, mailbox id, task key, input and subscriber; the ticket knows its scope."""
    rs, transport = make_client(lambda sent: ok(MAILBOXES) if sent.method == "GET" else ok({"taskId": "tk_1"}))
    ticket = await rs.scope("sc_1").mailbox("research").submit({"company": "acme"}, key="research:acme", subscriber_id="planner-7")
    assert (ticket.id, ticket.scope_id) == ("tk_1", "sc_1")
    assert transport.sent[1].json == {
        "scopeId": "sc_1", "mailboxId": "mb_1", "taskKey": "research:acme",
        "input": {"company": "acme"}, "subscriberId": "planner-7",
    }


# -- deliveries -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_receive_returns_a_delivery_or_none():
    """receive() asks for a 30 s lease without waitMs and wraps the answer; an empty queue gives None."""
    server = QueueServer([(1, {"company": "acme"})])
    rs, transport = make_client(server)
    mailbox = rs.scope("sc_1").mailbox("research")
    delivery = await mailbox.receive()
    assert (delivery.id, delivery.data, delivery.attempt, delivery.scope_id) == ("msg_1", {"company": "acme"}, 1, "sc_1")
    assert transport.sent[1].json == {"scopeId": "sc_1", "holder": "h1", "holderSession": rs.session, "leaseSeconds": 30}
    assert await mailbox.receive() is None


@pytest.mark.anyio
async def test_a_delivery_settles_once():
    """After complete(), retry() and reject() send nothing; renew() still goes out."""
    rs, transport = make_client(QueueServer([(1, "x")]))
    delivery = await rs.scope("sc_1").mailbox("research").receive()
    await delivery.complete(result={"payload": "report"})
    await delivery.retry()
    await delivery.reject()
    await delivery.renew(120)
    await delivery.renew()
    assert [(s.suffix, s.json) for s in transport.sent[2:]] == [
        ("/messages/msg_1/complete", {"token": "t1", "result": {"payload": "report"}}),
        ("/messages/msg_1/renew", {"token": "t1", "leaseSeconds": 120}),
        ("/messages/msg_1/renew", {"token": "t1"}),
    ]


@pytest.mark.anyio
async def test_retry_and_reject_send_nack_with_the_retry_flag():
    """retry() nacks with retry true, reject() with retry false, and complete() alone sends just the token."""
    rs, transport = make_client(QueueServer([(1, "a"), (2, "b"), (3, "c")]))
    mailbox = rs.scope("sc_1").mailbox("research")
    await (await mailbox.receive()).retry()
    await (await mailbox.receive()).reject()
    await (await mailbox.receive()).complete()
    assert settlements(transport) == [
        ("/messages/msg_1/nack", {"token": "t1", "retry": True}),
        ("/messages/msg_2/nack", {"token": "t2", "retry": False}),
        ("/messages/msg_3/complete", {"token": "t3"}),
    ]


# -- task tickets -----------------------------------------------------------------------------


@pytest.mark.trio
async def test_result_polls_every_250ms_until_terminal(autojump_clock):
    """result() polls GET /tasks/{id} every 250 ms and returns {state, outcome, reason} once terminal."""
    rs, transport = make_client(task_server(["QUEUED", "RUNNING", "RUNNING", "SUCCEEDED"]))
    start = trio.current_time()
    outcome = await rs.scope("sc_1").task("tk_1").result()
    assert outcome == {"state": "SUCCEEDED", "outcome": "report", "reason": None}
    assert [round(s.at - start, 6) for s in transport.sent] == [0, 0.25, 0.5, 0.75]


@pytest.mark.trio
async def test_result_times_out_without_touching_the_task(autojump_clock):
    """A task still running at timeout_ms raises WaitTimeoutError exactly then; nothing is cancelled."""
    rs, transport = make_client(task_server(["RUNNING"] * 100))
    start = trio.current_time()
    with pytest.raises(runstate.WaitTimeoutError) as caught:
        await rs.scope("sc_1").task("tk_1").result(timeout_ms=1000, poll_ms=300)
    assert trio.current_time() - start == pytest.approx(1.0)
    assert caught.value.code == "WAIT_TIMEOUT"
    assert {s.method for s in transport.sent} == {"GET"}


@pytest.mark.anyio
async def test_ticket_cancel_join_and_detach_bodies():
    """cancel() without a reason sends {}, with one {reason}; join defaults to the ticket's scope; detach sends the subscriber."""
    rs, transport = make_client(lambda sent: ok({"id": "tk_1"}))
    ticket = rs.scope("sc_1").task("tk_1")
    await ticket.cancel()
    await ticket.cancel("not needed")
    await ticket.join("planner-8")
    await ticket.join("planner-9", "sc_2")
    await ticket.detach("planner-8")
    assert [(s.suffix, s.raw) for s in transport.sent][0] == ("/tasks/tk_1/cancel", b"{}")
    assert transport.sent[0].headers["content-type"] == "application/json"
    assert [s.json for s in transport.sent[1:]] == [
        {"reason": "not needed"},
        {"subscriberId": "planner-8", "scopeId": "sc_1"},
        {"subscriberId": "planner-9", "scopeId": "sc_2"},
        {"subscriberId": "planner-8"},
    ]


# -- consume ----------------------------------------------------------------------------------


@pytest.mark.trio
async def test_consume_completes_after_the_handler_returns(autojump_clock):
    """Each delivery runs the handler with (data, delivery) and is completed with just its token."""
    server = QueueServer([(1, {"n": 1}), (2, {"n": 2})])
    rs, transport = make_client(server)
    stop = trio.Event()
    seen = []

    async def handle(data, delivery):
        seen.append((data, delivery.attempt))
        if len(seen) == 2:
            stop.set()

    await rs.scope("sc_1").mailbox("research").consume(handle, stop_event=stop)
    assert seen == [({"n": 1}, 1), ({"n": 2}, 1)]
    assert settlements(transport) == [("/messages/msg_1/complete", {"token": "t1"}), ("/messages/msg_2/complete", {"token": "t2"})]


@pytest.mark.trio
async def test_consume_calls_on_error_then_puts_the_delivery_back(autojump_clock):
    """A handler that raises gets on_error(err, delivery), then a nack with retry true."""
    rs, transport = make_client(QueueServer([(1, "x")]))
    stop = trio.Event()
    errors = []

    async def handle(data, delivery):
        stop.set()
        raise RuntimeError("model timed out")

    def log_error(err, delivery):
        errors.append((str(err), delivery.id))

    await rs.scope("sc_1").mailbox("research").consume(handle, stop_event=stop, on_error=log_error)
    assert errors == [("model timed out", "msg_1")]
    assert settlements(transport) == [("/messages/msg_1/nack", {"token": "t1", "retry": True})]


@pytest.mark.trio
async def test_a_handler_that_settles_itself_is_not_settled_again(autojump_clock):
    """If the handler completes the delivery, consume sends no second settlement."""
    rs, transport = make_client(QueueServer([(1, "x")]))
    stop = trio.Event()

    async def handle(data, delivery):
        await delivery.complete(result={"payload": "report"})
        stop.set()

    await rs.scope("sc_1").mailbox("research").consume(handle, stop_event=stop)
    assert settlements(transport) == [("/messages/msg_1/complete", {"token": "t1", "result": {"payload": "report"}})]


def _returned_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "runstate" and "not recorded" in r.getMessage()]


@pytest.mark.trio
async def test_a_handler_that_returns_a_value_is_warned_about_once(autojump_clock, caplog):
    """A returned value is not recorded (the delivery is completed with no payload, as before), and
    the `runstate` logger says so once for the handler, naming it and how to record a result; a
    second consume() with the same handler says nothing more."""
    caplog.set_level(logging.WARNING, logger="runstate")
    rs, transport = make_client(QueueServer([(1, "a"), (2, "b"), (3, "c")]))
    seen = []
    stop = trio.Event()

    async def research(data, delivery):
        seen.append(data)
        if len(seen) > 1:  # the first consume() runs two, the second one
            stop.set()
        return {"report": data}

    await rs.scope("sc_1").mailbox("research").consume(research, stop_event=stop)
    assert seen == ["a", "b"]
    assert settlements(transport) == [("/messages/msg_1/complete", {"token": "t1"}), ("/messages/msg_2/complete", {"token": "t2"})]
    told = _returned_warnings(caplog)
    assert len(told) == 1, told
    assert "consume('research')" in told[0] and "handler test_a_handler" in told[0] and "(dict)" in told[0]
    assert 'delivery.complete(result={"payload": value})' in told[0]
    stop = trio.Event()
    await rs.scope("sc_1").mailbox("research").consume(research, stop_event=stop)
    assert seen == ["a", "b", "c"] and len(settlements(transport)) == 3
    assert len(_returned_warnings(caplog)) == 1, "said once per handler, not once per consume()"


@pytest.mark.trio
async def test_no_warning_for_a_handler_that_returns_none_or_settles_itself(autojump_clock, caplog):
    """Returning nothing, or completing the delivery itself before returning a value, is not warned about."""
    caplog.set_level(logging.WARNING, logger="runstate")
    rs, transport = make_client(QueueServer([(1, "a"), (2, "b")]))
    stop = trio.Event()

    async def handle(data, delivery):
        if data == "a":
            return None
        await delivery.complete(result={"payload": "report"})
        stop.set()
        return "report"

    await rs.scope("sc_1").mailbox("research").consume(handle, stop_event=stop)
    assert len(settlements(transport)) == 2
    assert _returned_warnings(caplog) == []


@pytest.mark.trio
async def test_consume_renews_while_the_handler_runs(autojump_clock, pinned_jitter):
    """A 60 s delivery lease is renewed every 20 s with {token, leaseSeconds} while the handler works."""
    rs, transport = make_client(QueueServer([(1, "x")]))
    stop = trio.Event()
    start = trio.current_time()

    async def handle(data, delivery):
        await trio.sleep(50)
        stop.set()

    await rs.scope("sc_1").mailbox("research").consume(handle, stop_event=stop, lease_seconds=60)
    renewals = [s for s in transport.sent if s.suffix == "/messages/msg_1/renew"]
    assert [round(s.at - start, 6) for s in renewals] == [20, 40]
    assert renewals[0].json == {"token": "t1", "leaseSeconds": 60}
    # The intake looks first without a wait (a cancellation does not cut it), with the lease asked.
    assert transport.sent[1].json["leaseSeconds"] == 60 and "waitMs" not in transport.sent[1].json


@pytest.mark.trio
async def test_a_lost_delivery_cancels_its_handler_and_sends_nothing(autojump_clock, pinned_jitter):
    """When the server refuses a renewal as stale the delivery is lost: its coroutine handler is
    cancelled at that instant (10 s into a 30 s lease), nothing is sent for it, and on_error hears
    of the loss; consume() goes on with the next delivery."""
    rs, transport = make_client(QueueServer([(1, "x"), (2, "y")], renew_error=error(409, "STALE_CLAIM")))
    stop = trio.Event()
    started, finished, errors = [], [], []

    async def handle(data, delivery):
        started.append((data, trio.current_time()))
        if data == "y":
            stop.set()
            return
        await trio.sleep(15)
        finished.append(data)

    start = trio.current_time()
    await rs.scope("sc_1").mailbox("research").consume(
        handle, stop_event=stop, lease_seconds=30, on_error=lambda err, delivery: errors.append((type(err), delivery.id))
    )
    assert [data for data, _ in started] == ["x", "y"] and started[1][1] - start == pytest.approx(10)
    assert finished == []
    assert errors == [(runstate.LeaseLostError, "msg_1")]
    assert settlements(transport) == [("/messages/msg_2/complete", {"token": "t2"})]


@pytest.mark.trio
async def test_stop_drains_then_requeues_what_is_unfinished(autojump_clock):
    """On stop: no new recv, running handlers get shutdown_timeout, the unfinished one is nacked then cancelled."""
    rs, transport = make_client(QueueServer([(1, "quick"), (2, "slow")]))
    stop = trio.Event()
    start = trio.current_time()
    events = []

    async def handle(data, delivery):
        if data == "slow":
            stop.set()
            try:
                await trio.sleep(3600)
            except trio.Cancelled:
                events.append(("cancelled", trio.current_time() - start))
                raise
        else:
            await trio.sleep(5)
            events.append(("quick done", trio.current_time() - start))

    await rs.scope("sc_1").mailbox("research").consume(handle, stop_event=stop, concurrency=2, shutdown_timeout=10)
    nacks = [s for s in transport.sent if s.suffix == "/messages/msg_2/nack"]
    # At concurrency the intake sleeps poll_ms (0.25 s) before it sees the stop; the drain follows.
    assert events == [("quick done", pytest.approx(5)), ("cancelled", pytest.approx(10.25))]
    assert len(nacks) == 1 and nacks[0].json == {"token": "t2", "retry": True}
    assert nacks[0].at - start == pytest.approx(10.25)
    assert ("/messages/msg_1/complete", {"token": "t1"}) in settlements(transport)
    assert server_recvs_after(transport, start) == 2


def server_recvs_after(transport, start):
    return len([s for s in transport.sent if s.suffix.endswith("/recv")])


@pytest.mark.trio
async def test_stop_cancels_a_long_poll_within_100ms(autojump_clock):
    """An idle consume stops 0.1 s after the stop flag is set, abandoning its long poll."""
    rs, transport = make_client(QueueServer([]))
    stop = trio.Event()
    start = trio.current_time()

    async def stop_later():
        await trio.sleep(5.05)
        stop.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_later)
        await rs.scope("sc_1").mailbox("research").consume(lambda data, delivery: None, stop_event=stop)
    assert trio.current_time() - start == pytest.approx(5.1)
    assert server_recvs_after(transport, start) == 2  # a look without a wait, then the long poll


@pytest.mark.trio
async def test_an_empty_long_poll_is_followed_at_once_and_an_early_empty_one_after_poll_ms(autojump_clock):
    """After a held empty recv the next one goes out at once; an empty answer in <1 s waits poll_ms first."""
    server = QueueServer([], hold=True)
    rs, transport = make_client(server)
    stop = trio.Event()

    async def stop_later():
        await trio.sleep(2.5)
        server.hold = False
        await trio.sleep(1)
        stop.set()

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_later)
        await rs.scope("sc_1").mailbox("research").consume(lambda d, x: None, stop_event=stop, wait_ms=1000, poll_ms=300)
    times = [round(s.at - start, 6) for s in transport.sent if s.suffix.endswith("/recv")]
    # Each intake is a look without a wait and then the long poll, at the same moment.
    assert times[::2] == times[1::2]
    assert times[::2][:4] == [0, 1, 2, 3]
    assert times[::2][4:] == [3.3]


@pytest.mark.trio
async def test_scope_cancelled_stops_consume_cleanly(autojump_clock):
    """SCOPE_CANCELLED from recv ends consume without an error and at once: the handler in flight
    (its task ended with the run on the server) is cancelled and told, and nothing is sent for it."""
    server = QueueServer([(1, "x")], recv_error=lambda n: error(409, "SCOPE_CANCELLED") if n == 2 else None)

    async def over_the_wire(sent):  # an answer takes a moment, as over a socket: the handler is under way by then
        await trio.sleep(0.001)
        return await server(sent)

    rs, transport = make_client(over_the_wire)
    finished, told = [], []

    async def handle(data, delivery):
        try:
            await trio.sleep(3)
            finished.append(data)
        finally:
            told.append((delivery.is_lost, type(delivery.lost_error)))

    start = trio.current_time()
    await rs.scope("sc_1").mailbox("research").consume(handle, concurrency=2)
    assert trio.current_time() - start < 0.01
    assert finished == [] and told == [(True, runstate.ScopeCancelledError)]
    assert settlements(transport) == []


@pytest.mark.trio
@pytest.mark.parametrize("status,code,cls", [(401, "UNAUTHENTICATED", runstate.AuthenticationError), (404, "NOT_FOUND", runstate.NotFoundError)])
async def test_consume_raises_authentication_and_not_found_errors(autojump_clock, status, code, cls):
    """Authentication and not-found errors from recv come out of consume as they are, not in a group."""
    rs, _ = make_client(QueueServer([], recv_error=lambda n: error(status, code)))
    with pytest.raises(cls):
        await rs.scope("sc_1").mailbox("research").consume(lambda d, x: None)


@pytest.mark.trio
async def test_consume_keeps_polling_through_other_errors(autojump_clock):
    """A 503 or a 429 from recv is waited out (poll_ms, then twice that) and the loop goes on."""
    answers = {1: error(503, "UNAVAILABLE"), 2: error(429, "RATE_LIMITED")}
    rs, transport = make_client(QueueServer([(1, "x")], recv_error=lambda n: answers.get(n)))
    stop = trio.Event()
    start = trio.current_time()

    async def handle(data, delivery):
        stop.set()

    await rs.scope("sc_1").mailbox("research").consume(handle, stop_event=stop, poll_ms=250)
    times = [round(s.at - start, 6) for s in transport.sent if s.suffix.endswith("/recv")]
    assert times == [0, 0.25, 0.75]


@pytest.mark.trio
async def test_concurrency_bounds_the_handlers_in_flight(autojump_clock):
    """With concurrency=2 at most two handlers run at once."""
    rs, _ = make_client(QueueServer([(n, n) for n in range(1, 6)]))
    stop = trio.Event()
    running = {"now": 0, "most": 0, "done": 0}

    async def handle(data, delivery):
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        await trio.sleep(1)
        running["now"] -= 1
        running["done"] += 1
        if running["done"] == 5:
            stop.set()

    await rs.scope("sc_1").mailbox("research").consume(handle, stop_event=stop, concurrency=2)
    assert (running["most"], running["done"]) == (2, 5)


@pytest.mark.trio
async def test_plain_handlers_run_in_a_worker_thread(autojump_clock):
    """A plain handler runs off the event loop thread and its delivery is completed afterwards."""
    rs, transport = make_client(QueueServer([(1, "x")]))
    stop = threading.Event()
    threads = []

    def handle(data, delivery):
        threads.append(threading.current_thread())
        stop.set()

    await rs.scope("sc_1").mailbox("research").consume(handle, stop_event=stop)
    assert threads and threads[0] is not threading.current_thread()
    assert settlements(transport) == [("/messages/msg_1/complete", {"token": "t1"})]


@pytest.mark.anyio
async def test_asyncio_consume_with_an_asyncio_event_drains_and_requeues():
    """Under asyncio, an asyncio.Event stops consume; an unfinished handler is nacked after shutdown_timeout."""
    rs, transport = make_client(QueueServer([(1, "quick"), (2, "slow")]))
    stop = asyncio.Event()
    done = []

    async def handle(data, delivery):
        if data == "slow":
            stop.set()
            await asyncio.sleep(10)
        done.append(data)

    errors = []
    with anyio.fail_after(3):
        await rs.scope("sc_1").mailbox("research").consume(
            handle, stop_event=stop, concurrency=2, shutdown_timeout=0.05, wait_ms=200, on_error=lambda e, d: errors.append(e)
        )
    assert done == ["quick"] and errors == []
    assert settlements(transport) == [("/messages/msg_1/complete", {"token": "t1"}), ("/messages/msg_2/nack", {"token": "t2", "retry": True})]


@pytest.mark.anyio
async def test_asyncio_consume_with_async_on_error_and_anyio_event():
    """Under asyncio an anyio.Event works as the stop flag and an async on_error is awaited."""
    rs, transport = make_client(QueueServer([(1, "x")]))
    stop = anyio.Event()
    errors = []

    async def handle(data, delivery):
        stop.set()
        raise ValueError("bad")

    async def on_error(err, delivery):
        errors.append(type(err).__name__)

    with anyio.fail_after(3):
        await rs.scope("sc_1").mailbox("research").consume(handle, stop_event=stop, on_error=on_error, wait_ms=0, poll_ms=10)
    assert errors == ["ValueError"]
    assert settlements(transport) == [("/messages/msg_1/nack", {"token": "t1", "retry": True})]
