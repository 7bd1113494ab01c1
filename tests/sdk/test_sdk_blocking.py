"""The blocking `Runstate` facade: same API without await, on a private event-loop thread."""

from __future__ import annotations

import logging
import threading

import pytest

import runstate
from sdk_fakes import GRANT, MAILBOXES, RENEWED, QueueServer, Scripted, ok, settlements


def claim_handler(sent):
    if sent.suffix == "/scopes":
        return ok({"id": "sc_1"})
    if sent.suffix == "/claims":
        return ok(GRANT)
    return ok(RENEWED)


def blocking_client(handler):
    transport = Scripted(handler)
    return runstate.Runstate(api_key="k", space_id="sp1", holder="h1", transport=transport), transport


def test_blocking_client_runs_a_claim_with_a_plain_function():
    """Runstate creates a run and runs a claim with a plain function, which sees a usable lease."""
    with blocking_client(claim_handler)[0] as rs:
        run = rs.scopes.create(name="blocking")
        assert run.id == "sc_1"
        result = run.claim("k").run(lambda lease: (lease.generation, lease.token(), lease.is_lost))
        assert result == (7, "tok-1", False)


def test_blocking_acquire_and_release_by_hand():
    """acquire() returns a lease whose renew() and release() block until done."""
    rs, transport = blocking_client(claim_handler)
    try:
        lease = rs.scope("sc_1").claim("k").try_acquire()["lease"]
        lease.renew(60)
        assert lease.expires_at.isoformat() == "2030-01-01T00:01:00+00:00"
        lease.release()
        assert [s.suffix for s in transport.sent] == ["/claims", "/claims/k/renew", "/claims/k/release"]
    finally:
        rs.close()


def test_blocking_consume_with_a_thread_safe_stop_flag():
    """consume() blocks; a plain handler can settle its delivery itself and set the stop flag."""
    rs, transport = blocking_client(QueueServer([(1, "x")]))
    try:
        stop = rs.new_event()

        def handle(data, delivery):
            delivery.complete(result={"payload": data.upper()})
            stop.set()

        rs.scope("sc_1").mailbox("research").consume(handle, stop_event=stop, wait_ms=200)
        assert settlements(transport) == [("/messages/msg_1/complete", {"token": "t1", "result": {"payload": "X"}})]
    finally:
        rs.close()


def test_blocking_consume_warns_once_about_a_handler_that_returns_a_value(caplog):
    """The blocking client's thread wrapper is known as the handler it wraps: one warning for the
    handler across two consume() calls, naming it."""
    caplog.set_level(logging.WARNING, logger="runstate")
    rs, transport = blocking_client(QueueServer([(1, "x"), (2, "y")]))
    stops = []

    def summarize(data, delivery):
        stops[-1].set()
        return data.upper()

    try:
        for _ in range(2):
            stops.append(rs.new_event())
            rs.scope("sc_1").mailbox("research").consume(summarize, stop_event=stops[-1], wait_ms=200)
        assert len(settlements(transport)) == 2
    finally:
        rs.close()
    told = [r.getMessage() for r in caplog.records if r.name == "runstate" and "not recorded" in r.getMessage()]
    assert len(told) == 1 and "summarize" in told[0], told


def test_blocking_client_reports_config_errors_and_leaves_no_thread(monkeypatch):
    """Making a client checks nothing and starts nothing (as the official 0.3.0 client, so a
    module can make one before its settings are loaded); a missing key raises ConfigError at the
    first use, naming what to set, and no loop thread is started for it."""
    monkeypatch.delenv("RUNSTATE_API_KEY", raising=False)
    before = {t.ident for t in threading.enumerate() if t.name == "runstate-blocking"}
    rs = runstate.Runstate(api_key="", space_id="s")
    with pytest.raises(runstate.ConfigError, match="RUNSTATE_API_KEY"):
        rs.scopes.create()
    with pytest.raises(runstate.ConfigError, match="RUNSTATE_API_KEY"):
        rs.run_id()
    assert {t.ident for t in threading.enumerate() if t.name == "runstate-blocking"} == before
    rs.configure(api_key="k")  # settings given later take effect at the next call
    assert rs._shared.settings().config.api_key == "k"


def test_blocking_close_is_idempotent_and_stops_the_thread():
    """close() twice is harmless and the loop thread ends."""
    rs, _ = blocking_client(lambda sent: ok(MAILBOXES))
    rs.mailboxes.ensure("research", mode="work")
    thread = rs._loop.thread
    rs.close()
    rs.close()
    assert not thread.is_alive()


def test_the_blocking_client_has_real_signatures_not_a_proxy():
    """Every blocking class defines its methods itself: no __getattr__ forwarding, and the signatures match the async twins."""
    import inspect

    from runstate import blocking
    from runstate.claims import ClaimRef
    from runstate.mailboxes import MailboxRef

    for cls in (blocking.Runstate, blocking.BlockingScope, blocking.BlockingClaim, blocking.BlockingLease,
                blocking.BlockingMailbox, blocking.BlockingDelivery, blocking.BlockingTicket):
        assert "__getattr__" not in vars(cls), cls
    for blocking_cls, async_cls in ((blocking.BlockingClaim, ClaimRef), (blocking.BlockingMailbox, MailboxRef)):
        for name in ("acquire", "try_acquire", "run") if async_cls is ClaimRef else ("submit", "send", "receive", "consume"):
            ours = list(inspect.signature(getattr(blocking_cls, name)).parameters)
            theirs = list(inspect.signature(getattr(async_cls, name)).parameters)
            assert ours == theirs, name


def test_blocking_try_acquire_when_busy_and_a_lost_lease_sets_a_thread_event():
    """try_acquire() reports busy; a lease whose renewal is refused sets its threading.Event lost_event."""
    from sdk_fakes import error

    state = {"held": True}

    def handler(sent):
        if sent.suffix == "/claims":
            if state["held"]:
                return error(409, "CLAIM_HELD", "held")
            return ok(GRANT)
        if sent.suffix.endswith("/renew"):
            return error(409, "STALE_CLAIM", "moved on")
        return ok({})

    with blocking_client(handler)[0] as rs:
        claim = rs.scope("sc_1").claim("k")
        assert claim.try_acquire() == {"kind": "busy"}
        state["held"] = False
        lease = claim.acquire(lease_seconds=5)
        assert isinstance(lease.lost_event, threading.Event) and not lease.is_lost
        with pytest.raises(runstate.LeaseLostError):
            lease.renew(5)
        assert lease.lost_event.wait(2) and lease.is_lost


def test_closing_a_with_space_view_leaves_the_client_running():
    """A with_space view shares the loop; closing it closes nothing."""
    rs, transport = blocking_client(lambda sent: ok({"id": "sc_2"}))
    try:
        view = rs.with_space("sp2")
        assert view.space_id == "sp2" and view.holder == rs.holder
        view.close()
        assert rs.scopes.create().id == "sc_2"
        assert transport.sent[-1].path == "/v1/spaces/sp1/scopes"
    finally:
        rs.close()


def test_crash_takes_the_blocking_clients_objects():
    """runstate.testing.crash() on a blocking lease stops its renewal and makes release() send nothing."""
    from runstate import testing

    rs, transport = blocking_client(claim_handler)
    try:
        lease = rs.scope("sc_1").claim("k").acquire(lease_seconds=5)
        testing.crash(lease)
        lease.release()
        assert [s.suffix for s in transport.sent] == ["/claims"]
        testing.crash(rs)
        with pytest.raises(testing.CrashedError):
            rs.scopes.create()
    finally:
        rs.close()
