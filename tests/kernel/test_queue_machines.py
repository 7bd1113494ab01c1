"""Mailboxes, messages, deliveries and tasks as pure state machines: every transition, no trio.

Each test drives a space by hand at chosen instants and, at the end, checks that replaying the
records it produced rebuilds exactly the same state.
"""

from __future__ import annotations

import pytest

from runstate.actors.errors import (
    BACKLOG_FULL,
    CONFLICT,
    DEADLINE_EXCEEDED,
    IDEMPOTENCY_CONFLICT,
    NOT_FOUND,
    SCOPE_CANCELLED,
    STALE_CLAIM,
    VALIDATION_FAILED,
    KernelError,
)
from runstate.actors.limits import Limits
from runstate.actors.messages import backoff_ms
from runstate.actors.space import SpaceState
from runstate.actors.work import outcome_of, queue_actor

from .queue_world import SPACE, T0, World, recount, snapshot


@pytest.fixture
def world():
    w = World()
    yield w
    w.assert_replay_matches()
    assert recount(w.space) == {m.id: w.space.mailboxes.view(m).counts._asdict() for m in w.space.mailboxes.all()}


def refused(code: str, call, *args, **kwargs):
    with pytest.raises(KernelError) as caught:
        call(*args, **kwargs)
    assert caught.value.code == code, caught.value
    return caught.value


# -- mailboxes ------------------------------------------------------------------------------------


def test_a_mailbox_defaults_to_work_mode_and_five_attempts(world):
    """Mode WORK and maxAttempts 5 unless asked otherwise; `work` in any case is WORK."""
    first = world.mailbox("a")
    second = world.mailbox("b", mode="work", max_attempts=3, backlog_limit=10)
    views = {m.id: world.space.mailboxes.view(m) for m in world.space.mailboxes.all()}
    assert views[first].mode == "WORK" and views[first].max_attempts == 5
    assert views[first].backlog_limit is None
    assert views[second].mode == "WORK" and views[second].max_attempts == 3
    assert views[second].backlog_limit == 10


def test_a_mailbox_refuses_unknown_modes_naming_the_supported_ones(world):
    error = refused(VALIDATION_FAILED, world.mailbox, "a", mode="FANOUT")
    assert "WORK" in error.message and "FANOUT" in error.message


@pytest.mark.parametrize("settings", [{"max_attempts": 0}, {"max_attempts": 101}, {"backlog_limit": 0}])
def test_a_mailbox_refuses_settings_outside_their_limits(world, settings):
    refused(VALIDATION_FAILED, world.mailbox, "a", **settings)


def test_a_duplicate_mailbox_name_is_a_conflict_whatever_the_settings(world):
    world.mailbox("research")
    refused(CONFLICT, world.mailbox, "research")
    assert len(world.space.mailboxes) == 1


# -- plain messages and deliveries ----------------------------------------------------------------


def test_recv_leases_the_oldest_message_of_exactly_that_scope(world):
    """FIFO by enqueue order; a message of another scope, even older, is not handed out."""
    mailbox, run, other = world.mailbox(), world.scope(), world.scope()
    world.send(mailbox, other, "elsewhere")
    first = world.send(mailbox, run, "one")
    world.send(mailbox, run, "two")
    delivery = world.recv(mailbox, run)
    assert delivery["message"]["id"] == first["id"]
    assert delivery["message"]["payload"] == "one"
    assert delivery["message"]["attempt"] == 1
    assert delivery["message"]["scopeId"] == run
    assert delivery["leaseExpiresAt"] == "2027-01-15T08:00:30.000Z"
    assert world.recv(mailbox, run)["message"]["payload"] == "two"
    assert world.recv(mailbox, run) is None


def test_an_empty_recv_writes_nothing_so_a_long_poll_can_park(world):
    mailbox, run = world.mailbox(), world.scope()
    before = len(world.records)
    outcome = world.do("receive", mailbox, run, "w", "s", 30_000, "dt_x")
    assert outcome.empty and not outcome.records and len(world.records) == before


def test_complete_settles_once_and_a_second_complete_is_stale(world):
    mailbox, run = world.mailbox(), world.scope()
    sent = world.send(mailbox, run, {"n": 1})
    delivery = world.recv(mailbox, run)
    reply = world.do("complete_delivery", sent["id"], delivery["token"], None).reply
    assert reply.state == "COMPLETED"
    refused(STALE_CLAIM, world.do, "complete_delivery", sent["id"], delivery["token"], None)
    assert world.message(sent["id"])["state"] == "COMPLETED"


