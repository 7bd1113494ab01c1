"""Mailboxes and their queues: list, create, send, recv, dead letters.

`recv` is a long poll: with `waitMs` it is held until a message arrives or the wait ends (capped
at `wait_ms_max`), and answers 204 with an empty body when there is nothing; when the client goes
away the wait is withdrawn, so no lease is handed to nobody.

Dead letters are listed a page at a time, newest first, filtered by reason and age, and an
operator requeues or deletes a set of them (`actors/dead_letters.py`), or purges what waits.

`recv-many` (our extension) leases up to `maxMessages` at once, in one turn: a worker's prefetch.
"""

from __future__ import annotations

from ...actors import commands as c
from ...actors import reads
from ...actors.dead_letters import AGE_S_MAX, LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX, DeadLetterFilter, DeadLetterPage
from ...actors.errors import VALIDATION_FAILED
from ...actors.mailboxes import MailboxesView, MailboxView
from ..api import NO_CONTENT, Doc, Reply, endpoint, endpoint_and_dot_segments
from ..errors import ApiError
from ..http import Request, Router, integer_param
from ..services import ReadServices
from ..wire.messages import sent_status

router = Router()

BASE = "/v1/spaces/{space}/mailboxes"



async def list_mailboxes(services: ReadServices, request: Request, space: str) -> tuple[int, MailboxesView]:
    services.authorize(request, space)
    return 200, MailboxesView(tuple(reads.mailboxes(services.kernel, space)))


async def read(services: ReadServices, request: Request, space: str, mailbox_id: str) -> tuple[int, MailboxView]:
    services.authorize(request, space)
    return 200, reads.mailbox(services.kernel, space, mailbox_id)


async def dead_letters(services: ReadServices, request: Request, space: str, mailbox_id: str) -> tuple[int, DeadLetterPage]:
    """A page of dead letters, newest first: `limit`, `cursor`, and the filters of an action."""
    services.authorize(request, space)
    kernel = services.kernel
    limit = integer_param(request, "limit", 1, LIST_LIMIT_MAX) or LIST_LIMIT_DEFAULT
    reason = request.param("reason") or None
    if reason is not None and len(reason) > kernel.limits.reason_len_max:
        raise ApiError(VALIDATION_FAILED, f"reason is longer than {kernel.limits.reason_len_max} characters")
    where = DeadLetterFilter(
        reason, integer_param(request, "olderThanSeconds", 0, AGE_S_MAX), integer_param(request, "newerThanSeconds", 0, AGE_S_MAX)
    )
    return 200, reads.dead_letters(kernel, space, mailbox_id, limit, request.param("cursor") or None, where)


G = "Mailboxes and messages"
endpoint(router, "GET", BASE, Doc("Every mailbox of the space", (Reply(200, "Mailboxes"),), errors=("404",), group=G), list_mailboxes)
endpoint(router, "POST", BASE, Doc(
    "Create a work queue", (Reply(201, "Mailbox", "Created"),), c.CreateMailbox, errors=("400", "404", "409"),
    idempotent=True, group=G, location=("/mailboxes/{}", "id"),
), status=201)
endpoint_and_dot_segments(router, "PUT", BASE + "/by-name/{name}", Doc(
    "Get or create the mailbox of this name; maxAttempts and requirements, once declared, must match (else 409 CONFLICT)",
    (Reply(200, "Mailbox"),), c.EnsureMailbox, body_required=False, errors=("400", "404", "409"), idempotent=True, group=G,
), "name")
endpoint(router, "GET", BASE + "/{mailbox_id}", Doc("A mailbox", (Reply(200, "Mailbox"),), errors=("404",), group=G), read)
endpoint(router, "GET", BASE + "/{mailbox_id}/dead-letters", Doc(
    f"Dead letters, newest first, a page at a time (limit 1-{LIST_LIMIT_MAX}, default {LIST_LIMIT_DEFAULT}; cursor), "
    "filtered by reason (contains) and age in seconds",
    (Reply(200, "DeadLetterPage"),), query=("limit", "cursor", "reason", "olderThanSeconds", "newerThanSeconds"), errors=("400", "404"),
    group=G,
), dead_letters)
endpoint(router, "POST", BASE + "/{mailbox_id}/dead-letters/requeue", Doc(
    "Requeue dead letters (by messageIds, a filter, or all) as new messages at the end of their queues; "
    "dryRun says how many it would",
    (Reply(200, "DeadLettersRequeued"),), c.RequeueDeadLetters, errors=("400", "404", "409"), idempotent=True, group=G, operator=True,
))
endpoint(router, "POST", BASE + "/{mailbox_id}/dead-letters/delete", Doc(
    "Delete dead letters (by messageIds, a filter, or all); dryRun says how many it would",
    (Reply(200, "DeadLettersDeleted"),), c.DeleteDeadLetters, errors=("400", "404", "409"), idempotent=True, group=G, operator=True,
))
endpoint(router, "POST", BASE + "/{mailbox_id}/purge", Doc(
    "End the messages waiting in the mailbox (all runs, or scopeId's): tasks CANCELLED, plain messages dropped; "
    "deliveries under way finish; dryRun says how many it would",
    (Reply(200, "MailboxPurged"),), c.PurgeMailbox, body_required=False, errors=("400", "404", "409"), idempotent=True, group=G,
    operator=True,
))
endpoint(router, "POST", BASE + "/{mailbox_id}/messages", Doc(
    "Send a message", (Reply(201, "Sent", "Sent"), Reply(200, "Sent", "A replay of the work key's message")),
    c.SendMessage, errors=("400", "404", "409"), idempotent=True, group=G,
), status=sent_status)
endpoint(router, "POST", BASE + "/{mailbox_id}/recv", Doc(
    "Lease the oldest deliverable message (a long poll with waitMs)",
    (Reply(200, "Delivery", "A delivery"), Reply(204, NO_CONTENT, "Nothing to deliver (after waiting up to waitMs)")),
    c.Receive, errors=("400", "404", "409"), idempotent=True, group=G,
), long_poll=True)
endpoint(router, "POST", BASE + "/{mailbox_id}/recv-many", Doc(
    "Lease up to maxMessages deliverable messages, oldest first (a long poll with waitMs, for the first): a prefetch (our extension)",
    (Reply(200, "Deliveries", "The deliveries"), Reply(204, NO_CONTENT, "Nothing to deliver (after waiting up to waitMs)")),
    c.ReceiveMany, errors=("400", "404", "409"), idempotent=True, group=G,
), long_poll=True)
