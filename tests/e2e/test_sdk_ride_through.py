"""Against a real server process: work that survives the server being killed and restarted, a
cancelled run that stops its workers at once, and a paused worker that sees its lease gone.

- A worker holds a claim (15 s lease) in `run()`; the server is killed with SIGKILL one second
  later and started again with the same `--data-dir` six seconds after that, so a renewal falls
  due while it is down (where a start is slow, the lease and the time down grow with it: `_sized`). The work runs to its end: `run()` returns its result, not LeaseLostError.
- A handler finishes while the server is down: its completion is sent again until the restarted
  server takes it, and the task records that result at its first attempt.
- A run is cancelled while `consume()` runs two long handlers: it returns within a second (and a
  little for the process to say so), and both tasks end CANCELLED.
- A worker is paused (SIGSTOP) past its 5 s lease and resumed: its first look says the lease is
  lost, `raise_if_lost()` raises, and another holder has the key.

Each script prints JSON lines; the test reads them as they come, and kills what it started.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import httpx
import pytest

from ..servers import ServerProcess

pytestmark = pytest.mark.e2e

# How long the server stays down: longer than a claim's renewal interval (15 s / 3).
DOWN_S = 6.0


def _sized(server: ServerProcess) -> tuple[int, float]:
    """A lease (whole seconds) and a time down for an outage of `server` that its clients ride
    through: the renewal due at a third of the lease falls while it is down, and it is back (a
    restart taken as twice its first start, which a loaded machine makes slow) well before the
    client gives the lease up at nine tenths of it. 15 s and DOWN_S where a start takes a second."""
    restart_s = 2 * server.started_in_s
    lease_s = max(15, math.ceil((3 + restart_s) / 0.55))
    return lease_s, max(DOWN_S, lease_s / 3 + 0.5)


class Script:
    """A Python script of ours against `server`, read line by line as JSON."""

    def __init__(self, server: ServerProcess, code: str, **env: str) -> None:
        environment = {
            **os.environ, "RUNSTATE_BASE_URL": server.base_url, "RUNSTATE_API_KEY": server.api_key,
            "RUNSTATE_SPACE_ID": server.space_id, "PYTHONUNBUFFERED": "1", **env,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=environment,
        )

    def line(self) -> dict:
        assert self.proc.stdout is not None
        text = self.proc.stdout.readline()
        if not text:
            self.proc.wait(5)
            raise AssertionError(f"the script ended ({self.proc.returncode}):\n{self.proc.stderr.read() if self.proc.stderr else ''}")
        return json.loads(text)

    def finish(self, timeout_s: float = 60) -> tuple[dict, str]:
        out, err = self.proc.communicate(timeout=timeout_s)
        lines = [json.loads(text) for text in out.splitlines() if text.startswith("{")]
        assert self.proc.returncode == 0 and lines, f"the script failed ({self.proc.returncode}):\n{err[-3000:]}"
        return lines[-1], err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def durable_server(tmp_path: Path):
    server = ServerProcess("--data-dir", str(tmp_path / "data"), "--fsync", "always")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _api(server: ServerProcess) -> httpx.Client:
    return httpx.Client(
        base_url=f"{server.base_url}/v1/spaces/{server.space_id}",
        headers={"authorization": f"Bearer {server.api_key}"}, timeout=10,
    )


def _outage(server: ServerProcess, down_s: float = DOWN_S) -> tuple[float, float]:
    """Kill the server at once, start it again `down_s` later; when it went and when it was back."""
    server.kill()
    killed_at = time.monotonic()
    time.sleep(down_s)
    server.restart()
    return killed_at, time.monotonic()


CLAIM = """
    import asyncio, json, os
    from runstate import AsyncRunstate, LeaseLostError

    async def main():
        rs = AsyncRunstate(holder="rider")
        run = await rs.scopes.create()

        async def work(lease):
            print(json.dumps({"started": run.id, "generation": lease.generation}), flush=True)
            for _ in range(int(os.environ["WORK_S"])):
                lease.raise_if_lost()
                await asyncio.sleep(1)
            return {"finished": True, "generation": lease.generation, "lost": lease.is_lost}

        try:
            lease_s = int(os.environ["LEASE_S"])
            print(json.dumps({"result": await run.claim("report").run(work, lease_seconds=lease_s)}), flush=True)
        except LeaseLostError as error:
            print(json.dumps({"lost": str(error)}), flush=True)

    asyncio.run(main())
