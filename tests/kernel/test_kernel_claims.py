"""Claims through the kernel's actors and supervisor, in virtual time (exact instants)."""

import pytest
import trio
import trio.testing

from runstate.actors import Idem, KernelError, KernelState
from runstate.actors.errors import CLAIM_HELD, IDEMPOTENCY_CONFLICT, SCOPE_CANCELLED, STALE_CLAIM

from .conftest import T0
from ..single import only

pytestmark = pytest.mark.trio


async def acquire(h, scope_id, key="company:acme", holder="a", lease_s=5, idem=None):
    return await h.claims.acquire("default", scope_id=scope_id, key=key, holder=holder, session="s-" + holder, lease_s=lease_s, idem=idem)


async def test_a_holder_that_stops_renewing_loses_the_key_exactly_at_expiry(harness, autojump_clock):
    """The supervisor expires a 5 s lease at 5.000 s; the next owner gets generation + 1 then, not before."""
    h = harness
    scope = await h.scopes.create("default")
    first = await acquire(h, scope["id"])
    assert first["generation"] == 1
    assert first["leaseExpiresAt"] == "2027-01-15T08:00:05.000Z"
    await trio.sleep(4.999)
    with pytest.raises(KernelError) as caught:
        await acquire(h, scope["id"], holder="b")
    assert caught.value.code == CLAIM_HELD
    await trio.sleep_until(h.t0 + 5)
    await trio.testing.wait_all_tasks_blocked()
    assert only(h.kernel).supervisor.fired == 1
    assert only(h.kernel).state.space("default").claims.by_token(first["token"]) is None
    second = await acquire(h, scope["id"], holder="b")
    assert second["generation"] == 2 and second["token"] != first["token"]
    assert h.elapsed() == pytest.approx(5.0)
    with pytest.raises(KernelError) as caught:
        await h.claims.renew("default", key="company:acme", token=first["token"])
    assert caught.value.code == STALE_CLAIM


async def test_renewing_keeps_a_short_lease_alive_far_beyond_its_length(harness, autojump_clock):
    """A 5 s lease renewed every 3 s is still held after ten minutes, with one generation."""
    h = harness
    scope = await h.scopes.create("default")
    lease = await acquire(h, scope["id"])
    for _ in range(200):
        await trio.sleep(3)
        renewed = await h.claims.renew("default", key="company:acme", token=lease["token"])
    assert renewed["generation"] == 1
    assert only(h.kernel).supervisor.fired == 0
    with pytest.raises(KernelError):
        await acquire(h, scope["id"], holder="b")
    await trio.sleep(5)
    await trio.testing.wait_all_tasks_blocked()
    assert only(h.kernel).supervisor.fired == 1
    assert (await acquire(h, scope["id"], holder="b"))["generation"] == 2


async def test_release_frees_the_key_at_once_and_the_old_token_goes_stale(harness, autojump_clock):
    """After a release the next acquire succeeds immediately; the released token renews nothing."""
    h = harness
    scope = await h.scopes.create("default")
    lease = await acquire(h, scope["id"])
    released = await h.claims.release("default", key="company:acme", token=lease["token"], observation={"ok": True})
    assert released["released"] is True
    nxt = await acquire(h, scope["id"], holder="b")
    assert nxt["generation"] == 2 and h.elapsed() == 0
    for call in (h.claims.renew, h.claims.release):
        with pytest.raises(KernelError) as caught:
            await call("default", key="company:acme", token=lease["token"])
        assert caught.value.code == STALE_CLAIM


async def test_an_idempotency_key_replays_the_first_answer_and_refuses_another_request(harness, autojump_clock):
    """The same key and request returns the same lease; the same key with another request is a conflict."""
    h = harness
    scope = await h.scopes.create("default")
    idem = Idem("default", "k1", "fp-a")
    first = await acquire(h, scope["id"], idem=idem)
    again = await acquire(h, scope["id"], idem=idem)
    assert again == first
    with pytest.raises(KernelError) as caught:
        await acquire(h, scope["id"], key="other", idem=Idem("default", "k1", "fp-b"))
    assert caught.value.code == IDEMPOTENCY_CONFLICT


