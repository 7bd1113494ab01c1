"""Dead letters an operator acts on, and a mailbox's purge, as pure state machines, with replay.

Each test drives a space by hand at chosen instants; at the end the journal's records and the
space's image must rebuild exactly the same state (every table compared, retention's queue and the
work keys included).
"""

from __future__ import annotations

import pytest

from runstate.actors.dead_letters import ACTION_MAX, DeadLetterFilter, PurgedView, RequeuedView, RequeueSkipped, page
from runstate.actors.errors import BACKLOG_FULL, NOT_FOUND, VALIDATION_FAILED, KernelError
from runstate.actors.space import SpaceState
from runstate.actors.work import queue_actor
from runstate.snapshots.equality import contents, first_difference
from runstate.server import wire

from .queue_world import SPACE, World, recount


@pytest.fixture
def world():
    w = World()
    yield w
    assert_rebuilt(w)


def assert_rebuilt(w: World) -> None:
    """The records, and the image, rebuild the space exactly; the mailbox counts are exact."""
    imaged = SpaceState(SPACE, w.limits)
    for record in w.space.image():
        imaged.apply(record)
    for rebuilt in (w.replayed(), imaged):
        assert first_difference(contents(w.space), contents(rebuilt)) is None
    counts = {m.id: w.space.mailboxes.view(m).counts._asdict() for m in w.space.mailboxes.all()}
    assert recount(w.space) == counts


def dead(w: World, mailbox: str, run: str, payload=None, *, error="bad input", work_key=None, task_key=None) -> str:
    """A message (or a task's) delivered once and rejected: a dead letter. Returns its id."""
    if task_key is not None:
        message_id = w.submit(mailbox, run, task_key, payload)["messageId"]
    else:
        message_id = w.send(mailbox, run, payload, work_key=work_key)["id"]
    delivery = w.recv(mailbox, run)
    assert delivery["message"]["id"] == message_id
    w.do("nack_delivery", message_id, delivery["token"], False, error, 1.0)
    assert w.message(message_id)["state"] == "DEAD"
    return message_id


def refused(code: str, call, *args, **kwargs) -> KernelError:
    with pytest.raises(KernelError) as caught:
        call(*args, **kwargs)
    assert caught.value.code == code, caught.value
    return caught.value


def test_a_requeued_dead_letter_is_a_new_message_at_the_end_of_its_queue(world):
    """Same run, payload and work key, a new id, attempts from zero; the work key now names it."""
    mailbox, run = world.mailbox(max_attempts=1), world.scope()
    old = dead(world, mailbox, run, {"company": "acme"}, work_key="crawl:acme")
    waiting = world.send(mailbox, run, "younger")["id"]
    bytes_before = world.space.messages.payload_bytes
    outcome = world.do("requeue_dead_letters", mailbox, "ms_new", {"message_ids": [old]})
    assert outcome.reply == RequeuedView(1, 1, RequeueSkipped(task=0, run_ended=0, deadline_passed=0), 0, False, {old: "ms_new_0"})
    assert wire.encode(outcome.reply) == {
        "matched": 1, "requeued": 1, "skipped": {"task": 0, "runEnded": 0, "deadlinePassed": 0}, "remaining": 0,
        "dryRun": False, "requeuedAs": {old: "ms_new_0"},
    }
    assert world.space.messages.find(old) is None
    new = world.message("ms_new_0")
    assert new["state"] == "QUEUED" and new["attempt"] == 0 and new["payload"] == {"company": "acme"}
    assert new["scopeId"] == run and new["workKey"] == "crawl:acme" and new["reason"] is None
    assert world.space.messages.payload_bytes == bytes_before  # the payload moved, it was not copied
    assert queue_actor(SPACE, mailbox, run) in outcome.pokes  # parked receivers look again
    # A send of the same work key and payload answers the new message.
    again = world.send(mailbox, run, {"company": "acme"}, work_key="crawl:acme")
    assert again["replay"] is True and again["id"] == "ms_new_0"
    # It comes after what was already waiting, with attempt 1 on its first delivery.
    assert world.recv(mailbox, run)["message"]["id"] == waiting
    delivery = world.recv(mailbox, run)
    assert delivery["message"]["id"] == "ms_new_0" and delivery["message"]["attempt"] == 1
    counts = world.space.mailboxes.view(world.space.mailboxes.get(mailbox)).counts
    assert counts._asdict() == {"queued": 0, "delayed": 0, "leased": 2, "dead_letters": 0}


