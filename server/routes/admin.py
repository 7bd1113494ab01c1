"""Admin endpoints (our extension, not in the 0.2.0 API): API keys and spaces, for `runstate keys` and `runstate spaces`.

Every route here needs the admin key (`server/admin.py`). Keys are registered and revoked through
the kernel, so the change is journaled (`key.registered`, `key.revoked`, digests only) and takes
effect on the running server at once. A new key's secret is in the answer that creates it and
nowhere else; the request takes no Idempotency-Key, because a stored answer would keep it.

    POST /v1/admin/keys                  {"space": "S"} or {"spaces": [...]}, "name" optional -> 201, with "key"
    GET  /v1/admin/keys[?space=S]        {"keys": [...]}
    POST /v1/admin/keys/{id}/revoke      the key's view, "revokedAt" set
    GET  /v1/admin/spaces                {"spaces": [{"id", "keys", "runs", "claimsLive", "operations"}]}
"""

from __future__ import annotations

from ...actors.errors import VALIDATION_FAILED
from ...actors.keys import new_secret
from ..errors import ApiError
from ..http import Request, Router
from ..runtime import Runtime

router = Router()

BASE = "/v1/admin"
# At most this many spaces on one key (a key for every space is the admin key's job).
KEY_SPACES_MAX = 100


@router.route("POST", BASE + "/keys")
async def create_key(services: Runtime, request: Request) -> tuple[int, dict]:
    services.authorize_admin(request)
    body = request.json()
    spaces = body.data.get("spaces")
    if spaces is None:
        spaces = [body.text("space")]
    elif not isinstance(spaces, list) or not spaces or not all(isinstance(s, str) for s in spaces):
        raise ApiError(VALIDATION_FAILED, "field 'spaces' must be a non-empty list of space ids")
    if len(spaces) > KEY_SPACES_MAX:
        raise ApiError(VALIDATION_FAILED, f"a key opens at most {KEY_SPACES_MAX} spaces")
    secret = new_secret()
    view = await services.keys.register(secret, frozenset(spaces), name=body.opt_text("name"))
    return 201, {**view, "key": secret}


@router.route("GET", BASE + "/keys")
async def list_keys(services: Runtime, request: Request) -> tuple[int, dict]:
    services.authorize_admin(request)
    space = request.param("space")
    state = services.kernel.state  # type: ignore[union-attr]
    views = [state.key_view(key) for key in state.keys.all() if space is None or space in key.spaces]
    return 200, {"keys": views}


@router.route("POST", BASE + "/keys/{key_id}/revoke")
async def revoke_key(services: Runtime, request: Request, key_id: str) -> tuple[int, dict]:
    services.authorize_admin(request)
    return 200, await services.keys.revoke(key_id)


@router.route("GET", BASE + "/spaces")
async def list_spaces(services: Runtime, request: Request) -> tuple[int, dict]:
    services.authorize_admin(request)
    state = services.kernel.state  # type: ignore[union-attr]
    now_ms = services.kernel.clock.now_ms()  # type: ignore[union-attr]
    keys_per_space: dict[str, int] = {}
    for key in state.keys.all():
        if key.revoked_ms is None:
            for space in key.spaces:
                keys_per_space[space] = keys_per_space.get(space, 0) + 1
    rows = []
    for space_id in sorted(set(keys_per_space) | {s for s, space in state.spaces.items() if len(space.scopes)}):
        space = state.spaces.get(space_id)
        rows.append(
            {
                "id": space_id,
                "keys": keys_per_space.get(space_id, 0),
                "runs": 0 if space is None else len(space.scopes),
                "claimsLive": 0 if space is None else sum(1 for c in space.claims.held() if c.held_at(now_ms)),
                "operations": 0 if space is None else space.usage.total,
            }
        )
    return 200, {"spaces": rows}
