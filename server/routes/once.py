"""Once (`@runstate.once` of the 0.3.0 client): acquire, wait, renew, complete, fail, release.

Work done exactly once per (run, key): the first caller holds the key under a fenced lease and
runs the work; the result is recorded once and answered to every later caller; a failed attempt
opens the key again until `maxAttempts` are used (then FAILED); a holder that dies lets its lease run
out and the next caller takes over; a release gives the key back unused, the attempt not counted. `GET /once?waitMs=` parks until a held key settles or opens.
"""

from __future__ import annotations

from ...actors import commands as c
from ...actors.kernel import EMPTY
from ...actors.shapes import View
from ..api import Doc, Reply, endpoint, say_if_capped
from ..http import Request, Router
from ..services import ReadServices

router = Router()

BASE = "/v1/spaces/{space}/once"
ONCE = (Reply(200, "Once"),)
ERRORS = ("400", "404", "409")
G = "Once"


async def wait(services: ReadServices, request: Request, space: str) -> tuple[int, View]:
    services.authorize(request, space)
    kernel = services.kernel
    command = kernel.parse(c.WaitOnce, {}, {"space": space}, request.param)
    say_if_capped(request, kernel.limits, command.wait_ms)
    reply = await kernel.submit(command, wait_ms=command.wait_ms)
    if reply is EMPTY:  # still held when the wait ended (or its run removed meanwhile: NOT_FOUND)
        state = kernel.space_view(space)
        state.scopes.get(command.scope_id)
        reply = state.once.view(state.once.find(command.scope_id, command.key), kernel.clock.now_ms())
    return 200, reply


endpoint(router, "POST", BASE + "/acquire", Doc(
    "Hold a once key under a lease, or learn its result (DONE), its failure (FAILED) or its holder (HELD)",
    ONCE, c.AcquireOnce, errors=ERRORS, idempotent=True, group=G,
))
endpoint(router, "GET", BASE, Doc(
    "A once key's state; with waitMs, once it is no longer held (a long poll)", ONCE, c.WaitOnce,
    errors=("400", "404"), group=G,
), wait, long_poll=True)
endpoint(router, "POST", BASE + "/renew", Doc("Renew the lease on a once key", ONCE, c.RenewOnce, errors=ERRORS, idempotent=True, group=G))
endpoint(router, "POST", BASE + "/complete", Doc(
    "Record a once key's result (DONE for good)", ONCE, c.CompleteOnce, errors=ERRORS, idempotent=True, group=G,
))
endpoint(router, "POST", BASE + "/fail", Doc(
    "Give a failed attempt back (OPEN again, or FAILED once maxAttempts are used)", ONCE, c.FailOnce, errors=ERRORS,
    idempotent=True, group=G,
))
endpoint(router, "POST", BASE + "/release", Doc(
    "Give a held once key back unused (OPEN again; the acquisition is not counted against maxAttempts)", ONCE,
    c.ReleaseOnce, errors=ERRORS, idempotent=True, group=G,
))
