"""Once: a piece of work done exactly once per (run, key), its one result handed to every caller.

A slot is OPEN until a caller acquires it: that caller HOLDS it under a fenced lease (a token, and
a lease it renews) and runs the work. Completing records the result: the slot is DONE for good and
every later acquire answers the result instead of a lease. Failing gives the attempt back: the
slot is OPEN again, or FAILED for good once `maxAttempts` attempts were used. A holder that dies
lets its lease run out: the slot opens again and the next caller takes over, the lost attempt
counted. Releasing gives the key back unused (its holder was cancelled before it began, say): the
slot is OPEN again and that acquisition is not counted against `maxAttempts`. Waiters
(`GET /once?waitMs=`) park on the slot's actor and are answered when it settles or opens.

    OPEN --acquire--> HELD --complete--> DONE
      ^                |  --fail (attempts left), lease ran out, release--> OPEN
      |                +--fail (attempts used up)--> FAILED

`attempts` counts the acquisitions so far, released ones included: it is the slot's generation,
which only grows (each holder's is greater than the last). An acquire answers the count before
it, so the holder's attempt number is `attempts + 1`. `released` counts the acquisitions given
back unused; a failure is FAILED once `attempts - released` reaches `maxAttempts`.

Records (snake_case, units last): `once.acquired` {scope_id, key, token, holder, session, lease_ms,
expires_ms, attempts, at_ms}, `once.renewed` {scope_id, key, token, lease_ms, expires_ms, at_ms},
`once.completed` {scope_id, key, result, at_ms}, `once.failed` {scope_id, key, error, failed, at_ms},
`once.released` {scope_id, key, at_ms}, `once.expired` {scope_id, key, at_ms}, `once.image` (a slot
as it stands).

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import Any, Callable, Final, Iterator, Literal, NamedTuple

from .actor_keys import ActorKey, once_actor
from .caps import value_bytes
from .errors import STALE_CLAIM, KernelError, quote
from .fields import INTEGER, JSON, body, drawn, path, query
from .leases import LeaseKind, hold, release, renewal, renewed, restore
from .outcome import Outcome, Timer, Space, State
from .primitive import NOT_COUNTED, Command, Primitive, command, event, free, lease_field, operation, reason_field, record_type, timer_kind
from .scopes import ScopeTree
from .shapes import DurationMs, EpochMs, Json, Record

__all__ = [
    "OnceTable", "OnceCommands", "OnceState", "OnceView", "OnceHeldView", "OnceAcquiredView", "OnceRenewedView",
    "LEASE_TIMER", "once_actor", "OPEN", "HELD", "DONE", "FAILED", "ONCE",
    "ONCE_ACQUIRED", "ONCE_COMPLETED", "ONCE_EXPIRED", "ONCE_FAILED", "ONCE_IMAGE", "ONCE_RELEASED", "ONCE_RENEWED",
    "AcquireOnce", "WaitOnce", "RenewOnce", "CompleteOnce", "FailOnce", "ReleaseOnce",
]

# The record types this module decides and applies (the journal's spelling of each).
ONCE_ACQUIRED = record_type("once.acquired")
ONCE_COMPLETED = record_type("once.completed")
ONCE_EXPIRED = record_type("once.expired")
ONCE_FAILED = record_type("once.failed")
ONCE_IMAGE = record_type("once.image")
ONCE_RELEASED = record_type("once.released")
ONCE_RENEWED = record_type("once.renewed")

# A slot's states, and ACQUIRED: what an acquire that got the slot answers.
OnceState = Literal["ACQUIRED", "OPEN", "HELD", "DONE", "FAILED"]
OPEN: Final = "OPEN"
HELD: Final = "HELD"
DONE: Final = "DONE"
FAILED: Final = "FAILED"
ACQUIRED: Final = "ACQUIRED"
LEASE_TIMER = timer_kind("once-lease")
ONCE_LEASE = "once"  # the kind of lease a slot is held under, in the lease table


class OnceView(NamedTuple):
    """What a caller learns of a once key that is not held: its state (OPEN, DONE, FAILED), the
    attempts used, and the result (DONE) or the last attempt's error."""

    state: OnceState
    attempts: int
    result: Json
    last_error: str | None


class OnceHeldView(NamedTuple):
    """A once key someone holds (OnceView's fields first): who, and until when."""

    state: OnceState
    attempts: int
    result: Json
    last_error: str | None
    holder: str | None
    expires_ms: EpochMs


class OnceAcquiredView(NamedTuple):
    """An acquire that got the key: the token to complete or fail it with, the attempts used before
    this one, and the lease."""

    state: OnceState
    token: str
    attempts: int
    expires_ms: EpochMs
    lease_ms: DurationMs


