"""The HTTP API, one module per resource; `ROUTER` holds every route."""

from ..http import Router
from . import claims, health, mailboxes, messages, once, scopes, tasks
from . import admin, cluster, inspect, metrics, openapi
from . import batch, history
from . import capacity
from . import coordination

__all__ = ["ROUTER"]

ROUTER = Router()
for module in (health, scopes, claims, mailboxes, messages, tasks, once, admin, inspect, metrics, openapi, cluster):
    ROUTER.include(module.router)
ROUTER.include(capacity.router)
ROUTER.include(coordination.router)
ROUTER.include(batch.router)
# Last: the past of every read of a space, made from the routes above (`history.twins`).
ROUTER.include(history.router)
ROUTER.include(history.twins(ROUTER.routes))