"""


def test_a_held_claim_survives_a_server_killed_and_restarted_within_its_lease(durable_server):
    """The claim is acquired at 0; the server dies at about 1 s and is back after 6 s and its
    start-up (the renewal due at 5 s falls in between): the 20 s of work finish, run() returns,
    and the claim is then free for the next holder at generation 2."""
    lease_s, down_s = _sized(durable_server)
    work_s = max(20, math.ceil(1 + down_s + 2 * durable_server.started_in_s + 4))
    script = Script(durable_server, CLAIM, WORK_S=str(work_s), LEASE_S=str(lease_s))
    try:
        started = script.line()
        acquired_at = time.monotonic()
        time.sleep(1)
        killed_at, back_at = _outage(durable_server, down_s)
        assert killed_at - acquired_at < lease_s / 3 < back_at - acquired_at < lease_s, (
            killed_at - acquired_at, back_at - acquired_at, lease_s,
        )
        done, log = script.finish()
    finally:
        script.kill()
    assert done == {"result": {"finished": True, "generation": 1, "lost": False}}, (done, log[-2000:])
    assert "renewal failed" in log and "renewed again" in log  # the outage was ridden through, and said so
    with _api(durable_server) as api:
        taken = api.post("/claims", json={"key": "report", "scopeId": started["started"], "holder": "next", "holderSession": "s2", "leaseSeconds": 30})
    assert taken.status_code in (200, 201) and taken.json()["generation"] == 2, taken.text


HANDLER = """
    import asyncio, json, os
    from runstate import AsyncRunstate

    async def main():
        rs = AsyncRunstate(holder="worker")
        name = os.environ["MAILBOX"]
        await rs.mailboxes.ensure(name, mode="WORK")
        run = await rs.scopes.create()
        ticket = await run.mailbox(name).submit({"company": "acme"}, key="research:acme")
        stop, errors = asyncio.Event(), []

        async def handle(data, delivery):
            print(json.dumps({"handling": ticket.id, "attempt": delivery.attempt}), flush=True)
            await asyncio.sleep(4)
            stop.set()
            await delivery.complete(result={"payload": f"report on attempt {delivery.attempt}"})

        def on_error(error, delivery):
            if delivery is not None:
                errors.append(repr(error))

        await run.mailbox(name).consume(handle, lease_seconds=int(os.environ["LEASE_S"]), stop_event=stop, on_error=on_error)
        print(json.dumps({"errors": errors}), flush=True)

    asyncio.run(main())
