"""The wire shapes of messages and deliveries: the bytes clients read, and the OpenAPI components
made from the same declaration.

The official clients 0.2.0 and 0.3.0 read a delivery, a settle, a renewal and a send as the
server wrote them before the kernel answered with typed views; the functions `*_before` below are
those shapes, kept here as the kernel built them then, and every generated view must encode to
exactly their bytes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.deliveries import (
    DelayedSettledView, DelayedTaskSettledView, DeliveredMessage, DeliveriesView, DeliveryView, RenewedDeliveryView,
    SettledView, TaskSettledView,
)
from runstate.actors.limits import Limits
from runstate.actors.messages import DeadLetterView, DelayedMessageView, LeasedMessageView, MessageView
from runstate.actors.timestamps import format_ms
from runstate.actors.work import SentView
from runstate.server import wire
from runstate.server.openapi import openapi
from runstate.server.wire.messages import sent_status


def _at(ms: int | None) -> str | None:
    return None if ms is None else format_ms(ms)


def message_before(view: Any) -> dict[str, Any]:
    """`MessageTable.view` as it was (with `payload=True` for a dead letter)."""
    body = {
        "id": view.id, "mailboxId": view.mailbox_id, "scopeId": view.scope_id, "taskId": view.task_id, "state": view.state,
        "attempt": view.attempt, "workKey": view.work_key, "deadline": _at(view.deadline_ms), "createdAt": format_ms(view.created_ms),
        "finishedAt": _at(view.finished_ms), "reason": view.reason,
    }
    if isinstance(view, LeasedMessageView):
        body["leaseExpiresAt"] = format_ms(view.expires_ms)
        body["holder"] = view.holder
    elif isinstance(view, DelayedMessageView):
        body["visibleAt"] = format_ms(view.visible_ms)
    if isinstance(view, DeadLetterView):
        body["payload"] = view.payload
    return body


def delivery_before(view: DeliveryView) -> dict[str, Any]:
    """`delivery_view` as it was."""
    message = view.message
    return {
        "message": {
            "id": message.id, "mailboxId": message.mailbox_id, "scopeId": message.scope_id, "payload": message.payload,
            "attempt": message.attempt, "workKey": message.work_key, "deadline": _at(message.deadline_ms), "taskId": message.task_id,
        },
        "token": view.token,
        "leaseExpiresAt": format_ms(view.expires_ms),
        "leaseSeconds": view.lease_ms // 1000,
    }


def settled_before(view: Any) -> dict[str, Any]:
    """`_settled`'s reply as it was."""
    reply = {"id": view.id, "state": view.state, "attempt": view.attempt, "taskId": view.task_id}
    if isinstance(view, (DelayedSettledView, DelayedTaskSettledView)):
        reply["visibleAt"] = format_ms(view.visible_ms)
    if isinstance(view, (TaskSettledView, DelayedTaskSettledView)):
        reply["taskState"] = view.task_state
    return reply


def renewed_before(view: RenewedDeliveryView) -> dict[str, Any]:
    return {"id": view.id, "leaseExpiresAt": format_ms(view.expires_ms), "leaseSeconds": view.lease_ms // 1000, "attempt": view.attempt}


def sent_before(view: SentView) -> dict[str, Any]:
    return {
        "id": view.id, "messageId": view.id, "mailboxId": view.mailbox_id, "scopeId": view.scope_id, "workKey": view.work_key,
        "state": view.state, "replay": view.replay, "deduplicated": view.deduplicated,
    }


_text = st.text(max_size=30)
_maybe_text = st.none() | _text
_instant = st.integers(min_value=0, max_value=253_402_300_799_999)
_maybe_instant = st.none() | _instant
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=10,
)
_message_state = st.sampled_from(["QUEUED", "DELAYED", "LEASED", "COMPLETED", "DEAD", "DROPPED"])
_task_state = st.sampled_from(["QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"])
_attempt = st.integers(0, 2**31)
_lease_ms = st.integers(min_value=1, max_value=10**12)


@st.composite
def messages(draw: st.DrawFn) -> Any:
    fields = (
        draw(_text), draw(_text), draw(_text), draw(_maybe_text), draw(_message_state), draw(_attempt), draw(_maybe_text),
        draw(_maybe_instant), draw(_instant), draw(_maybe_instant), draw(_maybe_text),
    )
    kind = draw(st.sampled_from([MessageView, LeasedMessageView, DelayedMessageView, DeadLetterView]))
    if kind is LeasedMessageView:
        return kind(*fields, draw(_instant), draw(_text))
    if kind is DelayedMessageView:
        return kind(*fields, draw(_instant))
    if kind is DeadLetterView:
        return kind(*fields, draw(_json))
    return kind(*fields)


@st.composite
def deliveries(draw: st.DrawFn) -> DeliveryView:
    message = DeliveredMessage(
        draw(_text), draw(_text), draw(_text), draw(_json), draw(_attempt), draw(_maybe_text), draw(_maybe_instant), draw(_maybe_text),
    )
    return DeliveryView(message, draw(_text), draw(_instant), draw(_lease_ms))