def test_a_wrong_token_changes_nothing(world):
    """Complete, nack and renew with a token that was never current: STALE_CLAIM, no record."""
    mailbox, run = world.mailbox(), world.scope()
    sent = world.send(mailbox, run)
    world.recv(mailbox, run)
    before = len(world.records)
    for command, args in (
        ("complete_delivery", (None,)),
        ("nack_delivery", (True, None, 1.0)),
        ("renew_delivery", (None,)),
    ):
        refused(STALE_CLAIM, world.do, command, sent["id"], "dt_forged", *args)
    assert len(world.records) == before
    assert world.message(sent["id"])["state"] == "LEASED"


def test_an_unknown_message_is_not_found(world):
    refused(NOT_FOUND, world.do, "complete_delivery", "ms_nope", "dt_x", None)


def test_renew_extends_from_now_by_the_given_or_the_original_length(world):
    mailbox, run = world.mailbox(), world.scope()
    sent = world.send(mailbox, run)
    delivery = world.recv(mailbox, run, lease_s=10)
    world.at(8_000)
    assert world.do("renew_delivery", sent["id"], delivery["token"], 60_000).reply.expires_ms == T0 + 68_000  # 08:01:08
    world.at(9_000)
    renewed = world.do("renew_delivery", sent["id"], delivery["token"], None).reply
    assert renewed.expires_ms == T0 + 69_000 and renewed.lease_ms == 60_000  # 08:01:09, 60 s


def test_a_lease_past_its_end_cannot_be_renewed_or_completed(world):
    """Even before the supervisor records the expiry, a lease past its end is over."""
    mailbox, run = world.mailbox(), world.scope()
    sent = world.send(mailbox, run)
    delivery = world.recv(mailbox, run, lease_s=5)
    world.at(5_000)
    refused(STALE_CLAIM, world.do, "renew_delivery", sent["id"], delivery["token"], None)
    refused(STALE_CLAIM, world.do, "complete_delivery", sent["id"], delivery["token"], None)


def test_an_expired_lease_requeues_at_once_with_the_next_attempt(world):
    mailbox, run = world.mailbox(), world.scope()
    sent = world.send(mailbox, run)
    first = world.recv(mailbox, run, lease_s=5)
    world.at(5_000)
    world.fire(("lease", sent["id"]))
    assert world.message(sent["id"])["state"] == "QUEUED"
    second = world.recv(mailbox, run, holder="w2")
    assert second["message"]["attempt"] == 2 and second["token"] != first["token"]
    refused(STALE_CLAIM, world.do, "complete_delivery", sent["id"], first["token"], None)
    world.do("complete_delivery", sent["id"], second["token"], None)


def test_a_lease_timer_made_stale_by_a_renewal_does_nothing(world):
    mailbox, run = world.mailbox(), world.scope()
    sent = world.send(mailbox, run)
    delivery = world.recv(mailbox, run, lease_s=5)
    world.at(4_000)
    world.do("renew_delivery", sent["id"], delivery["token"], None)
    world.at(5_000)
    outcome = world.do("on_timer", queue_actor(SPACE, mailbox, run), ("lease", sent["id"]), delivery["token"])
    assert not outcome.records
    assert world.message(sent["id"])["state"] == "LEASED"


def test_a_retry_waits_out_an_exponential_backoff_before_the_next_attempt(world):
    """nack retry: DELAYED for 1 s x jitter, then deliverable again with attempt 2."""
    mailbox, run = world.mailbox(), world.scope()
    sent = world.send(mailbox, run)
    delivery = world.recv(mailbox, run)
    reply = world.do("nack_delivery", sent["id"], delivery["token"], True, None, 0.9).reply
    assert reply.state == "DELAYED" and reply.visible_ms == T0 + 900
    world.at(899)
    assert world.recv(mailbox, run) is None
    world.at(900)
    again = world.recv(mailbox, run)
    assert again["message"]["attempt"] == 2


