"""Durable timers of a scope: ARMED -> FIRED -> ACKED, or CANCELLED, or EXPIRED.

A timer is armed for a wall time (`afterSeconds` from now, or `at`). The supervisor proposes its
firing at that time; the turn checks again that it is armed and due, so a timer never fires early
and fires once. Its time is wall time in the journal, so a timer whose time passed while the server
was down fires as soon as the state is back (`timers()` re-arms every armed timer after recovery,
and the supervisor fires the overdue ones at once).

A fired timer waits to be acknowledged with its token. `/timers/poll` lists every fired, unacked
timer of a scope with its token: a listing, harmless to repeat, never an exclusive hand-out, since
several handles in one scope poll for different timers. The token is drawn when the timer is
created and shown only once it has fired. An ack with another token is 409 `STALE_CLAIM`; acking
again with the right one is harmless. A fired timer nobody acknowledges becomes EXPIRED after
`timer_fired_ttl_s`, so the listing stays short. Cancelling (or the end of its scope) makes it
CANCELLED, and it is never listed.

A timer may have a name, unique in its scope (`PUT /timers/by-name/{name}`, what the 0.3.0
client's `sleep(name, ...)` uses). The name is kept for the timer's whole life: a put of a name
that exists answers that timer as it is, whatever its state and whatever the body says, so a
process that restarts and sleeps again under the same name only waits for what is left, and one
that slept to the end (ACKED or EXPIRED) does not sleep again in that scope. The timers'
declaration (`TIMERS`) is at the end.

Timers of the supervisor (tags on the timer's scope actor, `("timers", space, scope_id)`):
    ("timer-fire", timer_id)     -   fire if still armed and due
    ("timer-expiry", timer_id)   -   EXPIRED if fired and never acked

Pure: no IO, no clock reads; every method takes `now_ms`.
"""

from __future__ import annotations

from typing import Any, Callable, Final, Iterator, Literal, NamedTuple

from .actor_keys import ActorKey, timers_actor
from .caps import full
from .errors import CONFLICT, NOT_FOUND, SCOPE_CANCELLED, STALE_CLAIM, VALIDATION_FAILED, KernelError
from .events import Change, entity_event
from .fields import INTEGER, TIMESTAMP, body, check_text, drawn, path
from .limits import Limits
from .outcome import Outcome, Timer, Space, State, TimerMarker
from .primitive import NOT_COUNTED, Command, Primitive, command, event, operation, record_type, timer_kind
from .scopes import ACTIVE, SCOPE_ENDED, ScopeTree
from .coordination import CoordinationCommands
from .shapes import EpochMs, Record

__all__ = [
    "ScopeTimer", "TimerTable", "TimerState", "TimerView", "FiredTimerView", "NamedTimerView", "TimerPollView",
    "TimerPollOneView", "TIMERS", "CreateTimer", "EnsureTimer", "PollTimers", "AckTimer", "CancelTimer",
    "ARMED", "FIRED", "ACKED", "CANCELLED", "EXPIRED", "TIMER_ACKED",
    "TIMER_CANCELLED", "TIMER_CREATED", "TIMER_EXPIRED", "TIMER_FIRED", "TIMER_IMAGE",
]

# The record types this module decides and applies (the journal's spelling of each).
TIMER_ACKED = record_type("timer.acked")
TIMER_CANCELLED = record_type("timer.cancelled")
TIMER_CREATED = record_type("timer.created")
TIMER_EXPIRED = record_type("timer.expired")
TIMER_FIRED = record_type("timer.fired")
TIMER_IMAGE = record_type("timer.image")

TimerState = Literal["ARMED", "FIRED", "ACKED", "CANCELLED", "EXPIRED"]
ARMED: Final = "ARMED"
FIRED: Final = "FIRED"
ACKED: Final = "ACKED"
CANCELLED: Final = "CANCELLED"
EXPIRED: Final = "EXPIRED"
ENDED = frozenset({ACKED, CANCELLED, EXPIRED})

