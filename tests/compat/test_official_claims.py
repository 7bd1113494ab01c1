"""The official runstate-sdk 0.2.0 client, unchanged, against a real server: scopes and claims.

One script runs every scenario concurrently against one server (they use separate runs), so the
real-time parts (a 5 s lease kept alive for 12 s, a dead owner's lease running out) overlap.
"""

from __future__ import annotations

import pytest

from ..servers import run_official

pytestmark = [pytest.mark.compat, pytest.mark.e2e]

SCRIPT = r'''
import asyncio, json, time
from datetime import datetime, timezone
from urllib.parse import quote
from runstate import AsyncRunstate, ConflictError, LeaseLostError, NotFoundError, AuthenticationError, RunstateError, WaitTimeoutError

results = {}

def client(holder, **kw):
    return AsyncRunstate(holder=holder, **kw)

async def basics():
    a, b = client("agent-a"), client("agent-b")
    run = await a.scopes.create(name="compat")
    view = await run.status()
    lease = await a.scope(run.id).claim("company:acme").acquire()
    try:
        await b.scope(run.id).claim("company:acme").acquire()
        held = None
    except ConflictError as err:
        held = {"code": err.code, "status": err.status, "message": err.message}
    busy = await b.scope(run.id).claim("company:acme").try_acquire()
    started = time.monotonic()
    try:
        await b.scope(run.id).claim("company:acme").acquire(wait=True, timeout_ms=1000)
        waited = None
    except WaitTimeoutError as err:
        waited = {"code": err.code, "elapsed": time.monotonic() - started}
    first_generation, first_token = lease.generation, lease.token()
    await lease.release()
    nxt = await b.scope(run.id).claim("company:acme").acquire()
    stale = {}
    # The official lease object sends nothing once released, so speak through its transport.
    for action in ("renew", "release"):
        try:
            await a._ctx.transport.request("POST", f"/v1/spaces/{a.space_id}/claims/{quote('company:acme', safe='')}/{action}", body={"token": first_token})
        except LeaseLostError as err:
            stale[action] = err.code
    await nxt.release()
    results["basics"] = {
        "run_id": run.id, "view": view, "held": held, "busy": busy, "waited": waited,
        "first": [first_generation, first_token], "next": [nxt.generation, nxt.token()], "stale": stale,
    }

async def keep_alive():
    a = client("keeper")
    run = await a.scopes.create()
    lease = await a.scope(run.id).claim("long:job").acquire(lease_seconds=5)
    await asyncio.sleep(12)
    other = client("other")
    busy = await other.scope(run.id).claim("long:job").try_acquire()
    results["keep_alive"] = {"lost": lease.is_lost, "busy": busy["kind"], "generation": lease.generation}
    await lease.release()

async def takeover():
    dead, alive = client("dead-owner"), client("successor")
    run = await dead.scopes.create()
    lease = await dead.scope(run.id).claim("company:initech").acquire(lease_seconds=5)
    lease._renewal.stop()  # the owner dies: nothing renews its lease any more
    expires = lease.expires_at
    nxt = await alive.scope(run.id).claim("company:initech").acquire(wait=True, timeout_ms=20_000)
    late = (datetime.now(timezone.utc) - expires).total_seconds()
    results["takeover"] = {"after_expiry_s": late, "generations": [lease.generation, nxt.generation], "tokens_differ": nxt.token() != lease.token()}
    await nxt.release()

async def refusals():
    a = client("validator")
    run = await a.scopes.create()
    out = {}
    for seconds in (4, 601):
        try:
            await a.scope(run.id).claim("x").acquire(lease_seconds=seconds)
            out[str(seconds)] = None
        except RunstateError as err:
            out[str(seconds)] = [err.code, err.status, type(err).__name__]
    try:
        await a.scope("sc_doesnotexist").status()
    except NotFoundError as err:
        out["unknown_run"] = [err.code, err.status]
    try:
        await a.scope("sc_doesnotexist").claim("x").acquire()
    except NotFoundError as err:
        out["claim_unknown_run"] = [err.code, err.status]
    try:
        await a.with_space("someone-else").scopes.create()
    except NotFoundError as err:
        out["other_space"] = [err.code, err.status]
    try:
        await AsyncRunstate(api_key="wrong").scopes.create()
    except AuthenticationError as err:
        out["bad_key"] = [err.code, err.status]
    child = await run.child(name="child")
    await run.cancel()
    out["child_after_cancel"] = (await child.status())["effective"]
    try:
        await child.claim("x").acquire()
    except RunstateError as err:
        out["claim_in_cancelled"] = [err.code, type(err).__name__]
    results["refusals"] = out

async def main():
    await asyncio.gather(basics(), keep_alive(), takeover(), refusals())
    print(json.dumps(results, default=str))

asyncio.run(main())
'''


