"""Claims inside a space: acquire, renew, release, and the expiry of a lease that ran out.

`ClaimCommands` is one part of a `SpaceState`: it is given the tables it uses (the scope tree, to
refuse a claim in an ended scope, and the claim table), the boot facts (the generation floor) and
the space's `commit`, and nothing else. Each method is a pure transition: a command and `now_ms`
in, an `Outcome` out, its records already applied through `commit`.

Timers (tag on the claim's actor, each proposing a change the turn checks again):
    ("claim-lease", key)   marker token   the lease ran out: record the expiry if still due

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

from .boot import BootInfo
from .claims import Claim, ClaimTable
from .actor_keys import claim_actor
from .leases import LeaseKind
from .outcome import Outcome, Timer
from .scopes import ScopeTree
from .timestamps import format_ms

if TYPE_CHECKING:
    from .commands import AcquireClaim, ForceReleaseClaim, ReleaseClaim, RenewClaim

__all__ = ["ClaimCommands", "LEASE_TIMER"]

LEASE_TIMER = "claim-lease"
CLAIM_LEASE = "claim"  # the kind of lease a claim is held under, in the lease table
# A lease timer's tag: the same for every claim, since its actor already names the claim (space,
# scope and key), so a held claim keeps no tag of its own in the supervisor.
_LEASE_TAG = (LEASE_TIMER, None)

Commit = Callable[..., Outcome]


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

    def acquire(self, command: "AcquireClaim", now_ms: int) -> Outcome:
        self._scopes.require_active(command.scope_id, now_ms)
        claims = self._claims
        if command.wait_ms:
            held = claims.get(command.scope_id, command.key)
            if held is not None and held.held_at(now_ms):
                return Outcome(empty=True)  # park until the release or the expiry re-runs it
        if claims.get(command.scope_id, command.key) is None:
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

    def renew(self, command: "RenewClaim", now_ms: int) -> Outcome:
        lease_ms = None if command.lease_s is None else command.lease_s * 1000
        record = self._claims.decide_renew(command.key, command.token, lease_ms, now_ms)
        outcome = self._commit(Outcome(), record)
        claim = self._claims.by_token(command.token)
        assert claim is not None, "a renewed claim keeps its token"
        outcome.timers.append(self.lease_timer(claim.scope_id, claim.key, command.token, claim.expires_ms))
        outcome.reply = self._claims.view(claim)
        return outcome

    def release(self, command: "ReleaseClaim", now_ms: int) -> Outcome:
        claims = self._claims
        claim = claims.current(command.key, command.token, now_ms)
        reply = claims.view(claim)
        outcome = self._commit(Outcome(), claims.decide_release(command.key, command.token, command.observation, now_ms))
        reply.update(token=None, released=True, releasedAt=format_ms(now_ms))
        outcome.reply = reply
        return outcome

    def force_release(self, command: "ForceReleaseClaim", now_ms: int) -> Outcome:
        """An operator's release without the token: the claim's view as it was, token withheld.

        The scope may have ended (its claims are then gone: NOT_FOUND); the holder learns of it at
        its next renewal, which is STALE_CLAIM like any other stale token's.
        """
        self._scopes.get(command.scope_id)
        claims = self._claims
        record = claims.decide_force_release(command.scope_id, command.key, command.reason, command.by, now_ms)
        claim = claims.by_token(record["token"])
        assert claim is not None
        reply = claims.view(claim)
        outcome = self._commit(Outcome(), record)
        reply.update(
            token=None, released=True, releasedAt=format_ms(now_ms), forced=True, reason=command.reason, by=command.by
        )
        outcome.reply = reply
        return outcome

    def expire(self, token: str, now_ms: int) -> Outcome:
        """The supervisor's proposal: record the expiry if the lease of `token` has run out."""
        record = self._claims.decide_expire(token, now_ms)
        return Outcome() if record is None else self._commit(Outcome(), record)

    def lease_timer(self, scope_id: str, key: str, token: str, expires_ms: int) -> Timer:
        return Timer(expires_ms, claim_actor(self._space_id, scope_id, key), _LEASE_TAG, token)

    def timers(self) -> Iterator[Timer]:
        for claim in self._claims.held():
            yield self.lease_timer(claim.scope_id, claim.key, claim.token, claim.expires_ms)  # type: ignore[arg-type]

    # -- the lease table (`leases.py`: the restart rule is decided there, for every kind at once) --

    def lease_kind(self) -> LeaseKind:
        return LeaseKind(CLAIM_LEASE, self._claims.held, self._lease_ended, self._lease_graced)

    def _lease_ended(self, claim: Claim, now_ms: int, outcome: Outcome) -> None:
        self._commit(outcome, self._claims.decide_ended(claim, now_ms))

    def _lease_graced(self, claim: Claim, expires_ms: int, now_ms: int, outcome: Outcome) -> None:
        record = self._claims.renewed_record(claim, claim.lease_ms, expires_ms, now_ms)
        record["graced"] = True
        self._commit(outcome, record)
