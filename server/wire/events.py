"""The wire shapes of the event log (`actors/events.py`'s views)."""

from __future__ import annotations

from typing import Any

from ...actors.events import AggregateView, EventPageView, EventView
from .shape import Shape, component

__all__ = ["AGGREGATE", "EVENT", "EVENT_PAGE", "COMPONENTS"]

AGGREGATE = Shape(AggregateView)
EVENT = Shape(EventView)
EVENT_PAGE = Shape(EventPageView)


def _event() -> dict[str, Any]:
    # A payload is always an object (its values named by the event's type); the view keeps it as
    # the JSON it is, so the component says which kind of JSON.
    schema = component(EVENT)
    schema["properties"]["payload"] = {"type": "object", "description": "the event's values, named by its type"}
    return schema


# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {
    "Event": _event(),
    "EventPage": {
        **component(EVENT_PAGE),
        "properties": {"events": {"type": "array", "items": {"$ref": "#/components/schemas/Event"}}, "nextCursor": {"type": "string"}},
    },
}
