"""`GET /v1/openapi.json`: the OpenAPI 3.1 description of every route (`server/openapi.py`). No key needed."""

from __future__ import annotations

from typing import Any

import orjson

from ..api import Doc, Reply, endpoint
from ..http import Raw, Request, Router
from ..openapi import OPENAPI_PATH, openapi
from ..runtime import Runtime

router = Router()

_cache: dict[Any, bytes] = {}  # Limits (frozen, hashable) -> the document


async def document(services: Runtime, request: Request) -> tuple[int, Raw]:
    limits = services.limits
    body = _cache.get(limits)
    if body is None:
        body = _cache[limits] = orjson.dumps(openapi(limits))
    return 200, Raw(body, "application/json")


endpoint(router, "GET", OPENAPI_PATH, Doc("This document", (Reply(200, {"type": "object"}),), group="Operating it"), document, public=True)