FIRE_TIMER = timer_kind("timer-fire")
EXPIRY_TIMER = timer_kind("timer-expiry")

class TimerView(NamedTuple):
    """A timer as creating, acknowledging, cancelling and reading it answer."""

    id: str
    scope_id: str
    name: str | None
    state: TimerState
    fire_ms: EpochMs
    fired_ms: EpochMs | None
    created_ms: EpochMs
    ended_ms: EpochMs | None


class FiredTimerView(NamedTuple):
    """A poll's entry: a fired timer (TimerView's fields first) with the token that acknowledges it."""

    id: str
    scope_id: str
    name: str | None
    state: TimerState
    fire_ms: EpochMs
    fired_ms: EpochMs | None
    created_ms: EpochMs
    ended_ms: EpochMs | None
    token: str


class NamedTimerView(NamedTuple):
    """A put by name's answer: the timer (TimerView's fields first), the server's clock (the client
    sleeps until the fire time by it, not by its own clock), and the token once the timer has fired
    (to acknowledge it), else None."""

    id: str
    scope_id: str
    name: str | None
    state: TimerState
    fire_ms: EpochMs
    fired_ms: EpochMs | None
    created_ms: EpochMs
    ended_ms: EpochMs | None
    now_ms: EpochMs
    token: str | None


class TimerPollView(NamedTuple):
    """A poll's answer: the scope's fired, unacknowledged timers, newest first."""

    scope_id: str
    timers: tuple[FiredTimerView, ...]


class TimerPollOneView(NamedTuple):
    """A poll of one timer (`timerId`): the timer as it stands too, and no entry once it ended."""

    scope_id: str
    timer: TimerView
    timers: tuple[FiredTimerView, ...]


class ScopeTimer:
    """One timer (named so as not to be confused with `outcome.Timer`, a supervisor deadline)."""

    __slots__ = ("id", "scope_id", "fire_ms", "token", "state", "created_ms", "fired_ms", "ended_ms", "name")

    def __init__(self, timer_id: str, scope_id: str, fire_ms: int, token: str, created_ms: int, name: str | None = None) -> None:
        self.id = timer_id
        self.name = name
        self.scope_id = scope_id
        self.fire_ms = fire_ms
        self.token = token
        self.state: TimerState = ARMED
        self.created_ms = created_ms
        self.fired_ms: int | None = None
        self.ended_ms: int | None = None


