"""Restart semantics: leases alive at a crash survive with a grace period, ended ones expire,
generations never come again, idempotency keys replay. In virtual time."""

from __future__ import annotations

import os

import pytest
import trio

from runstate.actors import Idem, KernelError, KernelState, Limits
from runstate.actors import commands as c
from runstate.actors import scopes
from runstate.actors.boot import EPOCH_SHIFT
from runstate.snapshots import assert_same_state

from .helpers import T0_MS, frames, reload, running, segments
from ..single import only

SPACE = "s1"


async def acquire(run, scope_id: str, key: str = "k", holder: str = "h1", lease_s: int = 30, idem=None) -> dict:
    return await run.claims.acquire(
        SPACE, scope_id=scope_id, key=key, holder=holder, session="x", lease_s=lease_s, idem=idem
    )


@pytest.mark.trio
async def test_a_held_lease_survives_a_crash_gets_grace_and_its_token_renews(tmp_path, autojump_clock):
    data = str(tmp_path)
    async with running(data) as run:
        scope_id = (await run.scopes.create(SPACE))["id"]
        grant = await acquire(run, scope_id, lease_s=30)
        await trio.sleep(10)  # crash 10 s into a 30 s lease (it had 20 s left)
    # Down for 12 s: the lease has 8 s left at the restart, less than the grace period.
    restart_ms = T0_MS + 22_000
    async with running(data, wall_ms=restart_ms) as run:
        assert run.store.report.graced == 1 and run.store.report.expired == 0
        claim = only(run.kernel).state.space(SPACE).claims.get(scope_id, "k")
        assert claim.token == grant["token"] and claim.generation == 1
        grace_ms = Limits().restart_grace_s * 1000
        assert restart_ms + grace_ms <= claim.expires_ms <= restart_ms + grace_ms + Limits().restart_spread_s * 1000
        await trio.sleep(grace_ms / 1000 - 1)  # not yet expired near the end of the grace period
        renewed = await run.claims.renew(SPACE, key="k", token=grant["token"])
        assert renewed["generation"] == 1 and renewed["token"] == grant["token"]
        with pytest.raises(KernelError) as held:
            await acquire(run, scope_id, holder="h2")
        assert held.value.code == "CLAIM_HELD"
        live = only(run.kernel).state
    assert_same_state(live, reload(data).state)  # the grace period was journaled as a renewal


@pytest.mark.trio
async def test_a_lease_that_ended_while_the_server_was_down_is_free_at_the_restart(tmp_path, autojump_clock):
    """Down for an hour: the 30 s lease ended long ago, so the restart expires it and the key is
    free at once, to the next generation."""
    data = str(tmp_path)
    async with running(data) as run:
        scope_id = (await run.scopes.create(SPACE))["id"]
        await acquire(run, scope_id, lease_s=30)
    async with running(data, wall_ms=T0_MS + 3_600_000) as run:
        assert run.store.report.expired == 1 and run.store.report.graced == 0
        grant = await acquire(run, scope_id, holder="h2")
        assert grant["generation"] == 2


@pytest.mark.trio
async def test_a_graced_lease_nobody_renews_expires_at_the_end_of_its_grace(tmp_path, autojump_clock):
    """Down for 25 s of a 30 s lease: graced at the restart, and nobody renews it: it expires once
    its grace has run, and a restart meanwhile gives it no more."""
    data = str(tmp_path)
    async with running(data) as run:
        scope_id = (await run.scopes.create(SPACE))["id"]
        await acquire(run, scope_id, lease_s=30)
    async with running(data, wall_ms=T0_MS + 25_000) as run:
        assert run.store.report.graced == 1
        graced_end = only(run.kernel).state.space(SPACE).claims.get(scope_id, "k").expires_ms
    async with running(data, wall_ms=T0_MS + 28_000) as run:
        assert run.store.report.graced == 0 and run.store.report.expired == 0
        assert only(run.kernel).state.space(SPACE).claims.get(scope_id, "k").expires_ms == graced_end
        await trio.sleep((graced_end - run.kernel.clock.now_ms()) / 1000 + 0.01)
        grant = await acquire(run, scope_id, holder="h2")
        assert grant["generation"] == 2


