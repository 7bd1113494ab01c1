"""Nothing is shown before it is durable: a second caller never sees a change that a crash then takes back.

Each test holds the WAL's writes (the server has appended a change and not yet written it), lets
another caller look at what the change touched, then crashes the server before the write and
starts it again on the same directory. Whatever the other caller was answered must be what the
restarted server shows: a read, a refusal decided from the new state, or a watch's wake-up that
showed the change would each be a dirty read. With nothing held, the same calls answer at once.

Virtual time without autojump: nothing in these tests waits for the clock, and a clock that jumped
while the write is held would only fire timers that have nothing to do with the point.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import pytest
import trio
import trio.testing

from runstate.actors import Clock
from runstate.server.runtime import Runtime
from runstate.server.settings import Settings
from runstate.snapshots.wal import SegmentWriter, inline
from tests.server.asgi_client import API_KEY, SPACE, T0, AsgiClient


class HeldWrites:
    """Runs the store's blocking IO inline, except WAL writes while `held` (until released)."""

    def __init__(self) -> None:
        self.held = False
        self.released = trio.Event()
        self.waiting = 0

    async def __call__(self, function: Callable[..., Any], *args: Any) -> Any:
        if self.held and getattr(function, "__func__", None) is SegmentWriter.write:
            self.waiting += 1
            await self.released.wait()
        return await inline(function, *args)


class HeldRuntime(Runtime):
    def __init__(self, settings: Settings, writes: HeldWrites) -> None:
        super().__init__(settings, clock=Clock(wall_anchor_ms=T0))
        self.writes = writes

    def _store_options(self) -> dict:
        return {**super()._store_options(), "run_blocking": self.writes}


async def start(nursery: trio.Nursery, data_dir: str, writes: HeldWrites) -> Runtime:
    settings = Settings(api_key=API_KEY, space_id=SPACE, seed=5, data_dir=data_dir, fsync="always")
    runtime = HeldRuntime(settings, writes)
    await nursery.start(runtime.run)
    while not runtime.ready:
        assert runtime.fatal is None, runtime.fatal
        await trio.testing.wait_all_tasks_blocked()
    return runtime


async def crash_before_the_write(data_dir: str, setup, change, look) -> tuple[list, dict]:
    """Run `setup` (durable), then `change` with writes held and `look` beside it, then crash.

    Returns what `look` was answered before the crash (nothing, if it was still waiting), and
    what `setup` returned."""
    seen: list = []
    writes = HeldWrites()
    async with trio.open_nursery() as nursery:
        runtime = await start(nursery, data_dir, writes)
        client = AsgiClient(runtime)
        made = await setup(client)
        writes.held = True
        nursery.start_soon(change, client, made)
        await trio.testing.wait_all_tasks_blocked()
        assert writes.waiting == 1, "the change is appended and its write held"

        async def looking() -> None:
            seen.append(await look(client, made))

        nursery.start_soon(looking)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()  # the process dies: the held write never reaches the disk
    return seen, made


async def two_runs(data_dir: str, setup, change, look, after: Callable[[AsgiClient, dict], Awaitable[Any]]):
    seen, made = await crash_before_the_write(data_dir, setup, change, look)
    async with trio.open_nursery() as nursery:
        runtime = await start(nursery, data_dir, HeldWrites())
        client = AsgiClient(runtime)
        client._keys = 1 << 40  # Idempotency-Keys not used before the crash
        recovered = await after(client, made)
        nursery.cancel_scope.cancel()
    return seen, recovered


async def _task_running(client: AsgiClient) -> dict:
    scope = await client.run()
    mailbox = await client.mailbox()
    task = await client.post("/tasks", {"scopeId": scope, "mailboxId": mailbox, "taskKey": "t1", "input": 1})
    delivery = await client.recv(mailbox, scope)
    assert delivery.status == 200, delivery
    return {"task": task.json["taskId"], "message": delivery.json["message"]["id"], "token": delivery.json["token"]}


async def _complete(client: AsgiClient, made: dict) -> None:
    await client.post(f"/messages/{made['message']}/complete", {"token": made["token"], "result": {"answer": 42}})


async def _task_view(client: AsgiClient, made: dict) -> Any:
    response = await client.get(f"/tasks/{made['task']}")
    return response.json["state"], response.json.get("outcome")


def test_a_task_read_never_shows_a_result_that_a_crash_before_its_fsync_loses(tmp_path):
    """A worker completes a task; before the completion is on disk, another caller reads the task.
    The server dies before the write: the reader must not have been told SUCCEEDED with 42."""

    async def main() -> None:
        seen, recovered = await two_runs(str(tmp_path), _task_running, _complete, _task_view, _task_view)
        assert recovered == ("RUNNING", None)  # the completion was never recorded
        assert seen == [], f"the read answered {seen} before the completion was durable"

    trio.run(main, clock=trio.testing.MockClock())


async def _claim_held(client: AsgiClient) -> dict:
    scope = await client.run()
    return {"scope": scope}


def _acquire_body(made: dict, holder: str) -> dict:
    return {"scopeId": made["scope"], "key": "k", "holder": holder, "holderSession": holder, "leaseSeconds": 60}


async def _acquire_first(client: AsgiClient, made: dict) -> None:
    await client.post("/claims", _acquire_body(made, "first"))


async def _acquire_second(client: AsgiClient, made: dict) -> Any:
    response = await client.post("/claims", _acquire_body(made, "second"))
    return response.status, response.code or response.json.get("holder")


def test_a_refusal_is_never_decided_from_a_claim_that_a_crash_takes_back(tmp_path):
    """A's acquire is appended, not written; B's acquire of the same key would be refused
    CLAIM_HELD because of it. The server dies before the write: after the restart the key was
    never taken, so B must not have been told it is held."""

    async def main() -> None:
        seen, recovered = await two_runs(str(tmp_path), _claim_held, _acquire_first, _acquire_second, _acquire_second)
        assert recovered == (200, "second")
        assert seen == [], f"B was answered {seen} from an acquire that was never recorded"

    trio.run(main, clock=trio.testing.MockClock())


async def _watch_from_now(client: AsgiClient, made: dict) -> Any:
    response = await client.get(f"/watch?cursor={made['cursor']}&waitSeconds=30")
    if response.status == 204:
        return []
    return [event["type"] for event in response.json["events"]]


async def _events_cursor(client: AsgiClient) -> dict:
    made = await _task_running(client)
    page = await client.get("/events?limit=1000")
    assert page.status == 200, page
    made["cursor"] = page.json["nextCursor"]
    return made


def test_a_watch_is_never_woken_by_an_event_that_a_crash_takes_back(tmp_path):
    """A watch parked on the event log is woken by the completion's events; it must not be
    answered with them until they are durable, since the crash takes them back."""

    async def main() -> None:
        seen, recovered = await two_runs(str(tmp_path), _events_cursor, _complete, _watch_from_now, _task_view)
        assert recovered == ("RUNNING", None)
        assert all("task.succeeded" not in events for events in seen), seen

    trio.run(main, clock=trio.testing.MockClock())


def test_with_nothing_pending_the_same_reads_answer_at_once(tmp_path):
    """The rule costs nothing when nothing waits to be written: reads answer in the same instant."""

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            runtime = await start(nursery, str(tmp_path), HeldWrites())
            client = AsgiClient(runtime)
            made = await _task_running(client)
            before = trio.current_time()
            assert await _task_view(client, made) == ("RUNNING", None)
            assert (await _acquire_second(client, await _claim_held(client)))[0] == 200
            assert trio.current_time() == before
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock())
