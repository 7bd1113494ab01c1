"""Claims: exclusive, leased, fenced ownership of a key inside a scope.

A claim key has at most one holder whose lease has not ended. Each new holder gets a `generation`
one greater than the last (the counter survives releases and expiries, and restarts through the
journal) and a fresh opaque `token`. A boot may set a generation floor (see `state.BootInfo`): the
first holder after such a boot gets at least the floor, so no generation handed out before a crash
can come again even when the end of the journal was lost. Renew and release name the claim by its token; a token that is
not the current one is `STALE_CLAIM`, whatever else is true.

A claim is held under a lease (`leases.py`: its token, holder, session, length, end and grace,
renewed and restarted by the one rule every lease keeps). A lease ends at `expires_ms`. The
supervisor proposes the expiry; until it is recorded, every decision already treats a lease past
its end as ended, so nothing depends on when the supervisor gets to run.

Pure: no IO, no clock reads; every method takes `now_ms`.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple

from .caps import full
from .errors import CLAIM_HELD, CONFLICT, NOT_FOUND, STALE_CLAIM, KernelError, quote
from .leases import hold, release, renewal, renewed, restore
from .primitive import record_type
from .timestamps import format_ms
from .shapes import DurationMs, EpochMs, Record

__all__ = [
    "Claim", "ClaimTable", "ClaimView", "RunClaimsView", "ReleasedClaimView", "ForceReleasedClaimView", "ClaimHeldView",
    "CLAIM_ACQUIRED", "CLAIM_RENEWED", "CLAIM_RELEASED", "CLAIM_EXPIRED", "CLAIM_FORCE_RELEASED", "CLAIM_IMAGE",
]

# The record types this module decides and applies (the journal's spelling of each).
CLAIM_ACQUIRED = record_type("claim.acquired")
CLAIM_RENEWED = record_type("claim.renewed")
CLAIM_RELEASED = record_type("claim.released")
CLAIM_EXPIRED = record_type("claim.expired")
CLAIM_FORCE_RELEASED = record_type("claim.force_released")
CLAIM_IMAGE = record_type("claim.image")


class Claim:
    __slots__ = (
        "scope_id",
        "key",
        "generation",
        "token",
        "holder",
        "session",
        "lease_ms",
        "expires_ms",
        "acquired_ms",
        "expired",
        "graced",
    )

    def __init__(self, scope_id: str, key: str) -> None:
        self.scope_id = scope_id
        self.key = key
        self.generation = 0
        self.token: str | None = None
        self.holder: str | None = None
        self.session: str | None = None
        self.lease_ms = 0
        self.expires_ms = 0
        self.acquired_ms = 0
        # The last lease ended by expiring, not by a release: the next acquire is a takeover.
        self.expired = False
        # A restart gave this lease its grace and its holder has not renewed since: a restart
        # gives a lease its grace once (`leases.restart`).
        self.graced = False

    def held_at(self, now_ms: int) -> bool:
        return self.token is not None and now_ms < self.expires_ms


# A claim's views are named tuples: immutable, no per-instance dict, and built by one tuple
# allocation (a frozen dataclass sets each field through `object.__setattr__`, several times the
# cost, on the hot path of every acquire and release). The release variants repeat the fields of
# `ClaimView` first, in its order, then their own.


class ClaimView(NamedTuple):
    """A claim as a holder or a reader is shown it: who holds which key, under which lease.

    `token` is None where it is withheld (a release's answer). `session` is the holder's session;
    `lease_ms` the lease's length, `expires_ms` its end (the lease is not held from then on unless
    renewed), `acquired_ms` when its holder took it. The shell names and formats these on the wire
    (`server/wire/`); the kernel knows nothing of that."""

    key: str
    scope_id: str
    token: str | None
    generation: int
    holder: str | None
    session: str | None
    lease_ms: DurationMs
    expires_ms: EpochMs
    acquired_ms: EpochMs


class RunClaimsView(NamedTuple):
    """A page of the claims held in a run, in the order of their keys, at most a listing's limit
    (`next_cursor` reads the next page, None on the last; `truncated` says the same as a boolean),
    written without their tokens (`server/wire/claims.py`)."""

    scope_id: str
    claims: tuple[ClaimView, ...]
    truncated: bool
    next_cursor: str | None


class ReleasedClaimView(NamedTuple):
    """A claim as its release left it: the view it had, its token withheld (None), `released`
    (always true: a view of a release), at `released_ms`."""

    key: str
    scope_id: str
    token: str | None  # None: withheld
    generation: int
    holder: str | None
    session: str | None
    lease_ms: DurationMs
    expires_ms: EpochMs
    acquired_ms: EpochMs
    released: bool
    released_ms: EpochMs


class ForceReleasedClaimView(NamedTuple):
    """A claim an operator released without its token: as `ReleasedClaimView`, then `forced`
    (always true), why (`reason`) and who did (`by`)."""

    key: str
    scope_id: str
    token: str | None  # None: withheld
    generation: int
    holder: str | None
    session: str | None
    lease_ms: DurationMs
    expires_ms: EpochMs
    acquired_ms: EpochMs
    released: bool
    released_ms: EpochMs
    forced: bool
    reason: str | None
    by: str | None


class ClaimHeldView(NamedTuple):
    """Why an acquire was refused CLAIM_HELD (its details): who holds the key, as which
    generation, and when that lease ends unless renewed."""

    holder: str | None
    generation: int
    expires_ms: EpochMs


class ClaimTable:
    """The claims of one space, by scope then key, and by token."""

    # `keys`: how many keys are remembered, counted from `_by_scope` as it changes.
    _DERIVED = ("keys",)
    __slots__ = ("_by_scope", "_by_token", "takeovers", "keys")

    def __init__(self) -> None:
        self._by_scope: dict[str, dict[str, Claim]] = {}
        self._by_token: dict[str, Claim] = {}
        self.keys = 0
        # Acquisitions of a key whose last lease expired (usage counts them as events).
        self.takeovers = 0

    # -- reading --------------------------------------------------------------------------------

    def get(self, scope_id: str, key: str) -> Claim | None:
        keys = self._by_scope.get(scope_id)
        return None if keys is None else keys.get(key)

    def by_token(self, token: str) -> Claim | None:
        return self._by_token.get(token)

    def in_scope(self, scope_id: str) -> Iterator[Claim]:
        return iter(self._by_scope.get(scope_id, {}).values())

    def held(self) -> Iterator[Claim]:
        """Every claim with a token (its lease may have ended unrecorded)."""
        return iter(self._by_token.values())

    def __len__(self) -> int:
        """Keys remembered, held or not (a released key keeps its generation until its run ends)."""
        return self.keys

    @property
    def held_count(self) -> int:
        """Claims held (with a token): what `space_claims_max` bounds."""
        return len(self._by_token)

    @staticmethod
    def view(claim: Claim) -> ClaimView:
        return ClaimView(
            claim.key, claim.scope_id, claim.token, claim.generation, claim.holder, claim.session, claim.lease_ms,
            claim.expires_ms, claim.acquired_ms,
        )

    @staticmethod
    def released_view(claim: Claim, now_ms: int) -> ReleasedClaimView:
        """The answer to a release: the claim as it was until `now_ms`, its token withheld (made
        before the release is applied, which forgets the holder)."""
        assert claim.token is not None, "a release ends a held claim"
        return ReleasedClaimView(
            claim.key, claim.scope_id, None, claim.generation, claim.holder, claim.session, claim.lease_ms,
            claim.expires_ms, claim.acquired_ms, True, now_ms,
        )

    @staticmethod
    def force_released_view(claim: Claim, now_ms: int, reason: str | None, by: str | None) -> ForceReleasedClaimView:
        """The answer to an operator's release: as `released_view`, with why and who."""
        assert claim.token is not None, "a forced release ends a held claim"
        return ForceReleasedClaimView(
            claim.key, claim.scope_id, None, claim.generation, claim.holder, claim.session, claim.lease_ms,
            claim.expires_ms, claim.acquired_ms, True, now_ms, True, reason, by,
        )

    # -- deciding -------------------------------------------------------------------------------

    def decide_acquire(
        self,
        scope_id: str,
        key: str,
        holder: str,
        session: str,
        lease_ms: int,
        token: str,
        now_ms: int,
        generation_floor: int = 0,
        held_max: int | None = None,
    ) -> list[Record]:
        """Records that give the key to `holder`, or CLAIM_HELD naming who has it and until when.

        Asking again while holding it is CLAIM_HELD too, even from the same holder and session:
        two `run()`s at once in one client must not share a fencing token. A key that holds no
        token yet is one more claim held: past `held_max` it is BACKLOG_FULL (taking over a lease
        that ended unrecorded holds no more than before).
        """
        claim = self.get(scope_id, key)
        records: list[Record] = []
        generation = 1
        if claim is not None:
            if claim.held_at(now_ms):
                raise KernelError(
                    CLAIM_HELD,
                    f"claim {quote(key)} is held by {claim.holder} until {format_ms(claim.expires_ms)}",
                    details=ClaimHeldView(claim.holder, claim.generation, claim.expires_ms),
                    retry_after_s=max(0.0, (claim.expires_ms - now_ms) / 1000),
                )
            if claim.token is not None:  # ended but not yet recorded: record it first
                records.append(self._ended_record(CLAIM_EXPIRED, claim, now_ms))
            generation = claim.generation + 1
        if held_max is not None and (claim is None or claim.token is None) and len(self._by_token) >= held_max:
            raise full(f"space holds {len(self._by_token)} claims", "space_claims_max")
        generation = max(generation, generation_floor)
        # Paired with `apply_acquired`: each new owner of a key gets a greater generation.
        assert generation > (0 if claim is None else claim.generation), "a generation is never handed out twice"
        assert lease_ms > 0 and token, "a lease has a length and a token"
        records.append(
            {
                "type": CLAIM_ACQUIRED,
                "scope_id": scope_id,
                "key": key,
                "generation": generation,
                "token": token,
                "holder": holder,
                "session": session,
                "lease_ms": lease_ms,
                "expires_ms": now_ms + lease_ms,
                "at_ms": now_ms,
            }
        )
        return records

    def current(self, key: str, token: str, now_ms: int) -> Claim:
        """The claim `token` holds on `key` with a lease not yet ended, else STALE_CLAIM."""
        claim = self._by_token.get(token)
        if claim is None or claim.key != key:
            raise KernelError(STALE_CLAIM, f"token is not the current one for claim {quote(key)}")
        if now_ms >= claim.expires_ms:
            raise KernelError(STALE_CLAIM, f"the lease on claim {quote(key)} has ended")
        return claim

    def decide_renew(self, key: str, token: str, lease_ms: int | None, now_ms: int) -> Record:
        """The renewal rule (`leases.renewal`) for the claim `token` holds on `key`."""
        claim = self.current(key, token, now_ms)
        record = self.renewed_record(token, *renewal(claim, lease_ms, now_ms), now_ms)
        assert record["expires_ms"] == now_ms + record["lease_ms"], "a renewal runs its length from now"
        return record

    @staticmethod
    def renewed_record(token: str, lease_ms: int, expires_ms: int, now_ms: int) -> Record:
        return {"type": CLAIM_RENEWED, "token": token, "lease_ms": lease_ms, "expires_ms": expires_ms, "at_ms": now_ms}

    def decide_release(self, key: str, token: str, observation: object, now_ms: int) -> Record:
        claim = self.current(key, token, now_ms)
        assert now_ms < claim.expires_ms, "a release ends a lease before its end (after it, the lease expires)"
        record = self._ended_record(CLAIM_RELEASED, claim, now_ms)
        if observation is not None:
            record["observation"] = observation
        return record

    def decide_force_release(self, scope_id: str, key: str, reason: str | None, by: str | None, now_ms: int) -> Record:
        """An operator's release of the claim held on `key`, without its token.

        NOT_FOUND for a key never claimed in the scope; CONFLICT for one not held now (released,
        or its lease ended: a forced release of nobody's claim is a mistake to report, not a
        no-op to hide). The record names the holder it took the key from, for the event log.
        """
        claim = self.get(scope_id, key)
        if claim is None:
            raise KernelError(NOT_FOUND, f"claim {quote(key)} was never acquired in scope {quote(scope_id)}")
        if not claim.held_at(now_ms):
            why = "its lease ended" if claim.token is not None or claim.expired else "it was released"
            raise KernelError(
                CONFLICT, f"claim {quote(key)} is not held ({why}; generation {claim.generation} was the last)"
            )
        record = self._ended_record(CLAIM_FORCE_RELEASED, claim, now_ms)
        assert record["token"] is not None and claim.holder is not None, "a forced release names whose lease it ends"
        record["holder"] = claim.holder
        if reason:
            record["reason"] = reason
        if by is not None:
            record["by"] = by
        return record

    def decide_expire(self, token: str, now_ms: int) -> Record | None:
        """The expiry the supervisor proposed, if `token` still holds a lease that has ended."""
        claim = self._by_token.get(token)
        if claim is None or now_ms < claim.expires_ms:
            return None
        assert claim.expires_ms <= now_ms, "only a lease past its end expires"
        return self._ended_record(CLAIM_EXPIRED, claim, now_ms)

    @staticmethod
    def _ended_record(kind: str, claim: Claim, now_ms: int) -> Record:
        return {
            "type": kind,
            "token": claim.token,
            "key": claim.key,
            "generation": claim.generation,
            "at_ms": now_ms,
        }

    def decide_ended(self, claim: Claim, now_ms: int) -> Record:
        """The expiry of a lease whose end has passed (a restart's, `leases.restart`)."""
        assert claim.token is not None and claim.expires_ms <= now_ms, "only an ended lease is expired"
        return self._ended_record(CLAIM_EXPIRED, claim, now_ms)

    # -- images ---------------------------------------------------------------------------------

    def image(self) -> Iterator[Record]:
        """Records that rebuild this table exactly through `apply_image`, free keys included.

        A free key must keep its generation counter, which no ordinary record can say on its own:
        hence the image-only `claim.image` record.
        """
        for keys in self._by_scope.values():
            for claim in keys.values():
                record = {
                    "type": CLAIM_IMAGE,
                    "scope_id": claim.scope_id,
                    "key": claim.key,
                    "generation": claim.generation,
                    "token": claim.token,
                    "holder": claim.holder,
                    "session": claim.session,
                    "lease_ms": claim.lease_ms,
                    "expires_ms": claim.expires_ms,
                    "acquired_ms": claim.acquired_ms,
                    "expired": claim.expired,
                    "at_ms": claim.acquired_ms,
                }
                if claim.graced:
                    record["graced"] = True
                yield record

    def apply_image(self, record: Record) -> Claim:
        claim = Claim(record["scope_id"], record["key"])
        claim.generation = record["generation"]
        claim.acquired_ms = record["acquired_ms"]
        restore(claim, record)
        claim.expired = record.get("expired", False)
        keys = self._by_scope.setdefault(claim.scope_id, {})
        if claim.key not in keys:
            self.keys += 1
        keys[claim.key] = claim
        if claim.token is not None:
            self._by_token[claim.token] = claim
        return claim

    # -- applying -------------------------------------------------------------------------------

    def apply_acquired(self, record: Record) -> Claim:
        keys = self._by_scope.setdefault(record["scope_id"], {})
        claim = keys.get(record["key"])
        if claim is None:
            claim = keys[record["key"]] = Claim(record["scope_id"], record["key"])
            self.keys += 1
        else:
            assert record["generation"] > claim.generation, "each new owner gets a greater generation"
            if claim.token is not None:
                del self._by_token[claim.token]
            if claim.expired:
                self.takeovers += 1
                claim.expired = False
        assert record["token"] not in self._by_token, "a fencing token is never handed out twice"
        claim.generation = record["generation"]
        claim.acquired_ms = record["at_ms"]
        hold(claim, record)
        assert claim.token is not None, "a claim acquired holds the token it was given"
        self._by_token[claim.token] = claim
        return claim

    def apply_renewed(self, record: Record) -> Claim:
        claim = self._by_token[record["token"]]
        renewed(claim, record)
        return claim

    def apply_ended(self, record: Record) -> Claim:
        """A release (forced or not) or an expiry: the key is free, its generation counter stays."""
        claim = self._by_token.pop(record["token"])
        assert claim.generation == record["generation"], "an end names the generation it ends"
        release(claim)
        claim.expired = record["type"] == CLAIM_EXPIRED
        return claim

    def drop_scopes(self, scope_ids: list[str]) -> list[Claim]:
        """Forget every claim of ended scopes (no acquire can happen there again); returns those held."""
        held = []
        for scope_id in scope_ids:
            dropped = self._by_scope.pop(scope_id, {})
            self.keys -= len(dropped)
            for claim in dropped.values():
                if claim.token is not None:
                    del self._by_token[claim.token]
                    held.append(claim)
        return held
