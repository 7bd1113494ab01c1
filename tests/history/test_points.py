"""History answers, at any past point, exactly what a live reader saw then.

A server on a data directory, in virtual time, goes through a known history: a claim taken, its
lease left to end and the claim taken over, a task whose first delivery's lease ends and whose
second is completed. After each change a live reader reads every view and records the time. Then
the history routes are asked for each recorded moment, for moments between the changes, by time,
by LSN and by event id: each answers what the live reader saw (plus `asOf`).
"""

from __future__ import annotations

import pytest
import trio

from runstate.actors.limits import Limits
from runstate.actors.timestamps import format_ms
from tests.history.helpers import Seen, start, without_as_of
from tests.server.asgi_client import AsgiClient

pytestmark = pytest.mark.trio

CLAIMS = "/scopes/{run}/claims"


async def build(client: AsgiClient, seen: Seen) -> dict:
    """The known history; returns the ids it made."""
    run = await client.run()
    mailbox = await client.mailbox("research")
    seen.views = [
        "/scopes", f"/scopes/{run}", CLAIMS.format(run=run), f"/scopes/{run}/tasks", "/mailboxes", f"/ops/runs/{run}",
        "/usage", "/caps", "/events",
    ]
    await seen.look()
    await trio.sleep(1)
    taken = await client.post("/claims", {"scopeId": run, "key": "company:acme", "holder": "agent-a", "holderSession": "sa", "leaseSeconds": 10})
    assert taken.status == 200, taken
    await seen.look()
    await trio.sleep(5)
    await seen.look()  # still held by agent-a
    await trio.sleep(6)  # the lease ended at +11 s: expired by the supervisor
    await seen.look()
    await trio.sleep(1)
    again = await client.post("/claims", {"scopeId": run, "key": "company:acme", "holder": "agent-b", "holderSession": "sb", "leaseSeconds": 30})
    assert again.status == 200 and again.json["generation"] == 2, again
    await seen.look()
    await trio.sleep(0.5)
    submitted = await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "report", "input": {"n": 1}})
    assert submitted.status == 201, submitted
    seen.views.append(f"/tasks/{submitted.json['id']}")
    await seen.look()
    await trio.sleep(0.5)
    first = await client.recv(mailbox, run, holder="w1", holderSession="s1", leaseSeconds=5)
    assert first.status == 200, first
    await seen.look()
    await trio.sleep(6)  # w1's delivery lease ended: requeued
    await seen.look()
    await trio.sleep(0.5)
    second = await client.recv(mailbox, run, holder="w2", holderSession="s2", leaseSeconds=30)
    assert second.status == 200, second
    await seen.look()
    await trio.sleep(2)
    message_id = second.json["message"]["id"]
    done = await client.post(f"/messages/{message_id}/complete", {"token": second.json["token"], "result": {"ok": True}})
    assert done.status == 200, done
    await seen.look()
    await trio.sleep(3)
    await seen.look()
    return {"run": run, "mailbox": mailbox, "task": submitted.json["id"]}


async def test_every_point_answers_what_a_live_reader_saw(nursery, autojump_clock, tmp_path):
    runtime = await start(nursery, str(tmp_path / "data"))
    client = AsgiClient(runtime)
    seen = Seen(client, runtime, [])
    await build(client, seen)
    for at_ms, lsn, answers in seen.moments:
        for view, (status, body) in answers.items():
            past = await client.get(f"/history{view}?at={format_ms(at_ms)}")
            assert past.status == status, (view, at_ms, past)
            assert without_as_of(past.json) == body, (view, at_ms)
            assert past.json["asOf"]["at"] == format_ms(at_ms) and past.json["asOf"]["lsn"] == lsn
            # The same point by its cursor (judged at its last record's time): the same state.
            again = await client.get(f"/history{view}?at=lsn:{lsn}")
            assert again.status == status and again.json["asOf"]["lsn"] == lsn
            assert without_as_of(again.json) == body, (view, lsn)


async def test_a_point_right_after_an_event_and_what_changed_between_two_points(nursery, autojump_clock, tmp_path):
    runtime = await start(nursery, str(tmp_path / "data"))
    client = AsgiClient(runtime)
    seen = Seen(client, runtime, [])
    await build(client, seen)
    run = seen.moments[-1][2]["/scopes"][1]["scopes"][0]["id"]
    events = (await client.get("/events")).json["events"]
    taken_over = next(event for event in events if event["type"] == "claim.taken_over")
    # Right after the takeover: agent-b holds the key at generation 2.
    past = await client.get(f"/history/scopes/{run}/claims?at={taken_over['eventId']}")
    assert past.status == 200, past
    assert [(c["holder"], c["generation"]) for c in past.json["claims"]] == [("agent-b", 2)]
    before = await client.get(f"/history/events?at={taken_over['eventId']}")
    assert before.json["events"][-1] == taken_over  # the event itself is the newest then
    # Just before it (the expiry): nobody holds it.
    expired = next(event for event in events if event["type"] == "claim.expired")
    between = await client.get(f"/history/scopes/{run}/claims?at={expired['eventId']}")
    assert between.json["claims"] == []

    start_ms, start_lsn, _ = seen.moments[0]
    end_ms, end_lsn, end_answers = seen.moments[-1]
    diff = await client.get(f"/history/diff?from={format_ms(start_ms)}&to={format_ms(end_ms)}")
    assert diff.status == 200, diff
    body = diff.json
    assert (body["from"]["lsn"], body["to"]["lsn"]) == (start_lsn, end_lsn)
    assert body["events"]["claim.acquired"] == 1 and body["events"]["claim.taken_over"] == 1
    assert body["events"]["claim.expired"] == 1
    assert body["events"]["task.started"] == 2 and body["events"]["task.retried"] == 1 and body["events"]["task.succeeded"] == 1
    assert body["causes"]["task.retried"] == {"expired": 1}
    assert body["states"]["tasks"] == {"SUCCEEDED": {"from": 0, "to": 1}}
    # Every event listed, in order, as the live log lists them after the first point.
    assert body["changes"] == [event for event in events if int(event["eventId"][3:]) > int(body["eventCursors"]["from"])]
    assert not body["truncated"]
    assert sum(body["records"].values()) == end_lsn - start_lsn