@pytest.mark.trio
async def test_the_next_owner_after_a_crash_gets_a_greater_generation(tmp_path, autojump_clock):
    """The acquire acknowledged just before the crash is on disk (ack after fsync), so the count goes on."""
    data = str(tmp_path)
    generations = []
    for crash in range(4):
        async with running(data, wall_ms=T0_MS + crash * 600_000) as run:
            if crash == 0:
                scope_id = (await run.scopes.create(SPACE))["id"]
            else:
                await trio.sleep(60)  # grace and spread are over: the old lease expires
            generations.append((await acquire(run, scope_id, holder=f"h{crash}", lease_s=5))["generation"])
            # crash right after the answer
    assert generations == [1, 2, 3, 4]


@pytest.mark.trio
async def test_under_fsync_off_a_lost_tail_cannot_bring_a_generation_back(tmp_path, autojump_clock):
    """With `off`, a power cut may lose acknowledged records; the next boot's floor is above them."""
    data = str(tmp_path)
    async with running(data, fsync="off") as run:
        scope_id = (await run.scopes.create(SPACE))["id"]
        first = await acquire(run, scope_id, lease_s=5)
        assert first["generation"] == 1
    # The power cut: the acquire's record never reached the disk.
    path = segments(data)[-1]
    acquired = [f for f in frames(path) if b"claim.acquired" in bytes(f.body)][0]
    with open(path, "r+b") as file:
        file.truncate(acquired.offset)
    async with running(data, wall_ms=T0_MS + 60_000) as run:
        assert only(run.kernel).state.space(SPACE).claims.get(scope_id, "k") is None  # lost
        second = await acquire(run, scope_id, holder="h2", lease_s=5)
        assert second["generation"] == 2 << EPOCH_SHIFT > first["generation"]
        third = await acquire(run, scope_id, key="other", lease_s=5)
        assert third["generation"] == 2 << EPOCH_SHIFT
        await trio.sleep(6)
        fourth = await acquire(run, scope_id, holder="h3", lease_s=5)
        assert fourth["generation"] == second["generation"] + 1  # within a boot: one more per owner


@pytest.mark.trio
async def test_generations_do_not_jump_after_always_boots(tmp_path, autojump_clock):
    data = str(tmp_path)
    async with running(data, fsync="always") as run:
        scope_id = (await run.scopes.create(SPACE))["id"]
        await acquire(run, scope_id, lease_s=5)
    async with running(data, wall_ms=T0_MS + 600_000) as run:
        await trio.sleep(60)
        assert (await acquire(run, scope_id, holder="h2"))["generation"] == 2
        assert only(run.kernel).state.boot.epoch == 2 and only(run.kernel).state.boot.generation_floor == 0


@pytest.mark.trio
async def test_idempotency_keys_replay_after_a_restart(tmp_path, autojump_clock):
    data = str(tmp_path)
    idem = Idem(SPACE, "retry-1", "POST /claims {k}")
    async with running(data) as run:
        scope_id = (await run.scopes.create(SPACE))["id"]
        grant = await acquire(run, scope_id, idem=idem)
    async with running(data, wall_ms=T0_MS + 5_000) as run:
        lsn = run.store.journal.appended_lsn
        again = await acquire(run, scope_id, idem=idem)
        assert again == grant
        assert run.store.journal.appended_lsn == lsn  # answered from the store, nothing new recorded
        with pytest.raises(KernelError) as conflict:
            await acquire(run, scope_id, idem=Idem(SPACE, "retry-1", "another request"))
        assert conflict.value.code == "IDEMPOTENCY_CONFLICT"