def test_the_end_of_a_backoff_is_recorded_so_parked_receivers_are_run_again(world):
    mailbox, run = world.mailbox(), world.scope()
    sent = world.send(mailbox, run)
    delivery = world.recv(mailbox, run)
    world.do("nack_delivery", sent["id"], delivery["token"], True, None, 1.0)
    world.at(1_000)
    outcome = world.fire(("visible", sent["id"]))
    assert [r["type"] for r in outcome.records] == ["message.visible"]
    assert world.message(sent["id"])["state"] == "QUEUED"


def test_backoff_doubles_from_one_second_and_is_capped_at_sixty():
    limits = Limits()
    assert [backoff_ms(limits, attempt, 1.0) for attempt in range(1, 10)] == [
        1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000,
    ]
    assert backoff_ms(limits, 3, 0.8) == 3_200
    assert backoff_ms(limits, 1_000, 0.8) == 48_000


def test_a_retried_message_keeps_its_place_ahead_of_younger_ones(world):
    mailbox, run = world.mailbox(), world.scope()
    old = world.send(mailbox, run, "old")
    delivery = world.recv(mailbox, run)
    world.send(mailbox, run, "young")
    world.do("nack_delivery", old["id"], delivery["token"], True, None, 1.0)
    world.at(1_000)
    assert world.recv(mailbox, run)["message"]["payload"] == "old"


def test_reject_dead_letters_the_message(world):
    mailbox, run = world.mailbox(), world.scope()
    sent = world.send(mailbox, run, {"bad": True})
    delivery = world.recv(mailbox, run)
    reply = world.do("nack_delivery", sent["id"], delivery["token"], False, "cannot parse", 1.0).reply
    assert reply.state == "DEAD"
    letters = world.space.messages.dead_letters(mailbox)
    assert [m.id for m in letters] == [sent["id"]]
    assert world.message(sent["id"])["payload"] == {"bad": True}
    assert world.message(sent["id"])["reason"] == "handler_error: cannot parse"
    assert world.recv(mailbox, run) is None


def test_past_the_attempt_limit_a_message_is_dead_lettered(world):
    """maxAttempts 2: two retried deliveries, then DEAD with a reason that says so."""
    mailbox, run = world.mailbox(max_attempts=2), world.scope()
    sent = world.send(mailbox, run)
    first = world.recv(mailbox, run)
    world.do("nack_delivery", sent["id"], first["token"], True, None, 1.0)
    world.at(1_000)
    second = world.recv(mailbox, run)
    assert second["message"]["attempt"] == 2
    reply = world.do("nack_delivery", sent["id"], second["token"], True, "boom", 1.0).reply
    assert reply.state == "DEAD"
    reason = world.message(sent["id"])["reason"]
    assert reason == "handler_error: boom (attempts_exhausted: 2 of 2 attempts used)"


def test_dead_letters_are_forgotten_after_the_retention_window(world):
    w = World(Limits().replace(retention_s=60))
    mailbox, run = w.mailbox(), w.scope()
    sent = w.send(mailbox, run)
    w.do("nack_delivery", sent["id"], w.recv(mailbox, run)["token"], False, None, 1.0)
    assert w.space.mailboxes.view(w.space.mailboxes.get(mailbox)).counts.dead_letters == 1
    w.at(60_000)
    w.send(mailbox, run)  # any later record lets the table drop what is past retention
    assert w.space.messages.dead_letters(mailbox) == []
    assert w.space.mailboxes.view(w.space.mailboxes.get(mailbox)).counts.dead_letters == 0
    w.assert_replay_matches()


# -- work keys, deadlines, backlog, scopes ----------------------------------------------------


def test_a_work_key_deduplicates_sends_with_replay_true(world):
    mailbox, run = world.mailbox(), world.scope()
    first = world.send(mailbox, run, {"company": "acme"}, work_key="crawl:acme")
    again = world.send(mailbox, run, {"company": "acme"}, work_key="crawl:acme")
    assert first["replay"] is False and again["replay"] is True
    assert again["id"] == first["id"] and again["deduplicated"] is True
    assert len(world.space.messages) == 1
    refused(IDEMPOTENCY_CONFLICT, world.send, mailbox, run, {"company": "other"}, "crawl:acme")


