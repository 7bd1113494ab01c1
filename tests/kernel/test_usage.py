"""Usage counters: counted in `apply`, so they replay exactly; renewals and expiries are not operations."""

import pytest
import trio
import trio.testing

from runstate.actors import KernelState
from runstate.actors.space import RECORD_TYPES
from runstate.actors.usage import CLASSIFIED, UsageView

from .conftest import T0
from ..single import only

def replayed(records):
    state = KernelState()
    for record in records:
        state.apply(dict(record))
    return state


async def acquire(h, scope_id, key="k", holder="a", lease_s=5):
    return await h.claims.acquire("default", scope_id=scope_id, key=key, holder=holder, session="s-" + holder, lease_s=lease_s)


def test_every_record_type_of_a_space_says_whether_it_is_an_operation():
    """A new record type (queues, tasks) cannot slip past usage: it must be classified."""
    assert RECORD_TYPES <= CLASSIFIED


@pytest.mark.trio
async def test_operations_are_counted_renewals_are_free_and_expiries_are_events(harness, autojump_clock):
    """Create, acquire, release and cancel count; renewals count apart as free; an expiry and the takeover after it are events."""
    h = harness
    scope = await h.scopes.create("default")
    lease = await acquire(h, scope["id"])
    for _ in range(3):
        await h.claims.renew("default", key="k", token=lease["token"])
    await h.claims.release("default", key="k", token=lease["token"])
    await acquire(h, scope["id"], holder="b")  # then let it expire
    await trio.sleep(6)
    await trio.testing.wait_all_tasks_blocked()
    await acquire(h, scope["id"], holder="c")  # a takeover: the last lease expired
    await h.scopes.cancel("default", scope["id"])
    usage = only(h.kernel).state.space("default").usage.view("default")
    assert usage == UsageView(
        "default",
        operations={"claims.acquire": 3, "claims.release": 1, "scopes.cancel": 1, "scopes.create": 1},
        total=6,
        free={"claims.renew": 3},
        events={"claims.expire": 1, "claims.takeover": 1},
    )


@pytest.mark.trio
async def test_refusals_and_idempotent_replays_are_not_operations(harness, autojump_clock):
    """A held claim (409) writes no record, and a replayed Idempotency-Key runs nothing again: neither counts."""
    from runstate.actors import Idem, KernelError

    h = harness
    scope = await h.scopes.create("default")
    await acquire(h, scope["id"])
    with pytest.raises(KernelError):
        await acquire(h, scope["id"], holder="b")
    idem = Idem("default", "key-1", "fingerprint")
    await h.scopes.create("default", idem=idem)
    await h.scopes.create("default", idem=idem)
    usage = only(h.kernel).state.space("default").usage
    assert usage.operations == {"scopes.create": 2, "claims.acquire": 1}
    assert h.kernel.idempotent_replays == 1


@pytest.mark.trio
async def test_replaying_the_journal_gives_the_same_counts(harness, autojump_clock):
    """The journal alone rebuilds the counters: what a restart recovers is what was counted."""
    h = harness
    scope = await h.scopes.create("default")
    lease = await acquire(h, scope["id"])
    await h.claims.renew("default", key="k", token=lease["token"])
    await trio.sleep(10)
    await trio.testing.wait_all_tasks_blocked()
    await acquire(h, scope["id"], holder="b")
    await h.scopes.complete("default", scope["id"])
    state = replayed(only(h.kernel).journal.records)
    live = only(h.kernel).state.space("default").usage
    again = state.space("default").usage
    assert (again.operations, again.free, again.events) == (live.operations, live.free, live.events)
    assert again.takeovers == live.takeovers == 1


def test_the_usage_image_sets_the_counters_outright():
    """A snapshot carries usage as one record that overrides whatever replaying the image counted."""
    state = KernelState()
    space = state.space("default")
    space.apply({"type": "scope.created", "space": "default", "id": "sc_1", "name": None, "parent_id": None,
                 "deadline_ms": None, "child_limit": None, "at_ms": T0})
    image = space.usage.image("default")
    fresh = KernelState()
    fresh.apply({"type": "scope.created", "space": "default", "id": "sc_1", "name": None, "parent_id": None,
                 "deadline_ms": None, "child_limit": None, "at_ms": T0})
    fresh.apply({"type": "scope.created", "space": "default", "id": "sc_2", "name": None, "parent_id": None,
                 "deadline_ms": None, "child_limit": None, "at_ms": T0})
    fresh.apply(image)
    assert fresh.space("default").usage.operations == {"scopes.create": 1}


@pytest.mark.trio
async def test_a_run_that_expires_is_an_event_not_an_operation(harness, autojump_clock):
    """A deadline passing is the server's doing: scopes.expire is an event."""
    h = harness
    await h.scopes.create("default", deadline_ms=T0 + 2_000)
    await trio.sleep(3)
    await trio.testing.wait_all_tasks_blocked()
    usage = only(h.kernel).state.space("default").usage
    assert usage.operations == {"scopes.create": 1}
    assert usage.events == {"scopes.expire": 1}


@pytest.mark.trio
async def test_a_snapshot_image_carries_the_counters_and_takeovers(harness, autojump_clock):
    """Rebuilt from its image, a state has the same usage view, takeovers and expiry marks included."""
    h = harness
    scope = await h.scopes.create("default")
    await acquire(h, scope["id"])
    await trio.sleep(6)
    await trio.testing.wait_all_tasks_blocked()
    await acquire(h, scope["id"], holder="b")  # a takeover
    await acquire(h, scope["id"], key="other")
    await trio.sleep(6)
    await trio.testing.wait_all_tasks_blocked()  # "other" expired: its next acquire would be a takeover
    rebuilt = replayed(list(only(h.kernel).state.image()))
    live = only(h.kernel).state.space("default")
    again = rebuilt.space("default")
    assert again.usage.view("default") == live.usage.view("default")
    assert again.usage.takeovers == 1
    assert again.claims.get(scope["id"], "other").expired is True
