"""A delivery taken by hand: `receive(lease_seconds=)`, kept renewed in the background
(`keep_renewed()`, `stop_renewing()`), and settled with a reason (`retry(reason)`, `reject(reason)`).

Against a scripted server for the exact requests and their virtual times, and against a real
kernel (`runstate.testing`) for what the server makes of them: who else can take the task, and
the reason its task ends with.
"""

from __future__ import annotations

import inspect

import pytest
import trio

import runstate
from runstate import testing
from sdk_fakes import QueueServer, Scripted, error, make_client, settlements

pytest.importorskip("runstate.server.app")


def renewals(transport, message: str = "msg_1") -> list:
    return [s for s in transport.sent if s.suffix == f"/messages/{message}/renew"]


# -- against a scripted server ------------------------------------------------------------------


@pytest.mark.anyio
async def test_receive_asks_for_the_lease_it_is_given_and_checks_it_first():
    """receive(lease_seconds=90) asks for a 90 s lease; one outside 5-600 is refused before anything is sent."""
    rs, transport = make_client(QueueServer([(1, "x")]))
    mailbox = rs.scope("sc_1").mailbox("research")
    with pytest.raises(runstate.ValidationError, match="leaseSeconds must be between 5 and 600"):
        await mailbox.receive(lease_seconds=4)
    assert transport.sent == []
    delivery = await mailbox.receive(lease_seconds=90)
    assert transport.sent[-1].json["leaseSeconds"] == 90
    assert delivery.lost_error is None and not delivery.is_lost


@pytest.mark.trio
async def test_a_kept_delivery_is_renewed_every_third_of_its_lease_until_it_is_settled(autojump_clock, pinned_jitter):
    """keep_renewed() on a 30 s delivery renews it at 10 s and 20 s (by the client's renewal loop);
    the completion at 25 s stops it: nothing is renewed after, and the delivery is never lost."""
    rs, transport = make_client(QueueServer([(1, "x")]))
    start = trio.current_time()
    delivery = await rs.scope("sc_1").mailbox("research").receive(lease_seconds=30)
    delivery.keep_renewed()
    delivery.keep_renewed()  # a second call changes nothing
    await trio.sleep(25)
    await delivery.complete(result={"payload": "done"})
    await trio.sleep(60)
    assert [round(s.at - start, 6) for s in renewals(transport)] == [10, 20]
    assert renewals(transport)[0].json == {"token": "t1", "leaseSeconds": 30}
    assert delivery.settled and not delivery.is_lost


@pytest.mark.trio
async def test_a_delivery_not_kept_renewed_is_lost_at_its_lease_end_by_the_local_clock(autojump_clock):
    """Without keep_renewed() nothing is renewed: a 5 s delivery counts as lost 0.5 s before its end."""
    rs, transport = make_client(QueueServer([(1, "x")]))
    delivery = await rs.scope("sc_1").mailbox("research").receive(lease_seconds=5)
    await trio.sleep(4.4)
    assert not delivery.is_lost
    await trio.sleep(0.2)
    assert delivery.is_lost and renewals(transport) == []


@pytest.mark.trio
async def test_a_refused_renewal_loses_a_kept_delivery_and_stops_its_renewal(autojump_clock, pinned_jitter):
    """A renewal answered STALE_CLAIM loses the delivery at once (10 s in): is_lost, lost_error says
    why, raise_if_lost() raises, and nothing more is sent for it."""
    rs, transport = make_client(QueueServer([(1, "x")], renew_error=error(409, "STALE_CLAIM", "stale token")))
    delivery = await rs.scope("sc_1").mailbox("research").receive(lease_seconds=30)
    delivery.keep_renewed()
    await trio.sleep(11)
    assert delivery.is_lost and isinstance(delivery.lost_error, runstate.LeaseLostError)
    with pytest.raises(runstate.LeaseLostError):
        delivery.raise_if_lost()
    await trio.sleep(60)
    assert len(renewals(transport)) == 1


@pytest.mark.trio
async def test_stop_renewing_leaves_the_lease_to_run_out(autojump_clock, pinned_jitter):
    """stop_renewing() after one renewal: no more renewals, and the delivery is lost by the local
    clock at the end of the last renewed lease (10 s + 30 s, less the 2 s margin)."""
    rs, transport = make_client(QueueServer([(1, "x")]))
    start = trio.current_time()
    delivery = await rs.scope("sc_1").mailbox("research").receive(lease_seconds=30)
    delivery.keep_renewed()
    await trio.sleep(15)
    delivery.stop_renewing()
    await trio.sleep(22.9)
    assert not delivery.is_lost
    await trio.sleep(0.2)
    assert delivery.is_lost and trio.current_time() - start == pytest.approx(38.1)
    assert len(renewals(transport)) == 1