class TimerTable:
    """The timers of one space, by id and by scope."""

    __slots__ = ("_by_id", "_by_scope", "_by_name", "_limits", "_scopes")
    # (`_scopes` is the space's own table, compared there: `snapshots.equality`.)
    _DERIVED = ("_scopes",)

    def __init__(self, limits: Limits, scopes: ScopeTree) -> None:
        self._by_id: dict[str, ScopeTimer] = {}
        # The timers of each scope that are not ended (armed or fired), in creation order.
        self._by_scope: dict[str, dict[str, None]] = {}
        # Named timers, whatever their state: (scope_id, name) -> timer id.
        self._by_name: dict[tuple[str, str], str] = {}
        self._limits = limits
        self._scopes = scopes

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, timer_id: str) -> ScopeTimer:
        timer = self._by_id.get(timer_id)
        if timer is None:
            raise KernelError(NOT_FOUND, f"timer {timer_id!r} not found")
        return timer

    def find(self, timer_id: str) -> ScopeTimer | None:
        return self._by_id.get(timer_id)

    def by_name(self, scope_id: str, name: str) -> ScopeTimer | None:
        timer_id = self._by_name.get((scope_id, name))
        return None if timer_id is None else self._by_id[timer_id]

    def all(self) -> Iterator[ScopeTimer]:
        return iter(self._by_id.values())

    def live(self) -> Iterator[ScopeTimer]:
        """Armed and fired timers (the ones that still need a supervisor deadline)."""
        for ids in self._by_scope.values():
            for timer_id in ids:
                yield self._by_id[timer_id]

    def fired_in(self, scope_id: str) -> list[ScopeTimer]:
        """Fired, unacked timers of a scope, newest first."""
        timers = [self._by_id[timer_id] for timer_id in self._by_scope.get(scope_id, ())]
        fired = [timer for timer in timers if timer.state == FIRED]
        fired.sort(key=lambda timer: (timer.fired_ms, timer.id), reverse=True)
        return fired

    def expiry_ms(self, timer: ScopeTimer) -> int:
        assert timer.fired_ms is not None
        return timer.fired_ms + self._limits.timer_fired_ttl_s * 1000

    def view(self, timer: ScopeTimer) -> TimerView:
        assert timer.state != FIRED or timer.fired_ms is not None, "a fired timer has its firing time"
        return TimerView(
            timer.id, timer.scope_id, timer.name, timer.state, timer.fire_ms, timer.fired_ms, timer.created_ms, timer.ended_ms
        )

    def fired_view(self, timer: ScopeTimer) -> FiredTimerView:
        """A poll entry: the view with the token that acknowledges it."""
        assert timer.state == FIRED, "a poll lists fired timers only"
        return FiredTimerView(*self.view(timer), timer.token)

    # -- deciding -------------------------------------------------------------------------------

    def named_view(self, timer: ScopeTimer, now_ms: int) -> NamedTimerView:
        """A put by name's answer (`NamedTimerView`)."""
        return NamedTimerView(*self.view(timer), now_ms, timer.token if timer.state == FIRED else None)

    def decide_create(
        self, timer_id: str, scope_id: str, fire_ms: int, token: str, now_ms: int, name: str | None = None
    ) -> Record:
        self._scopes.require_active(scope_id, now_ms)
        if name is not None and (scope_id, name) in self._by_name:
            raise KernelError(CONFLICT, f"scope {scope_id} already has a timer named {name!r}")
        live = self._by_scope.get(scope_id, ())
        if len(live) >= self._limits.timers_per_scope_max:
            raise full(f"scope {scope_id} holds {len(live)} armed or fired timers", "timers_per_scope_max")
        if timer_id in self._by_id:  # an id source collision: the caller draws another id
            raise KernelError(CONFLICT, f"timer id {timer_id} is taken")
        assert token, "a timer is acknowledged with a token drawn when it is created"
        record = {"type": TIMER_CREATED, "id": timer_id, "scope_id": scope_id, "fire_ms": fire_ms, "token": token, "at_ms": now_ms}
        if name is not None:
            record["name"] = name
        return record

    def decide_fire(self, timer: ScopeTimer, now_ms: int) -> Record | None:
        """The firing the supervisor proposed, if the timer is still armed and due."""
        if timer.state != ARMED or now_ms < timer.fire_ms:
            return None
        assert timer.fired_ms is None, "a timer fires once, never early"
        return {"type": TIMER_FIRED, "id": timer.id, "at_ms": now_ms}

    def decide_expire(self, timer: ScopeTimer, now_ms: int) -> Record | None:
        if timer.state != FIRED or now_ms < self.expiry_ms(timer):
            return None
        assert timer.fired_ms is not None and timer.fired_ms <= now_ms, "a timer expires after it fired"
        return {"type": TIMER_EXPIRED, "id": timer.id, "at_ms": now_ms}

    def decide_ack(self, timer: ScopeTimer, token: str, now_ms: int) -> Record | None:
        """ACKED with the token it fired with; again with it, harmless; another token, STALE_CLAIM."""
        if token != timer.token:
            raise KernelError(STALE_CLAIM, f"token is not the one timer {timer.id} fired with")
        if timer.state == ACKED:
            return None
        if timer.state != FIRED:
            raise KernelError(CONFLICT, f"timer {timer.id} is {timer.state.lower()}, not fired")
        assert timer.fired_ms is not None, "only a fired timer is acknowledged"
        return {"type": TIMER_ACKED, "id": timer.id, "at_ms": now_ms}

    def decide_cancel(self, timer: ScopeTimer, now_ms: int) -> Record | None:
        """CANCELLED if armed or fired; a timer already ended stays as it is (a harmless repeat)."""
        if timer.state in ENDED:
            return None
        assert timer.state in (ARMED, FIRED), f"no timer state {timer.state!r}"
        return {"type": TIMER_CANCELLED, "id": timer.id, "at_ms": now_ms}

    # -- applying -------------------------------------------------------------------------------

    def apply_created(self, record: Record) -> ScopeTimer:
        timer = ScopeTimer(
            record["id"], record["scope_id"], record["fire_ms"], record["token"], record["at_ms"], record.get("name")
        )
        self._by_id[timer.id] = timer
        if timer.name is not None:
            assert (timer.scope_id, timer.name) not in self._by_name, f"two timers named {timer.name!r}"
            self._by_name[(timer.scope_id, timer.name)] = timer.id
        self._by_scope.setdefault(timer.scope_id, {})[timer.id] = None
        return timer

    def apply_fired(self, record: Record) -> ScopeTimer:
        timer = self._by_id[record["id"]]
        assert timer.state == ARMED, f"timer {timer.id} fired twice"
        assert record["at_ms"] >= timer.fire_ms, f"timer {timer.id} fired before its time"
        timer.state = FIRED
        timer.fired_ms = record["at_ms"]
        return timer

    def apply_ended(self, record: Record, state: TimerState) -> ScopeTimer:
        timer = self._by_id[record["id"]]
        assert timer.state not in ENDED, f"timer {timer.id} ended twice"
        self._end(timer, state, record["at_ms"])
        return timer

    def _end(self, timer: ScopeTimer, state: TimerState, at_ms: int | None) -> None:
        timer.state = state
        timer.ended_ms = at_ms
        live = self._by_scope.get(timer.scope_id)
        if live is not None:
            live.pop(timer.id, None)
            if not live:
                del self._by_scope[timer.scope_id]

    def cancel_in_scopes(self, scope_ids: list[str], at_ms: int) -> list[ScopeTimer]:
        """Applied with a scope's end: its armed and fired timers (and its subtree's) are CANCELLED."""
        cancelled = []
        for scope_id in scope_ids:
            for timer_id in list(self._by_scope.get(scope_id, ())):
                timer = self._by_id[timer_id]
                self._end(timer, CANCELLED, at_ms)
                cancelled.append(timer)
        return cancelled

    # -- images ---------------------------------------------------------------------------------

    def drop_scopes(self, scope_ids: frozenset[str]) -> None:
        """Ended runs removed (`runs.py`): their timers, all ended, leave with them."""
        for timer in [timer for timer in self._by_id.values() if timer.scope_id in scope_ids]:
            assert timer.scope_id not in self._by_scope, f"timer {timer.id} of a removed run is not ended"
            del self._by_id[timer.id]
            if timer.name is not None:
                del self._by_name[(timer.scope_id, timer.name)]

    def image(self) -> Iterator[Record]:
        for timer in self._by_id.values():
            yield {
                "type": TIMER_IMAGE,
                "id": timer.id,
                "scope_id": timer.scope_id,
                "fire_ms": timer.fire_ms,
                "token": timer.token,
                "state": timer.state,
                "fired_ms": timer.fired_ms,
                "ended_ms": timer.ended_ms,
                "at_ms": timer.created_ms,
                "name": timer.name,
            }

    def apply_image(self, record: Record) -> ScopeTimer:
        timer = self.apply_created(record)
        timer.fired_ms = record["fired_ms"]
        if record["state"] in ENDED:
            self._end(timer, record["state"], record["ended_ms"])
        else:
            timer.state = record["state"]
        return timer