def test_a_work_key_is_per_mailbox_and_scope_and_remembered_for_its_window(world):
    mailbox, run, other = world.mailbox(), world.scope(), world.scope()
    first = world.send(mailbox, run, 1, work_key="k")
    assert world.send(mailbox, other, 2, work_key="k")["replay"] is False
    world.at(7 * 86_400_000 - 1)
    assert world.send(mailbox, run, 1, work_key="k")["id"] == first["id"]
    world.at(7 * 86_400_000)
    fresh = world.send(mailbox, run, 3, work_key="k")
    assert fresh["replay"] is False and fresh["id"] != first["id"]


def test_a_message_past_its_deadline_is_not_delivered_and_is_dropped(world):
    mailbox, run = world.mailbox(), world.scope()
    sent = world.send(mailbox, run, "late", deadline_ms=T0 + 2_000)
    world.at(2_000)
    assert world.recv(mailbox, run) is None
    world.fire(("deadline", sent["id"]))
    assert world.message(sent["id"])["state"] == "DROPPED"
    assert world.message(sent["id"])["reason"] == "deadline_exceeded"


def test_a_deadline_already_past_is_refused(world):
    mailbox, run = world.mailbox(), world.scope()
    refused(DEADLINE_EXCEEDED, world.send, mailbox, run, 1, None, T0)


def test_a_full_backlog_is_refused_with_retry_after(world):
    mailbox, run = world.mailbox(backlog_limit=2), world.scope()
    world.send(mailbox, run, 1, work_key="a")
    world.send(mailbox, run, 2)
    error = refused(BACKLOG_FULL, world.send, mailbox, run, 3)
    assert error.retry_after_s == 1.0
    refused(BACKLOG_FULL, world.submit, mailbox, run, "k")
    assert world.send(mailbox, run, 1, work_key="a")["replay"] is True  # a replay adds nothing


def test_send_recv_and_submit_in_an_ended_scope_are_scope_cancelled(world):
    mailbox, run = world.mailbox(), world.scope()
    child = world.scope(parent=run)
    world.do("end_scope", run, "CANCELLED")
    for scope_id in (run, child):
        refused(SCOPE_CANCELLED, world.send, mailbox, scope_id, 1)
        refused(SCOPE_CANCELLED, world.recv, mailbox, scope_id)
        refused(SCOPE_CANCELLED, world.submit, mailbox, scope_id, "k")


def test_unknown_mailbox_and_scope_are_not_found(world):
    mailbox, run = world.mailbox(), world.scope()
    refused(NOT_FOUND, world.send, "mb_nope", run, 1)
    refused(NOT_FOUND, world.send, mailbox, "sc_nope", 1)
    refused(NOT_FOUND, world.recv, "mb_nope", run)


# -- tasks ----------------------------------------------------------------------------------


def test_submitting_a_key_again_returns_the_same_task_and_joins_the_subscriber(world):
    mailbox, run = world.mailbox(), world.scope()
    created = world.submit(mailbox, run, "research:acme", {"company": "acme", "depth": 2}, subscriber="planner-1")
    replay = world.submit(mailbox, run, "research:acme", {"depth": 2, "company": "acme"}, subscriber="planner-2")
    assert created["created"] is True and replay["created"] is False
    assert replay["taskId"] == created["taskId"]
    assert world.task(created["taskId"])["subscribers"] == ["planner-1", "planner-2"]
    assert len(world.space.tasks) == 1 and len(world.space.messages) == 1


def test_the_same_key_with_another_input_or_mailbox_is_an_idempotency_conflict(world):
    mailbox, other_mailbox, run = world.mailbox("a"), world.mailbox("b"), world.scope()
    world.submit(mailbox, run, "k", {"company": "acme"})
    refused(IDEMPOTENCY_CONFLICT, world.submit, mailbox, run, "k", {"company": "globex"})
    refused(IDEMPOTENCY_CONFLICT, world.submit, other_mailbox, run, "k", {"company": "acme"})
    assert world.submit(mailbox, world.scope(), "k", {"company": "globex"})["created"] is True


