"""The HTTP API, one module per resource; `ROUTER` holds every route."""

from ..http import Router
from . import claims, health, scopes
from . import admin, inspect, metrics

__all__ = ["ROUTER"]

ROUTER = Router()
for module in (health, scopes, claims, admin, inspect, metrics):
    ROUTER.include(module.router)
