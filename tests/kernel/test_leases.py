"""One lease rule for every kind of lease: at a restart, claims, pool grants, deliveries and once
slots near their end get the grace once, their new ends spread over `restart_spread_s` in the order
of the old ones, across the whole space (a restart must not set off a wave of expiries at one
instant, whatever kind of thing the leases hold)."""

from __future__ import annotations

from typing import Any

from runstate.actors import KernelState, Limits
from runstate.actors import commands as c
from runstate.actors.transitions import TRANSITIONS

from .conftest import T0

SPACE = "s1"


def run(state: KernelState, command: Any) -> None:
    """Run a command's transition at T0, as its actor's turn would."""
    TRANSITIONS[type(command)](state, command, T0)


def _state(limits: Limits) -> KernelState:
    state = KernelState(limits)
    run(state, c.CreateScope(space=SPACE, scope_id="sc"))
    return state


def _grant(state: KernelState, number: int, lease_s: int) -> None:
    run(state, c.AcquireGrant(
        space=SPACE, pool_id="pm_1", scope_id="sc", units=1, holder="h", session="x", lease_s=lease_s,
        grant_id=f"gr_{number}", token=f"gt_{number}",
    ))


def test_pool_grants_near_their_end_get_spread_ends_like_claims_do():
    """A restart 6 s after the grants: the one that ended (5 s) is expired, the ones short of the
    10 s grace (8 s, 12 s, 7 s) get it, their new ends spread over the 4 s in the order of their old
    ends, not all at one instant; the one that outlasts the grace (100 s) is left alone."""
    state = _state(Limits(restart_grace_s=10, restart_spread_s=4))
    space = state.space(SPACE)
    run(state, c.CreatePool(space=SPACE, name="p", units=10, pool_id="pm_1"))
    for number, lease_s in enumerate([5, 8, 12, 7, 100]):
        _grant(state, number, lease_s)
    now_ms = T0 + 6_000
    records = state.restart(now_ms)
    kinds = {record["id"]: (record["type"], record.get("expires_ms")) for record in records}
    assert kinds["gr_0"] == ("grant.expired", None)
    assert "gr_4" not in kinds
    renewed = sorted((kinds[grant_id][1], grant_id) for grant_id in ("gr_3", "gr_1", "gr_2"))
    assert [grant_id for _, grant_id in renewed] == ["gr_3", "gr_1", "gr_2"]  # old order: 7 s, 8 s, 12 s
    base = now_ms + 10_000
    assert [due for due, _ in renewed] == [base, base + 4_000 // 3, base + 8_000 // 3]
    assert all(record.get("graced") is True for record in records if record["type"] == "grant.renewed")
    assert [space.capacity.pools.grant(f"gr_{n}").expires_ms for n in (3, 1, 2)] == [due for due, _ in renewed]


def test_a_restart_spreads_the_leases_of_every_kind_together():
    """A claim, a pool grant, a delivery and a once slot, all 8 s into a 10 s lease at the restart:
    four new ends a quarter of the spread apart (ordered by old end, then token), not four at once."""
    state = _state(Limits(restart_grace_s=10, restart_spread_s=8))
    run(state, c.AcquireClaim(space=SPACE, scope_id="sc", key="k", holder="h", session="x", lease_s=10, token="t1"))
    run(state, c.CreatePool(space=SPACE, name="p", units=1, pool_id="pm_1"))
    run(state, c.AcquireGrant(
        space=SPACE, pool_id="pm_1", scope_id="sc", units=1, holder="h", session="x", lease_s=10, grant_id="gr_1", token="t2",
    ))
    run(state, c.CreateMailbox(space=SPACE, name="m", mailbox_id="mb_1"))
    run(state, c.SendMessage(space=SPACE, mailbox_id="mb_1", scope_id="sc", message_id="ms_1"))
    run(state, c.Receive(space=SPACE, mailbox_id="mb_1", scope_id="sc", holder="h", session="x", lease_s=10, token="t3"))
    run(state, c.AcquireOnce(space=SPACE, scope_id="sc", key="o", holder="h", session="x", lease_s=10, token="t4"))
    now_ms = T0 + 8_000
    records = state.restart(now_ms)
    ends = sorted((record["expires_ms"], record["token"] if "token" in record else record["id"]) for record in records)
    base = now_ms + 10_000
    assert ends == [(base, "t1"), (base + 2_000, "gr_1"), (base + 4_000, "t3"), (base + 6_000, "t4")]
    assert {record["type"] for record in records} == {"claim.renewed", "grant.renewed", "delivery.renewed", "once.renewed"}
    assert all(record["graced"] is True for record in records)
