"""Many planners, few workers, one recorded result each: the product's central promise at scale.

10 planner processes submit the same N task keys (each key by 3 planners, with the same input)
and wait for the results; 4 worker processes consume them with the official client. At the end
there are exactly N tasks, each SUCCEEDED with one recorded result, each handled exactly once (no
delivery needed a second attempt). The test prints the wall time and the rate.

It runs against a server in memory and against one on a data directory (`--fsync always`: every
answer waits for its record's fsync). The normal suite runs N = 200; `SCALE_TASKS=1000`
runs the full size.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

from ..servers import ServerProcess
from .official_scripts import Clients

pytestmark = [pytest.mark.compat, pytest.mark.e2e]

TASKS = int(os.environ.get("SCALE_TASKS", "200"))
PLANNERS = 10
WORKERS = 4
SUBMITS_PER_KEY = 3

PLANNER = """
async def main():
    rs = AsyncRunstate(holder=f"planner-{ARGS['planner']}")
    mailbox = rs.scope(ARGS["run"]).mailbox(ARGS["mailbox"])
    mine = {(ARGS["planner"] + j) % ARGS["planners"] for j in range(ARGS["per_key"])}
    keys = [i for i in range(ARGS["tasks"]) if i % ARGS["planners"] in mine]
    submit_gate, result_gate = asyncio.Semaphore(8), asyncio.Semaphore(2)
    started = time.time()

    async def submit(i):
        async with submit_gate:
            return await mailbox.submit({"i": i}, key=f"task-{i:05d}", subscriber_id=f"planner-{ARGS['planner']}")

    tickets = await asyncio.gather(*(submit(i) for i in keys))
    submitted = time.time()

    async def result(ticket):
        async with result_gate:
            return await ticket.result(timeout_ms=180_000)

    outcomes = await asyncio.gather(*(result(t) for t in tickets))
    emit(event="done", planner=ARGS["planner"], started=started, submitted=submitted, finished=time.time(),
         tasks={f"task-{i:05d}": t.id for i, t in zip(keys, tickets)},
         outcomes={f"task-{i:05d}": o for i, o in zip(keys, outcomes)})
    await rs.aclose()

asyncio.run(main())
"""

WORKER = """
async def main():
    rs = AsyncRunstate(holder=f"worker-{ARGS['worker']}")
    mailbox = rs.scope(ARGS["run"]).mailbox(ARGS["mailbox"])
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    handled = []

    async def handle(data, delivery):
        handled.append([delivery.id, data["i"], delivery.attempt, time.time()])
        await delivery.complete(result={"payload": {"i": data["i"], "worker": ARGS["worker"]}})

    await mailbox._resolve_id()
    emit(event="ready")
    await mailbox.consume(handle, concurrency=8, lease_seconds=30, stop_event=stop)
    emit(event="stopped", worker=ARGS["worker"], handled=handled)
    await rs.aclose()

