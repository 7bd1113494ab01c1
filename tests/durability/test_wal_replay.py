"""Replay equivalence: a random command stream applied live gives the state that its journal, its
image, and an image plus the rest of the journal give back, generation counters included."""

from __future__ import annotations

import random

import orjson
import pytest
import trio
from hypothesis import HealthCheck, given, settings, strategies as st

from runstate.actors import KernelError, KernelState, Limits
from runstate.actors import commands as c
from runstate.actors.idempotency import IdempotencyTable
from runstate.server import wire
from runstate.actors.transitions import TRANSITIONS
from runstate.snapshots import assert_same_state, contents
from runstate.snapshots.equality import first_difference

from .helpers import T0_MS, reload, running
from ..single import only

SPACES = ["s1", "s2"]
KEYS = ["a", "b", "c", "d/e"]


class Driver:
    """Runs commands on a live state the way a kernel turn does, and keeps every record."""

    def __init__(self, limits: Limits) -> None:
        self.state = KernelState(limits)
        self.records: list[dict] = []
        self.now_ms = T0_MS
        self.serial = 0
        self.images: list[tuple[int, list[dict]]] = []  # (records so far, image then)

    def _id(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial:06d}"

    def run(self, command, idem: tuple[str, str] | None = None) -> None:
        state = self.state
        try:
            space = state.spaces.get(idem[0]) if idem is not None else None
            if space is not None and space.idempotency.lookup(idem[1], "fp", self.now_ms):
                return
            outcome = TRANSITIONS[type(command)](state, command, self.now_ms)
        except KernelError:
            return
        records = list(outcome.records)
        if idem is not None and records:
            # Kept as the server keeps it: its JSON form (`Partition.keep_reply`).
            record = IdempotencyTable.record(idem[0], idem[1], "fp", wire.encode(outcome.reply), self.now_ms)
            state.apply(record)
            records.append(record)
        self.records.extend(records)

    def step(self, choice: int, pick: int, flag: bool) -> None:
        state = self.state
        space_id = SPACES[pick % len(SPACES)]
        space = state.space(space_id)
        scopes = [scope.id for scope in space.scopes.all()]
        held = [claim for claim in space.claims.held()]
        idem = (space_id, f"ik{pick % 7}") if flag and choice % 3 == 0 else None
        kind = choice % 12
        if kind == 0 or not scopes:
            parent = scopes[pick % len(scopes)] if scopes and flag else None
            deadline = self.now_ms + (pick % 5 + 1) * 10_000 if pick % 3 == 0 else None
            scope_id = self._id("sc_")
            self.run(c.CreateScope(space=space_id, scope_id=scope_id, parent_id=parent, deadline_ms=deadline), idem)
        elif kind in (1, 2, 3):
            scope_id = scopes[pick % len(scopes)]
            key = KEYS[pick % len(KEYS)]
            token = self._id("ct_")
            lease_ms = (5 + pick % 30) * 1000
            self.run(c.AcquireClaim(space=space_id, scope_id=scope_id, key=key, holder="h", session="sess", lease_s=lease_ms // 1000, token=token), idem)
        elif kind == 4 and held:
            claim = held[pick % len(held)]
            self.run(c.RenewClaim(space=space_id, key=claim.key, token=claim.token), idem)
        elif kind == 5 and held:
            claim = held[pick % len(held)]
            observation = {"seen": pick} if flag else None
            self.run(c.ReleaseClaim(space=space_id, key=claim.key, token=claim.token, observation=observation), idem)
        elif kind == 6:
            self.now_ms += (pick % 40) * 1000  # time passes; the supervisor proposes what fell due
            for timer in list(state.timers()):
                if timer.due_ms <= self.now_ms:
                    self.run(c.FireTimer(on=timer.actor, tag=timer.tag, marker=timer.marker))
        elif kind == 7:
            scope_id = scopes[pick % len(scopes)]
            end = c.CancelScope if flag else c.CompleteScope
            self.run(end(space=space_id, scope_id=scope_id), idem)
        elif kind == 8:
            key_id, digest = f"ak_{pick % 4}", f"{pick % 4:064x}"
            spaces = frozenset(SPACES[: 1 + pick % 2])
            self.run(c.RegisterKey(key_id=key_id, key_digest=digest, name=None, spaces=spaces))
        elif kind == 9 and len(state.keys):
            key_id = f"ak_{pick % 4}"
            self.run(c.RevokeKey(key_id=key_id))
        elif kind == 10 and flag:  # a restart: boot record, expiries and grace periods
            self.now_ms += (pick % 20) * 1000
            boot = state.decide_boot("off" if pick % 2 else "always", self.now_ms)
            self.records.extend(boot + state.restart(self.now_ms))
        elif kind == 11:
            self.images.append((len(self.records), list(state.image())))
        self.now_ms += 1 + pick % 500


def through_disk(records: list[dict]) -> list[dict]:
    return [orjson.loads(orjson.dumps(record)) for record in records]


def replayed(records: list[dict], limits: Limits) -> KernelState:
    state = KernelState(limits)
    for record in through_disk(records):
        state.apply(record)
    return state


steps = st.lists(st.tuples(st.integers(0, 11), st.integers(0, 1000), st.booleans()), min_size=1, max_size=120)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.sampled_from([Limits(), Limits(idempotency_keys_max=3, idempotency_ttl_s=60)]))
def test_replay_and_images_reproduce_the_live_state(commands, limits):
    driver = Driver(limits)
    for choice, pick, flag in commands:
        driver.step(choice, pick, flag)
    live = driver.state
    # The journal alone.
    assert_same_state(live, replayed(driver.records, limits))
    # The image alone (a snapshot at the end).
    assert_same_state(live, replayed(list(live.image()), limits))
    # Every image taken on the way, then the journal after it (a snapshot plus the WAL).
    for position, image in driver.images:
        assert_same_state(live, replayed(image + driver.records[position:], limits))


def test_generations_count_by_one_and_survive_replay():
    """Each new owner of a key gets one more; the counter survives releases, expiries and replay."""
    driver = Driver(Limits())
    scope = "sc_x"
    driver.run(c.CreateScope(space="s1", scope_id=scope))
    generations = []
    for round_number in range(5):
        token = f"ct_{round_number}"
        driver.run(c.AcquireClaim(space="s1", scope_id=scope, key="k", holder="h", session="x", lease_s=5, token=token))
        generations.append(driver.state.space("s1").claims.get(scope, "k").generation)
        if round_number % 2:
            driver.run(c.ReleaseClaim(space="s1", key="k", token=token))
        else:
            driver.now_ms += 6000  # the lease runs out; the next acquire records its expiry first
    assert generations == [1, 2, 3, 4, 5]
    again = replayed(driver.records, Limits())
    assert again.space("s1").claims.get(scope, "k").generation == 5
    assert_same_state(driver.state, again)


def test_the_equality_helper_sees_a_generation_difference():
    a, b = KernelState(), KernelState()
    for state, generation in ((a, 3), (b, 4)):
        state.apply({"type": "claim.image", "space": "s1", "scope_id": "sc", "key": "k", "generation": generation,
                     "token": None, "holder": None, "session": None, "lease_ms": 0, "expires_ms": 0,
                     "acquired_ms": 0, "at_ms": 0})
    assert "generation" in first_difference(contents(a), contents(b))
    with pytest.raises(AssertionError):
        assert_same_state(a, b)


@pytest.mark.trio
async def test_the_live_kernel_on_disk_replays_to_the_same_state(tmp_path, autojump_clock):
    """Random commands through the real kernel and WAL, with snapshots on the way, then recovery."""
    rng = random.Random(1234)
    data = str(tmp_path)
    async with running(data, idempotency_keys_max=50) as run:
        space = "s1"
        scope_ids = [(await run.scopes.create(space))["id"] for _ in range(3)]
        tokens: dict[str, str] = {}
        for step in range(600):
            choice = rng.random()
            key = f"k{rng.randrange(12)}"
            try:
                if choice < 0.35:
                    grant = await run.claims.acquire(
                        space, scope_id=rng.choice(scope_ids), key=key, holder="h", session="s",
                        lease_s=rng.randint(5, 40),
                    )
                    tokens[key] = grant["token"]
                elif choice < 0.55 and key in tokens:
                    await run.claims.renew(space, key=key, token=tokens[key])
                elif choice < 0.7 and key in tokens:
                    await run.claims.release(space, key=key, token=tokens.pop(key))
                elif choice < 0.75:
                    scope_ids.append((await run.scopes.create(space, parent_id=rng.choice(scope_ids)))["id"])
                elif choice < 0.78 and len(scope_ids) > 2:
                    await run.scopes.cancel(space, scope_ids.pop(rng.randrange(len(scope_ids))))
                elif choice < 0.8:
                    await run.store.snapshot()
                else:
                    await trio.sleep(rng.random() * 8)
            except KernelError:
                pass
        live = only(run.kernel).state
        assert run.store.snapshots_taken > 0
    assert_same_state(live, reload(data).state)