"""


def test_a_completion_made_while_the_server_is_down_is_accepted_once_it_is_back(durable_server):
    """The handler (4 s) finishes while the server is down (from about 1 s, for 6 s): consume()
    sends the completion again until the restarted server takes it; no error for the delivery; the
    task is SUCCEEDED with that result, at attempt 1."""
    lease_s, _ = _sized(durable_server)
    script = Script(durable_server, HANDLER, MAILBOX=f"ride-{uuid.uuid4().hex[:8]}", LEASE_S=str(lease_s))
    try:
        handling = script.line()
        time.sleep(1)
        _outage(durable_server)
        done, log = script.finish()
    finally:
        script.kill()
    assert done == {"errors": []}, log[-2000:]
    assert "complete failed" in log  # it met the outage, said so, and went on
    with _api(durable_server) as api:
        view = api.get(f"/tasks/{handling['handling']}").json()
    assert (view["state"], view["outcome"], view["attempt"]) == ("SUCCEEDED", "report on attempt 1", 1), view


CANCELLED = """
    import asyncio, json, os, time
    from runstate import AsyncRunstate

    async def main():
        rs = AsyncRunstate(holder="worker")
        name = os.environ["MAILBOX"]
        await rs.mailboxes.ensure(name, mode="WORK")
        run = await rs.scopes.create()
        tickets = [await run.mailbox(name).submit({"n": n}, key=f"task-{n}") for n in range(2)]
        print(json.dumps({"run": run.id, "tasks": [ticket.id for ticket in tickets]}), flush=True)
        told = []

        async def handle(data, delivery):
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                told.append(delivery.is_lost)
                raise

        await run.mailbox(name).consume(handle, concurrency=2, lease_seconds=30)
        print(json.dumps({"returned_at": time.time(), "told": told}), flush=True)

    asyncio.run(main())
"""


def test_a_cancelled_run_stops_consume_within_a_second_and_its_tasks_end_cancelled(module_server):
    """Two 60 s handlers run; the run is cancelled over HTTP: consume() returns within a second of
    the cancel (plus the time for the line to come out), both handlers were cancelled and told,
    and both tasks are CANCELLED (scope_cancelled)."""
    script = Script(module_server, CANCELLED, MAILBOX=f"cancel-{uuid.uuid4().hex[:8]}")
    try:
        started = script.line()
        with _api(module_server) as api:
            for _ in range(100):  # both handlers have their deliveries
                if all(api.get(f"/tasks/{task}").json()["state"] == "RUNNING" for task in started["tasks"]):
                    break
                time.sleep(0.1)
            cancelled_at = time.time()
            assert api.post(f"/scopes/{started['run']}/cancel").status_code == 200
            done, _ = script.finish(timeout_s=30)
            views = [api.get(f"/tasks/{task}").json() for task in started["tasks"]]
    finally:
        script.kill()
    assert done["returned_at"] - cancelled_at < 1.5, done["returned_at"] - cancelled_at
    assert done["told"] == [True, True]
    assert [(view["state"], view["outcomeReason"]) for view in views] == [("CANCELLED", "scope_cancelled")] * 2


PAUSED = """
    import json, sys
    from runstate import LeaseLostError, Runstate

    rs = Runstate(holder="sleeper")
    run = rs.scopes.create()
    lease = run.claim("report").acquire(lease_seconds=5)
    print(json.dumps({"run": run.id}), flush=True)
    sys.stdin.readline()  # the test says when to look: right after it resumed the process
    lost = lease.is_lost
    try:
        lease.raise_if_lost()
        raised = None
    except LeaseLostError as error:
        raised = error.code
    print(json.dumps({"is_lost": lost, "raised": raised}), flush=True)
"""


def test_a_paused_worker_sees_its_lease_lost_as_soon_as_it_resumes(module_server):
    """SIGSTOP for 7 s holding a 5 s lease, then SIGCONT and a look at once: is_lost is true and
    raise_if_lost() raises before anything else is sent; the server gave the key to the next holder."""
    script = Script(module_server, PAUSED)
    try:
        started = script.line()
        script.proc.send_signal(signal.SIGSTOP)
        time.sleep(7)
        script.proc.send_signal(signal.SIGCONT)
        assert script.proc.stdin is not None
        script.proc.stdin.write("look\n")
        script.proc.stdin.flush()
        seen = script.line()
    finally:
        script.kill()
    assert seen == {"is_lost": True, "raised": "STALE_CLAIM"}
    with _api(module_server) as api:
        taken = api.post("/claims", json={"key": "report", "scopeId": started["run"], "holder": "next", "holderSession": "s3", "leaseSeconds": 30})
    assert taken.status_code in (200, 201) and taken.json()["generation"] == 2, taken.text