async def test_cancelling_a_run_releases_the_claims_of_its_whole_subtree(harness, autojump_clock):
    """Cancel cascades: claims in the scope and its children are released, new ones refused."""
    h = harness
    run = await h.scopes.create("default")
    child = await h.scopes.create("default", parent_id=run["id"])
    lease = await acquire(h, child["id"])
    view = await h.scopes.cancel("default", run["id"])
    assert view["storedState"] == "CANCELLED"
    assert h.scopes.view("default", child["id"])["effective"] == "CANCELLED"
    with pytest.raises(KernelError) as caught:
        await h.claims.renew("default", key="company:acme", token=lease["token"])
    assert caught.value.code == STALE_CLAIM
    with pytest.raises(KernelError) as caught:
        await acquire(h, child["id"], holder="b")
    assert caught.value.code == SCOPE_CANCELLED


async def test_a_scope_deadline_expires_the_scope_and_frees_its_claims_at_that_instant(harness, autojump_clock):
    """At the deadline the supervisor records EXPIRED and the claims inside are gone."""
    h = harness
    deadline_ms = T0 + 60_000
    run = await h.scopes.create("default", deadline_ms=deadline_ms)
    lease = await acquire(h, run["id"], lease_s=600)
    await trio.sleep(60)
    await trio.testing.wait_all_tasks_blocked()
    assert h.scopes.view("default", run["id"])["storedState"] == "EXPIRED"
    assert only(h.kernel).state.space("default").claims.by_token(lease["token"]) is None


async def test_replaying_the_journal_rebuilds_the_same_claims(harness, autojump_clock):
    """Records applied to a fresh state give the same holders, tokens and generations."""
    h = harness
    run = await h.scopes.create("default")
    for n in range(20):
        lease = await acquire(h, run["id"], key=f"k{n % 5}", holder=f"h{n}")
        if n % 2:
            await h.claims.release("default", key=f"k{n % 5}", token=lease["token"])
        await trio.sleep(1)
    replayed = KernelState()
    for record in only(h.kernel).journal.records:
        replayed.apply(record)
    live, again = only(h.kernel).state.space("default").claims, replayed.space("default").claims
    for n in range(5):
        a, b = live.get(run["id"], f"k{n}"), again.get(run["id"], f"k{n}")
        assert (a.generation, a.token, a.holder, a.expires_ms) == (b.generation, b.token, b.holder, b.expires_ms)


async def test_actors_linger_briefly_then_retire(harness, autojump_clock):
    """A key in use keeps its actor task between calls; idle actors retire within two linger periods."""
    from runstate.actors.partition import ACTOR_LINGER_S

    h = harness
    run = await h.scopes.create("default")
    for n in range(100):
        await acquire(h, run["id"], key=f"k{n}")
    await trio.testing.wait_all_tasks_blocked()
    assert h.kernel.actors == 101  # 100 claim keys and the run's scope, lingering
    await trio.sleep(ACTOR_LINGER_S)
    await trio.sleep(ACTOR_LINGER_S)
    await trio.testing.wait_all_tasks_blocked()
    assert h.kernel.actors == 0
    assert len(only(h.kernel).state.space("default").claims) == 100


async def test_many_concurrent_callers_on_one_key_get_exactly_one_lease(harness, autojump_clock):
    """Fifty simultaneous acquires of one key: one wins, forty-nine get CLAIM_HELD."""
    h = harness
    run = await h.scopes.create("default")
    results = []

    async def attempt(n):
        try:
            results.append(await acquire(h, run["id"], holder=f"h{n}"))
        except KernelError as error:
            results.append(error.code)

    async with trio.open_nursery() as nursery:
        for n in range(50):
            nursery.start_soon(attempt, n)
    winners = [r for r in results if isinstance(r, dict)]
    assert len(winners) == 1 and results.count(CLAIM_HELD) == 49