def test_what_cannot_go_back_is_skipped_and_counted_by_why(world):
    """A task's dead letter (its FAILED outcome stands), one of an ended run, one past its deadline."""
    mailbox = world.mailbox(max_attempts=1)
    run, ended = world.scope(), world.scope()
    task_letter = dead(world, mailbox, run, {"n": 1}, task_key="k")
    task_id = world.space.messages.get(task_letter).task_id
    late = world.send(mailbox, run, "late", deadline_ms=world.now + 1_000)["id"]
    delivery = world.recv(mailbox, run)
    world.do("nack_delivery", late, delivery["token"], False, "no", 1.0)
    gone = dead(world, mailbox, ended, "x")
    world.do("end_scope", ended, "CANCELLED")
    fine = dead(world, mailbox, run, "fine")
    world.at(2_000)
    reply = world.requeue(mailbox, every=True)
    assert reply["matched"] == 4 and reply["requeued"] == 1 and reply["remaining"] == 0
    assert reply["skipped"] == {"task": 1, "runEnded": 1, "deadlinePassed": 1}
    assert list(reply["requeuedAs"]) == [fine]
    assert world.task(task_id)["state"] == "FAILED"
    kept = [m.id for m in world.space.messages.dead_letters(mailbox)]
    assert kept == [task_letter, late, gone]


def test_a_filter_names_dead_letters_by_reason_and_age(world):
    """`reason` is contained in the dead letter's reason; ages count from when it died."""
    mailbox, run = world.mailbox(max_attempts=1), world.scope()
    first = dead(world, mailbox, run, 1, error="timeout talking to crm")
    world.at(60_000)
    second = dead(world, mailbox, run, 2, error="malformed row")
    world.at(120_000)
    third = dead(world, mailbox, run, 3, error="timeout talking to erp")

    def chosen(**fields) -> list[str]:
        """What the listing shows for a filter, oldest first; a dry run counts the same."""
        where = DeadLetterFilter(fields.get("reason"), fields.get("older_than_s"), fields.get("newer_than_s"))
        listed = page(world.space.messages, mailbox, where, world.now, None, 100)
        assert listed.matched == world.requeue(mailbox, dry_run=True, **fields)["matched"]
        return [letter.id for letter in reversed(listed.dead_letters)]

    assert chosen(reason="timeout") == [first, third]
    assert chosen(older_than_s=60) == [first, second]
    assert chosen(newer_than_s=60) == [second, third]
    assert chosen(reason="timeout", newer_than_s=119) == [third]
    assert world.requeue(mailbox, reason="nothing like it", dry_run=True)["matched"] == 0


def test_the_dead_letters_must_be_named_one_way(world):
    mailbox, run = world.mailbox(max_attempts=1), world.scope()
    letter = dead(world, mailbox, run)
    for fields in ({}, {"message_ids": [letter], "every": True}, {"reason": "bad", "every": True},
                   {"message_ids": [letter], "older_than_s": 5}):
        error = refused(VALIDATION_FAILED, world.requeue, mailbox, **fields)
        assert "messageIds, or a filter" in error.message
        refused(VALIDATION_FAILED, world.delete, mailbox, **fields)


