"""The wire shapes of timers (`server/wire/timers.py`): the bytes clients read, and the OpenAPI
components made from the same declaration.

The `*_before` functions are the answers as the kernel built them before its views were typed
(`TimerTable.view`, `fired_view`, `named_view` and a poll's reply, kept here as they were written
then): every generated view must encode to exactly their bytes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.limits import Limits
from runstate.actors.timers import FiredTimerView, NamedTimerView, TimerPollOneView, TimerPollView, TimerView
from runstate.actors.timestamps import format_ms
from runstate.server import wire
from runstate.server.openapi import openapi
from runstate.server.wire.timers import FIRED_TIMER, NAMED_TIMER, TIMER


def timer_before(view: Any) -> dict[str, Any]:
    """`TimerTable.view` as it was."""
    return {
        "id": view.id,
        "scopeId": view.scope_id,
        "name": view.name,
        "state": view.state,
        "fireAt": format_ms(view.fire_ms),
        "firedAt": None if view.fired_ms is None else format_ms(view.fired_ms),
        "createdAt": format_ms(view.created_ms),
        "endedAt": None if view.ended_ms is None else format_ms(view.ended_ms),
    }


def fired_before(view: FiredTimerView) -> dict[str, Any]:
    return {**timer_before(view), "token": view.token}


def named_before(view: NamedTimerView) -> dict[str, Any]:
    before = {**timer_before(view), "now": format_ms(view.now_ms)}
    before["token"] = view.token
    return before


def poll_before(view: TimerPollView | TimerPollOneView) -> dict[str, Any]:
    """A poll's reply as it was: the scope, the one timer asked for (if one was), the fired ones."""
    reply: dict[str, Any] = {"scopeId": view.scope_id}
    if isinstance(view, TimerPollOneView):
        reply["timer"] = timer_before(view.timer)
    reply["timers"] = [fired_before(timer) for timer in view.timers]
    return reply


_text = st.text(max_size=40)
_instant = st.integers(min_value=0, max_value=253_402_300_799_999)
_maybe_instant = st.none() | _instant
_state = st.sampled_from(["ARMED", "FIRED", "ACKED", "CANCELLED", "EXPIRED"])
_common = (_text, _text, st.none() | _text, _state, _instant, _maybe_instant, _instant, _maybe_instant)
timers = st.builds(TimerView, *_common)
fired = st.builds(FiredTimerView, *_common, _text)
named = st.builds(NamedTimerView, *_common, _instant, st.none() | _text)
_listed = st.lists(fired, max_size=4).map(tuple)
polls = st.builds(TimerPollView, _text, _listed) | st.builds(TimerPollOneView, _text, timers, _listed)


@settings(max_examples=150, deadline=None)
@given(timers, named, polls)
def test_every_timer_answer_encodes_to_the_bytes_the_clients_read_before(timer: TimerView, by_name: NamedTimerView, poll: Any) -> None:
    """A timer, a put by name and a poll, alone, in a listing and as the idempotency table keeps
    them: the same bytes as before, field order too."""
    assert wire.dumps(timer) == orjson.dumps(timer_before(timer))
    assert wire.dumps({"scopeId": "r", "timers": [timer]}) == orjson.dumps({"scopeId": "r", "timers": [timer_before(timer)]})
    assert wire.dumps(by_name) == orjson.dumps(named_before(by_name))
    assert orjson.dumps(wire.encode(by_name)) == orjson.dumps(named_before(by_name))
    assert wire.dumps(poll) == orjson.dumps(poll_before(poll))
    assert orjson.dumps(wire.encode(poll)) == orjson.dumps(poll_before(poll))


@settings(max_examples=100, deadline=None)
@given(timers, named, polls)
def test_each_encoded_timer_answer_validates_against_its_component(timer: TimerView, by_name: NamedTimerView, poll: Any) -> None:
    components = openapi(Limits())["components"]["schemas"]
    for view, name in ((timer, "Timer"), (by_name, "NamedTimer"), (poll, "TimerPoll")):
        body = orjson.loads(wire.dumps(view))
        jsonschema.validate(body, components[name])
        assert set(components[name]["required"]) <= set(body) <= set(components[name]["properties"])


def test_the_timer_components_list_exactly_the_encoders_fields_with_their_json_types() -> None:
    components = openapi(Limits())["components"]["schemas"]
    timer = {
        "id": {"type": "string"}, "scopeId": {"type": "string"}, "name": {"type": ["string", "null"]},
        "state": {"type": "string", "enum": ["ARMED", "FIRED", "ACKED", "CANCELLED", "EXPIRED"]},
        "fireAt": wire.TIMESTAMP, "firedAt": wire.nullable(wire.TIMESTAMP), "createdAt": wire.TIMESTAMP,
        "endedAt": wire.nullable(wire.TIMESTAMP),
    }
    assert components["Timer"]["properties"] == timer
    assert components["Timer"]["required"] == [field.name for field in TIMER.fields]
    assert components["NamedTimer"]["properties"] == {**timer, "now": wire.TIMESTAMP, "token": {"type": ["string", "null"]}}
    assert components["NamedTimer"]["required"] == [field.name for field in NAMED_TIMER.fields]
    poll = components["TimerPoll"]
    entry = {"type": "object", "properties": {**timer, "token": {"type": "string"}}, "required": [field.name for field in FIRED_TIMER.fields]}
    assert poll["properties"] == {
        "scopeId": {"type": "string"}, "timers": {"type": "array", "items": entry},
        "timer": {"type": "object", "properties": timer, "required": list(timer)},
    }
    assert poll["required"] == ["scopeId", "timers"]  # `timer` only when one was asked for