@pytest.mark.trio
async def test_closing_the_client_counts_a_kept_delivery_lost(autojump_clock):
    """The client's close stops every renewal it runs, a kept delivery's too: it counts as lost from then on."""
    rs, transport = make_client(QueueServer([(1, "x")]))
    delivery = await rs.scope("sc_1").mailbox("research").receive()
    delivery.keep_renewed()
    await rs.aclose()
    assert delivery.is_lost and delivery.lost_error.code == "CLIENT_CLOSED"
    await trio.sleep(60)
    assert renewals(transport) == []


@pytest.mark.anyio
async def test_retry_and_reject_send_their_reason_and_check_its_length():
    """retry(reason) and reject(reason) send it as the nack's `error`; without one, none is sent;
    a reason over 2000 characters is refused before anything is sent."""
    rs, transport = make_client(QueueServer([(1, "a"), (2, "b"), (3, "c")]))
    mailbox = rs.scope("sc_1").mailbox("research")
    first, second, third = await mailbox.receive(), await mailbox.receive(), await mailbox.receive()
    await first.retry("the upstream API answered 503")
    await second.reject(reason="the input names no company")
    with pytest.raises(runstate.ValidationError, match="reason is longer than 2000 characters"):
        await third.retry("x" * 2001)
    await third.retry()
    assert settlements(transport) == [
        ("/messages/msg_1/nack", {"token": "t1", "retry": True, "error": "the upstream API answered 503"}),
        ("/messages/msg_2/nack", {"token": "t2", "retry": False, "error": "the input names no company"}),
        ("/messages/msg_3/nack", {"token": "t3", "retry": True}),
    ]


# -- against a real kernel ----------------------------------------------------------------------


@pytest.mark.trio
async def test_a_kept_delivery_stays_with_its_worker_for_minutes_then_goes_on_when_let_go(autojump_clock):
    """A task received with a 5 s lease and kept renewed is not handed to another worker for 3
    virtual minutes; once its renewal stops, it goes to the other worker as attempt 2 at its
    lease's end, and the first worker's completion is refused as stale."""
    async with testing.serve() as rs:
        await rs.mailboxes.ensure("research", mode="WORK")
        run = await rs.scopes.create(name="kept")
        ticket = await run.mailbox("research").submit({"company": "acme"}, key="research:acme")
        delivery = await run.mailbox("research").receive(lease_seconds=5)
        assert delivery is not None and delivery.task_id == ticket.id
        delivery.keep_renewed()
        other = rs.new_client(holder="worker-2").scope(run.id).mailbox("research")
        for _ in range(3):
            await trio.sleep(60)
            assert await other.receive() is None and not delivery.is_lost
        delivery.stop_renewing()
        taken = await other.receive(wait_ms=10_000)
        assert taken is not None and taken.task_id == ticket.id and taken.attempt == 2
        with pytest.raises(runstate.LeaseLostError):
            await delivery.complete(result={"payload": "late"})
        await taken.complete(result={"payload": "report"})
        assert (await ticket.result())["outcome"] == "report"


@pytest.mark.trio
async def test_a_rejected_task_keeps_the_reason_given(autojump_clock):
    """reject(reason) ends the task FAILED with `handler_error: <reason>` as its reason."""
    async with testing.serve() as rs:
        await rs.mailboxes.ensure("research", mode="WORK")
        run = await rs.scopes.create()
        ticket = await run.mailbox("research").submit({"company": ""}, key="research:nobody")
        delivery = await run.mailbox("research").receive()
        await delivery.reject("the input names no company")
        outcome = await ticket.result()
        assert outcome["state"] == "FAILED" and outcome["reason"] == "handler_error: the input names no company"


def test_the_blocking_twins_take_the_same_arguments_and_run_on_the_clients_loop():
    """The blocking client's mailbox and delivery take the lease, keep it renewed on the client's
    own loop (where its clock lives), and send the reason, as their async twins do."""
    from runstate.blocking import BlockingDelivery, BlockingScope

    transport = Scripted(QueueServer([(1, "x")]))
    with runstate.Runstate(api_key="k", space_id="sp1", holder="h1", transport=transport) as rs:
        delivery = rs.scope("sc_1").mailbox("research").receive(lease_seconds=45)
        assert transport.sent[-1].json["leaseSeconds"] == 45
        delivery.keep_renewed()
        delivery.stop_renewing()
        delivery.retry("not now")
        assert settlements(transport) == [("/messages/msg_1/nack", {"token": "t1", "retry": True, "error": "not now"})]
    for name in ("keep_renewed", "stop_renewing"):
        assert inspect.getdoc(getattr(BlockingDelivery, name)) == inspect.getdoc(getattr(runstate.Delivery, name))
    for name in ("claims", "tasks"):
        assert inspect.getdoc(getattr(BlockingScope, name)) == inspect.getdoc(getattr(runstate.ScopeHandle, name))
