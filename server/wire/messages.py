"""The wire shapes of messages and their deliveries (`actors/messages.py`, `deliveries.py` and
`work.py`'s views)."""

from __future__ import annotations

from typing import Any

from ...actors.deliveries import (
    DelayedSettledView, DelayedTaskSettledView, DeliveredMessage, DeliveriesView, DeliveryView, RenewedDeliveryView,
    SettledView, TaskSettledView,
)
from ...actors.messages import DeadLetterView, DelayedMessageView, LeasedMessageView, MessageView
from ...actors.work import SentView
from .shape import Shape, component

__all__ = [
    "MESSAGE", "LEASED_MESSAGE", "DELAYED_MESSAGE", "DEAD_LETTER", "DELIVERED_MESSAGE", "DELIVERY", "DELIVERIES",
    "RENEWED_DELIVERY", "SETTLED", "DELAYED_SETTLED", "TASK_SETTLED", "DELAYED_TASK_SETTLED", "SENT", "COMPONENTS",
    "sent_status",
]

# A message's deadline keeps the name `deadline` the send gives it; a lease's end and length are
# `leaseExpiresAt` and `leaseSeconds`, as the official clients read them from a delivery.
_DEADLINE = {"deadline_ms": "deadline"}
_LEASE = {"expires_ms": "leaseExpiresAt"}
_LEASE_SECONDS = {"lease_ms": "leaseSeconds"}

# A message as a reader is shown it; a leased one adds its lease's end and holder, a delayed one
# when it is visible again, a dead letter its payload.
MESSAGE = Shape(MessageView, rename=_DEADLINE)
LEASED_MESSAGE = Shape(LeasedMessageView, rename={**_DEADLINE, **_LEASE})
DELAYED_MESSAGE = Shape(DelayedMessageView, rename=_DEADLINE)
DEAD_LETTER = MESSAGE.extended(DeadLetterView)

# A delivery: the message handed over, the lease's token, end and length.
DELIVERED_MESSAGE = Shape(DeliveredMessage, rename=_DEADLINE)
DELIVERY = Shape(DeliveryView, rename=_LEASE, seconds=_LEASE_SECONDS)
DELIVERIES = Shape(DeliveriesView)
RENEWED_DELIVERY = Shape(RenewedDeliveryView, rename=_LEASE, seconds=_LEASE_SECONDS)

# A complete's or a nack's answer; a retried message adds when it is visible again, a task's
# delivery the task's state.
SETTLED = Shape(SettledView)
DELAYED_SETTLED = SETTLED.extended(DelayedSettledView)
TASK_SETTLED = SETTLED.extended(TaskSettledView)
DELAYED_TASK_SETTLED = DELAYED_SETTLED.extended(DelayedTaskSettledView)

# A send's answer: the message's id is written as `id` and `messageId`.
SENT = Shape(SentView, also={"messageId": "id"})

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {
    "Message": component(MESSAGE, LEASED_MESSAGE, DELAYED_MESSAGE, DEAD_LETTER),
    "DeadLetter": component(DEAD_LETTER),
    "Sent": component(SENT),
    "Delivery": component(DELIVERY),
    "Deliveries": component(DELIVERIES),
    "Settled": component(SETTLED, DELAYED_SETTLED, TASK_SETTLED, DELAYED_TASK_SETTLED),
    "DeliveryRenewed": component(RENEWED_DELIVERY),
}


def sent_status(reply: Any) -> int:
    """A send's status: 201 when it sent a message, 200 when it was a replay of the work key's
    send. The reply is the kernel's view, or its wire form where the answer was kept for an
    Idempotency-Key's retry."""
    replay = reply["replay"] if type(reply) is dict else reply.replay
    return 200 if replay else 201
