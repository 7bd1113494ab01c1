"""Admin endpoints (our extension, not in the 0.2.0 API): API keys and spaces, for `runstate keys` and `runstate spaces`.

Every route here needs the admin key (`server/admin.py`). Keys are registered and revoked through
the kernel, so the change is journaled (`key.registered`, `key.revoked`, digests only) and takes
effect on the running server at once. A new key's secret is in the answer that creates it and
nowhere else; the request takes no Idempotency-Key, because a stored answer would keep it.

A key's `role` is `editor` (the default: everything inside its spaces) or `viewer` (every read
there, no change: `Runtime.authorize` answers each change 403 FORBIDDEN naming the role).

    POST /v1/admin/keys                  {"space": "S"} or {"spaces": [...]}, "name" and "role" optional -> 201, with "key"
    GET  /v1/admin/keys[?space=S]        {"keys": [...]}
    POST /v1/admin/keys/{id}/revoke      the key's view, "revokedAt" set
    GET  /v1/admin/spaces                {"spaces": [{"id", "keys", "runs", "claimsLive", "operations"}]}
"""

from __future__ import annotations

from ...actors import commands as c
from ...actors.errors import VALIDATION_FAILED, quote
from ...actors.fields import TEXT, TEXTS, Spec, read_field
from ...actors.keys import EDITOR, KEY_SPACES_MAX, ROLES, ApiKeysView, ApiKeyView, digest, new_secret
from ...actors.state import KernelState
from ..api import Doc, Reply, endpoint
from ..errors import ApiError
from ..http import Request, Router
from ..runtime import Runtime
from ..views import CreatedKeyView, SpaceRowView, SpacesView

router = Router()

BASE = "/v1/admin"
G = "Admin (the admin key)"

# The request of POST /keys: "space", or "spaces" (one of the two), and an optional "name".
_SPACE = Spec("space", TEXT, required=False, description="the space the key opens (or spaces: one of the two)")
_SPACES = Spec("spaces", TEXTS, required=False, items_max=KEY_SPACES_MAX, description="the spaces the key opens (or space)")
_NAME = Spec("name", TEXT, required=False, length_max="name_len_max")
_SPACE_REQUIRED = Spec("space", TEXT)
_ROLE = Spec("role", TEXT, required=False, length_max=16, description="editor (the default: reads and changes) or viewer (reads only)")


async def create_key(services: Runtime, request: Request) -> tuple[int, CreatedKeyView]:
    services.authorize_admin(request)
    kernel = services.kernel
    limits = kernel.limits
    data = request.json().data
    unknown = sorted(set(data) - {"spaces", "space", "name", "role"})
    if unknown:
        raise ApiError(VALIDATION_FAILED, f"unknown field {quote(unknown[0])}: this request takes space (or spaces), name, role")
    spaces = read_field(_SPACES, data, limits)
    if spaces is None:
        spaces = [read_field(_SPACE_REQUIRED, data, limits)]
    elif data.get("space") is not None:  # (one of the two: the other was dropped, and the key made for less)
        raise ApiError(VALIDATION_FAILED, "give space or spaces, not both: list every space the key opens in spaces")
    name = read_field(_NAME, data, limits)
    role = read_field(_ROLE, data, limits) or EDITOR
    if role not in ROLES:
        raise ApiError(VALIDATION_FAILED, f"role must be one of {', '.join(ROLES)}, got {quote(role)}")
    secret = new_secret()
    command = c.RegisterKey(key_digest=digest(secret), spaces=frozenset(spaces), name=name, key_id=kernel.draw("ak_"), role=role)
    command.check(limits)
    view: ApiKeyView = await kernel.submit(command)
    return 201, CreatedKeyView(*view, key=secret)  # (the secret: in this answer only, never kept)


async def revoke_key(services: Runtime, request: Request, key_id: str) -> tuple[int, ApiKeyView]:
    services.authorize_admin(request)
    kernel = services.kernel
    return 200, await kernel.submit(kernel.parse(c.RevokeKey, {}, {"key_id": key_id}))


async def list_keys(services: Runtime, request: Request) -> tuple[int, ApiKeysView]:
    services.authorize_admin(request)
    space = request.param("space")
    keys = services.kernel.keys
    views = [KernelState.key_view(key) for key in keys.all() if space is None or space in key.spaces]
    return 200, ApiKeysView(tuple(views))


async def list_spaces(services: Runtime, request: Request) -> tuple[int, SpacesView]:
    services.authorize_admin(request)
    kernel = services.kernel
    now_ms = kernel.clock.now_ms()
    spaces = {space.id: space for space in kernel.spaces()}
    keys_per_space: dict[str, int] = {}
    for key in kernel.keys.all():
        if key.revoked_ms is None:
            for opened in key.spaces:
                keys_per_space[opened] = keys_per_space.get(opened, 0) + 1
    rows = []
    for space_id in sorted(set(keys_per_space) | {s for s, space in spaces.items() if len(space.scopes)}):
        space = spaces.get(space_id)
        rows.append(SpaceRowView(
            space_id,
            keys_per_space.get(space_id, 0),
            0 if space is None else len(space.scopes),
            0 if space is None else sum(1 for c in space.claims.held() if c.held_at(now_ms)),
            0 if space is None else space.usage.total,
        ))
    return 200, SpacesView(tuple(rows))

endpoint(router, "POST", BASE + "/keys", Doc(
    "Make an API key for some spaces", (Reply(201, "ApiKey", "Created, with the secret"),), body=(_SPACE, _SPACES, _NAME, _ROLE),
    body_required=False, errors=("400", "403", "404"), group=G,
), create_key)
endpoint(router, "GET", BASE + "/keys", Doc(
    "API keys (optionally of one space)", (Reply(200, "ApiKeys"),), query=("space",), errors=("403",), group=G,
), list_keys)
endpoint(router, "POST", BASE + "/keys/{key_id}/revoke", Doc(
    "Revoke an API key", (Reply(200, "ApiKey"),), errors=("403", "404"), group=G,
), revoke_key)
endpoint(router, "GET", BASE + "/spaces", Doc("Spaces and what they hold", (Reply(200, "Spaces"),), errors=("403",), group=G), list_spaces)
