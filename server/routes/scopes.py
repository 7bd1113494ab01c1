"""Scopes (runs): create, read, cancel, complete."""

from __future__ import annotations

from ...actors import commands as c
from ...actors import reads
from ...actors.scopes import ScopeView
from ..api import Doc, Reply, endpoint, endpoint_and_dot_segments
from ..http import Request, Router
from ..services import ReadServices

router = Router()

BASE = "/v1/spaces/{space}/scopes"
SCOPE = "Scope"


async def read(services: ReadServices, request: Request, space: str, scope_id: str) -> tuple[int, ScopeView]:
    services.authorize(request, space)
    return 200, reads.scope(services.kernel, space, scope_id)


endpoint(router, "POST", BASE, Doc(
    "Create a run (scope)", (Reply(201, SCOPE, "Created"),), c.CreateScope, body_required=False,
    errors=("400", "404", "409"), idempotent=True, group="Scopes", location=("/scopes/{}", "id"),
), status=201)
endpoint(router, "GET", BASE + "/{scope_id}", Doc("A run", (Reply(200, SCOPE),), errors=("404",), group="Scopes"), read)
endpoint_and_dot_segments(router, "PUT", "/v1/spaces/{space}/runs/{name}", Doc(
    "Get or create the run (a root scope) of this name; a stopped run is answered as it is",
    (Reply(200, SCOPE),), c.EnsureRun, body_required=False, errors=("400", "404", "409"), idempotent=True, group="Scopes",
), "name")
endpoint(router, "POST", BASE + "/{scope_id}/cancel", Doc(
    "Cancel a run and its subtree (no body)", (Reply(200, SCOPE),), c.CancelScope, errors=("404", "409"),
    idempotent=True, group="Scopes", operator=True,
))
endpoint(router, "POST", BASE + "/{scope_id}/complete", Doc(
    "Complete a run and its subtree (no body)", (Reply(200, SCOPE),), c.CompleteScope, errors=("404", "409"),
    idempotent=True, group="Scopes",
))
