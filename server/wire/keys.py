"""The wire shapes of API keys (`actors/keys.py`'s views, and the shell's in `server/views.py`:
a new key with its secret, the key of a request)."""

from __future__ import annotations

from typing import Any

from ...actors.keys import ApiKeyView, ApiKeysView
from ..views import AdminKeyView, CreatedKeyView, RequestKeyView
from .shape import Shape, component

__all__ = ["API_KEY", "API_KEYS", "CREATED_KEY", "REQUEST_KEY", "ADMIN_KEY", "COMPONENTS"]

API_KEY = Shape(ApiKeyView)
# Registering a key answers its secret too, after the view's fields (`key`: the kernel never holds it).
CREATED_KEY = API_KEY.extended(CreatedKeyView)
# The keys the admin lists (`GET /v1/admin/keys`).
API_KEYS = Shape(ApiKeysView)
# The key of a request (`GET /v1/key`): an API key's view and `admin`, or the admin key's.
REQUEST_KEY = API_KEY.extended(RequestKeyView)
ADMIN_KEY = Shape(AdminKeyView)


def _api_key() -> dict[str, Any]:
    # A role's meaning, and the secret's, are worth saying.
    schema = component(API_KEY, CREATED_KEY)
    schema["properties"]["role"] = {**schema["properties"]["role"], "description": "editor: reads and changes; viewer: reads only"}
    schema["properties"]["key"] = {**schema["properties"]["key"], "description": "the new key's secret: shown in this answer only"}
    return schema


# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {
    "ApiKey": _api_key(),
    "ApiKeys": component(API_KEYS),
    "RequestKey": {"anyOf": [REQUEST_KEY.schema(), ADMIN_KEY.schema()]},
}
