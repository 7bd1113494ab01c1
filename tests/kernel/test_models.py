"""Model-based tests: each state machine against a small reference model, with time as a rule.

Hypothesis drives random sequences of commands (and `advance`, which moves the clock by a drawn
amount and fires every timer that falls due, as the supervisor would) through the real tables,
and a few lines of plain Python say what must happen; invariants are checked after every step,
and every machine also checks that replaying its records rebuilds the same state.

Costs are bounded for CI by the `ci` profile (HYPOTHESIS_PROFILE=dev runs ten times more).
"""

from __future__ import annotations

import os
from collections import OrderedDict

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, precondition, rule

from runstate.actors.claims import ClaimTable
from runstate.actors.errors import CLAIM_HELD, CONFLICT, IDEMPOTENCY_CONFLICT, SCOPE_CANCELLED, STALE_CLAIM, KernelError
from runstate.actors.idempotency import IdempotencyTable
from runstate.actors.keys import KeyTable, digest
from runstate.actors.limits import Limits
from runstate.actors.messages import backoff_ms
from runstate.actors.scopes import ACTIVE, CANCELLED, COMPLETED, EXPIRED, ScopeTree
from runstate.snapshots.equality import assert_same_state

from .queue_world import T0, World, recount

settings.register_profile("ci", max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=600, stateful_step_count=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

advance_ms = st.sampled_from([0, 1, 999, 1_000, 4_999, 5_000, 15_000, 60_000, 400_000])


def refused(code: str, call) -> bool:  # type: ignore[no-untyped-def]
    try:
        call()
    except KernelError as error:
        assert error.code == code, f"{error.code} where {code} was expected: {error.message}"
        return True
    return False


# -- claims ----------------------------------------------------------------------------------------


class ClaimMachine(RuleBasedStateMachine):
    """ClaimTable: one holder per key, generations +1 per owner, stale tokens refused, expiry at the end."""

    tokens = Bundle("tokens")

    def __init__(self) -> None:
        super().__init__()
        self.table = ClaimTable()
        self.now = T0
        self.model: dict[str, dict] = {}  # key -> {"token", "expires", "generation"}
        self.records: list[dict] = []
        self.count = 0

    def _apply(self, records: list[dict]) -> None:
        for record in records:
            {"claim.acquired": self.table.apply_acquired, "claim.renewed": self.table.apply_renewed}.get(record["type"], self.table.apply_ended)(record)
            self.records.append(record)

    def _current(self, key: str) -> str | None:
        entry = self.model.get(key)
        if entry and entry["token"] and self.now < entry["expires"]:
            return entry["token"]
        return None

    @rule(ms=advance_ms)
    def advance(self, ms: int) -> None:
        self.now += ms
        for key, entry in self.model.items():  # the supervisor: expire what has ended
            if entry["token"] and self.now >= entry["expires"]:
                record = self.table.decide_expire(entry["token"], self.now)
                assert record is not None
                self._apply([record])
                entry["token"] = None

    @rule(target=tokens, key=st.sampled_from(["a", "b", "c"]), lease_s=st.sampled_from([5, 10, 30]))
    def acquire(self, key: str, lease_s: int) -> str:
        self.count += 1
        token = f"ct_{self.count}"
        held = self._current(key) is not None
        try:
            records = self.table.decide_acquire("sc", key, "h", "s", lease_s * 1000, token, self.now)
        except KernelError as error:
            assert error.code == CLAIM_HELD and held
            return f"never-{self.count}"
        assert not held
        self._apply(records)
        entry = self.model.setdefault(key, {"token": None, "expires": 0, "generation": 0})
        entry.update(token=token, expires=self.now + lease_s * 1000, generation=entry["generation"] + 1)
        assert self.table.get("sc", key).generation == entry["generation"]
        return token

    @rule(token=tokens, key=st.sampled_from(["a", "b", "c"]), lease_s=st.sampled_from([None, 5, 60]))
    def renew(self, token: str, key: str, lease_s: int | None) -> None:
        current = self._current(key) == token
        try:
            record = self.table.decide_renew(key, token, None if lease_s is None else lease_s * 1000, self.now)
        except KernelError as error:
            assert error.code == STALE_CLAIM and not current
            return
        assert current, "a stale token renewed"
        self._apply([record])
        self.model[key]["expires"] = record["expires_ms"]

    @rule(token=tokens, key=st.sampled_from(["a", "b", "c"]))
    def release(self, token: str, key: str) -> None:
        current = self._current(key) == token
        try:
            record = self.table.decide_release(key, token, None, self.now)
        except KernelError as error:
            assert error.code == STALE_CLAIM and not current
            return
        assert current, "a stale token released"
        self._apply([record])
        self.model[key]["token"] = None

    @invariant()
    def matches_the_model(self) -> None:
        held = {claim.key: claim for claim in self.table.held()}
        for key, entry in self.model.items():
            claim = self.table.get("sc", key)
            assert claim.generation == entry["generation"]
            assert (key in held) == (entry["token"] is not None)
            if entry["token"]:
                assert held[key].token == entry["token"] and held[key].expires_ms == entry["expires"]

    @invariant()
    def replay_rebuilds_it(self) -> None:
        fresh = ClaimTable()
        for record in self.records:
            {"claim.acquired": fresh.apply_acquired, "claim.renewed": fresh.apply_renewed}.get(record["type"], fresh.apply_ended)(record)
        assert_same_state(fresh, self.table)


# -- scopes ----------------------------------------------------------------------------------------


class ScopeMachine(RuleBasedStateMachine):
    """ScopeTree: a scope is effectively ended when it or any ancestor ended or passed its deadline."""

    def __init__(self) -> None:
        super().__init__()
        self.limits = Limits().replace(scope_depth_max=3)
        self.tree = ScopeTree(self.limits)
        self.now = T0
        self.parent: dict[str, str | None] = {}
        self.stored: dict[str, str] = {}
        self.deadline: dict[str, int | None] = {}
        self.count = 0

    def effective(self, scope_id: str | None) -> str:
        while scope_id is not None:
            if self.stored[scope_id] != ACTIVE:
                return self.stored[scope_id]
            if self.deadline[scope_id] is not None and self.now >= self.deadline[scope_id]:
                return EXPIRED
            scope_id = self.parent[scope_id]
        return ACTIVE

    def depth(self, scope_id: str | None) -> int:
        return -1 if scope_id is None else 1 + self.depth(self.parent[scope_id])

    @rule(ms=advance_ms)
    def advance(self, ms: int) -> None:
        self.now += ms

    @rule(data=st.data(), deadline=st.sampled_from([None, None, 1_000, 60_000]))
    def create(self, data, deadline: int | None) -> None:  # type: ignore[no-untyped-def]
        parent = data.draw(st.sampled_from([None, *self.parent]))
        self.count += 1
        scope_id = f"sc_{self.count}"
        deadline_ms = None if deadline is None else self.now + deadline
        try:
            record = self.tree.decide_create(scope_id, None, parent, deadline_ms, None, self.now)
        except KernelError as error:
            if error.code == SCOPE_CANCELLED:
                assert self.effective(parent) != ACTIVE
            else:
                assert self.depth(parent) + 1 > self.limits.scope_depth_max
            return
        assert parent is None or self.effective(parent) == ACTIVE
        self.tree.apply_created(record)
        self.parent[scope_id], self.stored[scope_id], self.deadline[scope_id] = parent, ACTIVE, deadline_ms

    @precondition(lambda self: self.parent)
    @rule(data=st.data(), state=st.sampled_from([CANCELLED, COMPLETED]))
    def end(self, data, state: str) -> None:  # type: ignore[no-untyped-def]
        scope_id = data.draw(st.sampled_from(sorted(self.parent)))
        before = self.stored[scope_id]
        try:
            record = self.tree.decide_end(scope_id, state, self.now)
        except KernelError as error:
            assert error.code == CONFLICT and before not in (ACTIVE, state)
            return
        if record is None:
            assert before == state
            return
        assert before == ACTIVE
        self.tree.apply_ended(record)
        self.stored[scope_id] = state

    @invariant()
    def effective_states_match(self) -> None:
        for scope_id in self.parent:
            scope = self.tree.get(scope_id)
            assert self.tree.effective(scope, self.now) == self.effective(scope_id)
            assert scope.stored_state == self.stored[scope_id]
            subtree = set(self.tree.subtree(scope_id))
            assert subtree == {s for s in self.parent if self._under(s, scope_id)}

    def _under(self, scope_id: str | None, ancestor: str) -> bool:
        while scope_id is not None:
            if scope_id == ancestor:
                return True
            scope_id = self.parent[scope_id]
        return False


# -- keys and idempotency ------------------------------------------------------------------------


class KeyMachine(RuleBasedStateMachine):
    """KeyTable: a key opens exactly the spaces it was last registered for, nothing once revoked."""

    def __init__(self) -> None:
        super().__init__()
        self.table = KeyTable()
        self.model: dict[str, tuple[frozenset[str], bool]] = {}  # secret -> (spaces, revoked)
        self.ids: dict[str, str] = {}
        self.count = 0

    @rule(secret=st.sampled_from(["s1", "s2", "s3"]), spaces=st.frozensets(st.sampled_from(["a", "b", "c"]), min_size=1))
    def register(self, secret: str, spaces: frozenset[str]) -> None:
        self.count += 1
        known = self.model.get(secret)
        try:
            record = self.table.decide_register(f"ak_{self.count}", digest(secret), None, spaces, T0)
        except KernelError as error:
            assert error.code == CONFLICT and known is not None and known[1]
            return
        assert known is None or not known[1]
        if record is None:
            assert known is not None and known[0] == spaces
            return
        self.table.apply_registered(record)
        self.ids.setdefault(secret, record["id"])
        self.model[secret] = (spaces, False)

    @precondition(lambda self: self.ids)
    @rule(data=st.data())
    def revoke(self, data) -> None:  # type: ignore[no-untyped-def]
        secret = data.draw(st.sampled_from(sorted(self.ids)))
        record = self.table.decide_revoke(self.ids[secret], T0 + 1)
        if record is None:
            assert self.model[secret][1]
            return
        self.table.apply_revoked(record)
        self.model[secret] = (self.model[secret][0], True)

    @invariant()
    def spaces_match(self) -> None:
        for secret in ["s1", "s2", "s3", "nobody"]:
            spaces, revoked = self.model.get(secret, (frozenset(), True))
            assert self.table.spaces_for(secret) == (frozenset() if revoked else spaces)


class IdempotencyMachine(RuleBasedStateMachine):
    """IdempotencyTable, one per space: a stored answer replays for the TTL; another request under
    the key conflicts; the oldest entries go first when there are too many, and a space's entries
    are only ever evicted by that space's own requests."""

    def __init__(self) -> None:
        super().__init__()
        self.limits = Limits().replace(idempotency_ttl_s=10, idempotency_keys_max=3)
        self.tables = {space: IdempotencyTable(self.limits) for space in ("a", "b")}
        self.now = T0
        # space -> key -> (fingerprint, body, at), oldest first
        self.model: dict[str, OrderedDict[str, tuple[str, int, int]]] = {space: OrderedDict() for space in ("a", "b")}
        self.count = 0

    def _live(self, space: str, key: str) -> tuple[str, int, int] | None:
        entry = self.model[space].get(key)
        if entry is None or self.now - entry[2] >= self.limits.idempotency_ttl_s * 1000:
            return None
        return entry

    @rule(ms=st.sampled_from([0, 1, 3_000, 9_999, 10_000, 30_000]))
    def advance(self, ms: int) -> None:
        self.now += ms

    @rule(space=st.sampled_from(["a", "b"]), key=st.sampled_from(["k1", "k2", "k3", "k4"]), fingerprint=st.sampled_from(["f1", "f2"]))
    def request(self, space: str, key: str, fingerprint: str) -> None:
        entry = self._live(space, key)
        table, model = self.tables[space], self.model[space]
        try:
            stored = table.lookup(key, fingerprint, self.now)
        except KernelError as error:
            assert error.code == IDEMPOTENCY_CONFLICT and entry is not None and entry[0] != fingerprint
            return
        if entry is not None:
            assert entry[0] == fingerprint and stored is not None and stored.body == entry[1]
            return
        assert stored is None
        self.count += 1
        table.apply_stored(table.record(space, key, fingerprint, self.count, self.now))
        model.pop(key, None)
        model[key] = (fingerprint, self.count, self.now)
        horizon = self.now - self.limits.idempotency_ttl_s * 1000
        while model:
            oldest = next(iter(model.values()))
            if oldest[2] > horizon and len(model) <= self.limits.idempotency_keys_max:
                break
            model.popitem(last=False)

    @invariant()
    def kept_entries_match(self) -> None:
        for space, table in self.tables.items():
            model = self.model[space]
            assert len(table) == len(model) <= self.limits.idempotency_keys_max
            for key, (fingerprint, body, _) in model.items():
                if self._live(space, key) is not None:
                    assert table.lookup(key, fingerprint, self.now).body == body


# -- mailboxes, messages, deliveries and tasks -----------------------------------------------------


class WorkMachine(RuleBasedStateMachine):
    """One space's queue: FIFO delivery of the oldest deliverable message, one lease at a time per
    message, retries with backoff, leases that run out, attempts used up, tasks with one outcome."""

    deliveries = Bundle("deliveries")

    @initialize()
    def setup(self) -> None:
        self.world = World(Limits().replace(retention_s=10**6))
        self.mailbox = self.world.mailbox("q", max_attempts=3)
        self.scope = self.world.scope()
        self.armed: dict[tuple, object] = {}
        # message id -> {"state", "attempts", "token", "expires", "visible", "seq", "task"}
        self.model: dict[str, dict] = {}
        self.tasks: dict[str, dict] = {}  # task id -> {"key", "input", "state", "outcome", "message"}
        self.seq = 0

    def _do(self, method: str, *args):  # type: ignore[no-untyped-def]
        outcome = self.world.do(method, *args)
        for timer in outcome.timers:
            self.armed[(timer.actor, timer.tag)] = timer
        return outcome

    def _enqueue(self, message_id: str, task_id: str | None) -> None:
        self.seq += 1
        self.model[message_id] = {"state": "QUEUED", "attempts": 0, "token": None, "expires": 0, "visible": 0, "seq": self.seq, "task": task_id}

    def _expected_next(self) -> str | None:
        ready = [m for m, e in self.model.items() if e["state"] == "QUEUED" or (e["state"] == "DELAYED" and e["visible"] <= self.world.now)]
        return min(ready, key=lambda m: self.model[m]["seq"]) if ready else None

    def _release(self, message_id: str, retry: bool) -> None:
        entry = self.model[message_id]
        if entry["attempts"] >= 3:
            entry["state"] = "DEAD"
            if entry["task"]:
                self._end_task(entry["task"], "FAILED", None)
        else:
            entry["state"] = "DELAYED" if retry else "QUEUED"
            if entry["task"]:
                self.tasks[entry["task"]]["state"] = "QUEUED"
        entry["token"] = None

    def _end_task(self, task_id: str, state: str, outcome) -> None:  # type: ignore[no-untyped-def]
        task = self.tasks[task_id]
        assert task["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"), "a task ended twice"
        task["state"], task["outcome"] = state, outcome

    @rule(ms=advance_ms)
    def advance(self, ms: int) -> None:
        self.world.now += ms
        while True:  # the supervisor: every timer due by now, earliest first
            due = sorted((t for t in self.armed.values() if t.due_ms <= self.world.now), key=lambda t: t.due_ms)
            if not due:
                break
            timer = due[0]
            del self.armed[(timer.actor, timer.tag)]
            kind, message_id = timer.tag
            entry = self.model.get(message_id)
            if kind == "lease" and entry and entry["state"] == "LEASED" and entry["token"] == timer.marker:
                self._release(message_id, retry=False)
            self._do("on_timer", timer.actor, timer.tag, timer.marker)
        for entry in self.model.values():
            if entry["state"] == "DELAYED" and entry["visible"] <= self.world.now:
                entry["state"] = "QUEUED"

    @rule(payload=st.integers(0, 3))
    def send(self, payload: int) -> None:
        reply = self.world.send(self.mailbox, self.scope, payload)
        self._enqueue(reply["id"], None)

    @rule(key=st.sampled_from(["t1", "t2", "t3"]), task_input=st.sampled_from([1, 2]))
    def submit(self, key: str, task_input: int) -> None:
        known = next((t for t, e in self.tasks.items() if e["key"] == key), None)
        try:
            reply = self.world.submit(self.mailbox, self.scope, key, task_input)
        except KernelError as error:
            assert error.code == IDEMPOTENCY_CONFLICT and known is not None and self.tasks[known]["input"] != task_input
            return
        if known is not None:
            assert reply["taskId"] == known and not reply["created"] and self.tasks[known]["input"] == task_input
            return
        assert reply["created"]
        self.tasks[reply["taskId"]] = {"key": key, "input": task_input, "state": "QUEUED", "outcome": None, "message": reply["messageId"]}
        self._enqueue(reply["messageId"], reply["taskId"])

    @rule(target=deliveries, lease_s=st.sampled_from([5, 30]))
    def recv(self, lease_s: int) -> tuple:
        expected = self._expected_next()
        delivery = self.world.recv(self.mailbox, self.scope, lease_s)
        if delivery is None:
            assert expected is None
            return ("none", "none")
        message_id, token = delivery["message"]["id"], delivery["token"]
        assert message_id == expected, "not the oldest deliverable message"
        entry = self.model[message_id]
        assert entry["state"] in ("QUEUED", "DELAYED") and entry["token"] is None, "a message leased twice"
        entry.update(state="LEASED", attempts=entry["attempts"] + 1, token=token, expires=self.world.now + lease_s * 1000)
        assert delivery["message"]["attempt"] == entry["attempts"]
        if entry["task"]:
            self.tasks[entry["task"]]["state"] = "RUNNING"
        return (message_id, token)

    def _current(self, delivery: tuple) -> bool:
        entry = self.model.get(delivery[0])
        return entry is not None and entry["state"] == "LEASED" and entry["token"] == delivery[1] and self.world.now < entry["expires"]

    @rule(delivery=deliveries, result=st.integers(0, 9))
    def complete(self, delivery: tuple, result: int) -> None:
        if delivery[0] == "none":
            return
        current = self._current(delivery)
        if refused(STALE_CLAIM, lambda: self._do("complete_delivery", delivery[0], delivery[1], {"payload": result})):
            assert not current
            return
        assert current, "a stale delivery token completed"
        entry = self.model[delivery[0]]
        entry.update(state="COMPLETED", token=None)
        if entry["task"]:
            self._end_task(entry["task"], "SUCCEEDED", result)

    @rule(delivery=deliveries, retry=st.booleans(), jitter=st.sampled_from([0.8, 1.0]))
    def nack(self, delivery: tuple, retry: bool, jitter: float) -> None:
        if delivery[0] == "none":
            return
        current = self._current(delivery)
        if refused(STALE_CLAIM, lambda: self._do("nack_delivery", delivery[0], delivery[1], retry, None, jitter)):
            assert not current
            return
        assert current, "a stale delivery token was nacked"
        entry = self.model[delivery[0]]
        if not retry:
            entry.update(state="DEAD", token=None)
            if entry["task"]:
                self._end_task(entry["task"], "FAILED", None)
            return
        entry["visible"] = self.world.now + backoff_ms(self.world.limits, entry["attempts"], jitter)
        self._release(delivery[0], retry=True)

    @rule(delivery=deliveries, lease_s=st.sampled_from([None, 10]))
    def renew(self, delivery: tuple, lease_s: int | None) -> None:
        if delivery[0] == "none":
            return
        current = self._current(delivery)
        if refused(STALE_CLAIM, lambda: self._do("renew_delivery", delivery[0], delivery[1], None if lease_s is None else lease_s * 1000)):
            assert not current
            return
        assert current
        length = lease_s * 1000 if lease_s else self.world.space.messages.get(delivery[0]).lease_ms
        self.model[delivery[0]]["expires"] = self.world.now + length

    @precondition(lambda self: self.tasks)
    @rule(data=st.data())
    def cancel(self, data) -> None:  # type: ignore[no-untyped-def]
        task_id = data.draw(st.sampled_from(sorted(self.tasks)))
        task = self.tasks[task_id]
        terminal = task["state"] in ("SUCCEEDED", "FAILED", "EXPIRED")
        if refused(CONFLICT, lambda: self._do("cancel_task", task_id, None)):
            assert terminal
            return
        assert not terminal
        if task["state"] != "CANCELLED":
            task["state"] = "CANCELLED"
            entry = self.model[task["message"]]
            entry.update(state="DROPPED", token=None)

    @invariant()
    def matches_the_model(self) -> None:
        if not hasattr(self, "world"):
            return
        space = self.world.space
        for message_id, entry in self.model.items():
            message = space.messages.get(message_id)
            assert message.state == entry["state"], (message_id, message.state, entry)
            assert message.attempts == entry["attempts"]
            assert message.token == entry["token"]
        for task_id, expected in self.tasks.items():
            task = space.tasks.get(task_id)
            assert task.state == expected["state"]
            if expected["state"] == "SUCCEEDED":
                assert task.outcome == expected["outcome"]
        kept = {m.id: {"queued": m.queued, "delayed": m.delayed, "leased": m.leased, "dead_letters": m.dead} for m in space.mailboxes.all()}
        assert recount(space) == kept

    @invariant()
    def replay_rebuilds_it(self) -> None:
        if hasattr(self, "world"):
            self.world.assert_replay_matches()


for machine in (ClaimMachine, ScopeMachine, KeyMachine, IdempotencyMachine, WorkMachine):
    machine.TestCase.settings = PROFILE

TestClaims = ClaimMachine.TestCase
TestScopes = ScopeMachine.TestCase
TestKeys = KeyMachine.TestCase
TestIdempotency = IdempotencyMachine.TestCase
TestWork = WorkMachine.TestCase
