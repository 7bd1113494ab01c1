"""Claims: acquire, renew, release, and an operator's forced release.

Renew and release carry no scope: the token names the claim, and the key in the path must match.
A forced release has no token to name the claim by, so it names the run (`scopeId`) as an
acquire does.

The 0.2.0 client leaves a key of `.` or `..` unencoded, and its HTTP library drops it from the
path as a dot segment: renew and release of `.` arrive as `/claims/renew` and `/claims/release`,
of `..` as `/renew` and `/release` under the space, and are served there too
(`endpoint_and_dot_segments`); a client that encodes them (`%2E`, ours) reaches the usual route.
"""

from __future__ import annotations

import dataclasses

from ...actors import commands as c
from ...actors.kernel import EMPTY
from ...actors.shapes import View
from ..api import Doc, Reply, endpoint, endpoint_and_dot_segments, say_if_capped
from ..http import Request, Router
from ..runtime import Runtime

router = Router()

BASE = "/v1/spaces/{space}/claims"
CLAIM = (Reply(200, "Claim"),)
ERRORS = ("400", "404", "409")

async def acquire(services: Runtime, request: Request, space: str) -> tuple[int, View]:
    """Acquire; with `waitMs`, a held claim parks the request until it is free or the wait ends."""
    services.authorize(request, space)
    kernel = services.kernel
    command = kernel.parse(c.AcquireClaim, request.json().for_command(c.AcquireClaim, kernel.limits), {"space": space})
    idem = request.idem(space)
    say_if_capped(request, kernel.limits, command.wait_ms)
    reply = await kernel.submit(command, idem=idem, wait_ms=command.wait_ms)
    if reply is EMPTY:  # still held when the wait ended: answer as an acquire without a wait does
        reply = await kernel.submit(dataclasses.replace(command, wait_ms=None), idem=idem)
    return 200, reply


endpoint(router, "POST", BASE, Doc(
    "Acquire a claim (with waitMs, wait in arrival order for a held one)", CLAIM, c.AcquireClaim, errors=ERRORS,
    idempotent=True, group="Claims",
), acquire, long_poll=lambda request: b'"waitMs"' in request.body, batchable=True)
endpoint_and_dot_segments(router, "POST", BASE + "/{key}/renew", Doc(
    "Renew a claim's lease ({key} percent-encoded)", CLAIM, c.RenewClaim, errors=ERRORS, idempotent=True, group="Claims",
), "key")
endpoint_and_dot_segments(router, "POST", BASE + "/{key}/release", Doc(
    "Release a claim", CLAIM, c.ReleaseClaim, errors=ERRORS, idempotent=True, group="Claims",
), "key")
endpoint(router, "POST", BASE + "/{key}/force-release", Doc(
    "Release a held claim without its token: the holder's token is refused from then on, "
    "the next holder gets the next generation",
    CLAIM, c.ForceReleaseClaim, errors=ERRORS, idempotent=True, group="Claims", operator=True,
))
