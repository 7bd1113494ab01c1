"""`GET /metrics`: Prometheus text format (`server/metrics.py` says what is in it).

Without a key only from loopback (the usual place of a local Prometheus or an operator's curl):
the numbers name spaces and show the load, which is not for anyone who can reach the port. From
any other address it needs the admin key, unless `metrics_public` is set.
"""

from __future__ import annotations

import ipaddress

from ..api import Doc, Reply, endpoint
from ..http import Raw, Request, Router
from ..metrics import CONTENT_TYPE
from ..runtime import Runtime

router = Router()


def _loopback(address: str | None) -> bool:
    if address is None:
        return False
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


async def metrics(services: Runtime, request: Request) -> tuple[int, Raw]:
    if not services.settings.metrics_public and not _loopback(request.client):
        services.authorize_admin(request)
    return 200, Raw(services.telemetry.metrics.render(), CONTENT_TYPE)


endpoint(router, "GET", "/metrics", Doc(
    "Prometheus metrics (from loopback without a key, else with the admin key)",
    (Reply(200, {"type": "string"}, "Prometheus text format", "text/plain"),), errors=("401", "403"), group="Operating it",
    admin_key_off_loopback=True,
), metrics, public=True)
