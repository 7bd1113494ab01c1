"""The wire shapes of an operator's dead-letter actions (`actors/dead_letters.py`'s views): a page
of a mailbox's dead letters, and the answers of a requeue, a delete and a purge.

Every field follows the rule (`shape.py`): `dead_letters` is `deadLetters`, `dry_run` is `dryRun`,
`requeued_as` is `requeuedAs`, a skip's reasons are `task`, `runEnded` and `deadlinePassed`.
"""

from __future__ import annotations

from typing import Any

from ...actors.dead_letters import DeadLetterPage, DeletedView, PurgedView, RequeuedView, RequeueSkipped
from .messages import DEAD_LETTER
from .shape import Shape, component

__all__ = ["DEAD_LETTER_PAGE", "REQUEUE_SKIPPED", "REQUEUED", "DELETED", "PURGED", "COMPONENTS"]

# A page of dead letters, each as the mailbox's listing writes it (its payload included).
DEAD_LETTER_PAGE = Shape(DeadLetterPage, nested={"dead_letters": DEAD_LETTER})
REQUEUE_SKIPPED = Shape(RequeueSkipped)
REQUEUED = Shape(RequeuedView)
DELETED = Shape(DeletedView)
PURGED = Shape(PurgedView)

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {
    "DeadLetterPage": component(DEAD_LETTER_PAGE),
    "DeadLettersRequeued": component(REQUEUED),
    "DeadLettersDeleted": component(DELETED),
    "MailboxPurged": component(PURGED),
}
