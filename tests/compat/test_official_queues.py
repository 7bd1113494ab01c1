"""Shared tasks, work queues and crash takeover through the official `runstate-sdk==0.2.0` client,
against a real `runstate serve` process (real time, every wait bounded).

Leases of 5 s (the shortest allowed) appear only where a test is about a lease running out.
"""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from ..servers import ServerProcess
from .official_scripts import Clients, clients  # noqa: F401 - the fixture
from .product_page import PRODUCT_PAGE_EXAMPLES, check_product_page_result

pytestmark = [pytest.mark.compat, pytest.mark.e2e]


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_the_product_page_examples_run_as_written(clients: Clients):
    """Tasks, consume, receive and send from the product page, nearly verbatim, one process."""
    result = clients.run(PRODUCT_PAGE_EXAMPLES, mailbox=unique("research"))
    check_product_page_result(result)


def test_a_key_with_different_input_is_an_idempotency_conflict(clients: Clients):
    result = clients.run(
        """
        async def main():
            rs = AsyncRunstate()
            run = await rs.scopes.create()
            await rs.mailboxes.ensure(ARGS["mailbox"], mode="WORK")
            mailbox = run.mailbox(ARGS["mailbox"])
            first = await mailbox.submit({"company": "acme"}, key="k")
            try:
                await mailbox.submit({"company": "globex"}, key="k")
                code = None
            except ConflictError as error:
                code, status = error.code, error.status
            try:
                await mailbox.submit({"company": "acme"}, key="k", deadline="tomorrow")
                bad = None
            except RunstateError as error:
                bad = (error.code, error.status)
            emit(code=code, status=status, bad=bad, first=first.id)

        asyncio.run(main())
        """,
        mailbox=unique("conflict"),
    )
    assert result["code"] == "IDEMPOTENCY_CONFLICT" and result["status"] == 409
    assert result["bad"] == ["VALIDATION_FAILED", 400]


WORKER = """
async def main():
    rs = AsyncRunstate(holder=ARGS["holder"])
    run = rs.scope(ARGS["run"])
    stop, release = asyncio.Event(), asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, release.set)

    async def handle(data, delivery):
        emit(event="started", attempt=delivery.attempt, holder=ARGS["holder"], message=delivery.id,
             token=delivery._token, scope=delivery.scope_id, data=data)
        if ARGS.get("hold"):  # the work goes on until the test sends SIGUSR1
            await release.wait()
        try:
            await delivery.complete(result={"payload": {"by": ARGS["holder"], "attempt": delivery.attempt}})
            emit(event="completed", attempt=delivery.attempt)
        except LeaseLostError as error:
            emit(event="late", code=error.code, status=error.status)
        if ARGS.get("once"):
            stop.set()

    await run.mailbox(ARGS["mailbox"]).consume(handle, lease_seconds=ARGS.get("lease_s", 30), stop_event=stop)
    emit(event="stopped")
    await rs.aclose()

asyncio.run(main())
"""


def setup_task(clients: Clients, mailbox: str, key: str = "research:acme", **extra) -> dict:
    return clients.run(
        """
        async def main():
            rs = AsyncRunstate()
            run = await rs.scopes.create()
            await rs.mailboxes.ensure(ARGS["mailbox"], mode="WORK")
            ticket = await run.mailbox(ARGS["mailbox"]).submit({"company": "acme"}, key=ARGS["key"], **ARGS["extra"])
            emit(run=run.id, task=ticket.id)

        asyncio.run(main())
        """,
        mailbox=mailbox,
        key=key,
        extra=extra,
    )


def task_view(clients: Clients, task_id: str) -> dict:
    response = clients.get(f"/tasks/{task_id}")
    assert response.status_code == 200, response.text
    return response.json()