def test_a_task_is_delivered_with_its_input_and_runs_then_succeeds_with_the_payload(world):
    mailbox, run = world.mailbox(), world.scope()
    task = world.submit(mailbox, run, "k", {"company": "acme"})
    assert task["state"] == "QUEUED" and task["attempt"] == 0
    delivery = world.recv(mailbox, run)
    assert delivery["message"]["taskId"] == task["taskId"]
    assert delivery["message"]["payload"] == {"company": "acme"}
    assert world.task(task["taskId"])["state"] == "RUNNING"
    assert world.task(task["taskId"])["attempt"] == 1
    world.at(500)
    reply = world.do("complete_delivery", delivery["message"]["id"], delivery["token"], {"payload": {"report": "r"}}).reply
    assert reply.task_state == "SUCCEEDED"
    view = world.task(task["taskId"])
    assert view["state"] == "SUCCEEDED" and view["outcome"] == {"report": "r"}
    assert view["outcomeReason"] is None and view["finishedAt"] == "2027-01-15T08:00:00.500Z"


@pytest.mark.parametrize(
    "result, outcome",
    [
        ({"payload": 7}, 7), ({"payload": None}, None), ({"report": "r"}, {"report": "r"}), (None, None), ([1, 2], [1, 2]),
        ({"payload": 7, "meta": 1}, {"payload": 7, "meta": 1}),
    ],
)
def test_the_outcome_is_the_result_payload_else_the_whole_result(result, outcome):
    assert outcome_of(result) == outcome


def test_a_task_retry_requeues_it_and_reject_fails_it(world):
    mailbox, run = world.mailbox(), world.scope()
    task = world.submit(mailbox, run, "k")
    delivery = world.recv(mailbox, run)
    world.do("nack_delivery", delivery["message"]["id"], delivery["token"], True, None, 1.0)
    assert world.task(task["taskId"])["state"] == "QUEUED"
    world.at(1_000)
    delivery = world.recv(mailbox, run)
    assert delivery["message"]["attempt"] == 2 and world.task(task["taskId"])["attempt"] == 2
    world.do("nack_delivery", delivery["message"]["id"], delivery["token"], False, None, 1.0)
    view = world.task(task["taskId"])
    assert view["state"] == "FAILED" and view["outcomeReason"] == "rejected"


def test_a_task_whose_attempts_run_out_fails_with_a_reason_saying_so(world):
    """Five leases that run out: the fifth expiry fails the task and dead-letters its message."""
    mailbox, run = world.mailbox(), world.scope()
    task = world.submit(mailbox, run, "k")
    for attempt in range(1, 6):
        delivery = world.recv(mailbox, run, lease_s=5)
        assert delivery["message"]["attempt"] == attempt
        world.at(attempt * 5_000)
        world.fire(("lease", delivery["message"]["id"]))
    view = world.task(task["taskId"])
    assert view["state"] == "FAILED" and view["attempt"] == 5
    assert view["outcomeReason"].startswith("attempts_exhausted: 5 of 5 attempts used")
    assert [m.id for m in world.space.messages.dead_letters(mailbox)] == [task["messageId"]]


def test_cancel_keeps_its_reason_and_refuses_a_later_completion(world):
    """The running worker's token is stale once the task is cancelled: its completion changes nothing."""
    mailbox, run = world.mailbox(), world.scope()
    task = world.submit(mailbox, run, "k")
    delivery = world.recv(mailbox, run)
    view = world.do("cancel_task", task["taskId"], "planner changed its mind").reply
    assert view.state == "CANCELLED" and view.outcome_reason == "planner changed its mind"
    error = refused(STALE_CLAIM, world.do, "complete_delivery", delivery["message"]["id"], delivery["token"], {"payload": 1})
    assert "planner changed its mind" in error.message
    refused(STALE_CLAIM, world.do, "renew_delivery", delivery["message"]["id"], delivery["token"], None)
    after = world.task(task["taskId"])
    assert after["state"] == "CANCELLED" and after["outcome"] is None
    assert world.do("cancel_task", task["taskId"], "again").reply.outcome_reason == "planner changed its mind"
    assert world.recv(mailbox, run) is None


def test_cancelling_a_task_that_ended_otherwise_is_a_conflict(world):
    mailbox, run = world.mailbox(), world.scope()
    task = world.submit(mailbox, run, "k")
    delivery = world.recv(mailbox, run)
    world.do("complete_delivery", delivery["message"]["id"], delivery["token"], {"payload": 1})
    refused(CONFLICT, world.do, "cancel_task", task["taskId"], None)
    assert world.task(task["taskId"])["outcome"] == 1


