"""The wire shapes of an operator's dead-letter actions: the bytes clients read, and the OpenAPI
components made from the same declaration.

A page of dead letters and the answers of a requeue, a delete and a purge were JSON objects the
kernel built before it answered with typed views; the functions `*_before` below are those shapes,
kept here as the kernel built them then, and every generated view must encode to exactly their
bytes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.dead_letters import DeadLetterPage, DeletedView, PurgedView, RequeuedView, RequeueSkipped
from runstate.actors.limits import Limits
from runstate.server import wire
from runstate.server.openapi import openapi

from .test_wire_messages import message_before, messages


def page_before(view: DeadLetterPage) -> dict[str, Any]:
    """`dead_letters.page` as it was."""
    return {
        "deadLetters": [message_before(letter) for letter in view.dead_letters],
        "total": view.total,
        "matched": view.matched,
        "truncated": view.truncated,
        "nextCursor": view.next_cursor,
    }


def requeued_before(view: RequeuedView) -> dict[str, Any]:
    """`dead_letters.requeue`'s reply as it was."""
    skipped = {"task": view.skipped.task, "runEnded": view.skipped.run_ended, "deadlinePassed": view.skipped.deadline_passed}
    return {
        "matched": view.matched, "requeued": view.requeued, "skipped": skipped,
        "remaining": view.remaining, "dryRun": view.dry_run, "requeuedAs": dict(view.requeued_as),
    }


def deleted_before(view: DeletedView) -> dict[str, Any]:
    """`dead_letters.delete`'s reply as it was."""
    return {
        "matched": view.matched, "deleted": view.deleted, "remaining": view.remaining,
        "dryRun": view.dry_run, "deletedIds": list(view.deleted_ids),
    }


def purged_before(view: PurgedView) -> dict[str, Any]:
    """`dead_letters.purge`'s reply as it was."""
    return {"matched": view.matched, "purged": view.purged, "remaining": view.remaining, "dryRun": view.dry_run}


_count = st.integers(0, 10**6)
_id = st.text(max_size=20)
_dead_letter = messages().filter(lambda view: hasattr(view, "payload"))


@st.composite
def pages(draw: st.DrawFn) -> DeadLetterPage:
    letters = tuple(draw(st.lists(_dead_letter, max_size=3)))
    return DeadLetterPage(letters, draw(_count), draw(_count), draw(st.booleans()), draw(st.none() | _id))


@st.composite
def requeues(draw: st.DrawFn) -> RequeuedView:
    skipped = RequeueSkipped(draw(_count), draw(_count), draw(_count))
    renamed = draw(st.dictionaries(_id, _id, max_size=4))
    return RequeuedView(draw(_count), draw(_count), skipped, draw(_count), draw(st.booleans()), renamed)


@st.composite
def deletes(draw: st.DrawFn) -> DeletedView:
    ids = tuple(draw(st.lists(_id, max_size=4)))
    return DeletedView(draw(_count), draw(_count), draw(_count), draw(st.booleans()), ids)


@st.composite
def purges(draw: st.DrawFn) -> PurgedView:
    return PurgedView(draw(_count), draw(_count), draw(_count), draw(st.booleans()))


def _same_bytes(view: Any, before: dict[str, Any]) -> None:
    """Alone, in a batch's results, and as the idempotency table keeps it: the same bytes."""
    assert wire.dumps(view) == orjson.dumps(before)
    assert wire.dumps({"results": [{"status": 200, "body": view}]}) == orjson.dumps({"results": [{"status": 200, "body": before}]})
    assert orjson.dumps(wire.encode(view)) == orjson.dumps(before)


@settings(max_examples=150, deadline=None)
@given(pages(), requeues(), deletes(), purges())
def test_every_dead_letter_answer_encodes_to_the_bytes_read_before(page, requeued, deleted, purged) -> None:
    _same_bytes(page, page_before(page))
    _same_bytes(requeued, requeued_before(requeued))
    _same_bytes(deleted, deleted_before(deleted))
    _same_bytes(purged, purged_before(purged))


def _components() -> dict[str, Any]:
    return openapi(Limits())["components"]["schemas"]


@settings(max_examples=100, deadline=None)
@given(pages(), requeues(), deletes(), purges())
def test_each_encoded_answer_validates_against_its_documented_component(page, requeued, deleted, purged) -> None:
    """What the encoder writes is what the document says, every field with its JSON type."""
    components = _components()
    for name, view in (("DeadLetterPage", page), ("DeadLettersRequeued", requeued), ("DeadLettersDeleted", deleted), ("MailboxPurged", purged)):
        body = orjson.loads(wire.dumps(view))
        jsonschema.validate(body, components[name])
        assert set(components[name]["required"]) == set(body) == set(components[name]["properties"])


def test_the_components_list_exactly_the_encoders_fields() -> None:
    """Each component lists what its shape writes, in the order the clients read, each required."""
    components = _components()
    expected = {
        "DeadLetterPage": ["deadLetters", "total", "matched", "truncated", "nextCursor"],
        "DeadLettersRequeued": ["matched", "requeued", "skipped", "remaining", "dryRun", "requeuedAs"],
        "DeadLettersDeleted": ["matched", "deleted", "remaining", "dryRun", "deletedIds"],
        "MailboxPurged": ["matched", "purged", "remaining", "dryRun"],
    }
    for name, fields in expected.items():
        assert list(components[name]["properties"]) == components[name]["required"] == fields
    requeued = components["DeadLettersRequeued"]["properties"]
    assert list(requeued["skipped"]["properties"]) == ["task", "runEnded", "deadlinePassed"]
    assert requeued["requeuedAs"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert components["DeadLettersDeleted"]["properties"]["deletedIds"] == {"type": "array", "items": {"type": "string"}}
    assert components["DeadLetterPage"]["properties"]["nextCursor"] == {"type": ["string", "null"]}
    letter = components["DeadLetterPage"]["properties"]["deadLetters"]["items"]
    assert letter == components["DeadLetter"]
