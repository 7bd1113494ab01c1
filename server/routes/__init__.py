"""The HTTP API, one module per resource; `ROUTER` holds every route."""

from ..http import Router
from . import claims, health, scopes

__all__ = ["ROUTER"]

ROUTER = Router()
for module in (health, scopes, claims):
    ROUTER.include(module.router)
