"""The server's lifetime in-process and in virtual time: expiry storms are logged, shutdown turns health off."""

from __future__ import annotations

import logging

import orjson
import pytest
import trio
import trio.testing

import runstate.testing
from runstate.server.app import create_app
from runstate.server.settings import Settings
from runstate.testing import call_asgi

pytestmark = pytest.mark.trio

KEY = "test-key"


async def post(app, path, body):
    status, _, raw = await call_asgi(app, "POST", "/v1/spaces/default" + path, {"authorization": f"Bearer {KEY}"}, orjson.dumps(body))
    return status, orjson.loads(raw)


def storm_events(caplog):
    return [(r.event, r.fields) for r in caplog.records if getattr(r, "event", "").startswith("expiry_storm")]


async def test_an_expiry_storm_is_logged_once_with_its_size_and_once_when_over(autojump_clock, caplog):
    """30 leases ending in the same second with a threshold of 10: one warning at the storm, one line when it is over."""
    caplog.set_level(logging.INFO, logger="runstate.server")
    app = create_app(Settings(api_key=KEY, seed=1, expiry_storm_per_s=10))
    async with runstate.testing.serve_app(app):
        _, run = await post(app, "/scopes", {})
        for n in range(30):
            status, _ = await post(app, "/claims", {"key": f"k{n}", "scopeId": run["id"], "holder": "h", "holderSession": "s", "leaseSeconds": 5})
            assert status == 200
        await trio.sleep(4)
        assert storm_events(caplog) == []
        await trio.sleep(4)
        await trio.testing.wait_all_tasks_blocked()
    events = storm_events(caplog)
    assert events == [("expiry_storm", {"expiries": 30, "window_s": 1.0}), ("expiry_storm_over", {"expiries": 30})]
    warning = next(r for r in caplog.records if getattr(r, "event", "") == "expiry_storm")
    assert warning.levelno == logging.WARNING


async def test_a_few_expiries_are_no_storm(autojump_clock, caplog):
    caplog.set_level(logging.INFO, logger="runstate.server")
    app = create_app(Settings(api_key=KEY, seed=1, expiry_storm_per_s=10))
    async with runstate.testing.serve_app(app):
        _, run = await post(app, "/scopes", {})
        for n in range(5):
            await post(app, "/claims", {"key": f"k{n}", "scopeId": run["id"], "holder": "h", "holderSession": "s", "leaseSeconds": 5})
        await trio.sleep(8)
    assert storm_events(caplog) == []


async def test_beginning_shutdown_turns_health_off_and_ends_waits(caplog):
    """After the signal: /healthz is 503, the kernel parks no call, the event names the reason."""
    caplog.set_level(logging.INFO, logger="runstate.server")
    app = create_app(Settings(api_key=KEY, seed=1))
    async with runstate.testing.serve_app(app):
        assert (await call_asgi(app, "GET", "/healthz", {}, None))[0] == 200
        app.lifecycle.begin_shutdown("SIGTERM")
        status, _, body = await call_asgi(app, "GET", "/healthz", {}, None)
        assert status == 503 and orjson.loads(body)["error"]["code"] == "UNAVAILABLE"
        assert app.runtime.kernel.waits_ended and app.lifecycle.stop.is_set()
        # Requests still in flight or arriving on open connections are answered normally.
        assert (await post(app, "/scopes", {}))[0] == 201
    shutdown = next(r for r in caplog.records if getattr(r, "event", "") == "shutdown")
    assert shutdown.fields["reason"] == "SIGTERM" and shutdown.fields["long_polls_ended"] == 0
