"""Claims inside a space, declared: acquire, renew, release, force, and the expiry of a lease that ran out.

`ClaimCommands` is one part of a `SpaceState`: it is given the tables it uses (the scope tree, to
refuse a claim in an ended scope, and the claim table), the boot facts (the generation floor) and
the space's `commit`, and nothing else. Each method is a pure transition: a command and `now_ms`
in, an `Outcome` out, its records already applied through `commit`. The table and its records
are `claims.py`; the claims' declaration (`CLAIMS`) is at the end of this module.

Timers (tag on the claim's actor, each proposing a change the turn checks again):
    ("claim-lease", None)   marker token   the lease ran out: record the expiry if still due

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from .actor_keys import ActorKey, claim_actor
from .boot import BootInfo
from .caps import value_bytes
from .claims import (
    CLAIM_ACQUIRED, CLAIM_EXPIRED, CLAIM_FORCE_RELEASED, CLAIM_IMAGE, CLAIM_RELEASED, CLAIM_RENEWED, Claim, ClaimTable,
)
from .errors import STALE_CLAIM, KernelError
from .fields import INTEGER, JSON, body, caller, drawn, path
from .leases import LeaseKind
from .outcome import Outcome, Timer, Space, State
from .primitive import NOT_COUNTED, Command, Primitive, command, event, free, lease_field, operation, reason_field, timer_kind
from .scopes import ScopeTree
from .shapes import Record

__all__ = [
    "ClaimCommands", "LEASE_TIMER", "CLAIMS", "AcquireClaim", "RenewClaim", "ReleaseClaim", "ForceReleaseClaim",
    "OBSERVATION_EVENT_BYTES_MAX", "observed",
]

LEASE_TIMER = timer_kind("claim-lease")
CLAIM_LEASE = "claim"  # the kind of lease a claim is held under, in the lease table
# A lease timer's tag: the same for every claim, since its actor already names the claim (space,
# scope and key), so a held claim keeps no tag of its own in the supervisor.
_LEASE_TAG = (LEASE_TIMER, None)

Commit = Callable[..., Outcome]


# -- commands ----------------------------------------------------------------------------------


@command
class AcquireClaim(Command):
    """With `waitMs` (our extension), a held claim parks the request until the claim is free (in
    arrival order) or the wait ends, then CLAIM_HELD; without it, CLAIM_HELD at once."""

    space: str = path("space")
    scope_id: str = body("scopeId")
    key: str = body("key", length_max="claim_key_len_max")
    holder: str = body("holder", length_max="holder_len_max")
    session: str = body("holderSession", length_max="holder_len_max")
    lease_s: int = lease_field(default="lease_s_default")
    wait_ms: int | None = body(
        "waitMs", INTEGER, required=False, minimum=0, description="wait for a held claim, capped at {wait_ms_max}"
    )
    token: str = drawn("token")

    def actor(self, state: State) -> ActorKey:
        return claim_actor(self.space, self.scope_id, self.key)

    def wait_key(self) -> Any:
        return ("claim", self.scope_id, self.key)  # a parked acquire waits for the key to be free


def _claim_actor_of(state: State, space: str, key: str, token: str) -> ActorKey:
    """The actor of the claim `token` names; the turn checks again that it is still current."""
    claim = state.space(space).claims.by_token(token)
    if claim is None or claim.key != key:
        raise KernelError(STALE_CLAIM, f"token is not the current one for claim {key!r}")
    return claim_actor(space, claim.scope_id, key)


@command
class RenewClaim(Command):
    """Renew by token: the token names the claim, and the key in the path must match."""

    space: str = path("space")
    key: str = path("key")
    token: str = body("token")
    lease_s: int | None = lease_field()

    def actor(self, state: State) -> ActorKey:
        return _claim_actor_of(state, self.space, self.key, self.token)


@command
class ReleaseClaim(Command):
    space: str = path("space")
    key: str = path("key")
    token: str = body("token")
    observation: Any = body("observation", JSON, required=False)

    def actor(self, state: State) -> ActorKey:
        return _claim_actor_of(state, self.space, self.key, self.token)


@command
class ForceReleaseClaim(Command):
    """An operator's release of a held claim, without its token (a holder that hangs, a stuck run):
    the key is free at once, the holder's token is refused from then on (STALE_CLAIM), and the
    next holder gets the next generation. The claim is named by run and key, as an acquire names it."""

    space: str = path("space")
    key: str = path("key")
    scope_id: str = body("scopeId")
    reason: str | None = reason_field("reason")
    by: str | None = caller()

    def actor(self, state: State) -> ActorKey:
        return claim_actor(self.space, self.scope_id, self.key)


# -- the part ----------------------------------------------------------------------------------


class ClaimCommands:
    __slots__ = ("_space_id", "_scopes", "_claims", "_boot", "_commit", "held_max", "check_entities")

    def __init__(
        self, space_id: str, scopes: ScopeTree, claims: ClaimTable, boot: BootInfo, commit: Commit, held_max: int | None = None
    ) -> None:
        self.held_max = held_max  # `space_claims_max`
        self._space_id = space_id
        self._scopes = scopes
        self._claims = claims
        self._boot = boot
        self._commit = commit
        # The space's cap on the entities it keeps: a key not remembered yet is one more.
        self.check_entities: Callable[[int], None] = lambda adding: None

    def acquire(self, command: AcquireClaim, now_ms: int) -> Outcome:
        self._scopes.require_active(command.scope_id, now_ms)
        claims = self._claims
        known = claims.get(command.scope_id, command.key)  # looked up once for both checks
        if command.wait_ms and known is not None and known.held_at(now_ms):
            return Outcome(empty=True)  # park until the release or the expiry re-runs it
        if known is None:
            self.check_entities(1)
        records = claims.decide_acquire(
            command.scope_id,
            command.key,
            command.holder,
            command.session,
            command.lease_s * 1000,
            command.token,
            now_ms,
            self._boot.generation_floor,
            self.held_max,
        )
        outcome = self._commit(Outcome(), *records)
        claim = claims.get(command.scope_id, command.key)
        assert claim is not None and claim.token == command.token, "an acquire must leave its token current"
        outcome.timers.append(self.lease_timer(claim.scope_id, claim.key, claim.token, claim.expires_ms))
        outcome.reply = claims.view(claim)
        return outcome

    def renew(self, command: RenewClaim, now_ms: int) -> Outcome:
        lease_ms = None if command.lease_s is None else command.lease_s * 1000
        record = self._claims.decide_renew(command.key, command.token, lease_ms, now_ms)
        outcome = self._commit(Outcome(), record)
        claim = self._claims.by_token(command.token)
        assert claim is not None, "a renewed claim keeps its token"
        outcome.timers.append(self.lease_timer(claim.scope_id, claim.key, command.token, claim.expires_ms))
        outcome.reply = self._claims.view(claim)
        return outcome

    def release(self, command: ReleaseClaim, now_ms: int) -> Outcome:
        claims = self._claims
        claim = claims.current(command.key, command.token, now_ms)
        reply = claims.released_view(claim, now_ms)
        outcome = self._commit(Outcome(), claims.decide_release(command.key, command.token, command.observation, now_ms))
        outcome.reply = reply
        return outcome

    def force_release(self, command: ForceReleaseClaim, now_ms: int) -> Outcome:
        """An operator's release without the token: the claim's view as it was, token withheld.

        The scope may have ended (its claims are then gone: NOT_FOUND); the holder learns of it at
        its next renewal, which is STALE_CLAIM like any other stale token's.
        """
        self._scopes.get(command.scope_id)
        claims = self._claims
        record = claims.decide_force_release(command.scope_id, command.key, command.reason, command.by, now_ms)
        claim = claims.by_token(record["token"])
        assert claim is not None
        reply = claims.force_released_view(claim, now_ms, command.reason, command.by)
        outcome = self._commit(Outcome(), record)
        outcome.reply = reply
        return outcome

    def expire(self, _: Any, token: str, now_ms: int) -> Outcome:
        """The supervisor's proposal: record the expiry if the lease of `token` has run out."""
        record = self._claims.decide_expire(token, now_ms)
        return Outcome() if record is None else self._commit(Outcome(), record)

    def lease_timer(self, scope_id: str, key: str, token: str, expires_ms: int) -> Timer:
        return Timer(expires_ms, claim_actor(self._space_id, scope_id, key), _LEASE_TAG, token)

    def timers(self) -> Iterator[Timer]:
        for claim in self._claims.held():
            yield from self.timers_of(claim)

    def timers_of(self, claim: Claim) -> Iterator[Timer]:
        """The lease timer of a held claim (none once it is free)."""
        if claim.token is not None:
            yield self.lease_timer(claim.scope_id, claim.key, claim.token, claim.expires_ms)


