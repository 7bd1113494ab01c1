"""Runs and mailboxes by name, once keys, and a task's long poll, over HTTP (in-process ASGI), in
virtual time: what the 0.3.0 client's `PUT /runs/{name}`, `PUT /mailboxes/by-name/{name}`,
`/once/*` and `GET /tasks/{id}?waitMs=` rely on, with exact times for every lease and wait."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from runstate.actors import KernelState, Limits
from runstate.actors.journal import MemoryJournal
from runstate.actors.records import check_record
from runstate.server.settings import Settings

from .asgi_client import API_KEY, SPACE, T0, AsgiClient, client, start_runtime  # noqa: F401 - the fixture

pytestmark = pytest.mark.trio


def _put(client, tail, body=None):  # type: ignore[no-untyped-def]
    return client.request("PUT", tail, {} if body is None else body)


# -- runs by name -----------------------------------------------------------------------------------


async def test_a_run_name_gives_every_caller_the_same_root_scope(client, autojump_clock):
    first = await _put(client, "/runs/nightly")
    again = await _put(client, "/runs/nightly", {"deadline": "2030-01-01T00:00:00Z"})
    other = await _put(client, "/runs/other")
    assert first.status == again.status == 200
    assert first.json["id"] == again.json["id"] != other.json["id"]
    assert first.json["name"] == "nightly" and first.json["parentId"] is None
    assert first.json["effective"] == first.json["storedState"] == "ACTIVE"
    assert again.json["deadline"] is None  # a deadline applies only when the run is created


async def test_a_stopped_run_is_answered_as_it_is_so_late_joiners_stop_too(client, autojump_clock):
    run = (await _put(client, "/runs/batch")).json
    assert (await client.post(f"/scopes/{run['id']}/cancel", {})).status == 200
    late = await _put(client, "/runs/batch")
    assert late.status == 200 and late.json["id"] == run["id"]
    assert late.json["effective"] == late.json["storedState"] == "CANCELLED"
    assert (await _put(client, "/runs/batch-2")).json["effective"] == "ACTIVE"  # a new name starts fresh


async def test_a_run_created_with_a_deadline_expires_at_it(client, autojump_clock):
    run = (await _put(client, "/runs/timed", {"deadline": "2027-01-15T08:00:05Z"})).json
    assert run["deadline"] == "2027-01-15T08:00:05.000Z"
    await trio.sleep(5)
    assert (await client.get(f"/scopes/{run['id']}")).json["effective"] == "EXPIRED"


async def test_run_names_are_checked_and_survive_replay(client, autojump_clock):
    assert (await _put(client, "/runs/" + "n" * 257)).code == "VALIDATION_FAILED"
    run = (await _put(client, "/runs/kept")).json
    replayed = KernelState(client.runtime.limits)
    for record in list(client.runtime.kernel.partition_of("default").state.image()):
        replayed.apply(record)
    assert replayed.space("default").run_names.scope_of("kept") == run["id"]


# -- mailboxes by name -------------------------------------------------------------------------------


async def test_a_mailbox_by_name_is_created_with_defaults_then_checked(client, autojump_clock):
    made = await _put(client, "/mailboxes/by-name/review")
    assert made.status == 200 and made.json["name"] == "review" and made.json["maxAttempts"] == 5
    same = await _put(client, "/mailboxes/by-name/review", {"maxAttempts": 5})
    assert same.json["id"] == made.json["id"]
    looked_up = await _put(client, "/mailboxes/by-name/review")
    assert looked_up.json["id"] == made.json["id"]
    mismatch = await _put(client, "/mailboxes/by-name/review", {"maxAttempts": 3})
    assert mismatch.status == 409 and mismatch.code == "CONFLICT" and "maxAttempts 5" in mismatch.json["error"]["message"]
    declared = await _put(client, "/mailboxes/by-name/crawl", {"maxAttempts": 2})
    assert declared.json["maxAttempts"] == 2
    assert (await _put(client, "/mailboxes/by-name/x", {"maxAttempts": 101})).code == "VALIDATION_FAILED"
    assert (await _put(client, "/mailboxes/by-name/x", {"requirements": {"slots": []}})).code == "VALIDATION_FAILED"
    assert (await _put(client, "/mailboxes/by-name/x", {"requirements": {"pools": [{"name": "none"}]}})).code == "NOT_FOUND"


async def test_a_producer_first_does_not_fix_the_settings_its_workers_declare(client, autojump_clock):
    """A put of `{}` (a 0.3.0 producer) creates the mailbox with defaults and declares nothing: the
    first worker's maxAttempts and requirements are declared then, and from then on a put that
    states others is CONFLICT, one that states none (or the same, in any order) is answered."""
    journal = client.runtime.kernel.partition_of("default").journal = MemoryJournal(keep=True)
    await client.post("/permits", {"name": "browser", "units": 2})
    await client.post("/permits", {"name": "gpu", "units": 1})
    made = (await _put(client, "/mailboxes/by-name/review")).json
    assert (made["maxAttempts"], made["requirements"]) == (5, None)
    needs = {"pools": [{"name": "browser", "units": 1}, {"name": "gpu"}]}
    worker = await _put(client, "/mailboxes/by-name/review", {"maxAttempts": 3, "requirements": needs})
    assert worker.status == 200 and worker.json["id"] == made["id"] and worker.json["maxAttempts"] == 3
    pools = worker.json["requirements"]["pools"]
    assert [entry["units"] for entry in pools] == [1, 1] and all(entry["permitId"].startswith("pm_") for entry in pools)
    reordered = {"pools": [{"name": "gpu", "units": 1}, {"name": "browser"}]}
    assert (await _put(client, "/mailboxes/by-name/review", {"maxAttempts": 3, "requirements": reordered})).status == 200
    assert (await _put(client, "/mailboxes/by-name/review")).json["maxAttempts"] == 3
    other = await _put(client, "/mailboxes/by-name/review", {"requirements": {"pools": [{"name": "browser", "units": 2}]}})
    assert other.code == "CONFLICT" and "requirements" in other.json["error"]["message"]
    assert (await _put(client, "/mailboxes/by-name/review", {"maxAttempts": 4})).code == "CONFLICT"
    # Declared settings are kept by the journal and the image.
    state = client.runtime.kernel.partition_of("default").state
    assert "mailbox.declared" in {record["type"] for record in journal.records}
    for records in (journal.records, list(state.image())):
        rebuilt = KernelState(client.runtime.limits)
        for record in records:
            check_record(record)
            rebuilt.apply(record)
        mailbox = rebuilt.space("default").mailboxes.get(made["id"])
        assert (mailbox.max_attempts, mailbox.attempts_declared) == (3, True)
        assert mailbox.requirements == state.space("default").mailboxes.get(made["id"]).requirements


async def test_a_task_that_names_no_requirements_is_admitted_with_its_mailboxs(client, autojump_clock):
    """A queue whose workers declared one unit of a 1-unit pool: two tasks submitted without
    requirements (before and after the declaration) are admitted one at a time, each with a grant;
    the second the moment the first completes. `recv` delivers neither."""
    run = await client.run()
    await client.post("/permits", {"name": "browser", "units": 1})
    mailbox = (await _put(client, "/mailboxes/by-name/crawl")).json["id"]
    first = (await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "a", "input": 1})).json
    await _put(client, "/mailboxes/by-name/crawl", {"maxAttempts": 5, "requirements": {"pools": [{"name": "browser", "units": 1}]}})
    second = (await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "b", "input": 2})).json
    recv = await client.post(f"/mailboxes/{mailbox}/recv", {"scopeId": run, "holder": "old", "holderSession": "s", "leaseSeconds": 30})
    assert recv.status == 204
    admit = {"scopeId": run, "mailboxId": mailbox, "holder": "w", "holderSession": "s", "leaseSeconds": 30}
    one = (await client.post("/tasks/admit", admit)).json
    assert one["taskId"] == first["taskId"] and [grant["units"] for grant in one["grants"]] == [1]
    assert (await client.post("/tasks/admit", admit)).status == 204  # the pool is full
    seen = {}

    async def wait_admit() -> None:
        seen["answer"] = await client.post("/tasks/admit", {**admit, "waitMs": 20_000})
        seen["at"] = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_admit)
        await trio.sleep(3)
        done_at = trio.current_time()
        await client.post(f"/messages/{one['messageId']}/complete", {"token": one["token"], "result": {"payload": 1}})
    assert seen["answer"].json["taskId"] == second["taskId"] and seen["at"] == done_at


# -- once ------------------------------------------------------------------------------------------------


def _acquire(client, run, holder="w1", key="k", lease=5):  # type: ignore[no-untyped-def]
    body = {"scopeId": run, "key": key, "holder": holder, "holderSession": "s-" + holder, "leaseSeconds": lease}
    return client.post("/once/acquire", body)


async def test_once_has_one_holder_then_one_result_for_everyone(client, autojump_clock):
    run = await client.run()
    held = (await _acquire(client, run)).json
    assert held["state"] == "ACQUIRED" and held["attempts"] == 0 and held["token"]
    busy = (await _acquire(client, run, holder="w2")).json
    assert busy["state"] == "HELD" and busy["holder"] == "w1"
    stale = await client.post("/once/complete", {"scopeId": run, "key": "k", "token": "nope", "result": 1})
    assert stale.status == 409 and stale.code == "STALE_CLAIM"
    done = await client.post("/once/complete", {"scopeId": run, "key": "k", "token": held["token"], "result": {"answer": 42}})
    assert done.status == 200 and done.json["state"] == "DONE"
    later = (await _acquire(client, run, holder="w3")).json
    assert later == {"state": "DONE", "attempts": 1, "result": {"answer": 42}, "lastError": None}
    again = await client.post("/once/complete", {"scopeId": run, "key": "k", "token": held["token"], "result": 2})
    assert again.code == "STALE_CLAIM"  # the result is recorded once and never changed
    view = await client.get(f"/once?scopeId={run}&key=k")
    assert view.json["state"] == "DONE" and view.json["result"] == {"answer": 42}


async def test_failed_attempts_open_the_key_until_they_are_used_up(client, autojump_clock):
    run = await client.run()
    for attempt in range(3):
        held = (await _acquire(client, run)).json
        assert held["state"] == "ACQUIRED" and held["attempts"] == attempt
        failed = await client.post("/once/fail", {"scopeId": run, "key": "k", "token": held["token"], "error": f"boom {attempt}", "maxAttempts": 3})
        assert failed.json["state"] == ("FAILED" if attempt == 2 else "OPEN")
    final = (await _acquire(client, run)).json
    assert final["state"] == "FAILED" and final["attempts"] == 3 and final["lastError"] == "boom 2"


async def test_a_dead_holders_lease_runs_out_and_the_next_caller_takes_over_counting_the_attempt(client, autojump_clock):
    run = await client.run()
    started = trio.current_time()
    first = (await _acquire(client, run, lease=5)).json
    renewed = await client.post("/once/renew", {"scopeId": run, "key": "k", "token": first["token"], "leaseSeconds": 10})
    assert renewed.status == 200 and renewed.json["leaseExpiresAt"] == "2027-01-15T08:00:10.000Z"
    waiter = {}

    async def wait() -> None:
        waiter["view"] = (await client.get(f"/once?scopeId={run}&key=k&waitMs=30000")).json
        waiter["at"] = trio.current_time() - started

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
    assert waiter == {"view": {"state": "OPEN", "attempts": 1, "result": None, "lastError": None}, "at": 10.0}
    second = (await _acquire(client, run, holder="w2")).json
    assert second["state"] == "ACQUIRED" and second["attempts"] == 1 and second["token"] != first["token"]
    late = await client.post("/once/complete", {"scopeId": run, "key": "k", "token": first["token"], "result": "late"})
    assert late.code == "STALE_CLAIM"


async def test_a_released_key_opens_again_without_counting_the_attempt(client, autojump_clock):
    """A holder cancelled before it began gives the key back: the next caller holds it at once,
    with a greater generation (attempts), and the release leaves all of maxAttempts to the work."""
    run = await client.run()
    waiter = {}

    async def wait() -> None:
        waiter["view"] = (await client.get(f"/once?scopeId={run}&key=k&waitMs=30000")).json
        waiter["at"] = trio.current_time()

    held = (await _acquire(client, run, lease=60)).json
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.sleep(1)
        stale = await client.post("/once/release", {"scopeId": run, "key": "k", "token": "nope"})
        assert stale.code == "STALE_CLAIM"
        released = await client.post("/once/release", {"scopeId": run, "key": "k", "token": held["token"]})
        released_at = trio.current_time()
    assert released.status == 200 and released.json["state"] == "OPEN"
    assert waiter == {"view": {"state": "OPEN", "attempts": 1, "result": None, "lastError": None}, "at": released_at}
    again = await client.post("/once/release", {"scopeId": run, "key": "k", "token": held["token"]})
    assert again.code == "STALE_CLAIM"
    late = await client.post("/once/complete", {"scopeId": run, "key": "k", "token": held["token"], "result": 1})
    assert late.code == "STALE_CLAIM"
    failed = []
    for attempt in range(2):
        got = (await _acquire(client, run, holder="w2")).json
        assert got["state"] == "ACQUIRED" and got["attempts"] == attempt + 1
        body = {"scopeId": run, "key": "k", "token": got["token"], "error": "boom", "maxAttempts": 2}
        failed.append((await client.post("/once/fail", body)).json["state"])
    assert failed == ["OPEN", "FAILED"], "the released acquisition was counted as a failed attempt"


async def test_a_waiter_is_answered_the_moment_the_result_is_recorded(client, autojump_clock):
    run = await client.run()
    held = (await _acquire(client, run, lease=60)).json
    seen = {}

    async def wait() -> None:
        seen["view"] = (await client.get(f"/once?scopeId={run}&key=k&waitMs=25000")).json
        seen["at"] = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.sleep(3)
        await client.post("/once/complete", {"scopeId": run, "key": "k", "token": held["token"], "result": [1]})
        done_at = trio.current_time()
    assert seen["view"]["state"] == "DONE" and seen["view"]["result"] == [1] and seen["at"] == done_at
    quiet = await client.get(f"/once?scopeId={run}&key=other&waitMs=1000")
    assert quiet.json["state"] == "OPEN"


async def test_a_held_key_is_answered_held_when_the_wait_ends(client, autojump_clock):
    run = await client.run()
    await _acquire(client, run, lease=60)
    before = trio.current_time()
    view = (await client.get(f"/once?scopeId={run}&key=k&waitMs=2000")).json
    assert view["state"] == "HELD" and trio.current_time() - before == pytest.approx(2.0)


async def test_once_refuses_bad_input_and_a_stopped_run(client, autojump_clock):
    run = await client.run()
    assert (await client.get(f"/once?scopeId={run}")).code == "VALIDATION_FAILED"
    assert (await client.get(f"/once?scopeId={run}&key=k&waitMs=soon")).code == "VALIDATION_FAILED"
    assert (await _acquire(client, run, lease=4)).code == "VALIDATION_FAILED"
    held = (await _acquire(client, run)).json
    big = await client.post("/once/complete", {"scopeId": run, "key": "k", "token": held["token"], "result": "x" * 70_000})
    assert big.code == "VALIDATION_FAILED" and "exceeds 65536 bytes" in big.json["error"]["message"]
    await client.post(f"/scopes/{run}/cancel", {})
    assert (await _acquire(client, run, key="k2")).code == "SCOPE_CANCELLED"


async def test_once_slots_survive_replay_and_images(client, autojump_clock):
    run = await client.run()
    held = (await _acquire(client, run, key="a")).json
    await client.post("/once/complete", {"scopeId": run, "key": "a", "token": held["token"], "result": "r"})
    given = (await _acquire(client, run, key="c")).json
    await client.post("/once/release", {"scopeId": run, "key": "c", "token": given["token"]})
    await _acquire(client, run, key="b", lease=60)
    live = client.runtime.kernel.partition_of("default").state.space("default")
    rebuilt = KernelState(client.runtime.limits)
    for record in list(client.runtime.kernel.partition_of("default").state.image()):
        check_record(record)  # every image record is one the record format knows
        rebuilt.apply(record)
    now = client.runtime.kernel.clock.now_ms()
    for key in ("a", "b", "c"):
        space = rebuilt.space("default")
        assert space.once.view(space.once.find(run, key), now) == live.once.view(live.once.find(run, key), now)
    assert rebuilt.space("default").once.find(run, "c").released == 1  # (the image keeps what was given back)


# -- a task's long poll ----------------------------------------------------------------------------------


async def test_a_task_long_poll_is_woken_by_the_tasks_end(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    task = (await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "t", "input": 1})).json
    seen = {}

    async def wait() -> None:
        seen["task"] = (await client.get(f"/tasks/{task['taskId']}?waitMs=25000")).json
        seen["at"] = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.sleep(4)
        delivery = (await client.recv(mailbox, run)).json
        await client.post(f"/messages/{delivery['message']['id']}/complete", {"token": delivery["token"], "result": {"payload": "ok"}})
        done_at = trio.current_time()
    assert seen["task"]["state"] == "SUCCEEDED" and seen["task"]["outcome"] == "ok" and seen["at"] == done_at
    before = trio.current_time()
    assert (await client.get(f"/tasks/{task['taskId']}?waitMs=25000")).json["state"] == "SUCCEEDED"
    assert trio.current_time() == before  # an ended task answers at once


async def test_a_task_long_poll_ends_with_the_wait_or_the_runs_cancel(client, autojump_clock):
    run, mailbox = await client.run(), await client.mailbox()
    task = (await client.post("/tasks", {"scopeId": run, "mailboxId": mailbox, "taskKey": "t"})).json
    before = trio.current_time()
    queued = (await client.get(f"/tasks/{task['taskId']}?waitMs=1500")).json
    assert queued["state"] == "QUEUED" and trio.current_time() - before == pytest.approx(1.5)
    seen = {}

    async def wait() -> None:
        seen["task"] = (await client.get(f"/tasks/{task['taskId']}?waitMs=25000")).json

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.sleep(1)
        await client.post(f"/scopes/{run}/cancel", {})
    assert seen["task"]["state"] == "CANCELLED" and seen["task"]["outcomeReason"] == "scope_cancelled"
    assert (await client.get(f"/tasks/{task['taskId']}?waitMs=-1")).code == "VALIDATION_FAILED"


# -- a claim acquire that waits on the server --------------------------------------------------------


def _claim(client, run, holder, **more):  # type: ignore[no-untyped-def]
    body = {"scopeId": run, "key": "k", "holder": holder, "holderSession": "s-" + holder, "leaseSeconds": 10, **more}
    return client.post("/claims", body)


async def test_a_waiting_acquire_gets_the_claim_the_moment_it_is_released_in_arrival_order(client, autojump_clock):
    run = await client.run()
    first = (await _claim(client, run, "w1")).json
    got = []

    async def wait(holder: str) -> None:
        answer = await _claim(client, run, holder, waitMs=30_000)
        got.append((holder, answer.status, answer.json.get("generation"), trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait, "w2")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(wait, "w3")
        await trio.sleep(2)
        released_at = trio.current_time()
        await client.post("/claims/k/release", {"token": first["token"]})
        await trio.testing.wait_all_tasks_blocked()
        assert got == [("w2", 200, 2, released_at)]  # the first to arrive, at the release, not by polling
        expires_at = trio.current_time() + 10
    assert got[1][:3] == ("w3", 200, 3) and got[1][3] == pytest.approx(expires_at)  # w2's lease ran out


async def test_a_waiting_acquire_is_claim_held_when_its_wait_ends_or_stopped_by_its_scope(client, autojump_clock):
    run = await client.run()
    await _claim(client, run, "w1")
    before = trio.current_time()
    held = await _claim(client, run, "w2", waitMs=3_000)
    assert held.status == 409 and held.code == "CLAIM_HELD" and trio.current_time() - before == pytest.approx(3.0)
    assert "retry-after" in held.headers
    seen = {}

    async def wait() -> None:
        seen["answer"] = await _claim(client, run, "w3", waitMs=30_000)
        seen["at"] = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.sleep(1)
        await client.post(f"/scopes/{run}/cancel", {})
        cancelled_at = trio.current_time()
    assert seen["answer"].code == "SCOPE_CANCELLED" and seen["at"] == cancelled_at
    assert (await _claim(client, run, "w4", waitMs=-5)).code == "VALIDATION_FAILED"


async def test_every_record_these_routes_write_is_registered(client, autojump_clock):
    """Runs, mailboxes by name, once keys through every state: each record is one the format knows."""
    journal = client.runtime.kernel.partition_of("default").journal = MemoryJournal(keep=True)
    run = (await _put(client, "/runs/registered", {"deadline": "2027-01-15T09:00:00Z"})).json["id"]
    await _put(client, "/mailboxes/by-name/q")
    done = (await _acquire(client, run, key="a")).json
    await client.post("/once/renew", {"scopeId": run, "key": "a", "token": done["token"]})
    await client.post("/once/complete", {"scopeId": run, "key": "a", "token": done["token"], "result": 1})
    failing = (await _acquire(client, run, key="b")).json
    await client.post("/once/fail", {"scopeId": run, "key": "b", "token": failing["token"], "error": "x", "maxAttempts": 1})
    given = (await _acquire(client, run, key="d")).json
    await client.post("/once/release", {"scopeId": run, "key": "d", "token": given["token"]})
    await _acquire(client, run, key="c", lease=5)
    await trio.sleep(6)  # the lease of c runs out
    kinds = set()
    for record in journal.records:
        check_record(record)
        kinds.add(record["type"])
    assert {"run.named", "once.acquired", "once.renewed", "once.completed", "once.failed", "once.expired", "once.released"} <= kinds


async def test_a_once_keys_state_is_read_in_a_run_that_exists(nursery, autojump_clock):
    """`GET /once` names its run as acquire does: an unknown run, or one removed after its
    retention, is 404 NOT_FOUND (the removed one naming the retention), not a key OPEN with no
    attempts that acquire would then refuse; an ended run kept still answers its keys."""
    limits = Limits().replace(ended_run_retention_s=60)
    client = AsgiClient(await start_runtime(nursery, Settings(api_key=API_KEY, space_id=SPACE, seed=7, limits=limits)))
    unknown = await client.get("/once?scopeId=sc_0123456789abcdef&key=k")
    assert (unknown.status, unknown.code) == (404, "NOT_FOUND"), unknown
    assert (await _acquire(client, "sc_0123456789abcdef")).code == "NOT_FOUND"
    run = await client.run()
    held = (await _acquire(client, run)).json
    await client.post("/once/complete", {"scopeId": run, "key": "k", "token": held["token"], "result": 7})
    await client.post(f"/scopes/{run}/cancel")
    kept = await client.get(f"/once?scopeId={run}&key=k")
    assert (kept.status, kept.json["state"], kept.json["result"]) == (200, "DONE", 7)
    await trio.sleep(61)
    removed = await client.get(f"/once?scopeId={run}&key=k&waitMs=1000")
    assert (removed.status, removed.code) == (404, "NOT_FOUND"), removed
    assert "retention" in removed.json["error"]["message"]
