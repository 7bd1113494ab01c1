"""The wire shapes of claims (`actors/claims.py`'s views)."""

from __future__ import annotations

from typing import Any

from ...actors.claims import ClaimHeldView, ClaimView, ForceReleasedClaimView, ReleasedClaimView, RunClaimsView
from .shape import Shape, component

__all__ = ["CLAIM", "RELEASED_CLAIM", "FORCE_RELEASED_CLAIM", "HELD_CLAIM", "RUN_CLAIMS", "CLAIM_HELD", "COMPONENTS"]

# A claim as acquire, renew and release answer it. The official clients read `holderSession`,
# `leaseSeconds` and `leaseExpiresAt`, so the holder's session, the lease's length and its end keep
# those names. A release answers the claim with `released` and `releasedAt`; an operator's release
# adds `forced`, `reason` and `by`.
CLAIM = Shape(ClaimView, rename={"session": "holderSession", "expires_ms": "leaseExpiresAt"}, seconds={"lease_ms": "leaseSeconds"})
RELEASED_CLAIM = CLAIM.extended(ReleasedClaimView)
FORCE_RELEASED_CLAIM = CLAIM.extended(ForceReleasedClaimView)
# A claim as a run's listing shows it: tokens are never listed.
HELD_CLAIM = CLAIM.without("token")
# A run's claims (`/scopes/{scope_id}/claims`), each as a listing shows it.
RUN_CLAIMS = Shape(RunClaimsView, nested={"claims": HELD_CLAIM})
# CLAIM_HELD's details: the holder, its generation and its lease's end, as a claim names them.
CLAIM_HELD = Shape(ClaimHeldView, rename={"expires_ms": "leaseExpiresAt"})

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {
    "Claim": component(CLAIM, RELEASED_CLAIM, FORCE_RELEASED_CLAIM),
    "HeldClaim": component(HELD_CLAIM),
    "RunClaims": component(RUN_CLAIMS),
}
