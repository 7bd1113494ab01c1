"""The wire shapes of mailboxes (`actors/mailboxes.py`'s views)."""

from __future__ import annotations

from typing import Any

from ...actors.mailboxes import BudgetNeed, MailboxCountsView, MailboxesView, MailboxView, PoolNeed, QuotaNeed, RequirementsView
from .shape import Shape, component

__all__ = ["MAILBOX", "MAILBOXES", "MAILBOX_COUNTS", "REQUIREMENTS", "COMPONENTS"]

# A mailbox's default requirements, by id: a pool's id is written `permitId`, as a grant names it.
POOL_NEED = Shape(PoolNeed)
QUOTA_NEED = Shape(QuotaNeed)
BUDGET_NEED = Shape(BudgetNeed)
REQUIREMENTS = Shape(RequirementsView)
# Its messages by state (`deadLetters`: its dead letters kept).
MAILBOX_COUNTS = Shape(MailboxCountsView)
MAILBOX = Shape(MailboxView)
# Every mailbox of a space (`GET /mailboxes`).
MAILBOXES = Shape(MailboxesView)

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {
    "Mailbox": component(MAILBOX),
    "Mailboxes": component(MAILBOXES),
}