def test_a_frozen_worker_is_taken_over_and_its_late_completion_is_stale(clients: Clients):
    """Worker A takes the task with a 5 s lease and freezes (SIGSTOP: it stops renewing, as if
    dead). Worker B gets it with attempt 2 once the lease runs out and completes it. A, woken,
    completes too late: LeaseLostError STALE_CLAIM, and the task keeps B's result."""
    mailbox = unique("takeover")
    created = setup_task(clients, mailbox)
    a = clients.start(WORKER, holder="worker-a", run=created["run"], mailbox=mailbox, lease_s=5, hold=True, once=True)
    b = None
    try:
        started_a = a.wait_for("started")
        assert started_a["attempt"] == 1
        a.process.send_signal(signal.SIGSTOP)
        frozen_at = time.monotonic()
        b = clients.start(WORKER, holder="worker-b", run=created["run"], mailbox=mailbox, lease_s=5, once=True)
        started_b = b.wait_for("started", timeout_s=15)
        assert started_b["attempt"] == 2 and started_b["message"] == started_a["message"]
        assert time.monotonic() - frozen_at <= 7.5  # the 5 s lease, plus a loaded machine's slack
        assert b.wait_for("completed")["attempt"] == 2
        a.process.send_signal(signal.SIGCONT)
        a.process.send_signal(signal.SIGUSR1)
        late = a.wait_for("late", timeout_s=15)
        assert late == {"event": "late", "code": "STALE_CLAIM", "status": 409}
        assert a.finish()["event"] == "stopped" and b.finish()["event"] == "stopped"
    finally:
        a.process.send_signal(signal.SIGCONT)
        a.kill()
        if b is not None:
            b.kill()
    view = task_view(clients, created["task"])
    assert view["state"] == "SUCCEEDED" and view["attempt"] == 2
    assert view["outcome"] == {"by": "worker-b", "attempt": 2}


def test_a_killed_worker_is_taken_over_and_its_token_completes_nothing(clients: Clients):
    """Worker A is killed (SIGKILL) mid-task. B completes it with attempt 2. A completion sent
    afterwards with A's delivery (its token) is STALE_CLAIM; the task keeps B's result."""
    mailbox = unique("killed")
    created = setup_task(clients, mailbox)
    a = clients.start(WORKER, holder="worker-a", run=created["run"], mailbox=mailbox, lease_s=5, hold=True)
    b = None
    try:
        started_a = a.wait_for("started")
        a.kill()
        killed_at = time.monotonic()
        b = clients.start(WORKER, holder="worker-b", run=created["run"], mailbox=mailbox, lease_s=5, once=True)
        assert b.wait_for("started", timeout_s=15)["attempt"] == 2
        print(f"\ntakeover: worker b started attempt 2 {time.monotonic() - killed_at:.2f} s after worker a was killed (5 s lease)")
        assert b.wait_for("completed")["attempt"] == 2
        assert b.finish()["event"] == "stopped"
    finally:
        a.kill()
        if b is not None:
            b.kill()
    late = clients.run(
        """
        from runstate.mailboxes import Delivery

        async def main():
            rs = AsyncRunstate()
            raw = {"message": {"id": ARGS["message"], "payload": None, "attempt": 1, "scopeId": ARGS["scope"]},
                   "token": ARGS["token"]}
            delivery = Delivery(rs._ctx, raw)
            try:
                await delivery.complete(result={"payload": "late from a"})
                emit(code=None)
            except LeaseLostError as error:
                emit(code=error.code, status=error.status)

        asyncio.run(main())
        """,
        message=started_a["message"],
        scope=started_a["scope"],
        token=started_a["token"],
    )
    assert late == {"code": "STALE_CLAIM", "status": 409}
    view = task_view(clients, created["task"])
    assert view["state"] == "SUCCEEDED" and view["outcome"] == {"by": "worker-b", "attempt": 2}