class OnceRenewedView(NamedTuple):
    """A renewal: the key still held, to the lease's new end."""

    state: OnceState
    expires_ms: EpochMs
    lease_ms: DurationMs


class Slot:
    __slots__ = ("scope_id", "key", "state", "attempts", "token", "holder", "session", "lease_ms", "expires_ms",
                 "result", "last_error", "updated_ms", "graced", "released")

    def __init__(self, scope_id: str, key: str) -> None:
        self.scope_id = scope_id
        self.key = key
        self.state: OnceState = OPEN
        self.attempts = 0
        self.token: str | None = None
        self.holder: str | None = None
        self.session: str | None = None
        self.lease_ms = 0
        self.expires_ms = 0
        self.result: Any = None
        self.last_error: str | None = None
        self.updated_ms = 0
        self.graced = False  # a restart gave the lease its grace; its holder has not renewed since
        self.released = 0  # acquisitions given back unused: not counted against maxAttempts

    def held_at(self, now_ms: int) -> bool:
        return self.state == HELD and now_ms < self.expires_ms


class OnceTable:
    """The once slots of one space, by (scope, key)."""

    __slots__ = ("_slots", "result_bytes")

    def __init__(self) -> None:
        self._slots: dict[tuple[str, str], Slot] = {}
        # Bytes of the results kept (for good: a DONE slot answers its result to every caller).
        self.result_bytes = 0

    def __len__(self) -> int:
        return len(self._slots)

    def find(self, scope_id: str, key: str) -> Slot | None:
        return self._slots.get((scope_id, key))

    def all(self) -> Iterator[Slot]:
        return iter(self._slots.values())

    def view(self, slot: Slot | None, now_ms: int) -> OnceView | OnceHeldView:
        """What a caller learns of a slot: its state, and the result or the last error."""
        if slot is None:
            return OnceView(OPEN, 0, None, None)
        state = slot.state
        if state == HELD and not slot.held_at(now_ms):
            state = OPEN  # the lease ran out; the expiry is recorded by the next turn or the timer
        if state == HELD:
            assert slot.token is not None and now_ms < slot.expires_ms, "a held slot has a live lease"
            return OnceHeldView(state, slot.attempts, slot.result, slot.last_error, slot.holder, slot.expires_ms)
        return OnceView(state, slot.attempts, slot.result, slot.last_error)

    def current(self, scope_id: str, key: str, token: str, now_ms: int) -> Slot:
        """The slot `token` holds now, or STALE_CLAIM."""
        slot = self._slots.get((scope_id, key))
        if slot is None or slot.token != token or not slot.held_at(now_ms):
            raise KernelError(STALE_CLAIM, f"token is not the current one for once key {quote(key)}")
        return slot

    def drop_scopes(self, scope_ids: frozenset[str]) -> None:
        """Ended runs removed (`runs.py`): their slots, results included, leave with them. A lease
        still held there ends with the slot (its timer then finds nothing, and its holder's token is
        stale)."""
        for key in [key for key in self._slots if key[0] in scope_ids]:
            self.result_bytes -= value_bytes(self._slots.pop(key).result)

    # -- applying -------------------------------------------------------------------------------

    def _slot(self, record: Record) -> Slot:
        key = (record["scope_id"], record["key"])
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = Slot(record["scope_id"], record["key"])
        return slot

    def apply_acquired(self, record: Record) -> Slot:
        slot = self._slot(record)
        assert slot.state in (OPEN, HELD), "a settled once slot is never acquired again"
        assert record["attempts"] == slot.attempts + 1, "each acquisition is the next attempt"
        slot.state = HELD
        slot.attempts = record["attempts"]
        hold(slot, record)
        slot.updated_ms = record["at_ms"]
        return slot

    def apply_renewed(self, record: Record) -> Slot:
        slot = self._slot(record)
        assert slot.state == HELD and slot.token == record["token"], "only the holder's token renews"
        renewed(slot, record)
        return slot

    def _end_lease(self, slot: Slot, state: OnceState, at_ms: int) -> Slot:
        assert slot.state == HELD, "only a held slot's lease ends"
        slot.state = state
        release(slot)
        slot.updated_ms = at_ms
        return slot

    def apply_completed(self, record: Record) -> Slot:
        slot = self._slot(record)
        assert slot.state != DONE, "a once result is recorded once and never changed"
        slot.result = record["result"]
        self.result_bytes += value_bytes(slot.result)
        return self._end_lease(slot, DONE, record["at_ms"])

    def apply_failed(self, record: Record) -> Slot:
        slot = self._slot(record)
        slot.last_error = record["error"]
        return self._end_lease(slot, FAILED if record["failed"] else OPEN, record["at_ms"])

    def apply_released(self, record: Record) -> Slot:
        slot = self._slot(record)
        slot.released += 1
        assert slot.released <= slot.attempts, "only an acquisition is given back"
        return self._end_lease(slot, OPEN, record["at_ms"])

    def apply_expired(self, record: Record) -> Slot:
        return self._end_lease(self._slot(record), OPEN, record["at_ms"])

    def apply_image(self, record: Record) -> Slot:
        slot = self._slot(record)
        slot.state, slot.attempts, slot.result = record["state"], record["attempts"], record["result"]
        restore(slot, record)
        self.result_bytes += value_bytes(slot.result)
        slot.last_error = record["last_error"]
        slot.released = record.get("released", 0)
        slot.updated_ms = record["at_ms"]
        return slot

    def image(self) -> Iterator[Record]:
        for slot in self._slots.values():
            record = {
                "type": ONCE_IMAGE, "scope_id": slot.scope_id, "key": slot.key, "state": slot.state,
                "attempts": slot.attempts, "token": slot.token, "holder": slot.holder, "session": slot.session,
                "lease_ms": slot.lease_ms, "expires_ms": slot.expires_ms, "result": slot.result,
                "last_error": slot.last_error, "at_ms": slot.updated_ms,
            }
            if slot.graced:
                record["graced"] = True
            if slot.released:
                record["released"] = slot.released
            yield record