def test_a_cancel_without_reason_records_cancelled(world):
    mailbox, run = world.mailbox(), world.scope()
    task = world.submit(mailbox, run, "k")
    assert world.do("cancel_task", task["taskId"], None).reply.outcome_reason == "cancelled"


def test_join_and_detach_are_harmless_to_repeat_and_zero_subscribers_cancels_nothing(world):
    mailbox, run = world.mailbox(), world.scope()
    task = world.submit(mailbox, run, "k", subscriber="a")
    world.do("join_task", task["taskId"], "b", run)
    assert not world.do("join_task", task["taskId"], "b", run).records
    world.do("detach_task", task["taskId"], "a")
    world.do("detach_task", task["taskId"], "b")
    assert not world.do("detach_task", task["taskId"], "b").records
    view = world.task(task["taskId"])
    assert view["subscribers"] == [] and view["state"] == "QUEUED"
    assert world.recv(mailbox, run)["message"]["taskId"] == task["taskId"]


def test_a_task_past_its_deadline_expires_queued_or_running(world):
    mailbox, run = world.mailbox(), world.scope()
    queued = world.submit(mailbox, run, "q", deadline_ms=T0 + 3_000)
    running = world.submit(mailbox, run, "r", deadline_ms=T0 + 3_000)
    world.recv(mailbox, run)  # leases "q", the older one
    delivery = world.recv(mailbox, run)
    assert delivery["message"]["taskId"] == running["taskId"]
    world.at(3_000)
    world.fire(("task-deadline", queued["taskId"]))
    world.fire(("task-deadline", running["taskId"]))
    for task in (queued, running):
        view = world.task(task["taskId"])
        assert view["state"] == "EXPIRED" and view["outcomeReason"] == "deadline_exceeded"
    refused(STALE_CLAIM, world.do, "complete_delivery", delivery["message"]["id"], delivery["token"], None)


def test_a_finished_task_is_tombstoned_after_retention_and_its_key_still_returns_it(world):
    mailbox, run = world.mailbox(), world.scope()
    task = world.submit(mailbox, run, "k", {"x": 1})
    delivery = world.recv(mailbox, run)
    world.do("complete_delivery", delivery["message"]["id"], delivery["token"], {"payload": "big result"})
    week = 7 * 86_400_000
    world.at(week - 1)
    assert world.task(task["taskId"])["outcome"] == "big result"
    world.at(week)
    assert world.task(task["taskId"])["tombstoned"] is True  # shown before the record is written
    world.fire(("retention", task["taskId"]))
    view = world.task(task["taskId"])
    assert view["tombstoned"] is True and view["outcome"] is None and view["state"] == "SUCCEEDED"
    assert world.space.tasks.get(task["taskId"]).outcome is None
    replay = world.submit(mailbox, run, "k", {"x": 1})
    assert replay["taskId"] == task["taskId"] and replay["created"] is False


# -- the scope cascade ----------------------------------------------------------------------


def test_ending_a_scope_cancels_its_queued_tasks_and_wakes_its_queues(world):
    """Queued tasks of the subtree: CANCELLED scope_cancelled; the parked receivers of its queues wake."""
    mailbox, run = world.mailbox(), world.scope()
    child = world.scope(parent=run)
    outside = world.scope()
    queued = world.submit(mailbox, child, "queued")
    elsewhere = world.submit(mailbox, outside, "elsewhere")
    plain = world.send(mailbox, run, "plain")
    world.pokes.clear()
    world.do("end_scope", run, "CANCELLED")
    assert world.task(queued["taskId"])["state"] == "CANCELLED"
    assert world.task(queued["taskId"])["outcomeReason"] == "scope_cancelled"
    assert world.message(plain["id"])["state"] == "DROPPED"
    assert world.task(elsewhere["taskId"])["state"] == "QUEUED"
    queues = {actor for actor in world.pokes if actor[0] == "queue"}
    assert queues == {queue_actor(SPACE, mailbox, run), queue_actor(SPACE, mailbox, child)}


