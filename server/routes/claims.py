"""Claims: acquire, renew, release.

Renew and release carry no scope: the token names the claim, and the key in the path must match.
"""

from __future__ import annotations

from ...actors import commands as c
from ..api import Doc, Reply, endpoint
from ..http import Router

router = Router()

BASE = "/v1/spaces/{space}/claims"
CLAIM = (Reply(200, "Claim"),)
ERRORS = ("400", "404", "409")

endpoint(router, "POST", BASE, Doc("Acquire a claim", CLAIM, c.AcquireClaim, errors=ERRORS, idempotent=True, group="Claims"))
endpoint(router, "POST", BASE + "/{key}/renew", Doc(
    "Renew a claim's lease ({key} percent-encoded)", CLAIM, c.RenewClaim, errors=ERRORS, idempotent=True, group="Claims",
))
endpoint(router, "POST", BASE + "/{key}/release", Doc(
    "Release a claim", CLAIM, c.ReleaseClaim, errors=ERRORS, idempotent=True, group="Claims",
))