def test_ids_that_are_not_dead_letters_here_are_not_found_and_nothing_changes(world):
    """A live message, another mailbox's dead letter, an unknown id: 404 naming it, no record."""
    mailbox, other, run = world.mailbox("a", max_attempts=1), world.mailbox("b", max_attempts=1), world.scope()
    letter = dead(world, mailbox, run)
    elsewhere = dead(world, other, run)
    live = world.send(mailbox, run, "live")["id"]
    written = len(world.records)
    for bad in (live, elsewhere, "ms_unknown"):
        error = refused(NOT_FOUND, world.requeue, mailbox, message_ids=[letter, bad])
        assert bad in error.message
        refused(NOT_FOUND, world.delete, mailbox, message_ids=[letter, bad])
    refused(NOT_FOUND, world.delete, "mb_nope", every=True)
    assert len(world.records) == written


def test_a_dry_run_says_what_would_change_and_changes_nothing(world):
    mailbox, run = world.mailbox(max_attempts=1), world.scope()
    letters = [dead(world, mailbox, run, n) for n in range(3)]
    written = len(world.records)
    assert world.delete(mailbox, every=True, dry_run=True) == {
        "matched": 3, "deleted": 3, "remaining": 0, "dryRun": True, "deletedIds": [],
    }
    dry = world.requeue(mailbox, message_ids=letters[:2], dry_run=True)
    assert dry["requeued"] == 2 and dry["requeuedAs"] == {} and dry["dryRun"] is True
    assert len(world.records) == written
    assert [m.id for m in world.space.messages.dead_letters(mailbox)] == letters


def test_one_request_acts_on_at_most_a_thousand_oldest_first(world):
    """The rest remain for the next request, which the answer says."""
    mailbox, run = world.mailbox(max_attempts=1), world.scope()
    letters = [dead(world, mailbox, run, n) for n in range(ACTION_MAX + 5)]
    first = world.delete(mailbox, every=True)
    assert first == {
        "matched": ACTION_MAX + 5, "deleted": ACTION_MAX, "remaining": 5, "dryRun": False, "deletedIds": letters[:ACTION_MAX],
    }
    assert [m.id for m in world.space.messages.dead_letters(mailbox)] == letters[ACTION_MAX:]
    assert world.delete(mailbox, every=True)["remaining"] == 0
    assert world.space.messages.payload_bytes == 0
    assert world.delete(mailbox, every=True) == {"matched": 0, "deleted": 0, "remaining": 0, "dryRun": False, "deletedIds": []}


def test_a_requeue_takes_what_the_backlog_has_room_for(world):
    """backlogLimit 2 with one message waiting: one goes back, one remains; then BACKLOG_FULL."""
    mailbox, run = world.mailbox(max_attempts=1, backlog_limit=2), world.scope()
    letters = [dead(world, mailbox, run, n) for n in range(3)]
    world.send(mailbox, run, "waiting")
    reply = world.requeue(mailbox, every=True)
    assert reply["requeued"] == 1 and reply["remaining"] == 2 and list(reply["requeuedAs"]) == letters[:1]
    assert world.requeue(mailbox, every=True, dry_run=True)["requeued"] == 0
    refused(BACKLOG_FULL, world.requeue, mailbox, every=True)


def test_deleting_gives_back_payload_bytes_and_a_task_keeps_its_outcome(world):
    mailbox, run = world.mailbox(max_attempts=1), world.scope()
    letter = dead(world, mailbox, run, {"big": "x" * 1000}, task_key="k")
    task_id = world.space.messages.get(letter).task_id
    before = world.space.messages.payload_bytes
    assert world.delete(mailbox, message_ids=[letter])["deleted"] == 1
    assert world.space.messages.payload_bytes < before - 1000
    assert world.space.messages.find(letter) is None
    view = world.task(task_id)
    assert view["state"] == "FAILED" and view["outcomeReason"].startswith("handler_error: bad input")
    # Retention later finds nothing left to forget, and forgets the rest as before.
    world.at(world.limits.retention_s * 1000 + 1)
    world.send(mailbox, run, "after")
    assert world.space.messages.dead_letters(mailbox) == []