@pytest.fixture(scope="module")
def outcome(official_client, module_server):
    return run_official(official_client, module_server, SCRIPT)


def test_a_run_is_created_and_read_back(outcome):
    """scopes.create() gets an id; status() returns the scope view."""
    view = outcome["basics"]["view"]
    assert view["id"] == outcome["basics"]["run_id"] and view["effective"] == "ACTIVE"


def test_a_second_holder_is_refused_with_claim_held_and_try_acquire_says_busy(outcome):
    """CLAIM_HELD (409, ConflictError) names the holder; try_acquire() returns kind busy."""
    basics = outcome["basics"]
    assert basics["held"]["code"] == "CLAIM_HELD" and basics["held"]["status"] == 409
    assert "agent-a" in basics["held"]["message"]
    assert basics["busy"] == {"kind": "busy"}


def test_a_waiting_acquire_times_out(outcome):
    """wait=True with timeout_ms=1000 raises WaitTimeoutError after about a second."""
    waited = outcome["basics"]["waited"]
    assert waited["code"] == "WAIT_TIMEOUT" and 0.9 <= waited["elapsed"] < 3


def test_release_then_the_next_owner_gets_a_greater_generation_and_a_new_token(outcome):
    """After release, the next acquire has generation + 1 and a different token."""
    first, nxt = outcome["basics"]["first"], outcome["basics"]["next"]
    assert nxt[0] == first[0] + 1 and nxt[1] != first[1]


def test_an_old_token_is_stale_for_renew_and_release(outcome):
    """Renew and release with the previous owner's token get STALE_CLAIM (LeaseLostError)."""
    assert outcome["basics"]["stale"] == {"renew": "STALE_CLAIM", "release": "STALE_CLAIM"}


def test_background_renewal_keeps_a_5s_lease_for_much_longer(outcome):
    """A 5 s lease held for 12 s is not lost and still blocks others."""
    assert outcome["keep_alive"] == {"lost": False, "busy": "busy", "generation": 1}


def test_a_dead_owners_key_is_taken_over_within_about_a_second_of_expiry(outcome):
    """The successor's waiting acquire succeeds less than ~1 s after the dead lease ran out."""
    takeover = outcome["takeover"]
    assert takeover["generations"] == [1, 2] and takeover["tokens_differ"]
    assert -0.05 <= takeover["after_expiry_s"] < 1.0


def test_bad_leases_unknown_runs_other_spaces_and_bad_keys_are_refused(outcome):
    """leaseSeconds 4 and 601 are VALIDATION_FAILED; unknown run and other space 404; bad key 401."""
    refusals = outcome["refusals"]
    assert refusals["4"] == ["VALIDATION_FAILED", 400, "RunstateError"]
    assert refusals["601"] == ["VALIDATION_FAILED", 400, "RunstateError"]
    assert refusals["unknown_run"] == ["NOT_FOUND", 404]
    assert refusals["claim_unknown_run"] == ["NOT_FOUND", 404]
    assert refusals["other_space"] == ["NOT_FOUND", 404]
    assert refusals["bad_key"] == ["UNAUTHENTICATED", 401]


def test_cancelling_a_run_cascades_to_children(outcome):
    """A child of a cancelled run is effectively cancelled and refuses claims with SCOPE_CANCELLED."""
    refusals = outcome["refusals"]
    assert refusals["child_after_cancel"] == "CANCELLED"
    assert refusals["claim_in_cancelled"] == ["SCOPE_CANCELLED", "ScopeCancelledError"]