# -- commands ----------------------------------------------------------------------------------


@command
class CreateTimer(Command):
    """Arm a timer `afterSeconds` from now or `at` a time (exactly one of the two)."""

    space: str = path("space")
    scope_id: str = body("scopeId")
    after_s: int | None = body("afterSeconds", INTEGER, required=False, minimum=0, maximum="timer_after_s_max")
    at_ms: int | None = body("at", TIMESTAMP, required=False)
    timer_id: str = drawn("tm_")
    token: str = drawn("token")

    def actor(self, state: State) -> ActorKey:
        return timers_actor(self.space, self.scope_id)

    def check(self, limits: Limits) -> None:
        if (self.after_s is None) == (self.at_ms is None):
            raise KernelError(VALIDATION_FAILED, "give exactly one of 'afterSeconds' and 'at'")


@command
class EnsureTimer(Command):
    """The timer of this name in the scope, armed `afterSeconds` from now or `at` a time when it
    does not exist yet (exactly one of the two, asked only then); one that exists is answered as
    it is, whatever the body says (`{scopeId}` alone looks it up)."""

    space: str = path("space")
    name: str = path("name")
    scope_id: str = body("scopeId")
    after_s: int | None = body("afterSeconds", INTEGER, required=False, minimum=0, maximum="timer_after_s_max")
    at_ms: int | None = body("at", TIMESTAMP, required=False)
    timer_id: str = drawn("tm_")
    token: str = drawn("token")

    def actor(self, state: State) -> ActorKey:
        return timers_actor(self.space, self.scope_id)

    def check(self, limits: Limits) -> None:
        check_text("name", self.name, limits.name_len_max)