# -- applying (of the space: a claim's event is made from what applying its record found) ---------

# The largest observation a `claim.released` event carries, in bytes of JSON. A release's
# observation is journaled whole (up to `payload_bytes_max`); its event, kept in memory with up to
# `events_kept_max` others, carries it only up to this size (10,000 events of 64 KiB each would be
# 640 MiB), and a larger one's event says its size in its place.
OBSERVATION_EVENT_BYTES_MAX = 4096


def observed(observation: Any) -> tuple[Any, int | None]:
    """What a `claim.released` event says of its release's observation: `(observation,
    observationBytes)`: the value and its size when it fits (`OBSERVATION_EVENT_BYTES_MAX`), only
    its size when it does not, (None, None) for a release that gave none."""
    if observation is None:
        return None, None
    try:
        size = value_bytes(observation)
    except TypeError:  # (not JSON: only a bug upstream makes one, and the journal refuses its record,
        return None, None  # whose repair rebuilds the state without it; applying a record never raises)
    return (observation if size <= OBSERVATION_EVENT_BYTES_MAX else None), size


def _apply_acquired(space: Space, record: Record) -> None:
    claims = space.claims
    takeovers = claims.takeovers
    claims.apply_acquired(record)
    kind = "claim.taken_over" if claims.takeovers != takeovers else "claim.acquired"
    space.events.add((kind, record["scope_id"], "claim", record["key"], (record["generation"], record["holder"])), record["at_ms"])