Commit = Callable[..., Outcome]


# -- commands ----------------------------------------------------------------------------------


@command
class AcquireOnce(Command):
    space: str = path("space")
    scope_id: str = body("scopeId")
    key: str = body("key", length_max="claim_key_len_max")
    holder: str = body("holder", length_max="holder_len_max")
    session: str = body("holderSession", length_max="holder_len_max")
    lease_s: int = lease_field(default="lease_s_default")
    token: str = drawn("token")

    def actor(self, state: State) -> ActorKey:
        return once_actor(self.space, self.scope_id, self.key)


@command
class WaitOnce(Command):
    """The slot once it is not held (settled, or open again), or when the wait ends."""

    space: str = path("space")
    scope_id: str = query("scopeId", required=True)
    key: str = query("key", required=True)
    wait_ms: int | None = query("waitMs", INTEGER, minimum=0, description="capped at {wait_ms_max}")

    def actor(self, state: State) -> ActorKey:
        return once_actor(self.space, self.scope_id, self.key)


@command
class RenewOnce(Command):
    space: str = path("space")
    scope_id: str = body("scopeId")
    key: str = body("key")
    token: str = body("token")
    lease_s: int | None = lease_field()

    def actor(self, state: State) -> ActorKey:
        return once_actor(self.space, self.scope_id, self.key)


@command
class CompleteOnce(Command):
    space: str = path("space")
    scope_id: str = body("scopeId")
    key: str = body("key")
    token: str = body("token")
    result: Any = body("result", JSON, required=False)

    def actor(self, state: State) -> ActorKey:
        return once_actor(self.space, self.scope_id, self.key)


@command
class FailOnce(Command):
    space: str = path("space")
    scope_id: str = body("scopeId")
    key: str = body("key")
    token: str = body("token")
    error: str | None = reason_field("error")
    max_attempts: int = body("maxAttempts", INTEGER, required=False, minimum=1, maximum="attempts_max_max", default=3)

    def actor(self, state: State) -> ActorKey:
        return once_actor(self.space, self.scope_id, self.key)


@command
class ReleaseOnce(Command):
    """Give a held key back unused: OPEN again, the acquisition not counted against maxAttempts."""

    space: str = path("space")
    scope_id: str = body("scopeId")
    key: str = body("key")
    token: str = body("token")

    def actor(self, state: State) -> ActorKey:
        return once_actor(self.space, self.scope_id, self.key)


# -- the part ----------------------------------------------------------------------------------


