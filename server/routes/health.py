"""`GET /healthz`: the probes. Reveals nothing else.

- Readiness, `GET /healthz`: 200 once the state is recovered and the server takes changes; 503 with
  the reason while it recovers, while the journal refuses changes (a failing disk: 200 again once
  the store has repaired itself) and while it shuts down. Route traffic by it.
- Liveness, `GET /healthz?probe=live`: 200 whenever the process answers HTTP, in any of those
  states, since none of them is cured by a restart. Restart on it failing, never on readiness.

Any other `probe` is 400 naming the two: answered as readiness, a mistyped `?probe=liev` in a
liveness check would restart a server that is only recovering.
"""

from __future__ import annotations

from ...actors.errors import UNAVAILABLE, VALIDATION_FAILED, quote
from ..api import Doc, Reply, endpoint
from ..errors import ApiError
from ..http import Request, Router
from ..runtime import Runtime
from ..views import HealthView

router = Router()


# The probes `?probe=` names; readiness is also the answer without one.
PROBES = ("live", "ready")


async def healthz(services: Runtime, request: Request) -> tuple[int, HealthView]:
    probe = request.param("probe")
    if probe is not None and probe not in PROBES:
        raise ApiError(VALIDATION_FAILED, f"probe {quote(probe)} is not one of live, ready (none: ready)")
    if probe == "live":
        return 200, HealthView("live")
    if not services.ready:
        raise ApiError(UNAVAILABLE, "recovering", headers={"retry-after": "1"})
    if services.draining:
        raise ApiError(UNAVAILABLE, "shutting down")
    refusal = services.journal_refusal()
    if refusal is not None:
        raise ApiError(UNAVAILABLE, refusal, headers={"retry-after": "1"})
    return 200, HealthView("ok")


endpoint(router, "GET", "/healthz", Doc(
    "Readiness: 200 once the server takes changes, else 503 with the reason; ?probe=live is liveness "
    "(?probe=ready, or none, readiness; any other probe 400)",
    (Reply(200, "Health"),), query=("probe",), errors=("400", "503"), group="Operating it",
), healthz, public=True)