def test_pages_continue_where_the_last_one_ended_while_letters_die_and_go(world):
    """Newest first by (death, enqueue order); a page after a cursor never repeats or skips one that
    was there all along, whatever died, was requeued or deleted in between."""
    mailbox, run = world.mailbox(max_attempts=1), world.scope()
    letters = [dead(world, mailbox, run, n) for n in range(5)]  # all die at the same instant
    messages = world.space.messages
    first = page(messages, mailbox, DeadLetterFilter(), world.now, None, 2)
    assert [m.id for m in first.dead_letters] == letters[:2:-1][:2] == [letters[4], letters[3]]
    assert first.total == first.matched == 5 and first.truncated is True
    dead(world, mailbox, run, "newer")  # shows on no later page (it is newer than the cursor)
    world.delete(mailbox, message_ids=[letters[2]])
    second = page(messages, mailbox, DeadLetterFilter(), world.now, first.next_cursor, 2)
    assert [m.id for m in second.dead_letters] == [letters[1], letters[0]]
    assert second.truncated is False and second.next_cursor is None
    refused(VALIDATION_FAILED, page, messages, mailbox, DeadLetterFilter(), world.now, "12:x", 2)


def test_a_purge_ends_what_waits_and_leaves_deliveries_under_way(world):
    """Queued and backing-off messages end (tasks CANCELLED with the reason, plain ones dropped);
    a leased one finishes as usual; the events say who purged and how many."""
    mailbox, run, other = world.mailbox(), world.scope(), world.scope()
    leased = world.send(mailbox, run, "leased")["id"]
    delivery = world.recv(mailbox, run)
    backing_off = world.send(mailbox, run, "retry")["id"]
    world.do("nack_delivery", backing_off, world.recv(mailbox, run)["token"], True, None, 1.0)
    task = world.submit(mailbox, run, "k", {"n": 1})
    plain = world.send(mailbox, run, "plain")["id"]
    elsewhere = world.send(mailbox, other, "other run")["id"]
    assert world.purge(mailbox, scope_id=run, dry_run=True) == {"matched": 3, "purged": 3, "remaining": 0, "dryRun": True}
    outcome = world.do("purge_mailbox", mailbox, {"scope_id": run, "reason": "bad batch", "by": "ak_ops"})
    assert outcome.reply == PurgedView(matched=3, purged=3, remaining=0, dry_run=False)
    assert [r["type"] for r in outcome.records] == ["mailbox.purged", "message.dropped", "task.ended", "message.dropped"]
    assert world.task(task["taskId"])["state"] == "CANCELLED"
    assert world.task(task["taskId"])["outcomeReason"] == "purged: bad batch"
    for message_id in (backing_off, plain):
        assert world.message(message_id)["state"] == "DROPPED"
    assert world.message(elsewhere)["state"] == "QUEUED" and world.message(leased)["state"] == "LEASED"
    world.do("complete_delivery", leased, delivery["token"], {"payload": 1})
    assert queue_actor(SPACE, mailbox, run) in outcome.pokes
    events = [e.view() for e in world.space.events.after(0) if e.type in ("mailbox.purged", "task.cancelled")]
    assert events[0].payload == {"mailboxId": mailbox, "scopeId": run, "count": 3, "reason": "bad batch", "by": "ak_ops"}
    assert events[1].payload == {"reason": "purged: bad batch", "by": "ak_ops"}
    assert world.space.usage.operations["mailboxes.purge"] == 1
    # Everything else, in every run: the other run's message.
    assert world.purge(mailbox) == {"matched": 1, "purged": 1, "remaining": 0, "dryRun": False}
    assert world.purge(mailbox) == {"matched": 0, "purged": 0, "remaining": 0, "dryRun": False}
    refused(NOT_FOUND, world.purge, mailbox, scope_id="sc_nope")
    refused(NOT_FOUND, world.purge, "mb_nope")
