"""An operator's forced release of a claim, through the kernel: fencing holds, it is journaled and
replayed exactly, and the event log says whose claim it was and why it was taken."""

import pytest
import trio
import trio.testing

from runstate.actors import KernelError
from runstate.actors.errors import CONFLICT, NOT_FOUND, STALE_CLAIM, VALIDATION_FAILED
from runstate.server import wire

from .conftest import rebuilt_exactly
from ..single import only

pytestmark = pytest.mark.trio


async def acquire(h, scope_id, holder="a", key="report", lease_s=30, wait_ms=None):
    return await h.claims.acquire(
        "default", scope_id=scope_id, key=key, holder=holder, session="s-" + holder, lease_s=lease_s, wait_ms=wait_ms
    )


async def test_a_forced_release_frees_the_key_and_refuses_the_old_token(harness, autojump_clock):
    """The holder's renew and release are STALE_CLAIM from then on; the next holder gets generation + 1."""
    h = harness
    scope = (await h.scopes.create("default"))["id"]
    held = await acquire(h, scope)
    freed = await h.claims.force_release("default", scope_id=scope, key="report", reason="holder hung")
    assert freed["token"] is None and freed["released"] is True and freed["forced"] is True
    assert freed["holder"] == "a" and freed["generation"] == held["generation"] and freed["reason"] == "holder hung"
    for call in (lambda: h.claims.renew("default", key="report", token=held["token"]),
                 lambda: h.claims.release("default", key="report", token=held["token"])):
        with pytest.raises(KernelError) as caught:
            await call()
        assert caught.value.code == STALE_CLAIM
    after = await acquire(h, scope, holder="b")
    assert after["generation"] == held["generation"] + 1 and after["token"] != held["token"]
    space = only(h.kernel).state.space("default")
    assert space.usage.operations["claims.force_release"] == 1
    assert space.claims.takeovers == 0  # a forced release is not a lease that ran out
    events = [wire.encode(event.view()) for event in space.events.after(0)]  # (as a client reads them)
    forced = [event for event in events if event["type"] == "claim.force_released"]
    assert forced == [{
        "eventId": forced[0]["eventId"], "type": "claim.force_released", "createdAt": "2027-01-15T08:00:00.000Z",
        "scopeId": scope, "aggregate": {"type": "claim", "id": "report"},
        "payload": {"generation": 1, "holder": "a", "reason": "holder hung", "by": None},
    }]
    rebuilt_exactly(h.kernel)


async def test_a_waiting_acquirer_gets_the_key_the_moment_it_is_forced_free(harness, autojump_clock):
    """An acquire parked with waitMs on a held claim is answered by the forced release's turn."""
    h = harness
    scope = (await h.scopes.create("default"))["id"]
    await acquire(h, scope, lease_s=600)
    got: list[dict] = []
    async with trio.open_nursery() as nursery:
        async def waiter() -> None:
            got.append(await acquire(h, scope, holder="b", wait_ms=20_000))

        nursery.start_soon(waiter)
        await trio.sleep(3)
        assert not got
        await h.claims.force_release("default", scope_id=scope, key="report")
    assert got[0]["holder"] == "b" and got[0]["generation"] == 2
    assert h.elapsed() == pytest.approx(3.0)


async def test_a_claim_not_held_is_a_conflict_and_an_unknown_one_not_found(harness, autojump_clock):
    """Nothing is written for a key that is free, never claimed, or in a run that does not exist."""
    h = harness
    scope = (await h.scopes.create("default"))["id"]
    held = await acquire(h, scope, lease_s=5)
    await h.claims.release("default", key="report", token=held["token"])
    cases = [
        ({"scope_id": scope, "key": "report"}, CONFLICT, "it was released"),
        ({"scope_id": scope, "key": "other"}, NOT_FOUND, "never acquired"),
        ({"scope_id": "sc_missing", "key": "report"}, NOT_FOUND, "not found"),
    ]
    for fields, code, words in cases:
        written = len(only(h.kernel).journal.records)
        with pytest.raises(KernelError) as caught:
            await h.claims.force_release("default", **fields)
        assert caught.value.code == code and words in caught.value.message
        assert len(only(h.kernel).journal.records) == written
    await acquire(h, scope, lease_s=5)
    await trio.sleep(5)  # the lease runs out: nothing is held, whether its expiry is recorded yet or not
    space = only(h.kernel).state.space("default")
    with pytest.raises(KernelError) as caught:
        await h.claims.force_release("default", scope_id=scope, key="report")
    assert caught.value.code == CONFLICT and "lease ended" in caught.value.message
    assert space.claims.get(scope, "report").generation == 2


async def test_a_reason_longer_than_the_limit_is_refused(harness, autojump_clock):
    h = harness
    scope = (await h.scopes.create("default"))["id"]
    await acquire(h, scope)
    with pytest.raises(KernelError) as caught:
        await h.claims.force_release("default", scope_id=scope, key="report", reason="x" * 2001)
    assert caught.value.code == VALIDATION_FAILED
