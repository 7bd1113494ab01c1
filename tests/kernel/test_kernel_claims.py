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


async def test_a_call_to_a_key_with_no_actor_runs_in_the_callers_task_and_leaves_no_actor(harness, autojump_clock):
    """An acquire or a renewal of a key nobody else uses starts no task: its turn runs in the
    caller's task, is durable when answered, and leaves neither an actor nor a task behind."""
    h = harness
    partition = only(h.kernel)
    run = await h.scopes.create("default")
    await trio.testing.wait_all_tasks_blocked()
    tasks = len(partition._nursery.child_tasks)  # the supervisor and the sweep
    turns = partition.turns
    leases = []
    for n in range(100):
        leases.append(await acquire(h, run["id"], key=f"k{n}"))
        assert h.kernel.actors == 0 and len(partition._nursery.child_tasks) == tasks
    for n, lease in enumerate(leases):
        renewed = await h.claims.renew("default", key=f"k{n}", token=lease["token"])
        assert renewed["generation"] == 1
        assert h.kernel.actors == 0 and len(partition._nursery.child_tasks) == tasks
    assert partition.turns == turns + 200
    assert partition.journal.durable_lsn == partition.journal.appended_lsn
    assert len(partition.state.space("default").claims) == 100


async def test_a_cancelled_caller_runs_nothing_on_a_key_with_no_actor(harness, autojump_clock):
    """A caller already cancelled when it calls is refused before its turn: the key stays free."""
    h = harness
    run = await h.scopes.create("default")
    with trio.CancelScope() as scope:
        scope.cancel()
        await acquire(h, run["id"], key="never")
    assert scope.cancelled_caught
    assert h.kernel.actors == 0 and only(h.kernel).state.space("default").claims.get(run["id"], "never") is None
    assert (await acquire(h, run["id"], key="never", holder="b"))["generation"] == 1


async def test_a_batch_on_keys_with_no_actor_runs_in_the_callers_task_in_the_order_given(harness, autojump_clock):
    """A batch's commands on keys with no actor run in the caller's task, one after another in
    the order given (two acquires of one key: the first one's holder gets it), starting no task."""
    from runstate.actors import commands as c

    h = harness
    partition = only(h.kernel)
    run = await h.scopes.create("default")
    await trio.testing.wait_all_tasks_blocked()
    tasks = len(partition._nursery.child_tasks)
    body = {"scopeId": run["id"], "holderSession": "x", "leaseSeconds": 60}
    keys = [f"k{i}" for i in range(10)] + ["k0"]
    holders = [f"h{i}" for i in range(11)]
    commands = [
        (h.kernel.parse(c.AcquireClaim, {**body, "key": key, "holder": holder}, {"space": "default"}), None)
        for key, holder in zip(keys, holders)
    ]
    answers = await h.kernel.submit_all("default", commands)
    assert [answer.unwrap().holder for answer in answers[:10]] == holders[:10]
    with pytest.raises(KernelError) as caught:
        answers[10].unwrap()
    assert caught.value.code == CLAIM_HELD
    assert h.kernel.actors == 0 and len(partition._nursery.child_tasks) == tasks
    assert partition.journal.durable_lsn == partition.journal.appended_lsn


async def test_a_key_whose_calls_queue_gets_a_task_that_lingers_then_retires(harness, autojump_clock):
    """A key with a parked caller has an actor, so a call to it goes through its channel and its
    task; that task lingers for more calls and retires within two linger periods."""
    from runstate.actors.partition import ACTOR_LINGER_S

    h = harness
    partition = only(h.kernel)
    run = await h.scopes.create("default")
    await trio.testing.wait_all_tasks_blocked()
    tasks = len(partition._nursery.child_tasks)
    first = await acquire(h, run["id"], key="hot", holder="a")
    answers = []

    async def wait_for_it():
        answers.append(await h.claims.acquire(
            "default", scope_id=run["id"], key="hot", holder="b", session="s-b", lease_s=5, wait_ms=10_000))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_for_it)
        await trio.testing.wait_all_tasks_blocked()
        assert h.kernel.actors == 1 and len(partition._nursery.child_tasks) == tasks  # parked, no task
        released_at = trio.current_time()
        await h.claims.release("default", key="hot", token=first["token"])
    assert [answer["holder"] for answer in answers] == ["b"] and trio.current_time() == released_at
    await trio.testing.wait_all_tasks_blocked()
    assert h.kernel.actors == 1 and len(partition._nursery.child_tasks) == tasks + 1  # its task lingers
    await trio.sleep(ACTOR_LINGER_S)
    await trio.sleep(ACTOR_LINGER_S)
    await trio.testing.wait_all_tasks_blocked()
    assert h.kernel.actors == 0 and len(partition._nursery.child_tasks) == tasks


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
