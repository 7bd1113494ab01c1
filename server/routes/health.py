"""`GET /healthz`: 200 once the state is recovered and the server serves, 503 before and while it shuts down.

Reveals nothing else."""

from __future__ import annotations

from typing import Any

from ...actors.errors import UNAVAILABLE
from ..api import Doc, Reply, endpoint
from ..errors import ApiError
from ..http import Request, Router

router = Router()


async def healthz(services: Any, request: Request) -> tuple[int, dict]:
    if not services.ready:
        raise ApiError(UNAVAILABLE, "recovering", headers={"retry-after": "1"})
    if services.draining:
        raise ApiError(UNAVAILABLE, "shutting down")
    return 200, {"status": "ok"}


endpoint(router, "GET", "/healthz", Doc(
    "Health: 200 once the state is recovered and served", (Reply(200, "Health"),), errors=("503",), group="Operating it",
), healthz, public=True)
