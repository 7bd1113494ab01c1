"""Mailboxes and their queues: list, create, send, recv, dead letters.

`recv` is a long poll: with `waitMs` it is held until a message arrives or the wait ends (capped
at `wait_ms_max`), and answers 204 with an empty body when there is nothing; when the client goes
away the wait is withdrawn, so no lease is handed to nobody.
"""

from __future__ import annotations

from ...actors import commands as c
from ...actors import reads
from ..api import NO_CONTENT, Doc, Reply, endpoint
from ..http import Request, Router
from ..runtime import Runtime

router = Router()

BASE = "/v1/spaces/{space}/mailboxes"

# The most dead letters one listing shows (newest first); `total` says how many are kept.
DEAD_LETTERS_LIST_MAX = 1000

_LIST = {"type": "object", "properties": {"mailboxes": {"type": "array", "items": {"$ref": "#/components/schemas/Mailbox"}}}, "required": ["mailboxes"]}
_DEAD = {
    "type": "object",
    "properties": {
        "deadLetters": {"type": "array", "items": {"$ref": "#/components/schemas/Message"}},
        "total": {"type": "integer"},
        "truncated": {"type": "boolean"},
    },
    "required": ["deadLetters", "total", "truncated"],
}


async def list_mailboxes(services: Runtime, request: Request, space: str) -> tuple[int, dict]:
    services.authorize(request, space)
    return 200, {"mailboxes": reads.mailboxes(services.kernel, space)}


async def read(services: Runtime, request: Request, space: str, mailbox_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    return 200, reads.mailbox(services.kernel, space, mailbox_id)


async def dead_letters(services: Runtime, request: Request, space: str, mailbox_id: str) -> tuple[int, dict]:
    services.authorize(request, space)
    return 200, reads.dead_letters(services.kernel, space, mailbox_id, DEAD_LETTERS_LIST_MAX)


G = "Mailboxes and messages"
endpoint(router, "GET", BASE, Doc("Every mailbox of the space", (Reply(200, _LIST),), errors=("404",), group=G), list_mailboxes)
endpoint(router, "POST", BASE, Doc(
    "Create a work queue", (Reply(201, "Mailbox", "Created"),), c.CreateMailbox, errors=("400", "404", "409"),
    idempotent=True, group=G,
), status=201)
endpoint(router, "PUT", BASE + "/by-name/{name}", Doc(
    "Get or create the mailbox of this name; maxAttempts and requirements, once declared, must match (else 409 CONFLICT)",
    (Reply(200, "Mailbox"),), c.EnsureMailbox, body_required=False, errors=("400", "404", "409"), idempotent=True, group=G,
))
endpoint(router, "GET", BASE + "/{mailbox_id}", Doc("A mailbox", (Reply(200, "Mailbox"),), errors=("404",), group=G), read)
endpoint(router, "GET", BASE + "/{mailbox_id}/dead-letters", Doc(
    "The newest dead letters", (Reply(200, _DEAD),), errors=("404",), group=G,
), dead_letters)
endpoint(router, "POST", BASE + "/{mailbox_id}/messages", Doc(
    "Send a message", (Reply(201, "Sent", "Sent"), Reply(200, "Sent", "A replay of the work key's message")),
    c.SendMessage, errors=("400", "404", "409"), idempotent=True, group=G,
), status=lambda view: 200 if view["replay"] else 201)
endpoint(router, "POST", BASE + "/{mailbox_id}/recv", Doc(
    "Lease the oldest deliverable message (a long poll with waitMs)",
    (Reply(200, "Delivery", "A delivery"), Reply(204, NO_CONTENT, "Nothing to deliver (after waiting up to waitMs)")),
    c.Receive, errors=("400", "404", "409"), idempotent=True, group=G,
), long_poll=True)