class OnceCommands:
    """The once part of a space: given the scope tree (a run must be active), the table, `commit`."""

    __slots__ = ("_space_id", "_scopes", "_slots", "_commit", "check_bytes")

    def __init__(self, space_id: str, scopes: ScopeTree, slots: OnceTable, commit: Commit) -> None:
        self._space_id = space_id
        self._scopes = scopes
        self._slots = slots
        self._commit = commit
        # The space's payload cap (`caps.check_bytes` over all its tables): (adding, freeing) -> None.
        self.check_bytes: Callable[[int, int], None] = lambda adding, freeing: None

    def acquire(self, command: AcquireOnce, now_ms: int) -> Outcome:
        """The result if DONE, the error if FAILED, the holder if HELD; else the caller holds it."""
        scope_id, key = command.scope_id, command.key
        self._scopes.require_active(scope_id, now_ms)
        slots = self._slots
        slot = slots.find(scope_id, key)
        outcome = Outcome()
        if slot is not None:
            if slot.state in (DONE, FAILED) or slot.held_at(now_ms):
                outcome.reply = slots.view(slot, now_ms)
                return outcome
            if slot.state == HELD:  # ran out, not yet recorded: record it first
                self._commit(outcome, self._expired(scope_id, key, now_ms))
        attempts = 0 if slot is None else slot.attempts
        lease_ms = command.lease_s * 1000
        record = {
            "type": ONCE_ACQUIRED, "scope_id": scope_id, "key": key, "token": command.token,
            "holder": command.holder, "session": command.session, "lease_ms": lease_ms,
            "expires_ms": now_ms + lease_ms, "attempts": attempts + 1, "at_ms": now_ms,
        }
        self._commit(outcome, record)
        outcome.timers.append(self._lease_timer(scope_id, key, command.token, now_ms + lease_ms))
        outcome.reply = OnceAcquiredView(ACQUIRED, command.token, attempts, now_ms + lease_ms, lease_ms)
        return outcome

    def wait(self, command: WaitOnce, now_ms: int) -> Outcome:
        """The slot's view once it is not held; `empty` (park) while a live lease holds it. The run
        must exist, as for an acquire (NOT_FOUND), ended or not: an unknown one has no keys at all,
        rather than keys OPEN that an acquire would refuse."""
        self._scopes.get(command.scope_id)
        slot = self._slots.find(command.scope_id, command.key)
        if slot is not None and slot.held_at(now_ms):
            return Outcome(empty=True)
        return Outcome(reply=self._slots.view(slot, now_ms))

    def renew(self, command: RenewOnce, now_ms: int) -> Outcome:
        slot = self._slots.current(command.scope_id, command.key, command.token, now_ms)
        lease_ms, expires_ms = renewal(slot, None if command.lease_s is None else command.lease_s * 1000, now_ms)
        outcome = self._commit(Outcome(), _renewed_record(slot, lease_ms, expires_ms, now_ms))
        outcome.timers.append(self._lease_timer(slot.scope_id, slot.key, command.token, slot.expires_ms))
        outcome.reply = OnceRenewedView(HELD, slot.expires_ms, lease_ms)
        return outcome

    def complete(self, command: CompleteOnce, now_ms: int) -> Outcome:
        slot = self._slots.current(command.scope_id, command.key, command.token, now_ms)
        self.check_bytes(value_bytes(command.result), 0)
        record = {"type": ONCE_COMPLETED, "scope_id": slot.scope_id, "key": slot.key, "result": command.result, "at_ms": now_ms}
        outcome = self._commit(Outcome(), record)
        outcome.reply = self._slots.view(slot, now_ms)
        return outcome

    def fail(self, command: FailOnce, now_ms: int) -> Outcome:
        """Give the attempt back: OPEN again, or FAILED once `maxAttempts` attempts were used."""
        slot = self._slots.current(command.scope_id, command.key, command.token, now_ms)
        assert 0 <= slot.released < slot.attempts, "the holder's own acquisition is not a released one"
        failed = slot.attempts - slot.released >= command.max_attempts
        record = {
            "type": ONCE_FAILED, "scope_id": slot.scope_id, "key": slot.key, "error": command.error or "",
            "failed": failed, "at_ms": now_ms,
        }
        outcome = self._commit(Outcome(), record)
        outcome.reply = self._slots.view(slot, now_ms)
        return outcome

    def release(self, command: ReleaseOnce, now_ms: int) -> Outcome:
        """Give the key back unused: OPEN again, and this acquisition not counted as an attempt (a
        holder cancelled before it began must not use up another caller's attempts)."""
        slot = self._slots.current(command.scope_id, command.key, command.token, now_ms)
        record = {"type": ONCE_RELEASED, "scope_id": slot.scope_id, "key": slot.key, "at_ms": now_ms}
        outcome = self._commit(Outcome(), record)
        assert slot.state == OPEN and slot.token is None, "a released key is open, its lease ended"
        outcome.reply = self._slots.view(slot, now_ms)
        return outcome

    def expire(self, ident: tuple[str, str], token: str, now_ms: int) -> Outcome:
        """The supervisor's proposal: the lease of `token` ran out; open the slot if still so."""
        scope_id, key = ident
        slot = self._slots.find(scope_id, key)
        if slot is None or slot.state != HELD or slot.token != token or now_ms < slot.expires_ms:
            return Outcome()
        return self._commit(Outcome(), self._expired(scope_id, key, now_ms))

    @staticmethod
    def _expired(scope_id: str, key: str, now_ms: int) -> Record:
        return {"type": ONCE_EXPIRED, "scope_id": scope_id, "key": key, "at_ms": now_ms}

    def _lease_timer(self, scope_id: str, key: str, token: str, expires_ms: int) -> Timer:
        return Timer(expires_ms, once_actor(self._space_id, scope_id, key), (LEASE_TIMER, (scope_id, key)), token)

    def timers(self) -> Iterator[Timer]:
        for slot in self._slots.all():
            yield from self.timers_of(slot)

    def timers_of(self, slot: Slot) -> Iterator[Timer]:
        """The lease timer of a held slot (none once it is settled or open)."""
        if slot.state == HELD:
            assert slot.token is not None and slot.expires_ms is not None, "a held slot has its lease"
            yield self._lease_timer(slot.scope_id, slot.key, slot.token, slot.expires_ms)


