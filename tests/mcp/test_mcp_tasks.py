"""Shared tasks and work queues through `runstate mcp`: real processes over stdio, a real server.

A task submitted by one agent is taken, completed and read back by key; a failed attempt goes back
to the queue, a final failure ends the task with its reason; a task held by a killed agent goes
back to the queue when its lease runs out and another agent takes it; an agent whose session ends
cleanly gives back at once what it holds; bad arguments answer errors a model can read.
"""

from __future__ import annotations

import time

import anyio
import pytest

from ..servers import ServerProcess
from .agents import LEASE_SECONDS, agent, agents, parse, unique

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


async def test_submit_take_complete_and_result_round_trip(module_server):
    """A planner submits, a worker takes and completes, the planner reads the result by key (and sees the
    work under way in the run's status, as a tool and as a resource); the same key submitted again joins
    the finished task (nothing runs twice), other input under it is refused."""
    run, queue = unique("run"), unique("research")
    async with agents(module_server, run, unique("planner"), unique("worker")) as (planner, worker):
        submitted = await planner.ok("submit", queue=queue, input={"company": "acme"}, key="research:acme")
        assert submitted["state"] == "QUEUED" and submitted["key"] == "research:acme"
        assert (await planner.ok("result", key="research:acme"))["finished"] is False

        taken = await worker.ok("take", queue=queue)
        assert taken["task"] == submitted["task"] and taken["key"] == "research:acme"
        assert taken["input"] == {"company": "acme"} and taken["attempt"] == 1
        assert [t["task"] for t in (await worker.ok("held"))["tasks"]] == [submitted["task"]]
        status = await planner.ok("status")
        assert status["tasks"]["running"] == [{"task": submitted["task"], "key": "research:acme", "queue": queue,
                                              "attempt": 1, "worker": worker.holder}]
        resource = await planner.session.read_resource("runstate://run/status")
        assert parse(resource.contents[0].text)["tasks"]["running"] == status["tasks"]["running"]
        prompt = await planner.session.get_prompt("claim-before-editing")
        assert 'claim with key "file:' in prompt.messages[0].content.text

        done = await worker.ok("complete", task=taken["task"], result={"founded": 1999, "report": "…"})
        assert done["completed"] is True and done["state"] == "SUCCEEDED"
        assert (await worker.ok("held"))["tasks"] == []

        read = await planner.ok("result", key="research:acme")
        assert (read["state"], read["finished"], read["result"]) == ("SUCCEEDED", True, {"founded": 1999, "report": "…"})
        # The worker never submitted it: found by key among the run's tasks.
        assert (await worker.ok("result", key="research:acme"))["result"] == {"founded": 1999, "report": "…"}

        again = await worker.ok("submit", queue=queue, input={"company": "acme"}, key="research:acme")
        assert (again["task"], again["state"], again["result"]) == (submitted["task"], "SUCCEEDED", {"founded": 1999, "report": "…"})
        other, error = await worker.call("submit", queue=queue, input={"company": "globex"}, key="research:acme")
        assert error and other["code"] == "IDEMPOTENCY_CONFLICT" and "new key" in other["error"]
        assert (await worker.ok("take", queue=queue))["task"] is None


async def test_a_failed_attempt_goes_back_to_the_queue_and_a_final_failure_keeps_its_reason(module_server):
    """fail(retry=true) puts the task back (taken again as attempt 2, after the backoff); fail(retry=false)
    ends it FAILED with the reason, which result reads."""
    run, queue = unique("run"), unique("crawl")
    async with agent(module_server, run, unique("worker")) as worker:
        task = (await worker.ok("submit", queue=queue, input={"url": "https://example.com"}, key="crawl:example"))["task"]
        assert (await worker.ok("take", queue=queue))["attempt"] == 1
        back = await worker.ok("fail", task=task, reason="the site timed out", retry=True)
        assert back["failed"] is True and back["state"] == "QUEUED" and "back on queue" in back["message"]

        second = await worker.ok("take", queue=queue, wait_seconds=10)
        assert (second["task"], second["attempt"]) == (task, 2)
        ended = await worker.ok("fail", task=task, reason="the site is gone for good", retry=False)
        assert ended["state"] == "FAILED"
        read = await worker.ok("result", key="crawl:example")
        assert (read["state"], read["result"]) == ("FAILED", None) and read["reason"].endswith("the site is gone for good")
        gone, error = await worker.call("complete", task=task, result="late")
        assert error and f"you do not hold task {task}" in gone["error"]