def _apply_ended(space: Space, record: Record) -> None:
    """A release, a forced release or an expiry: each is its own event type; a forced one says
    whose claim it was, why and who took it; a release, what its holder observed (`observed`)."""
    claim = space.claims.apply_ended(record)
    kind = record["type"]
    if kind == CLAIM_FORCE_RELEASED:
        payload: tuple[Any, ...] = (record["generation"], record["holder"], record.get("reason"), record.get("by"))
    elif kind == CLAIM_RELEASED:
        payload = (record["generation"], *observed(record.get("observation")))
    else:
        payload = (record["generation"],)
    space.events.add((kind, claim.scope_id, "claim", record["key"], payload), record["at_ms"])


def _scope_ending(space: Space, subtree: list[str]) -> Callable[[Outcome, int], None]:
    """Acquirers parked on a held claim of the subtree hear that the scope ended (its claims are
    gone once it has: their actors are named before)."""
    claims = space.claims
    actors = [claim_actor(space.id, claim.scope_id, claim.key) for scope_id in subtree for claim in claims.in_scope(scope_id)]
    return lambda outcome, at_ms: outcome.pokes.extend(actors)


def _make(space: Space) -> None:
    space.claims = ClaimTable()
    space.claiming = ClaimCommands(space.id, space.scopes, space.claims, space.boot, space.commit, space.limits.space_claims_max)
    space.claiming.check_entities = space.check_entities


_ENDED = ("", _apply_ended)

CLAIMS = Primitive(
    "claims",
    make=_make,
    state=("claims",),
    parts=("claiming",),
    commands={
        AcquireClaim: ("claiming", ClaimCommands.acquire),
        RenewClaim: ("claiming", ClaimCommands.renew),
        ReleaseClaim: ("claiming", ClaimCommands.release),
        ForceReleaseClaim: ("claiming", ClaimCommands.force_release),
    },
    records={
        CLAIM_ACQUIRED: ("scope_id", "key", "generation", "token", "holder", "session", "lease_ms", "expires_ms", "at_ms"),
        CLAIM_RENEWED: ("token", "lease_ms", "expires_ms", "at_ms", "graced?"),
        CLAIM_RELEASED: ("token", "key", "generation", "at_ms", "observation?"),
        CLAIM_EXPIRED: ("token", "key", "generation", "at_ms"),
        # An operator's release without the token (`ClaimTable.decide_force_release`).
        CLAIM_FORCE_RELEASED: ("token", "key", "generation", "holder", "at_ms", "reason?", "by?"),
        CLAIM_IMAGE: (
            "scope_id", "key", "generation", "token", "holder", "session", "lease_ms", "expires_ms", "acquired_ms", "at_ms",
            "expired?", "graced?",
        ),
    },
    apply={
        CLAIM_ACQUIRED: ("", _apply_acquired),
        CLAIM_RENEWED: ("claims", "apply_renewed"),
        CLAIM_RELEASED: _ENDED,
        CLAIM_EXPIRED: _ENDED,
        CLAIM_FORCE_RELEASED: _ENDED,
        CLAIM_IMAGE: ("claims", "apply_image"),
    },
    usage={
        CLAIM_ACQUIRED: operation("claims.acquire"),
        CLAIM_RELEASED: operation("claims.release"),
        CLAIM_FORCE_RELEASED: operation("claims.force_release"),
        CLAIM_RENEWED: free("claims.renew"),
        CLAIM_EXPIRED: event("claims.expire"),
        CLAIM_IMAGE: NOT_COUNTED,
    },
    timers={LEASE_TIMER: ("claiming", ClaimCommands.expire)},
    # A claim's events are made as its record is applied (`_apply_acquired`, `_apply_ended`): the
    # claim table is looked up once. `claim.taken_over` is an acquire of a key whose lease had ended.
    events={
        "claim.acquired": ("generation", "holder"),
        "claim.taken_over": ("generation", "holder"),
        "claim.released": ("generation", "observation", "observationBytes"),
        "claim.expired": ("generation",),
        "claim.force_released": ("generation", "holder", "reason", "by"),
    },
    leases=lambda space: LeaseKind(
        CLAIM_LEASE, space.claims.held, space.claims.decide_ended,
        lambda claim, lease_ms, expires_ms, now_ms: ClaimTable.renewed_record(claim.token, lease_ms, expires_ms, now_ms), space.commit,
        lambda claim: space.claiming.timers_of(claim),
    ),
    deadlines=lambda space: space.claiming.timers(),
    image=lambda space: space.claims.image(),
    is_empty=lambda space: not len(space.claims),
    entities=lambda space: len(space.claims),
    scope_ended=lambda space, subtree, state, at_ms: space.claims.drop_scopes(subtree),
    scope_ending=_scope_ending,
)