def _renewed_record(slot: Slot, lease_ms: int, expires_ms: int, now_ms: int) -> Record:
    return {
        "type": ONCE_RENEWED, "scope_id": slot.scope_id, "key": slot.key, "token": slot.token,
        "lease_ms": lease_ms, "expires_ms": expires_ms, "at_ms": now_ms,
    }


def _make(space: Space) -> None:
    space.once = OnceTable()
    space.onces = OnceCommands(space.id, space.scopes, space.once, space.commit)
    space.onces.check_bytes = space.check_bytes


_ON = "onces"

ONCE = Primitive(
    "once",
    make=_make,
    state=("once",),
    parts=("onces",),
    commands={
        AcquireOnce: (_ON, OnceCommands.acquire),
        WaitOnce: (_ON, OnceCommands.wait),
        RenewOnce: (_ON, OnceCommands.renew),
        CompleteOnce: (_ON, OnceCommands.complete),
        FailOnce: (_ON, OnceCommands.fail),
        ReleaseOnce: (_ON, OnceCommands.release),
    },
    records={
        ONCE_ACQUIRED: ("scope_id", "key", "token", "holder", "session", "lease_ms", "expires_ms", "attempts", "at_ms"),
        ONCE_RENEWED: ("scope_id", "key", "token", "lease_ms", "expires_ms", "at_ms", "graced?"),
        ONCE_COMPLETED: ("scope_id", "key", "result", "at_ms"),
        ONCE_FAILED: ("scope_id", "key", "error", "failed", "at_ms"),
        ONCE_RELEASED: ("scope_id", "key", "at_ms"),
        ONCE_EXPIRED: ("scope_id", "key", "at_ms"),
        ONCE_IMAGE: (
            "scope_id", "key", "state", "attempts", "token", "holder", "session", "lease_ms", "expires_ms", "result",
            "last_error", "at_ms", "graced?", "released?",
        ),
    },
    apply={
        ONCE_ACQUIRED: ("once", "apply_acquired"),
        ONCE_RENEWED: ("once", "apply_renewed"),
        ONCE_COMPLETED: ("once", "apply_completed"),
        ONCE_FAILED: ("once", "apply_failed"),
        ONCE_RELEASED: ("once", "apply_released"),
        ONCE_EXPIRED: ("once", "apply_expired"),
        ONCE_IMAGE: ("once", "apply_image"),
    },
    usage={
        ONCE_ACQUIRED: operation("once.acquire"),
        ONCE_COMPLETED: operation("once.complete"),
        ONCE_FAILED: operation("once.fail"),
        ONCE_RENEWED: free("once.renew"),
        ONCE_RELEASED: free("once.release"),
        ONCE_EXPIRED: event("once.expire"),
        ONCE_IMAGE: NOT_COUNTED,
    },
    timers={LEASE_TIMER: (_ON, OnceCommands.expire)},
    leases=lambda space: LeaseKind(
        ONCE_LEASE, lambda: [slot for slot in space.once.all() if slot.state == HELD],
        lambda slot, now_ms: OnceCommands._expired(slot.scope_id, slot.key, now_ms), _renewed_record, space.commit,
        space.onces.timers_of,
    ),
    deadlines=lambda space: space.onces.timers(),
    image=lambda space: space.once.image(),
    is_empty=lambda space: not len(space.once),
    values_bytes=lambda space: space.once.result_bytes,
    scopes_removed=lambda space, scope_ids: space.once.drop_scopes(scope_ids),
)
