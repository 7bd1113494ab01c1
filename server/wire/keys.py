"""The wire shapes of API keys (`actors/keys.py`'s view)."""

from __future__ import annotations

from typing import Any

from ...actors.keys import ApiKeyView
from .shape import Shape, component

__all__ = ["API_KEY", "COMPONENTS"]

API_KEY = Shape(ApiKeyView)


def _api_key() -> dict[str, Any]:
    # Registering a key answers its secret too (`key`, added by the admin route: the kernel never
    # holds it), and a role's meaning is worth saying.
    schema = component(API_KEY)
    schema["properties"]["role"] = {**schema["properties"]["role"], "description": "editor: reads and changes; viewer: reads only"}
    schema["properties"]["key"] = {"type": "string", "description": "the new key's secret: shown in this answer only"}
    return schema


# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {"ApiKey": _api_key()}