@command
class PollTimers(Command):
    """List the fired, unacked timers of a scope with their tokens (harmless to repeat)."""

    space: str = path("space")
    scope_id: str = body("scopeId")
    timer_id: str | None = body("timerId", required=False, description="only this timer, one of the scope's (an extension of this server)")
    wait_ms: int | None = body("waitMs", INTEGER, required=False, minimum=0, description="hold an empty listing up to this long, capped at {wait_ms_max}")

    def actor(self, state: State) -> ActorKey:
        return timers_actor(self.space, self.scope_id)


def _timer_actor_of(state: State, space: str, timer_id: str) -> ActorKey:
    return timers_actor(space, state.space(space).coordination.timers.get(timer_id).scope_id)


@command
class AckTimer(Command):
    space: str = path("space")
    timer_id: str = path("timer_id")
    token: str = body("token")

    def actor(self, state: State) -> ActorKey:
        return _timer_actor_of(state, self.space, self.timer_id)


@command
class CancelTimer(Command):
    space: str = path("space")
    timer_id: str = path("timer_id")

    def actor(self, state: State) -> ActorKey:
        return _timer_actor_of(state, self.space, self.timer_id)


# -- transitions (of the coordination part) --------------------------------------------------------


def create(part: CoordinationCommands, command: CreateTimer | EnsureTimer, now_ms: int, name: str | None = None) -> Outcome:
    timers: TimerTable = part.timers
    fire_ms = command.at_ms if command.at_ms is not None else now_ms + (command.after_s or 0) * 1000
    if fire_ms - now_ms > part.limits.timer_after_s_max * 1000:
        raise KernelError(VALIDATION_FAILED, f"a timer fires at most {part.limits.timer_after_s_max} seconds from now")
    record = timers.decide_create(command.timer_id, command.scope_id, fire_ms, command.token, now_ms, name)
    outcome = part.commit(Outcome(), record)
    timer = timers.get(command.timer_id)
    outcome.timers.extend(_timer_timers(part.id, timers, timer))
    outcome.reply = timers.view(timer)
    return outcome


def ensure(part: CoordinationCommands, command: EnsureTimer, now_ms: int) -> Outcome:
    """The scope's timer of this name as it is (the body is not compared), armed if missing."""
    timers: TimerTable = part.timers
    timer = timers.by_name(command.scope_id, command.name)
    if timer is not None:
        return Outcome(reply=timers.named_view(timer, now_ms))
    if (command.after_s is None) == (command.at_ms is None):  # (asked only of a timer to arm)
        raise KernelError(VALIDATION_FAILED, f"give exactly one of 'afterSeconds' and 'at' to arm timer {command.name!r}")
    outcome = create(part, command, now_ms, command.name)
    outcome.reply = timers.named_view(timers.get(command.timer_id), now_ms)
    return outcome