def test_a_handler_that_keeps_failing_retries_until_the_task_fails(clients: Clients):
    """maxAttempts 3: on_error sees attempts 1, 2, 3 (after 1 s and 2 s backoffs), then FAILED."""
    mailbox = unique("flaky")
    assert clients.post("/mailboxes", {"name": mailbox, "maxAttempts": 3}).status_code == 201
    result = clients.run(
        """
        async def main():
            rs = AsyncRunstate()
            run = await rs.scopes.create()
            await rs.mailboxes.ensure(ARGS["mailbox"], mode="WORK")
            mailbox = run.mailbox(ARGS["mailbox"])
            ticket = await mailbox.submit({"n": 1}, key="flaky")
            attempts, seen_at = [], []
            stop = asyncio.Event()
            started = time.monotonic()

            async def handle(data, delivery):
                seen_at.append(round(time.monotonic() - started, 2))
                raise RuntimeError("upstream 500")

            def on_error(err, delivery):
                attempts.append(delivery.attempt)

            worker = asyncio.ensure_future(mailbox.consume(handle, on_error=on_error, stop_event=stop, wait_ms=2000))
            outcome = await ticket.result(timeout_ms=20_000)
            stop.set()
            await asyncio.wait_for(worker, 10)
            emit(outcome=outcome, attempts=attempts, seen_at=seen_at)

        asyncio.run(main())
        """,
        mailbox=mailbox,
    )
    assert result["attempts"] == [1, 2, 3]
    assert result["outcome"]["state"] == "FAILED"
    assert result["outcome"]["reason"].startswith("attempts_exhausted: 3 of 3 attempts used")
    first, second, third = result["seen_at"]
    # Backoffs of 0.8-1.0 x 1 s and 2 s (plus the time to receive on a loaded machine).
    assert 0.7 <= second - first <= 2.5 and 1.5 <= third - second <= 3.5


def test_reject_fails_the_task_and_dead_letters_it(clients: Clients):
    mailbox = unique("reject")
    result = clients.run(
        """
        async def main():
            rs = AsyncRunstate()
            run = await rs.scopes.create()
            await rs.mailboxes.ensure(ARGS["mailbox"], mode="WORK")
            mailbox = run.mailbox(ARGS["mailbox"])
            ticket = await mailbox.submit({"malformed": True}, key="bad")
            delivery = await mailbox.receive()
            await delivery.reject()
            await delivery.complete()  # settles once: sends nothing
            outcome = await ticket.result(timeout_ms=5_000)
            emit(outcome=outcome, message=delivery.id)

        asyncio.run(main())
        """,
        mailbox=mailbox,
    )
    assert result["outcome"] == {"state": "FAILED", "outcome": None, "reason": "rejected"}
    mailbox_id = next(m["id"] for m in clients.get("/mailboxes").json()["mailboxes"] if m["name"] == mailbox)
    letters = clients.get(f"/mailboxes/{mailbox_id}/dead-letters").json()
    assert [letter["id"] for letter in letters["deadLetters"]] == [result["message"]]
    assert letters["deadLetters"][0]["payload"] == {"malformed": True}


def test_cancel_keeps_the_reason_and_refuses_the_running_workers_completion(clients: Clients):
    result = clients.run(
        """
        async def main():
            rs = AsyncRunstate()
            run = await rs.scopes.create()
            await rs.mailboxes.ensure(ARGS["mailbox"], mode="WORK")
            mailbox = run.mailbox(ARGS["mailbox"])
            queued = await mailbox.submit({"n": 1}, key="queued")
            cancelled = await queued.cancel("planner changed its mind")
            running = await mailbox.submit({"n": 2}, key="running")
            delivery = await mailbox.receive()
            await running.cancel()
            try:
                await delivery.complete(result={"payload": "too late"})
                late = None
            except LeaseLostError as error:
                late = error.code
            emit(cancelled=cancelled, queued=await queued.result(timeout_ms=5_000),
                 running=await running.result(timeout_ms=5_000), late=late,
                 delivered=delivery.data, empty=(await mailbox.receive()) is None)

        asyncio.run(main())
        """,
        mailbox=unique("cancel"),
    )
    assert result["cancelled"]["state"] == "CANCELLED"
    assert result["queued"] == {"state": "CANCELLED", "outcome": None, "reason": "planner changed its mind"}
    assert result["delivered"] == {"n": 2}
    assert result["running"] == {"state": "CANCELLED", "outcome": None, "reason": "cancelled"}
    assert result["late"] == "STALE_CLAIM" and result["empty"] is True