async def test_a_task_taken_by_a_killed_agent_goes_back_to_the_queue_and_another_takes_it(module_server):
    """SIGKILL: the task comes back when the lease runs out, as attempt 2 for the next worker."""
    run, queue = unique("run"), unique("review")
    async with agents(module_server, run, unique("worker-1"), unique("worker-2")) as (first, second):
        task = (await first.ok("submit", queue=queue, input={"pr": 42}, key="review:42"))["task"]
        assert (await first.ok("take", queue=queue))["task"] == task
        assert (await second.ok("take", queue=queue))["task"] is None, "it is held"
        killed = first.kill()
        taken = await second.ok("take", queue=queue, wait_seconds=30)
        assert time.monotonic() - killed <= LEASE_SECONDS + 3
        assert (taken["task"], taken["attempt"], taken["input"]) == (task, 2, {"pr": 42})
        assert (await second.ok("complete", task=task, result="approved"))["state"] == "SUCCEEDED"


async def test_a_session_that_ends_gives_back_what_it_holds_at_once(module_server):
    """Its MCP client closes the session: the claim is free at once and the task back on the queue, not
    after their leases (60 s here)."""
    run, queue = unique("run"), unique("edits")
    async with agent(module_server, run, unique("next")) as after:
        async with agent(module_server, run, unique("leaving")) as leaving:
            await leaving.ok("claim", key="file:a.py", lease_seconds=60)
            task = (await leaving.ok("submit", queue=queue, input=1, key="edit:a"))["task"]
            assert (await leaving.ok("take", queue=queue, lease_seconds=60))["task"] == task
        ended = time.monotonic()
        claim = await after.ok("claim", key="file:a.py")
        assert (claim["acquired"], claim["generation"]) == (True, 2)
        taken = await after.ok("take", queue=queue, wait_seconds=10)
        assert (taken["task"], taken["attempt"]) == (task, 2)
        assert time.monotonic() - ended < 10


async def test_a_take_the_server_ends_early_says_how_long_it_waited():
    """A take waiting 20 s on a server that stops after about 1 s answers "nothing to take" at once,
    with the time it waited, not the 20 s it asked for."""
    with ServerProcess() as server:
        async with agent(server, unique("run"), unique("worker")) as worker:
            async with anyio.create_task_group() as group:
                group.start_soon(anyio.to_thread.run_sync, lambda: (time.sleep(1.5), server.stop()))
                started = time.monotonic()
                taken = await worker.ok("take", queue=unique("q"), wait_seconds=20)
            took = time.monotonic() - started
    assert taken["task"] is None and took < 15, (taken, took)
    assert 1 <= taken["waited_seconds"] <= took + 0.1, (taken, took)
    assert f"after waiting {taken['waited_seconds']:g} s" in taken["message"]


async def test_bad_arguments_answer_errors_a_model_can_read(module_server):
    """Each mistake is an is_error answer that names what is wrong; nothing is a traceback."""
    async with agent(module_server, unique("run"), unique("agent")) as a:
        cases = [
            ("claim", {"key": "k", "lease_seconds": 2}, "lease_seconds"),
            ("claim", {"key": ""}, "key"),
            ("claim", {"key": "k", "wait_seconds": -1}, "wait_seconds"),
            ("claim", {}, "key"),
            ("take", {"queue": "q", "wait_seconds": "soon"}, "wait_seconds"),
            ("release", {"key": "never-claimed"}, "you do not hold never-claimed"),
            ("complete", {"task": "tk_0000000000000000", "result": 1}, "you do not hold task tk_0000000000000000"),
            ("fail", {"task": "tk_0000000000000000"}, "reason"),
            ("result", {"key": "no-such-task"}, "no task has the key no-such-task"),
            ("submit", {"queue": "q", "input": 1, "key": "x" * 513}, "key"),
            # A queue's name is a mailbox's: at most 256 characters, said by the schema, as the field.
            ("submit", {"queue": "q" * 257, "input": 1, "key": "k"}, "queue"),
            ("take", {"queue": "q" * 257}, "queue"),
        ]
        for tool, arguments, named in cases:
            body, error = await a.call(tool, **arguments)
            assert error, (tool, arguments, body)
            assert named in body["error"], (tool, arguments, body)
            assert "Traceback" not in body["error"]
        assert "Traceback" not in a.stderr()
        tools = {tool.name: tool for tool in (await a.session.list_tools()).tools}
        assert tools["submit"].input_schema["properties"]["queue"]["maxLength"] == 256
        assert tools["take"].input_schema["properties"]["queue"]["maxLength"] == 256