async def test_a_diff_whose_to_stands_before_its_from_is_refused_whatever_the_kinds_of_points(nursery, autojump_clock, tmp_path):
    """A replay reaches its points in the log's order: a `to` of another kind than `from` that the
    log passed before `from` is refused, as one of the same kind is, and not said to stand at `from`."""
    runtime = await start(nursery, str(tmp_path / "data"))
    client = AsgiClient(runtime)
    seen = Seen(client, runtime, [])
    await build(client, seen)
    (early_ms, early_lsn, _), (late_ms, late_lsn, _) = seen.moments[1], seen.moments[-2]
    newest = (await client.get("/events?latest=1")).json["events"][0]["eventId"]
    first_event = (await client.get("/events")).json["events"][0]["eventId"]
    for start_at, end_at in (
        (format_ms(late_ms), f"lsn:{early_lsn}"), (f"lsn:{late_lsn}", format_ms(early_ms)), (newest, format_ms(early_ms)),
        (newest, f"lsn:{early_lsn}"), (format_ms(late_ms), first_event), (f"lsn:{late_lsn}", first_event),
    ):
        refused = await client.get(f"/history/diff?from={start_at}&to={end_at}")
        assert refused.status == 400 and refused.code == "VALIDATION_FAILED", (start_at, end_at, refused)
        assert "is after to" in refused.json["error"]["message"]
    # In order, mixed kinds answer the points asked.
    fine = await client.get(f"/history/diff?from=lsn:{early_lsn}&to={format_ms(late_ms)}")
    assert fine.status == 200 and (fine.json["from"]["lsn"], fine.json["to"]["lsn"]) == (early_lsn, late_lsn), fine
    fine = await client.get(f"/history/diff?from={format_ms(early_ms)}&to={newest}")
    assert fine.status == 200 and fine.json["from"]["lsn"] == early_lsn, fine


async def test_an_event_never_made_is_a_bad_point_and_one_no_longer_in_the_log_is_not_kept(nursery, autojump_clock, tmp_path):
    runtime = await start(nursery, str(tmp_path / "data"), limits=Limits(events_kept_max=2))
    client = AsgiClient(runtime)
    for _ in range(4):
        await client.run()
    events = (await client.get("/events")).json["events"]
    assert [event["eventId"] for event in events] == ["ev_3", "ev_4"], events
    for never in ("ev_5", "ev_0"):
        refused = await client.get(f"/history/scopes?at={never}")
        assert refused.status == 400 and refused.code == "VALIDATION_FAILED", (never, refused)
        assert refused.json["error"]["message"] == f"the space has made no event {never[3:]} (its newest is ev_4)"
    gone = await client.get("/history/scopes?at=ev_1")
    assert gone.status == 410 and gone.code == "HISTORY_NOT_KEPT", gone
    kept = await client.get("/history/scopes?at=ev_3")
    assert kept.status == 200 and len(kept.json["scopes"]) == 3, kept


async def test_a_point_asked_by_time_is_asked_again_exactly_by_its_at_and_its_cursor_is_judged_at_its_record(
    nursery, autojump_clock, tmp_path,
):
    """A point asked by a time after its last record is judged at that time (an allowance's window
    rolls on the clock alone, with no record); its cursor asks for the same records, judged at the
    newest one's time, as docs/history.md says."""
    runtime = await start(nursery, str(tmp_path / "data"))
    client = AsgiClient(runtime)
    run = await client.run()
    allowance = (await client.post("/allowances", {"name": "llm", "unitsLimit": 2, "windowSeconds": 10})).json
    used = await client.post(f"/allowances/{allowance['id']}/consume", {"scopeId": run, "units": 2, "holder": "h"})
    assert used.status == 200, used
    await trio.sleep(12)  # the next window, with nothing recorded
    live = (await client.get(f"/allowances/{allowance['id']}")).json
    assert (live["used"], live["remaining"]) == (0, 2), live
    at = format_ms(runtime.kernel.clock.now_ms())
    past = (await client.get(f"/history/allowances/{allowance['id']}?at={at}")).json
    assert without_as_of(past) == live and past["asOf"]["at"] == at and past["asOf"]["recordAt"] < at
    again = (await client.get(f"/history/allowances/{allowance['id']}?at={past['asOf']['at']}")).json
    assert again == past
    by_cursor = (await client.get(f"/history/allowances/{allowance['id']}?at={past['asOf']['cursor']}")).json
    assert by_cursor["asOf"]["lsn"] == past["asOf"]["lsn"] and by_cursor["asOf"]["at"] == past["asOf"]["recordAt"]
    assert (by_cursor["used"], by_cursor["remaining"]) == (2, 0), by_cursor
