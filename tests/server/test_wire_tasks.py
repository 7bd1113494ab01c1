"""The wire shapes of tasks: the bytes clients read, and the OpenAPI components made from the same
declaration.

The official clients 0.2.0 and 0.3.0 read a task's answers as the server wrote them before the
kernel answered with typed views: `wire_before` below is that shape, kept here as it was written
then (`TaskTable.view`'s dict, with `created` and `replay` added by a submit, and `taskId`,
`groupId` and `group` by a group member's submit), and every generated task must encode to
exactly its bytes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.group_commands import GroupSubmittedView
from runstate.actors.groups import GroupStateView
from runstate.actors.limits import Limits
from runstate.actors.tasks import SubmittedTaskView, TaskView
from runstate.actors.timestamps import format_ms
from runstate.server import wire
from runstate.server.openapi import openapi
from runstate.server.wire.tasks import created_status


def wire_before(view: Any) -> dict[str, Any]:
    """A task's answer as the kernel built it before its views were typed (`TaskTable.view`, then
    a submit's `{**view, "created", "replay"}` and a member's `{**reply, "taskId", "groupId", "group"}`)."""
    body = {
        "id": view.id,
        "taskId": view.id,
        "taskKey": view.task_key,
        "scopeId": view.scope_id,
        "mailboxId": view.mailbox_id,
        "messageId": view.message_id,
        "state": view.state,
        "attempt": view.attempt,
        "outcome": view.outcome,
        "outcomeReason": view.outcome_reason,
        "deadline": None if view.deadline_ms is None else format_ms(view.deadline_ms),
        "subscribers": list(view.subscribers),
        "createdAt": format_ms(view.created_ms),
        "updatedAt": format_ms(view.updated_ms),
        "finishedAt": None if view.finished_ms is None else format_ms(view.finished_ms),
        "tombstoned": view.tombstoned,
    }
    if isinstance(view, (SubmittedTaskView, GroupSubmittedView)):
        body = {**body, "created": view.created, "replay": view.replay}
    if isinstance(view, GroupSubmittedView):
        group = view.group
        body = {**body, "taskId": view.id, "groupId": view.group_id, "group": {
            "groupId": group.group_id, "state": group.state, "outcome": group.outcome, "outcomeReason": group.outcome_reason,
        }}
    return body


_text = st.text(max_size=40)
_maybe_text = st.none() | _text
_instant = st.integers(min_value=0, max_value=253_402_300_799_999)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)
_state = st.sampled_from(["QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"])
_group = st.builds(
    GroupStateView, _text, st.sampled_from(["OPEN", "SEALED", "FINALIZED"]),
    st.none() | st.sampled_from(["SUCCEEDED", "FAILED", "CANCELLED"]), _maybe_text,
)


@st.composite
def tasks(draw: st.DrawFn) -> Any:
    fields = (
        draw(_text), draw(_text), draw(_text), draw(_text), draw(_text), draw(_state), draw(st.integers(0, 2**31)),
        draw(_json), draw(_maybe_text), draw(st.none() | _instant), tuple(draw(st.lists(_text, max_size=4))),
        draw(_instant), draw(_instant), draw(st.none() | _instant), draw(st.booleans()),
    )
    kind = draw(st.sampled_from([TaskView, SubmittedTaskView, GroupSubmittedView]))
    if kind is TaskView:
        return TaskView(*fields)
    created = draw(st.booleans())
    if kind is SubmittedTaskView:
        return SubmittedTaskView(*fields, created, not created)
    return GroupSubmittedView(*fields, created, not created, draw(_text), draw(_group))


@settings(max_examples=200, deadline=None)
@given(tasks())
def test_every_task_encodes_to_the_bytes_the_clients_read_before(view: Any) -> None:
    """Alone, in a listing and inside a batch's results, and as the idempotency table keeps it:
    the same bytes as before, field order too; a submit's status read from either form."""
    before = wire_before(view)
    assert wire.dumps(view) == orjson.dumps(before)
    assert wire.dumps({"scopeId": "r", "tasks": [view], "truncated": False}) == orjson.dumps({"scopeId": "r", "tasks": [before], "truncated": False})
    assert wire.dumps({"results": [{"status": 200, "body": view}]}) == orjson.dumps({"results": [{"status": 200, "body": before}]})
    assert orjson.dumps(wire.encode(view)) == orjson.dumps(before)
    if not isinstance(view, TaskView):
        assert created_status(view) == created_status(wire.encode(view)) == (201 if view.created else 200)


def _components() -> dict[str, Any]:
    return openapi(Limits())["components"]["schemas"]


@settings(max_examples=100, deadline=None)
@given(tasks())
def test_each_encoded_task_validates_against_the_documented_component(view: Any) -> None:
    """What the encoder writes is what the document says, every field with its JSON type."""
    components = _components()
    body = orjson.loads(wire.dumps(view))
    name = {TaskView: "Task", SubmittedTaskView: "Submitted", GroupSubmittedView: "GroupSubmitted"}[type(view)]
    schema = {**components[name], "components": {"schemas": components}}
    jsonschema.validate(body, schema)  # (its references resolved in the document's components, carried along)
    assert list(body) == list(components[name]["properties"]) == components[name]["required"]


def test_the_task_components_list_exactly_the_encoders_fields_with_their_json_types() -> None:
    """Task is what a task answer writes; Submitted adds `created` and `replay`; each type is the
    view field's."""
    components = _components()
    assert list(components["Task"]["properties"]) == [field.name for field in wire.TASK.fields]
    assert list(components["Submitted"]["properties"]) == [field.name for field in wire.SUBMITTED_TASK.fields]
    nullable_text, timestamp = {"type": ["string", "null"]}, wire.TIMESTAMP
    assert components["Task"]["properties"] == {
        "id": {"type": "string"},
        "taskId": {"type": "string"},
        "taskKey": {"type": "string"},
        "scopeId": {"type": "string"},
        "mailboxId": {"type": "string"},
        "messageId": {"type": "string"},
        "state": {"type": "string", "enum": ["QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"]},
        "attempt": {"type": "integer"},
        "outcome": {"description": "any JSON value"},
        "outcomeReason": nullable_text,
        "deadline": wire.nullable(timestamp),
        "subscribers": {"type": "array", "items": {"type": "string"}},
        "createdAt": timestamp,
        "updatedAt": timestamp,
        "finishedAt": wire.nullable(timestamp),
        "tombstoned": {"type": "boolean"},
    }
    assert components["Submitted"]["properties"] == {
        **components["Task"]["properties"], "created": {"type": "boolean"}, "replay": {"type": "boolean"},
    }
    # A member's submit is the submit's answer with the group's id and state.
    assert [field.name for field in wire.GROUP_SUBMITTED_TASK.fields][-2:] == ["groupId", "group"]
    group_submitted = components["GroupSubmitted"]["properties"]
    assert list(group_submitted) == [field.name for field in wire.GROUP_SUBMITTED_TASK.fields]
    assert group_submitted == {**components["Submitted"]["properties"], "groupId": {"type": "string"}, "group": group_submitted["group"]}
    assert group_submitted["group"] == components["GroupState"]