def poll(part: CoordinationCommands, command: PollTimers, now_ms: int) -> Outcome:
    """Every fired, unacked timer of the scope, with its token (a listing, harmless to repeat).

    With `timerId`, only that one, and the answer says its state when it has ended (so a caller
    waiting for a cancelled timer stops); it must be a timer of the scope (NOT_FOUND otherwise:
    its firing would not wake a poll held here). With `waitMs`, an empty listing waits for a firing
    in this scope (the timers fire on this actor).
    """
    timers: TimerTable = part.timers
    scope = part.scopes.get(command.scope_id)
    fired = timers.fired_in(command.scope_id)
    one: TimerView | None = None
    if command.timer_id is not None:
        timer = timers.get(command.timer_id)
        if timer.scope_id != command.scope_id:
            raise KernelError(
                NOT_FOUND, f"timer {command.timer_id!r} is not a timer of scope {command.scope_id!r} (it is of {timer.scope_id!r})"
            )
        fired = [timer] if timer.state == FIRED else []
        one = timers.view(timer)
        if timer.state not in (ARMED, FIRED):
            return Outcome(reply=TimerPollOneView(command.scope_id, one, ()))
    if not fired:
        if part.scopes.effective(scope, now_ms) != ACTIVE:
            raise KernelError(SCOPE_CANCELLED, f"scope {command.scope_id} is {part.scopes.effective(scope, now_ms).lower()}")
        if command.wait_ms:
            return Outcome(empty=True)
    listed = tuple(timers.fired_view(timer) for timer in fired[: part.limits.timers_listed_max])
    if one is None:
        return Outcome(reply=TimerPollView(command.scope_id, listed))
    return Outcome(reply=TimerPollOneView(command.scope_id, one, listed))


def ack(part: CoordinationCommands, command: AckTimer, now_ms: int) -> Outcome:
    timers: TimerTable = part.timers
    timer = timers.get(command.timer_id)
    record = timers.decide_ack(timer, command.token, now_ms)
    outcome = Outcome() if record is None else part.commit(Outcome(), record)
    outcome.reply = timers.view(timer)
    return outcome


def cancel(part: CoordinationCommands, command: CancelTimer, now_ms: int) -> Outcome:
    timers: TimerTable = part.timers
    timer = timers.get(command.timer_id)
    record = timers.decide_cancel(timer, now_ms)
    outcome = Outcome() if record is None else part.commit(Outcome(), record)
    outcome.reply = timers.view(timer)
    return outcome


def on_fire(part: CoordinationCommands, timer_id: str, _: TimerMarker, now_ms: int) -> Outcome:
    timers: TimerTable = part.timers
    timer = timers.find(timer_id)
    record = None if timer is None else timers.decide_fire(timer, now_ms)
    if record is None:
        return Outcome()
    assert timer is not None
    outcome = part.commit(Outcome(), record)
    outcome.timers.extend(_timer_timers(part.id, timers, timer))
    return outcome


def on_expiry(part: CoordinationCommands, timer_id: str, _: TimerMarker, now_ms: int) -> Outcome:
    timers: TimerTable = part.timers
    timer = timers.find(timer_id)
    record = None if timer is None else timers.decide_expire(timer, now_ms)
    return Outcome() if record is None else part.commit(Outcome(), record)


def _timer_timers(space_id: str, timers: TimerTable, timer: ScopeTimer) -> Iterator[Timer]:
    actor = timers_actor(space_id, timer.scope_id)
    if timer.state == ARMED:
        yield Timer(timer.fire_ms, actor, (FIRE_TIMER, timer.id), None)
    elif timer.state == FIRED:
        yield Timer(timers.expiry_ms(timer), actor, (EXPIRY_TIMER, timer.id), None)


def _deadlines(space: Space) -> Iterator[Timer]:
    timers: TimerTable = space.coordination.timers
    for timer in timers.live():
        yield from _timer_timers(space.id, timers, timer)