def test_a_task_past_its_deadline_expires(clients: Clients):
    result = clients.run(
        """
        from datetime import datetime, timedelta, timezone

        async def main():
            rs = AsyncRunstate()
            run = await rs.scopes.create()
            await rs.mailboxes.ensure(ARGS["mailbox"], mode="WORK")
            deadline = (datetime.now(timezone.utc) + timedelta(seconds=1.5)).isoformat()
            ticket = await run.mailbox(ARGS["mailbox"]).submit({"n": 1}, key="soon", deadline=deadline)
            started = time.monotonic()
            outcome = await ticket.result(timeout_ms=10_000)
            emit(outcome=outcome, waited=time.monotonic() - started,
                 empty=(await run.mailbox(ARGS["mailbox"]).receive()) is None)

        asyncio.run(main())
        """,
        mailbox=unique("deadline"),
    )
    assert result["outcome"] == {"state": "EXPIRED", "outcome": None, "reason": "deadline_exceeded"}
    assert 1.0 <= result["waited"] <= 3.0 and result["empty"] is True


def test_send_with_a_work_key_replays_and_refuses_another_payload(clients: Clients):
    result = clients.run(
        """
        async def main():
            rs = AsyncRunstate()
            run = await rs.scopes.create()
            await rs.mailboxes.ensure(ARGS["mailbox"], mode="WORK")
            mailbox = run.mailbox(ARGS["mailbox"])
            sent = await mailbox.send({"company": "acme"}, work_key="crawl:acme")
            again = await mailbox.send({"company": "acme"}, work_key="crawl:acme")
            try:
                await mailbox.send({"company": "globex"}, work_key="crawl:acme")
                conflict = None
            except ConflictError as error:
                conflict = [error.code, error.status]
            first = await mailbox.receive()
            second = await mailbox.receive()
            await first.complete()
            emit(sent=sent, again=again, conflict=conflict, data=first.data, second=second is None)

        asyncio.run(main())
        """,
        mailbox=unique("send"),
    )
    assert result["sent"]["replay"] is False and result["again"]["replay"] is True
    assert result["again"]["id"] == result["sent"]["id"]
    assert result["conflict"] == ["IDEMPOTENCY_CONFLICT", 409]
    assert result["data"] == {"company": "acme"} and result["second"] is True


def test_cancelling_the_run_stops_a_running_consume_at_once(clients: Clients):
    """An idle consume long-polling (20 s) returns cleanly within a second of the run's cancel;
    the run's queued task ends CANCELLED with reason scope_cancelled."""
    result = clients.run(
        """
        async def main():
            rs = AsyncRunstate()
            run = await rs.scopes.create()
            await rs.mailboxes.ensure(ARGS["mailbox"], mode="WORK")
            mailbox = run.mailbox(ARGS["mailbox"])
            handled = []

            async def handle(data, delivery):
                handled.append(data)

            worker = asyncio.ensure_future(mailbox.consume(handle))
            await mailbox.submit({"n": 1}, key="first")
            while not handled:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1)  # the worker is parked in a 20 s long poll now
            other = rs.scope(run.id)
            child = await other.child()
            cancelled_at = time.monotonic()
            await other.cancel()
            await asyncio.wait_for(worker, 10)
            stopped_after = time.monotonic() - cancelled_at
            try:
                await child.mailbox(ARGS["mailbox"]).submit({"n": 2}, key="second")
                refused = None
            except ScopeCancelledError as error:
                refused = error.code
            emit(stopped_after=stopped_after, handled=handled, refused=refused)

        asyncio.run(main())
        """,
        mailbox=unique("runcancel"),
    )
    assert result["handled"] == [{"n": 1}]
    assert result["stopped_after"] < 2.0  # woken by the cancel itself, not by the 20 s poll ending
    assert result["refused"] == "SCOPE_CANCELLED"


