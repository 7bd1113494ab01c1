"""Ctrl-C on a worker gives back what it holds at once, under asyncio and with the blocking client.

Each script takes one task (or a claim) from a real server, prints `started` and works forever; the
test sends SIGINT and then looks at the server: the delivery is back on the queue and the claim is
free right away, not when their 60 s leases would have run out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid

import httpx
import pytest

from ..interrupted import interrupt

pytestmark = pytest.mark.e2e

ASYNC_CONSUME = """
    import asyncio, os
    from runstate import AsyncRunstate

    async def main():
        rs = AsyncRunstate()
        name = os.environ["MAILBOX"]
        await rs.mailboxes.ensure(name, mode="WORK")
        run = await rs.scopes.create()
        await run.mailbox(name).send({"n": 1})

        async def handle(data, delivery):
            print("started", flush=True)
            await asyncio.sleep(3600)

        await run.mailbox(name).consume(handle, lease_seconds=60)

    asyncio.run(main())
"""

BLOCKING_CONSUME = """
    import os, time
    from runstate import Runstate

    rs = Runstate()
    name = os.environ["MAILBOX"]
    rs.mailboxes.ensure(name, mode="WORK")
    run = rs.scopes.create()
    run.mailbox(name).send({"n": 1})

    def handle(data, delivery):
        print("started", flush=True)
        time.sleep(3600)

    run.mailbox(name).consume(handle, lease_seconds=60)
"""

ASYNC_CLAIM = """
    import asyncio, os
    from runstate import AsyncRunstate

    async def main():
        rs = AsyncRunstate()
        run = await rs.scopes.create()

        async def work(lease):
            print("started", run.id, flush=True)
            await asyncio.sleep(3600)

        await run.claim("report").run(work, lease_seconds=60)

    asyncio.run(main())
"""

BLOCKING_CLAIM = """
    import time
    from runstate import Runstate

    rs = Runstate()
    run = rs.scopes.create()

    def work(lease):
        print("started", run.id, flush=True)
        time.sleep(3600)

    run.claim("report").run(work, lease_seconds=60)
"""


def _api(server) -> httpx.Client:
    return httpx.Client(
        base_url=f"{server.base_url}/v1/spaces/{server.space_id}",
        headers={"authorization": f"Bearer {server.api_key}"}, timeout=10,
    )


@pytest.mark.parametrize("script", [ASYNC_CONSUME, BLOCKING_CONSUME], ids=["asyncio", "blocking"])
def test_ctrl_c_on_consume_puts_the_delivery_back_at_once(module_server, script):
    """After SIGINT the mailbox has nothing leased: the message waits for the next worker."""
    name = f"interrupt-{uuid.uuid4().hex[:8]}"
    interrupt(module_server, script, MAILBOX=name)
    with _api(module_server) as api:
        rows = {row["name"]: row for row in api.get("/mailboxes").json()["mailboxes"]}
    counts = rows[name]["counts"]
    assert counts["leased"] == 0 and counts["queued"] + counts["delayed"] == 1, json.dumps(rows[name])


@pytest.mark.parametrize("script", [ASYNC_CLAIM, BLOCKING_CLAIM], ids=["asyncio", "blocking"])
def test_ctrl_c_in_claim_run_releases_the_claim_at_once(module_server, script):
    """After SIGINT the claim is free: another holder acquires it without waiting."""
    first, _ = interrupt(module_server, script)
    run_id = first.split()[1]
    with _api(module_server) as api:
        answer = api.post("/claims", json={"key": "report", "scopeId": run_id, "holder": "next", "holderSession": "s1", "leaseSeconds": 30})
    assert answer.status_code in (200, 201), answer.text
    assert answer.json()["generation"] == 2


SERVE = """
    import json, os, time
    import runstate

    @runstate.queue("slow-review")
    def review(doc):
        print(json.dumps({"working": doc}), flush=True)
        time.sleep(2)
        return {"reviewed": doc}

    job = runstate.queue("slow-review").send("draft")
    print(json.dumps({"job": job.id}), flush=True)
    runstate.serve()
    print(json.dumps({"served": True}), flush=True)
"""


def test_sigterm_on_serve_lets_the_running_job_finish_then_returns(module_server):
    """The run-bound serve() (0.3.0's) on SIGTERM takes no new work, lets the job in hand finish
    (it is recorded), and returns: the process ends normally."""
    environment = {
        **os.environ, "RUNSTATE_BASE_URL": module_server.base_url, "RUNSTATE_API_KEY": module_server.api_key,
        "RUNSTATE_SPACE_ID": module_server.space_id, "RUNSTATE_RUN": f"sigterm-{uuid.uuid4().hex[:8]}",
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SERVE)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=environment,
    )
    try:
        assert proc.stdout is not None
        job = json.loads(proc.stdout.readline())["job"]
        assert json.loads(proc.stdout.readline()) == {"working": "draft"}
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and json.loads(out.strip().splitlines()[-1]) == {"served": True}, err
    with _api(module_server) as api:
        view = api.get(f"/tasks/{job}").json()
    assert (view["state"], view["outcome"]) == ("SUCCEEDED", {"reviewed": "draft"}), view
