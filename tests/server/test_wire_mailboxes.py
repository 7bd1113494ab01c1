"""The wire shape of a mailbox: the bytes clients read, and the OpenAPI component made from the
same declaration.

The official clients read a mailbox (`ensure`, `list`) as the server wrote it before the kernel
answered with typed views: `mailbox_before` below is that shape, kept here as the kernel built it
then (`MailboxTable.view` and `requirements_view`), and every generated mailbox must encode to
exactly its bytes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.limits import Limits
from runstate.actors.mailboxes import BudgetNeed, MailboxCountsView, MailboxView, PoolNeed, QuotaNeed, RequirementsView
from runstate.actors.timestamps import format_ms
from runstate.server import wire
from runstate.server.openapi import openapi


def mailbox_before(view: MailboxView) -> dict[str, Any]:
    needs = view.requirements
    requirements = None if needs is None else {
        "pools": [{"permitId": pool_id, "units": units} for pool_id, units in needs.pools],
        "quotas": [{"allowanceId": allowance_id, "units": units} for allowance_id, units in needs.quotas],
        "budgets": [{"budgetId": budget_id, "reserveMinor": amount} for budget_id, amount in needs.budgets],
    }
    return {
        "id": view.id,
        "name": view.name,
        "mode": view.mode,
        "backlogLimit": view.backlog_limit,
        "maxAttempts": view.max_attempts,
        "requirements": requirements,
        "backlog": view.backlog,
        "counts": {
            "queued": view.counts.queued,
            "delayed": view.counts.delayed,
            "leased": view.counts.leased,
            "deadLetters": view.counts.dead_letters,
        },
        "createdAt": format_ms(view.created_ms),
    }


_text = st.text(max_size=30)
_count = st.integers(0, 2**31)
_units = st.integers(1, 2**31)
_requirements = st.builds(
    RequirementsView,
    st.lists(st.builds(PoolNeed, _text, _units), max_size=4).map(tuple),
    st.lists(st.builds(QuotaNeed, _text, _units), max_size=4).map(tuple),
    st.lists(st.builds(BudgetNeed, _text, st.integers(1, 10**30).map(str)), max_size=2).map(tuple),
)
mailboxes = st.builds(
    MailboxView, _text, _text, st.just("WORK"), st.none() | st.integers(1, 10**6), st.integers(1, 1000),
    st.none() | _requirements, _count, st.builds(MailboxCountsView, _count, _count, _count, _count),
    st.integers(0, 253_402_300_799_999),
)


@settings(max_examples=200, deadline=None)
@given(mailboxes)
def test_every_mailbox_encodes_to_the_bytes_the_clients_read_before(view: MailboxView) -> None:
    """Alone, listed, in a batch's results, and as the idempotency table keeps it: the same bytes."""
    before = mailbox_before(view)
    assert wire.dumps(view) == orjson.dumps(before)
    assert wire.dumps({"mailboxes": [view]}) == orjson.dumps({"mailboxes": [before]})
    assert wire.dumps({"results": [{"status": 200, "body": view}]}) == orjson.dumps({"results": [{"status": 200, "body": before}]})
    assert orjson.dumps(wire.encode(view)) == orjson.dumps(before)


@settings(max_examples=100, deadline=None)
@given(mailboxes)
def test_each_encoded_mailbox_validates_against_the_documented_component(view: MailboxView) -> None:
    schema = openapi(Limits())["components"]["schemas"]["Mailbox"]
    body = orjson.loads(wire.dumps(view))
    jsonschema.validate(body, schema)
    assert list(body) == list(schema["properties"]) == schema["required"]


def test_the_mailbox_component_lists_exactly_the_encoders_fields() -> None:
    schema = openapi(Limits())["components"]["schemas"]["Mailbox"]
    assert list(schema["properties"]) == [field.name for field in wire.mailboxes.MAILBOX.fields]
    assert schema["properties"]["counts"]["required"] == ["queued", "delayed", "leased", "deadLetters"]
    requirements = schema["properties"]["requirements"]
    assert requirements["type"] == ["object", "null"]
    assert requirements["properties"]["budgets"]["items"]["properties"] == {"budgetId": {"type": "string"}, "reserveMinor": {"type": "string"}}
    assert requirements["properties"]["pools"]["items"]["required"] == ["permitId", "units"]