def test_restart_decisions_expire_ended_leases_and_spread_the_rest():
    """The pure decision at a restart 6 s after the acquires: ended by now: expired; short of the
    grace: renewed, marked graced, spread in the order of their old ends; long enough: untouched."""
    limits = Limits(restart_grace_s=10, restart_spread_s=4)
    state = KernelState(limits)
    space = state.space(SPACE)
    scopes.create(space, c.CreateScope(space=SPACE, scope_id="sc"), T0_MS)
    for number, lease_s in enumerate([5, 8, 12, 7, 100]):
        command = c.AcquireClaim(space=SPACE, scope_id="sc", key=f"k{number}", holder="h", session="x", lease_s=lease_s, token=f"ct_{number}")
        space.claiming.acquire(command, T0_MS)
    now_ms = T0_MS + 6_000
    records = state.restart(now_ms)
    kinds = {record["token"]: (record["type"], record.get("expires_ms")) for record in records}
    assert kinds["ct_0"] == ("claim.expired", None)  # ended at +5 s, before the restart
    assert "ct_4" not in kinds  # ends at +100 s, after the grace period anyway
    renewed = sorted((kinds[token][1], token) for token in ("ct_3", "ct_1", "ct_2"))
    assert [token for _, token in renewed] == ["ct_3", "ct_1", "ct_2"]  # old order: 7 s, 8 s, 12 s
    base = now_ms + 10_000
    assert [due for due, _ in renewed] == [base, base + 4_000 // 3, base + 8_000 // 3]
    assert all(record["at_ms"] == now_ms for record in records)
    assert all(record.get("graced") is True for record in records if record["type"] == "claim.renewed")


def _one_claim(lease_s: int, limits: Limits | None = None) -> KernelState:
    state = KernelState(limits or Limits(restart_grace_s=15, restart_spread_s=0))
    space = state.space(SPACE)
    scopes.create(space, c.CreateScope(space=SPACE, scope_id="sc"), T0_MS)
    command = c.AcquireClaim(space=SPACE, scope_id="sc", key="k", holder="h", session="x", lease_s=lease_s, token="ct_k")
    space.claiming.acquire(command, T0_MS)
    return state


def test_a_lease_that_ended_while_the_server_was_down_is_expired_not_graced():
    """A 10-minute lease taken at 07:37 ended at 07:47; the server, down since before then,
    restarts at 07:58: the lease is expired at once (its holder was told it is lost at 07:47), not
    held for another grace period."""
    state = _one_claim(600)
    [record] = state.restart(T0_MS + 21 * 60_000)
    assert record["type"] == "claim.expired" and record["key"] == "k"
    assert state.space(SPACE).claims.get("sc", "k").token is None


def test_a_lease_gets_its_grace_once_unless_its_holder_renews():
    """Restarts every 3 s do not keep an 8 s lease alive: the first gives it the grace (to +18 s
    from the first restart), the later ones keep that end, and once it has passed the lease is
    expired. A lease whose holder renews after its grace can be given the grace again."""
    state = _one_claim(8)
    claims = state.space(SPACE).claims
    [graced] = state.restart(T0_MS + 3_000)
    assert graced["type"] == "claim.renewed" and graced["expires_ms"] == T0_MS + 18_000 and graced["graced"] is True
    for at_s in (6, 9, 12, 15):
        assert state.restart(T0_MS + at_s * 1000) == []
        assert claims.get("sc", "k").expires_ms == T0_MS + 18_000
    [expired] = state.restart(T0_MS + 18_000)
    assert expired["type"] == "claim.expired"

    state = _one_claim(8)
    claims = state.space(SPACE).claims
    state.restart(T0_MS + 3_000)
    space = state.space(SPACE)
    renewed = space.claiming.renew(c.RenewClaim(space=SPACE, key="k", token="ct_k", lease_s=8), T0_MS + 4_000)
    assert "graced" not in renewed.records[0] and claims.get("sc", "k").graced is False
    [again] = state.restart(T0_MS + 6_000)
    assert again["type"] == "claim.renewed" and again["expires_ms"] == T0_MS + 21_000


def test_a_graced_lease_is_still_graced_after_a_snapshot():
    """The mark is part of the state: an image carries it, so a restart after a snapshot does not
    grace the lease a second time either."""
    state = _one_claim(8)
    state.restart(T0_MS + 3_000)
    rebuilt = KernelState(state.limits)
    for record in state.image():
        rebuilt.apply(record)
    assert rebuilt.space(SPACE).claims.get("sc", "k").graced is True
    assert rebuilt.restart(T0_MS + 6_000) == []


@pytest.mark.trio
async def test_a_second_server_on_the_same_directory_is_refused(tmp_path, autojump_clock):
    from runstate.actors import Clock
    from runstate.snapshots import StoreLocked, open_store

    from .helpers import MODEL

    data = str(tmp_path)
    async with running(data):
        with pytest.raises(StoreLocked):
            await open_store(data, model=MODEL, clock=Clock())
    assert os.path.exists(os.path.join(data, "LOCK"))
