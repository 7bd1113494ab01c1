"""The claim state machine on its own: no trio, no clock, time passed in."""

import pytest

from runstate.actors.claims import ClaimHeldView, ClaimTable
from runstate.actors.errors import CLAIM_HELD, STALE_CLAIM, KernelError

T0 = 1_800_000_000_000


def acquire(table: ClaimTable, key: str, holder: str, token: str, now_ms: int, lease_ms: int = 30_000) -> list[dict]:
    records = table.decide_acquire("sc_1", key, holder, "s-" + holder, lease_ms, token, now_ms)
    for record in records:
        apply(table, record)
    return records


def apply(table: ClaimTable, record: dict) -> None:
    {
        "claim.acquired": table.apply_acquired,
        "claim.renewed": table.apply_renewed,
        "claim.released": table.apply_ended,
        "claim.expired": table.apply_ended,
    }[record["type"]](record)


def test_first_acquire_gets_generation_one_and_the_lease_it_asked_for():
    """A free key goes to the first holder with generation 1 and an end at now + lease."""
    table = ClaimTable()
    [record] = acquire(table, "k", "a", "t1", T0)
    assert record["generation"] == 1
    assert record["expires_ms"] == T0 + 30_000
    claim = table.get("sc_1", "k")
    assert claim.held_at(T0) and claim.holder == "a" and claim.token == "t1"


def test_a_held_key_is_refused_naming_the_holder_and_the_end_of_its_lease():
    """CLAIM_HELD says who holds the key and until when, and changes nothing."""
    table = ClaimTable()
    acquire(table, "k", "a", "t1", T0)
    with pytest.raises(KernelError) as caught:
        table.decide_acquire("sc_1", "k", "b", "s-b", 30_000, "t2", T0 + 1000)
    assert caught.value.code == CLAIM_HELD
    assert "held by a until" in caught.value.message
    assert caught.value.details == ClaimHeldView("a", 1, T0 + 30_000)
    assert caught.value.retry_after_s == 29.0
    assert table.get("sc_1", "k").token == "t1"


def test_the_same_holder_asking_again_is_refused_too():
    """Re-acquiring a key one already holds is CLAIM_HELD: two runs must not share a token."""
    table = ClaimTable()
    acquire(table, "k", "a", "t1", T0)
    with pytest.raises(KernelError) as caught:
        table.decide_acquire("sc_1", "k", "a", "s-a", 30_000, "t2", T0)
    assert caught.value.code == CLAIM_HELD


def test_after_the_lease_ends_the_next_owner_gets_the_next_generation_and_the_expiry_is_recorded_first():
    """A lease past its end, not yet expired by the supervisor, is expired in the same decision."""
    table = ClaimTable()
    acquire(table, "k", "a", "t1", T0)
    records = acquire(table, "k", "b", "t2", T0 + 30_000)
    assert [r["type"] for r in records] == ["claim.expired", "claim.acquired"]
    assert records[1]["generation"] == 2
    assert table.by_token("t1") is None and table.by_token("t2").holder == "b"


def test_generation_keeps_counting_across_releases():
    """Each new owner gets generation + 1, whether the last one released or expired."""
    table = ClaimTable()
    for n in range(1, 6):
        [record] = acquire(table, "k", "a", f"t{n}", T0 + n)
        assert record["generation"] == n
        apply(table, table.decide_release("k", f"t{n}", None, T0 + n))


def test_renew_extends_from_now_by_the_given_or_the_original_length():
    """A renew without leaseSeconds extends by the lease's own length; with one, by that."""
    table = ClaimTable()
    acquire(table, "k", "a", "t1", T0, lease_ms=10_000)
    record = table.decide_renew("k", "t1", None, T0 + 5000)
    assert record["expires_ms"] == T0 + 15_000
    apply(table, record)
    record = table.decide_renew("k", "t1", 60_000, T0 + 6000)
    apply(table, record)
    assert table.get("sc_1", "k").expires_ms == T0 + 66_000


@pytest.mark.parametrize("action", ["renew", "release"])
def test_a_token_that_is_not_current_is_stale(action):
    """Renew or release with an old token, a wrong key or after the lease ended is STALE_CLAIM."""
    table = ClaimTable()
    acquire(table, "k", "a", "t1", T0)
    apply(table, table.decide_release("k", "t1", None, T0))
    acquire(table, "k", "b", "t2", T0)
    decide = {
        "renew": lambda key, token, now: table.decide_renew(key, token, None, now),
        "release": lambda key, token, now: table.decide_release(key, token, None, now),
    }[action]
    for key, token, now in [("k", "t1", T0), ("other", "t2", T0), ("k", "t2", T0 + 30_000), ("k", "nope", T0)]:
        with pytest.raises(KernelError) as caught:
            decide(key, token, now)
        assert caught.value.code == STALE_CLAIM


def test_the_supervisor_expiry_is_a_no_op_when_the_lease_was_renewed_or_released():
    """A stale expiry proposal decides nothing."""
    table = ClaimTable()
    acquire(table, "k", "a", "t1", T0)
    apply(table, table.decide_renew("k", "t1", None, T0 + 20_000))
    assert table.decide_expire("t1", T0 + 30_000) is None
    assert table.decide_expire("t1", T0 + 50_000)["type"] == "claim.expired"
    apply(table, table.decide_release("k", "t1", None, T0 + 40_000))
    assert table.decide_expire("t1", T0 + 50_000) is None


def test_dropping_ended_scopes_frees_their_tokens():
    """Claims of an ended scope are forgotten; their tokens become stale."""
    table = ClaimTable()
    acquire(table, "k", "a", "t1", T0)
    held = table.drop_scopes(["sc_1"])
    assert [c.key for c in held] == ["k"]
    assert table.by_token("t1") is None and table.get("sc_1", "k") is None
