"""Settling a delivery: complete, nack, return, renew.

Each carries the delivery's token; one that is not current (the lease ran out and the message was
delivered again, or the task was cancelled) is 409 STALE_CLAIM and changes nothing.
"""

from __future__ import annotations

from ...actors import commands as c
from ..api import Doc, Reply, endpoint
from ..http import Router

router = Router()

BASE = "/v1/spaces/{space}/messages/{message_id}"
ERRORS = ("400", "404", "409")
G = "Mailboxes and messages"

endpoint(router, "POST", BASE + "/complete", Doc(
    "Complete a delivery", (Reply(200, "Settled"),), c.CompleteDelivery, errors=ERRORS, idempotent=True, group=G,
))
endpoint(router, "POST", BASE + "/nack", Doc(
    "Retry (after a backoff) or reject a delivery", (Reply(200, "Settled"),), c.NackDelivery, errors=ERRORS,
    idempotent=True, group=G,
))
endpoint(router, "POST", BASE + "/return", Doc(
    "Give a delivery back unhandled: queued again at once, its attempt not counted against maxAttempts, and what its "
    "admission took given back with it (only its current holder, before it is settled)", (Reply(200, "Settled"),), c.ReturnDelivery, errors=ERRORS,
    idempotent=True, group=G,
))
endpoint(router, "POST", BASE + "/renew", Doc(
    "Renew a delivery's lease", (Reply(200, "DeliveryRenewed"),), c.RenewDelivery, errors=ERRORS, idempotent=True, group=G,
))