def _after_scope_ended(space: Space, record: Record) -> list[Change]:
    """A scope's end cancels the armed or fired timers of its subtree."""
    subtree = space.scopes.subtree(record["id"])
    cancelled = space.coordination.timers.cancel_in_scopes(subtree, record["at_ms"])
    return [("timer.cancelled", timer.scope_id, "timer", timer.id, {"state": timer.state}) for timer in cancelled]


def _scope_ending(space: Space, subtree: list[str]) -> Callable[[Outcome, int], None]:
    """A poll parked on a timer actor of the subtree hears that the scope ended."""
    actors = [timers_actor(space.id, scope_id) for scope_id in subtree]
    return lambda outcome, at_ms: outcome.pokes.extend(actors)


def _find(space: Space, timer_id: str) -> ScopeTimer | None:
    return space.coordination.timers.find(timer_id)


def _make(space: Space) -> None:
    space.coordination.timers = TimerTable(space.limits, space.scopes)


_ON = "coordination"
_TABLE = "coordination.timers"

TIMERS = Primitive(
    "timers",
    make=_make,
    commands={
        CreateTimer: (_ON, create),
        EnsureTimer: (_ON, ensure),
        PollTimers: (_ON, poll),
        AckTimer: (_ON, ack),
        CancelTimer: (_ON, cancel),
    },
    records={
        # `name` only on a named timer (`PUT /timers/by-name/{name}`).
        TIMER_CREATED: ("id", "scope_id", "fire_ms", "token", "at_ms", "name?"),
        TIMER_FIRED: ("id", "at_ms"),
        TIMER_ACKED: ("id", "at_ms"),
        TIMER_CANCELLED: ("id", "at_ms"),
        TIMER_EXPIRED: ("id", "at_ms"),
        TIMER_IMAGE: ("id", "scope_id", "fire_ms", "token", "state", "fired_ms", "ended_ms", "at_ms", "name?"),
    },
    apply={
        TIMER_CREATED: (_TABLE, "apply_created"),
        TIMER_FIRED: (_TABLE, "apply_fired"),
        TIMER_ACKED: (_TABLE, lambda timers, record: timers.apply_ended(record, ACKED)),
        TIMER_CANCELLED: (_TABLE, lambda timers, record: timers.apply_ended(record, CANCELLED)),
        TIMER_EXPIRED: (_TABLE, lambda timers, record: timers.apply_ended(record, EXPIRED)),
        TIMER_IMAGE: (_TABLE, "apply_image"),
    },
    usage={
        TIMER_CREATED: operation("timers.create"),
        TIMER_ACKED: operation("timers.ack"),
        TIMER_CANCELLED: operation("timers.cancel"),
        TIMER_FIRED: event("timers.fire"),
        TIMER_EXPIRED: event("timers.expire"),
        TIMER_IMAGE: NOT_COUNTED,
    },
    timers={FIRE_TIMER: (_ON, on_fire), EXPIRY_TIMER: (_ON, on_expiry)},
    derive={
        TIMER_CREATED: entity_event("timer.created", "timer", _find, "fire_ms", "name"),
        TIMER_FIRED: entity_event("timer.fired", "timer", _find),
        TIMER_ACKED: entity_event("timer.acked", "timer", _find),
        TIMER_CANCELLED: entity_event("timer.cancelled", "timer", _find),
        TIMER_EXPIRED: entity_event("timer.expired", "timer", _find),
    },
    after={SCOPE_ENDED: _after_scope_ended},
    events={"timer.created": None, "timer.fired": None, "timer.acked": None, "timer.cancelled": None, "timer.expired": None},
    deadlines=_deadlines,
    image=lambda space: space.coordination.timers.image(),
    is_empty=lambda space: not len(space.coordination.timers),
    scope_ending=_scope_ending,
    scopes_removed=lambda space, scope_ids: space.coordination.timers.drop_scopes(scope_ids),
)
