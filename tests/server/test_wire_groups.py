"""The wire shapes of task groups (`server/wire/groups.py`): the bytes clients read, and the
OpenAPI components made from the same declaration.

`group_before`, `state_before` and `verdict_before` are the answers as the kernel built them before
its views were typed (`GroupTable.view`, `GroupTable.state_view` and the verdict's reply, kept here
as they were written then): every generated view must encode to exactly their bytes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.groups import GroupCountsView, GroupMemberView, GroupStateView, GroupVerdictView, GroupView
from runstate.actors.limits import Limits
from runstate.actors.timestamps import format_ms
from runstate.server import wire
from runstate.server.openapi import openapi
from runstate.server.wire.groups import GROUP, GROUP_STATE, GROUP_VERDICT


def group_before(view: GroupView) -> dict[str, Any]:
    """`GroupTable.view` as it was (the group's fields read from the view)."""
    members = []
    for member in view.members:
        members.append({"taskId": member.task_id, "verdict": member.verdict, "state": member.state})
    verdicts = [member.verdict for member in view.members]
    return {
        "id": view.id,
        "groupId": view.id,
        "scopeId": view.scope_id,
        "mailboxId": view.mailbox_id,
        "parentScopeId": view.parent_scope_id,
        "condition": view.condition,
        "threshold": view.threshold,
        "expectedMembers": view.expected_members,
        "deadline": None if view.deadline_ms is None else format_ms(view.deadline_ms),
        "state": view.state,
        "outcome": view.outcome,
        "outcomeReason": view.outcome_reason,
        "members": members,
        "counts": {
            "members": len(verdicts),
            "accepted": verdicts.count("ACCEPTED"),
            "rejected": verdicts.count("REJECTED"),
        },
        "createdAt": format_ms(view.created_ms),
        "sealedAt": None if view.sealed_ms is None else format_ms(view.sealed_ms),
        "finalizedAt": None if view.finalized_ms is None else format_ms(view.finalized_ms),
    }


def state_before(view: GroupStateView | GroupVerdictView) -> dict[str, Any]:
    """`GroupTable.state_view` as it was: what close and seal answer."""
    return {"groupId": view.group_id, "state": view.state, "outcome": view.outcome, "outcomeReason": view.outcome_reason}


def verdict_before(view: GroupVerdictView) -> dict[str, Any]:
    """A verdict's answer as it was: the state view, then the member and the verdict."""
    return {**state_before(view), "taskId": view.task_id, "verdict": view.verdict}


_text = st.text(max_size=40)
_maybe_text = st.none() | _text
_instant = st.integers(min_value=0, max_value=253_402_300_799_999)
_maybe_instant = st.none() | _instant
_verdict = st.sampled_from(["ACCEPTED", "REJECTED"])
_state = st.sampled_from(["OPEN", "SEALED", "FINALIZED"])
_outcome = st.none() | st.sampled_from(["SUCCEEDED", "FAILED", "CANCELLED"])
_members = st.lists(st.builds(GroupMemberView, _text, st.none() | _verdict, _maybe_text), max_size=6).map(tuple)


@st.composite
def groups(draw: st.DrawFn) -> GroupView:
    members = draw(_members)
    verdicts = [member.verdict for member in members]
    counts = GroupCountsView(len(members), verdicts.count("ACCEPTED"), verdicts.count("REJECTED"))
    return GroupView(
        draw(_text), draw(_text), draw(_text), draw(_maybe_text),
        draw(st.sampled_from(["ALL_TERMINAL", "N_ACCEPTED", "FIRST_ACCEPTED"])), draw(st.none() | st.integers(1, 10**6)),
        draw(st.none() | st.integers(1, 10**6)), draw(_maybe_instant), draw(_state), draw(_outcome), draw(_maybe_text),
        members, counts, draw(_instant), draw(_maybe_instant), draw(_maybe_instant),
    )


states = st.builds(GroupStateView, _text, _state, _outcome, _maybe_text)
verdicts = st.builds(GroupVerdictView, _text, _state, _outcome, _maybe_text, _text, _verdict)


@settings(max_examples=150, deadline=None)
@given(groups(), states, verdicts)
def test_every_group_answer_encodes_to_the_bytes_the_clients_read_before(group: GroupView, state: GroupStateView, verdict: GroupVerdictView) -> None:
    """Alone, in a run's listing, inside a member's submission, and as the idempotency table keeps
    it: the same bytes as before, field order too."""
    before = group_before(group)
    assert wire.dumps(group) == orjson.dumps(before)
    assert wire.dumps({"scopeId": "r", "groups": [group]}) == orjson.dumps({"scopeId": "r", "groups": [before]})
    assert orjson.dumps(wire.encode(group)) == orjson.dumps(before)
    assert wire.dumps(state) == orjson.dumps(state_before(state))
    submitted = {"id": "t", "taskId": "t", "groupId": state.group_id}
    assert wire.dumps({**submitted, "group": state}) == orjson.dumps({**submitted, "group": state_before(state)})
    assert wire.dumps(verdict) == orjson.dumps(verdict_before(verdict))
    assert orjson.dumps(wire.encode(verdict)) == orjson.dumps(verdict_before(verdict))


@settings(max_examples=100, deadline=None)
@given(groups(), states, verdicts)
def test_each_encoded_group_answer_validates_against_its_component(group: GroupView, state: GroupStateView, verdict: GroupVerdictView) -> None:
    components = openapi(Limits())["components"]["schemas"]
    for view, name in ((group, "TaskGroup"), (state, "GroupState"), (verdict, "GroupVerdict")):
        body = orjson.loads(wire.dumps(view))
        jsonschema.validate(body, components[name])
        assert list(body) == list(components[name]["properties"]) == components[name]["required"]


def test_the_group_components_list_exactly_the_encoders_fields_with_their_json_types() -> None:
    components = openapi(Limits())["components"]["schemas"]
    state = {"type": "string", "enum": ["OPEN", "SEALED", "FINALIZED"]}
    outcome = {"type": ["string", "null"], "enum": ["SUCCEEDED", "FAILED", "CANCELLED", None]}
    assert components["GroupState"]["properties"] == {
        "groupId": {"type": "string"}, "state": state, "outcome": outcome, "outcomeReason": {"type": ["string", "null"]},
    }
    assert components["GroupVerdict"]["properties"] == {
        **components["GroupState"]["properties"], "taskId": {"type": "string"},
        "verdict": {"type": "string", "enum": ["ACCEPTED", "REJECTED"]},
    }
    member = {
        "type": "object",
        "properties": {
            "taskId": {"type": "string"}, "verdict": {"type": ["string", "null"], "enum": ["ACCEPTED", "REJECTED", None]},
            "state": {"type": ["string", "null"]},
        },
        "required": ["taskId", "verdict", "state"],
    }
    integer = {"type": "integer"}
    assert components["TaskGroup"]["properties"] == {
        "id": {"type": "string"}, "groupId": {"type": "string"}, "scopeId": {"type": "string"}, "mailboxId": {"type": "string"},
        "parentScopeId": {"type": ["string", "null"]},
        "condition": {"type": "string", "enum": ["ALL_TERMINAL", "N_ACCEPTED", "FIRST_ACCEPTED"]},
        "threshold": {"type": ["integer", "null"]}, "expectedMembers": {"type": ["integer", "null"]},
        "deadline": wire.nullable(wire.TIMESTAMP), "state": state, "outcome": outcome, "outcomeReason": {"type": ["string", "null"]},
        "members": {"type": "array", "items": member},
        "counts": {"type": "object", "properties": {"members": integer, "accepted": integer, "rejected": integer},
                   "required": ["members", "accepted", "rejected"]},
        "createdAt": wire.TIMESTAMP, "sealedAt": wire.nullable(wire.TIMESTAMP), "finalizedAt": wire.nullable(wire.TIMESTAMP),
    }
    assert [field.name for field in GROUP.fields] == components["TaskGroup"]["required"]
    assert [field.name for field in GROUP_STATE.fields] == components["GroupState"]["required"]
    assert [field.name for field in GROUP_VERDICT.fields] == components["GroupVerdict"]["required"]
    # A member's submission carries the group's state as its component declares it.
    assert components["GroupSubmitted"]["properties"]["group"] == components["GroupState"]