asyncio.run(main())
"""


def server_cpu_s(clients: Clients) -> float | None:
    """CPU seconds the server process has used so far (Linux), to tell server cost from client cost."""
    try:
        with open(f"/proc/{clients.server.proc.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, ValueError, IndexError):
        return None


def run_scale(clients: Clients, tasks: int) -> dict:
    run = clients.post("/scopes", {"name": "scale"}).json()["id"]
    name = f"scale-{uuid.uuid4().hex[:8]}"
    mailbox = clients.post("/mailboxes", {"name": name}).json()["id"]
    common = {"run": run, "mailbox": name}
    workers = [clients.start(WORKER, worker=w, **common) for w in range(WORKERS)]
    planners = []
    try:
        for worker in workers:
            worker.wait_for("ready")
        began, cpu_before = time.monotonic(), server_cpu_s(clients)
        planners = [
            clients.start(PLANNER, planner=p, planners=PLANNERS, per_key=SUBMITS_PER_KEY, tasks=tasks, **common)
            for p in range(PLANNERS)
        ]
        reports = [planner.finish(timeout_s=240) for planner in planners]
        wall_s = time.monotonic() - began
        cpu_after = server_cpu_s(clients)
        for worker in workers:
            worker.process.terminate()
        handled = [row for worker in workers for row in worker.finish()["handled"]]
    finally:
        for process in (*workers, *planners):
            process.kill()
    server_cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return {"run": run, "mailbox": mailbox, "reports": reports, "handled": handled, "wall_s": wall_s, "server_cpu_s": server_cpu}


@pytest.fixture(params=["memory", "disk"])
def scale_clients(request, official_client, module_server, tmp_path):
    """Clients of the in-memory module server, or of a server on a data directory of its own."""
    if request.param == "memory":
        clients = Clients(official_client, module_server)
        yield clients
        clients.http.close()
        return
    with ServerProcess("--data-dir", str(tmp_path / "data"), "--fsync", "always") as server:
        clients = Clients(official_client, server)
        yield clients
        clients.http.close()


def test_planners_share_tasks_and_workers_handle_each_exactly_once(scale_clients: Clients, record_property, request):
    clients = scale_clients
    result = run_scale(clients, TASKS)
    reports, handled = result["reports"], result["handled"]

    # Every planner saw every one of its keys end SUCCEEDED, and all planners agree on the ids.
    ids: dict[str, set[str]] = {}
    for report in reports:
        assert all(o["state"] == "SUCCEEDED" for o in report["outcomes"].values())
        for key, task_id in report["tasks"].items():
            ids.setdefault(key, set()).add(task_id)
    submits = sum(len(report["tasks"]) for report in reports)
    assert submits == TASKS * SUBMITS_PER_KEY
    assert len(ids) == TASKS and all(len(found) == 1 for found in ids.values())
    task_ids = {found.pop() for found in ids.values()}
    assert len(task_ids) == TASKS

    # Each task handled exactly once, at its first attempt: no takeover, no redelivery.
    assert len(handled) == TASKS
    assert len({row[0] for row in handled}) == TASKS
    assert sorted(row[1] for row in handled) == list(range(TASKS))
    assert {row[2] for row in handled} == {1}

    # The server holds exactly these tasks, each with one recorded result, nothing left queued.
    by_worker = {i: None for i in range(TASKS)}
    for report in reports:
        for key, outcome in report["outcomes"].items():
            i = int(key.split("-")[1])
            assert outcome["outcome"]["i"] == i
            assert by_worker[i] in (None, outcome["outcome"]["worker"]), "two results for one task"
            by_worker[i] = outcome["outcome"]["worker"]
    for task_id in task_ids:
        view = clients.get(f"/tasks/{task_id}").json()
        assert view["state"] == "SUCCEEDED" and view["attempt"] == 1
        assert view["outcome"]["worker"] == by_worker[view["outcome"]["i"]]
        assert len(view["subscribers"]) == SUBMITS_PER_KEY
    row = clients.get(f"/mailboxes/{result['mailbox']}").json()
    assert row["backlog"] == 0 and row["counts"]["deadLetters"] == 0

    wall_s = result["wall_s"]
    rate = TASKS / wall_s
    first_start = min(r["started"] for r in reports)
    last_end = max(r["finished"] for r in reports)
    record_property("tasks", TASKS)
    record_property("wall_s", round(wall_s, 3))
    record_property("tasks_per_s", round(rate, 1))
    server_cpu = result["server_cpu_s"]
    print(
        f"\nscale ({request.node.callspec.id}): {TASKS} tasks, {submits} submits by {PLANNERS} planners, {WORKERS} workers: "
        f"wall {wall_s:.2f} s including process starts ({rate:.0f} tasks/s); "
        f"first submit to last result {last_end - first_start:.2f} s ({TASKS / (last_end - first_start):.0f} tasks/s); "
        f"server CPU {'n/a' if server_cpu is None else f'{server_cpu:.2f} s'}"
    )