def test_ending_a_scope_ends_its_deliveries_under_way_and_refuses_their_settlement(world):
    """A run cancelled while its workers hold deliveries: in the same turn their tasks end
    CANCELLED (scope_cancelled) and a plain message is dropped; each worker's later completion,
    retry and renewal is refused with SCOPE_CANCELLED and changes nothing, a delivery outside the
    run carries on, and the journal and the image rebuild the same state."""
    mailbox, run = world.mailbox(), world.scope()
    child = world.scope(parent=run)
    outside = world.scope()
    running = world.submit(mailbox, run, "running")
    in_child = world.submit(mailbox, child, "in-child")
    elsewhere = world.submit(mailbox, outside, "elsewhere")
    world.send(mailbox, run, "plain")
    first, second = world.recv(mailbox, run), world.recv(mailbox, run)
    deep, other = world.recv(mailbox, child), world.recv(mailbox, outside)
    world.do("end_scope", run, "CANCELLED")
    for task in (running, in_child):
        view = world.task(task["taskId"])
        assert view["state"] == "CANCELLED" and view["outcomeReason"] == "scope_cancelled"
    plain = next(d for d in (first, second) if d["message"]["taskId"] is None)
    assert world.message(plain["message"]["id"])["state"] == "DROPPED"
    for delivery in (first, second, deep):
        message_id, token = delivery["message"]["id"], delivery["token"]
        refused(SCOPE_CANCELLED, world.do, "complete_delivery", message_id, token, {"payload": "late"})
        refused(SCOPE_CANCELLED, world.do, "nack_delivery", message_id, token, True, None, 1.0)
        refused(SCOPE_CANCELLED, world.do, "renew_delivery", message_id, token, 30_000)
    assert world.task(running["taskId"])["outcome"] is None
    world.do("complete_delivery", other["message"]["id"], other["token"], {"payload": "fine"})
    assert world.task(elsewhere["taskId"])["state"] == "SUCCEEDED"
    world.at(60_000)
    world.fire(("lease", deep["message"]["id"]))  # its lease timer finds nothing left to do
    assert world.task(in_child["taskId"])["outcomeReason"] == "scope_cancelled"
    world.assert_replay_matches()
    image = SpaceState(SPACE, world.limits)
    for record in world.space.image():
        image.apply(record)
    assert snapshot(image, world.now) == snapshot(world.space, world.now)


def test_a_delivery_of_an_expired_run_is_refused_before_its_deadline_timer_runs(world):
    """A run past its deadline is no longer active even before the supervisor records its end: a
    completion then is refused with SCOPE_CANCELLED, and the deadline's turn cancels the task."""
    mailbox = world.mailbox()
    run = world.scope(deadline_ms=T0 + 1_000)
    task = world.submit(mailbox, run, "k")
    delivery = world.recv(mailbox, run)
    world.at(1_000)
    refused(SCOPE_CANCELLED, world.do, "complete_delivery", delivery["message"]["id"], delivery["token"], None)
    world.do("on_timer", ("scope", SPACE, run), "deadline", None)
    view = world.task(task["taskId"])
    assert view["state"] == "CANCELLED" and view["outcomeReason"] == "scope_expired"


def test_a_scope_that_expires_expires_its_queued_tasks_with_its_reason(world):
    mailbox = world.mailbox()
    run = world.scope(deadline_ms=T0 + 1_000)
    task = world.submit(mailbox, run, "k")
    world.at(1_000)
    world.do("on_timer", ("scope", SPACE, run), "deadline", None)
    view = world.task(task["taskId"])
    assert view["state"] == "CANCELLED" and view["outcomeReason"] == "scope_expired"


def test_timers_after_recovery_cover_every_lease_backoff_deadline_and_retention(world):
    mailbox, run = world.mailbox(), world.scope()
    leased = world.send(mailbox, run, 1)
    world.recv(mailbox, run, lease_s=5)
    delayed = world.send(mailbox, run, 2, deadline_ms=T0 + 60_000)
    token = world.recv(mailbox, run)["token"]
    world.do("nack_delivery", delayed["id"], token, True, None, 1.0)
    task = world.submit(mailbox, run, "k", deadline_ms=T0 + 90_000)
    done = world.submit(mailbox, run, "done")
    world.do("cancel_task", done["taskId"], None)
    tags = {t.tag for t in world.replayed().timers()}
    assert tags == {
        ("lease", leased["id"]),
        ("visible", delayed["id"]),
        ("deadline", delayed["id"]),
        ("task-deadline", task["taskId"]),
        ("retention", done["taskId"]),
    }