@st.composite
def settles(draw: st.DrawFn) -> Any:
    fields = (draw(_text), draw(_message_state), draw(_attempt), draw(_maybe_text))
    kind = draw(st.sampled_from([SettledView, DelayedSettledView, TaskSettledView, DelayedTaskSettledView]))
    if kind is SettledView:
        return kind(*fields)
    if kind is DelayedSettledView:
        return kind(*fields, draw(_instant))
    if kind is TaskSettledView:
        return kind(*fields, draw(_task_state))
    return kind(*fields, draw(_instant), draw(_task_state))


@st.composite
def renewals(draw: st.DrawFn) -> RenewedDeliveryView:
    return RenewedDeliveryView(draw(_text), draw(_instant), draw(_lease_ms), draw(_attempt))


@st.composite
def sends(draw: st.DrawFn) -> SentView:
    replay = draw(st.booleans())
    return SentView(draw(_text), draw(_text), draw(_text), draw(_maybe_text), draw(st.none() | _message_state), replay, replay)


def _same_bytes(view: Any, before: dict[str, Any]) -> None:
    """Alone, in a batch's results, and as the idempotency table keeps it: the same bytes."""
    assert wire.dumps(view) == orjson.dumps(before)
    assert wire.dumps({"results": [{"status": 200, "body": view}]}) == orjson.dumps({"results": [{"status": 200, "body": before}]})
    assert orjson.dumps(wire.encode(view)) == orjson.dumps(before)


@settings(max_examples=150, deadline=None)
@given(messages())
def test_every_message_encodes_to_the_bytes_read_before(view: Any) -> None:
    before = message_before(view)
    _same_bytes(view, before)
    page = {"deadLetters": [view], "total": 1, "matched": 1, "truncated": False, "nextCursor": None}
    assert wire.dumps(page) == orjson.dumps({**page, "deadLetters": [before]})


@settings(max_examples=150, deadline=None)
@given(st.lists(deliveries(), min_size=1, max_size=3))
def test_every_delivery_encodes_to_the_bytes_the_clients_read_before(views: list[DeliveryView]) -> None:
    for view in views:
        _same_bytes(view, delivery_before(view))
    _same_bytes(DeliveriesView(tuple(views)), {"deliveries": [delivery_before(view) for view in views]})


@settings(max_examples=150, deadline=None)
@given(settles(), renewals(), sends())
def test_every_settle_renewal_and_send_encodes_to_the_bytes_the_clients_read_before(settled: Any, renewed: RenewedDeliveryView, sent: SentView) -> None:
    _same_bytes(settled, settled_before(settled))
    _same_bytes(renewed, renewed_before(renewed))
    _same_bytes(sent, sent_before(sent))
    assert sent_status(sent) == sent_status(wire.encode(sent)) == (200 if sent.replay else 201)


def _components() -> dict[str, Any]:
    return openapi(Limits())["components"]["schemas"]


@settings(max_examples=100, deadline=None)
@given(messages(), deliveries(), settles(), renewals(), sends())
def test_each_encoded_answer_validates_against_its_documented_component(message, delivery, settled, renewed, sent) -> None:
    """What the encoder writes is what the document says, every field with its JSON type; the
    fields each component requires are the ones every variant writes."""
    components = _components()
    for name, view in (("Message", message), ("Delivery", delivery), ("Settled", settled), ("DeliveryRenewed", renewed), ("Sent", sent)):
        body = orjson.loads(wire.dumps(view))
        jsonschema.validate(body, components[name])
        assert set(components[name]["required"]) <= set(body) <= set(components[name]["properties"])


def test_the_components_list_exactly_the_encoders_fields() -> None:
    """Each component is the union of what its shapes write, in order; required, what all write."""
    components = _components()
    base = [field.name for field in wire.messages.MESSAGE.fields]
    assert list(components["Message"]["properties"]) == [*base, "leaseExpiresAt", "holder", "visibleAt", "payload"]
    assert components["Message"]["required"] == base
    assert list(components["Settled"]["properties"]) == ["id", "state", "attempt", "taskId", "visibleAt", "taskState"]
    assert components["Settled"]["required"] == ["id", "state", "attempt", "taskId"]
    assert list(components["Delivery"]["properties"]) == ["message", "token", "leaseExpiresAt", "leaseSeconds"]
    assert list(components["Delivery"]["properties"]["message"]["properties"]) == [
        "id", "mailboxId", "scopeId", "payload", "attempt", "workKey", "deadline", "taskId",
    ]
    assert list(components["DeliveryRenewed"]["properties"]) == ["id", "leaseExpiresAt", "leaseSeconds", "attempt"]
    assert components["Sent"]["properties"]["state"] == {
        "type": ["string", "null"], "enum": ["QUEUED", "DELAYED", "LEASED", "COMPLETED", "DEAD", "DROPPED", None],
    }
    assert list(components["Sent"]["properties"]) == components["Sent"]["required"] == [
        "id", "messageId", "mailboxId", "scopeId", "workKey", "state", "replay", "deduplicated",
    ]