def test_cancelling_a_run_cancels_its_queued_tasks(clients: Clients):
    mailbox = unique("cascade")
    created = setup_task(clients, mailbox, key="waiting")
    assert clients.post(f"/scopes/{created['run']}/cancel").status_code == 200
    view = task_view(clients, created["task"])
    assert view["state"] == "CANCELLED" and view["outcomeReason"] == "scope_cancelled"


def test_a_consume_stopped_mid_poll_leaves_the_next_message_to_the_next_receiver(clients: Clients):
    """Stopping an idle consume cancels its long poll (the client disconnects); the server
    withdraws that wait, so a message sent afterwards is delivered to the next receiver at its
    first attempt, not leased to the receiver that went away."""
    result = clients.run(
        """
        async def main():
            rs = AsyncRunstate()
            run = await rs.scopes.create()
            await rs.mailboxes.ensure(ARGS["mailbox"], mode="WORK")
            mailbox = run.mailbox(ARGS["mailbox"])
            stop = asyncio.Event()

            async def never(data, delivery):
                raise AssertionError("the stopped worker got a delivery")

            worker = asyncio.ensure_future(mailbox.consume(never, stop_event=stop))
            await asyncio.sleep(1)  # parked in a 20 s long poll
            stop.set()
            await asyncio.wait_for(worker, 5)
            await asyncio.sleep(0.5)  # the disconnect reaches the server
            await mailbox.send({"n": 1})
            delivery = await mailbox.receive()
            emit(attempt=delivery.attempt, data=delivery.data)

        asyncio.run(main())
        """,
        mailbox=unique("disconnect"),
    )
    assert result == {"attempt": 1, "data": {"n": 1}}


def test_results_and_work_keys_survive_a_killed_server(official_client, tmp_path):
    """A server on a data directory is killed (SIGKILL) after a task completed and while another
    is leased; restarted on the same directory, a client re-attaching by task id reads the
    recorded result, the work key still replays, and the leased task's worker still holds it."""
    data = str(tmp_path / "data")
    server = ServerProcess("--data-dir", data).start()
    try:
        first = Clients(official_client, server).run(
            """
            async def main():
                rs = AsyncRunstate()
                run = await rs.scopes.create()
                await rs.mailboxes.ensure("research", mode="WORK")
                mailbox = run.mailbox("research")
                done = await mailbox.submit({"company": "acme"}, key="research:acme")
                delivery = await mailbox.receive()
                await delivery.complete(result={"payload": {"report": "acme makes anvils"}})
                held = await mailbox.submit({"company": "globex"}, key="research:globex")
                leased = await mailbox.receive()
                sent = await mailbox.send({"crawl": "acme"}, work_key="crawl:acme")
                emit(run=run.id, done=done.id, held=held.id, message=leased.id, token=leased._token, sent=sent["id"])

            asyncio.run(main())
            """
        )
    finally:
        server.kill()
    server = ServerProcess("--data-dir", data).start()
    try:
        after = Clients(official_client, server).run(
            """
            from runstate.mailboxes import Delivery

            async def main():
                rs = AsyncRunstate()
                run = rs.scope(ARGS["run"])
                outcome = await run.task(ARGS["done"]).result(timeout_ms=5_000)
                resent = await run.mailbox("research").send({"crawl": "acme"}, work_key="crawl:acme")
                raw = {"message": {"id": ARGS["message"], "payload": None, "attempt": 1, "scopeId": ARGS["run"]},
                       "token": ARGS["token"]}
                leased = Delivery(rs._ctx, raw)
                await leased.renew()
                await leased.complete(result={"payload": "after the restart"})
                held = await run.task(ARGS["held"]).result(timeout_ms=5_000)
                emit(outcome=outcome, resent=resent, held=held)

            asyncio.run(main())
            """,
            **first,
        )
    finally:
        server.stop()
    assert after["outcome"] == {"state": "SUCCEEDED", "outcome": {"report": "acme makes anvils"}, "reason": None}
    assert after["resent"]["replay"] is True and after["resent"]["id"] == first["sent"]
    assert after["held"] == {"state": "SUCCEEDED", "outcome": "after the restart", "reason": None}
