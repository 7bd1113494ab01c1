"""The official 0.3.0 client's queues and coordination against a real server, as users write code
with it: `@runstate.queue` producers and `runstate.serve()` workers in other processes (failures,
`gather(need=...)`, a queue's slots), `runstate.stop()` ending the serving workers, and `sleep`,
`together`, `events` (through an expired cursor too) and `status`.

Each script runs in its own interpreter with the client installed in an isolated folder
(`test_official_030.py` says how). Every wait is bounded: a script that does not end within its
time fails the test with what it printed.

`gather` and a queue's `slots` rest on admission across the run's child scopes and on pools by
name; against a server that does not serve those yet (its OpenAPI document says), those two tests
are skipped with the reason, rather than failing for what another part of the server must do.
"""

from __future__ import annotations

import datetime
import time

import pytest

from ..servers import ServerProcess
from .official_scripts import Background
from .test_official_030 import _background, _finish, _start, _wait_until, _waits, sdk_030  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.compat, pytest.mark.e2e]

# How long a script may take, and how soon serving workers must exit once their run is stopped
# (the 0.3.0 client also sees the stop through its 5 s watch of the run: this is well under two).
SCRIPT_S = 45
EXIT_AFTER_STOP_S = 8.0


@pytest.fixture(scope="module")
def server(sdk_030):
    with ServerProcess() as process:
        yield process


def _serves(server: ServerProcess, method: str, path: str, field: str | None = None) -> bool:
    """Whether the server's OpenAPI document has this route (and this request body field)."""
    document = server.client().get("/v1/openapi.json").json()
    operation = document["paths"].get("/v1/spaces/{space}" + path, {}).get(method.lower())
    if operation is None or field is None:
        return operation is not None
    schema = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    return field in schema.get("properties", {})


def _exits(script: Background, timeout_s: float) -> dict:
    return script.finish(timeout_s=timeout_s)


def _waiting_for_work(server: ServerProcess, scripts: list[Background]) -> bool:
    """Whether every one of `scripts` has a call parked in the space (a worker asking for jobs):
    the holder a client names ends with its process id."""
    holders = [holder for wait in _waits(server) for holder in wait.get("holders") or ()]
    return all(any(holder.endswith(f"-{script.process.pid}") for holder in holders) for script in scripts)


def _run_id(server: ServerProcess, name: str) -> str | None:
    with server.client() as http:
        scopes = http.get(f"/v1/spaces/{server.space_id}/scopes", params={"limit": 1000}).json()["scopes"]
    return next((scope["id"] for scope in scopes if scope.get("name") == name), None)


def _in_run(server: ServerProcess, name: str, what: str) -> list[dict]:
    """The barriers or timers of the run called `name` (none while it does not exist)."""
    run = _run_id(server, name)
    if run is None:
        return []
    with server.client() as http:
        return http.get(f"/v1/spaces/{server.space_id}/scopes/{run}/{what}").json()[what]


WORKER = """

@runstate.queue("review", attempts=2)
def review(text):
    if text == "bad":
        raise ValueError(f"cannot review {text!r}")
    if text == "huge":
        return "x" * 70_000  # over the 64 KiB a result may be
    time.sleep(ARGS.get("work_s", 0.0))
    return {"length": len(text), "by": os.getpid()}

emit(ready=True)
runstate.serve()
emit(exited_at=time.time(), pid=os.getpid())
"""

PRODUCER = """
review = runstate.queue("review")
jobs = [review.send(text) for text in ARGS["texts"]]
results = [job.result(timeout=30) for job in jobs]
try:
    review("bad")
    failed = None
except runstate.TaskFailedError as error:
    failed = {"message": str(error), "reason": error.reason}
try:
    review("huge")
    too_large = None
except runstate.TaskFailedError as error:
    too_large = error.reason
stopped_at = time.time()
runstate.stop()
emit(results=results, failed=failed, too_large=too_large, stopped_at=stopped_at)
"""


def test_queue_producers_get_results_from_serving_workers_and_stop_ends_them(sdk_030, server):
    """Two processes serve a queue; a third submits six jobs and gets each result, a failing job
    raises TaskFailedError with the handler's error once its 2 attempts are used, one whose result
    is too large fails with the worker's error, and `runstate.stop()` makes both workers'
    `serve()` return within seconds."""
    run = "queue-serve"
    workers = [_background(sdk_030, server, WORKER, run, work_s=0.2) for _ in range(2)]
    texts = ["a", "bb", "ccc", "dddd", "eeeee", "ffffff"]
    producer = _start(sdk_030, server, PRODUCER, run, texts=texts)
    done = _finish(producer, timeout_s=SCRIPT_S)
    assert [result["length"] for result in done["results"]] == [len(text) for text in texts]
    pids = {worker.process.pid for worker in workers}
    assert {result["by"] for result in done["results"]} <= pids
    assert done["failed"]["reason"] == "handler_error: ValueError: cannot review 'bad' (attempts_exhausted: 2 of 2 attempts used)"
    assert done["failed"]["message"].startswith("ValueError: cannot review 'bad'")
    # A result over 64 KiB is refused at completion; the worker then fails the job with its own error.
    assert done["too_large"] == "handler_error: review returned a result over 64 KB"
    for worker in workers:
        exited = _exits(worker, timeout_s=EXIT_AFTER_STOP_S + 5)
        assert exited["exited_at"] - done["stopped_at"] < EXIT_AFTER_STOP_S, exited
        assert worker.process.returncode == 0


GATHER = """
review = runstate.queue("review")
some = review.gather(["a", "bb", "ccc", "dddd"], need=2, timeout=30)
everything = review.gather(["x", "yy", "zzz"], timeout=30)
picky = review.gather(["p", "qq", "rrr"], need=1, accept=lambda result, text: result["length"] == 3, timeout=30)
try:
    review.gather(["bad", "good"], need=2, timeout=30)
    short = None
except runstate.TaskFailedError as error:
    short = error.reason
runstate.stop()
emit(some=some, everything=everything, picky=picky, short=short)
"""


def test_gather_returns_what_it_needs_from_serving_workers(sdk_030, server):
    """`gather(need=2)` of four inputs returns two results, `gather` of three all three, `need=1`
    with an `accept` the one accepted, and a gather that can no longer reach its need raises."""
    if not _serves(server, "POST", "/tasks/admit", "includeDescendants"):
        pytest.skip("this server's admit does not take includeDescendants (gather's members live in a child scope)")
    run = "queue-gather"
    worker = _background(sdk_030, server, WORKER, run)
    done = _finish(_start(sdk_030, server, GATHER, run), timeout_s=SCRIPT_S)
    assert len(done["some"]) == 2 and {result["length"] for result in done["some"]} <= {1, 2, 3, 4}
    assert sorted(result["length"] for result in done["everything"]) == [1, 2, 3]
    assert [result["length"] for result in done["picky"]] == [3]
    assert done["short"].startswith("handler_error: ValueError: cannot review 'bad'")
    _exits(worker, timeout_s=EXIT_AFTER_STOP_S + 5)


SLOTTED_WORKER = """
runstate.setup(slots={"gpu": {"max": 1}})
busy = os.path.join(ARGS["dir"], "busy")

@runstate.queue("render", slots="gpu", concurrency=2)
def render(n):
    with open(busy, "a") as out:
        out.write(f"start {time.time()}\\n")
    time.sleep(0.3)
    with open(busy, "a") as out:
        out.write(f"end {time.time()}\\n")
    return n * n

runstate.serve()
emit(exited=True)
"""

SLOTTED_PRODUCER = """
render = runstate.queue("render")
jobs = [render.send(n) for n in range(4)]
results = [job.result(timeout=30) for job in jobs]
runstate.stop()
emit(results=results)
"""


def test_a_queues_slots_hold_its_jobs_to_the_pool_across_workers(sdk_030, server, tmp_path):
    """Two workers (each allowed two jobs at once) serve a queue declared with `slots="gpu"` on a
    one-slot pool; the producer names no requirements, yet the jobs run one at a time: the
    mailbox's default requirements are taken at admission."""
    if not _serves(server, "PUT", "/permits/by-name/{name}"):
        pytest.skip("this server does not serve pools by name (runstate.setup)")
    run = "queue-slots"
    workers = [_background(sdk_030, server, SLOTTED_WORKER, run, dir=str(tmp_path)) for _ in range(2)]
    # The jobs come once both workers have declared the queue (and its slots) and ask for work.
    _wait_until("both workers asking for the queue's jobs", lambda: _waiting_for_work(server, workers), tuple(workers))
    done = _finish(_start(sdk_030, server, SLOTTED_PRODUCER, run), timeout_s=SCRIPT_S)
    assert done["results"] == [0, 1, 4, 9]
    running, most = 0, 0
    events = sorted((float(at), kind) for kind, at in (line.split() for line in (tmp_path / "busy").read_text().splitlines()))
    for _, kind in events:
        running += 1 if kind == "start" else -1
        most = max(most, running)
    assert most == 1 and len(events) == 8
    for worker in workers:
        _exits(worker, timeout_s=EXIT_AFTER_STOP_S + 5)


SLEEPER = """
runstate.sleep("nap", ARGS["seconds"])
emit(slept=True)
"""

SLEEP_AGAIN = """
started = time.time()
runstate.sleep("nap", ARGS["seconds"])
woke_at = time.time()
runstate.sleep("nap", ARGS["seconds"])
emit(slept=woke_at - started, woke_at=woke_at, again=time.time() - woke_at)
"""


def _stamp(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_sleep_by_name_waits_only_for_what_is_left_after_a_restart(sdk_030, server):
    """A process sleeping 4 s under a name is killed 1.5 s into its sleep (by the timer the server
    armed for it); one that sleeps under that name again wakes when the first would have, by the
    server's clock, not 4 s after it began; once slept, the name returns at once."""
    run = "sleepy"
    first = _background(sdk_030, server, SLEEPER, run, seconds=4)
    armed = lambda: [timer for timer in _in_run(server, run, "timers") if timer["state"] == "ARMED"]  # noqa: E731
    _wait_until("the sleep's timer armed", armed, (first,))
    (timer,) = armed()
    fire_at = _stamp(timer["fireAt"])
    time.sleep(max(0.0, fire_at - 2.5 - time.time()))  # the scenario: a crash 1.5 s into a 4 s sleep
    first.kill()
    done = _finish(_start(sdk_030, server, SLEEP_AGAIN, run, seconds=4), timeout_s=SCRIPT_S)
    assert fire_at - 0.05 <= done["woke_at"] <= fire_at + 1.0, (done, fire_at)  # the first's deadline
    assert done["slept"] <= 3.2, done  # at most what was left (2.5 s), not 4 s again
    assert done["again"] < 1.0, done


TOGETHER = """
runstate.run_id()  # the client set up and the run joined before it is told to go
emit(event="ready")
meet()
emit(event="arriving", at=time.time())
runstate.together("meet", 3, timeout=20)
emit(released_at=time.time())
"""

LATECOMER = """
runstate.run_id()  # the client's first call sets it up (its loop, its connection): not timed here
started = time.time()
runstate.together("meet", 3, timeout=20)
emit(waited=time.time() - started)
"""


def test_together_lets_three_processes_go_once_the_last_arrives(sdk_030, server, tmp_path):
    """Two processes arrive at once and wait (the barrier counts them); the third arrives after
    that and all three go then, and only then; a fourth arriving after the release goes on at once."""
    run = "together"
    early = [_background(sdk_030, server, TOGETHER, run, go=str(tmp_path / "early")) for _ in range(2)]
    last = _background(sdk_030, server, TOGETHER, run, go=str(tmp_path / "last"))
    for script in (*early, last):
        script.wait_for("ready", timeout_s=60)
    (tmp_path / "early").touch()
    arrived = lambda: any(barrier["arrived"] == 2 for barrier in _in_run(server, run, "barriers"))  # noqa: E731
    _wait_until("the first two waiting at the barrier", arrived, (*early, last))
    (tmp_path / "last").touch()
    released = [script.finish(timeout_s=SCRIPT_S)["released_at"] for script in (*early, last)]
    assert min(released) >= last.wait_for("arriving")["at"], released  # nobody went before the third arrived
    assert max(released) - min(released) < 2.0, released  # polling at most 1 s apart
    assert _finish(_start(sdk_030, server, LATECOMER, run), timeout_s=SCRIPT_S)["waited"] < 1.0


WATCHER = """
seen = []
stop = threading.Event()
for event in runstate.events(signal=stop):
    seen.append({"id": event.id, "type": event.type, "at": event.at.isoformat(), "data": event.data})
    if event.type == "task.succeeded":
        break
emit(events=seen)
"""

BUSY_WORKER = """
@runstate.queue("slow")
def slow(n):
    wait_file(ARGS["done"])  # it holds the job until the producer has seen it held
    return n

runstate.serve()
emit(exited=True)
"""

WATCHED_PRODUCER = """
slow = runstate.queue("slow")
job = slow.send(1)
deadline = time.time() + 30
status = runstate.status()
while not any(worker.holding for worker in status.workers) and time.time() < deadline:  # until the worker has it
    time.sleep(0.02)
    status = runstate.status()
open(ARGS["done"], "w").close()
result = job.result(timeout=20)
workers = [{"worker": w.worker, "holding": w.holding, "expires": w.lease_expires_at.isoformat()} for w in status.workers]
runstate.stop()
after = runstate.status()
emit(result=result, run=[status.run.name, status.run.state], workers=workers, after=after.run.state)
"""


def test_events_and_status_follow_a_run(sdk_030, server, tmp_path):
    """`status()` shows the run running and the worker holding its one job with a lease end;
    after `stop()` the run reads stopped. `events()` streams the run's events in order, each
    with an id, a type, a time and a payload, up to the job's success."""
    run = "watched"
    done_file = str(tmp_path / "done")
    watcher = _start(sdk_030, server, "import threading\n" + WATCHER, run)
    worker = _background(sdk_030, server, BUSY_WORKER, run, done=done_file)
    done = _finish(_start(sdk_030, server, WATCHED_PRODUCER, run, done=done_file), timeout_s=SCRIPT_S)
    assert done["result"] == 1 and done["run"] == ["watched", "running"] and done["after"] == "stopped"
    (holding,) = done["workers"]
    assert holding["holding"] == 1 and str(worker.process.pid) in holding["worker"]
    seen = _finish(watcher, timeout_s=SCRIPT_S)["events"]
    types = [event["type"] for event in seen]
    assert types[0] == "scope.created" and types[-1] == "task.succeeded"
    assert {"task.created", "task.started"} <= set(types)
    numbers = [int(event["id"].removeprefix("ev_")) for event in seen]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    created = next(event for event in seen if event["type"] == "task.created")
    assert created["data"]["mailboxId"].startswith("mb_") and created["at"].endswith("+00:00")
    _exits(worker, timeout_s=EXIT_AFTER_STOP_S + 5)


PILE_WATCHER = """
import threading

seen = []
stop = threading.Event()
for event in runstate.events(signal=stop):
    seen.append([int(event.id.removeprefix("ev_")), event.type])
    emit(event=f"seen {len(seen)}")
    if event.type == "task.cancelled":
        break
emit(events=seen)
"""

PILE = """
pile = runstate.queue("pile")
for n in range(12):
    wait_file(os.path.join(ARGS["dir"], f"send-{n}"))  # one at a time, once the watcher saw the one before
    pile.send(n)
wait_file(os.path.join(ARGS["dir"], "stop"))
runstate.stop()  # cancels the twelve queued tasks in one turn: more events than the log keeps
emit(stopped=True)
"""


def test_events_carry_on_after_their_cursor_expired(sdk_030, tmp_path):
    """A server that keeps only 8 events: the watcher follows the run's events, then one turn makes
    more than that (a stop cancelling twelve queued tasks), so its cursor has expired; the client
    starts again without a cursor (CURSOR_EXPIRED) and carries on with the events still kept."""
    with ServerProcess("--events-kept-max", "8") as small:
        run = "expiring"
        watcher = _background(sdk_030, small, PILE_WATCHER, run)
        pile = _background(sdk_030, small, PILE, run, dir=str(tmp_path))
        watcher.wait_for("seen 1", timeout_s=60)  # the run's start: it is watching
        for n in range(12):  # each send once the watcher has seen the one before: it keeps up
            (tmp_path / f"send-{n}").touch()
            watcher.wait_for(f"seen {n + 2}", timeout_s=SCRIPT_S)
        (tmp_path / "stop").touch()
        assert pile.finish(timeout_s=SCRIPT_S)["stopped"]
        seen = watcher.finish(timeout_s=SCRIPT_S)["events"]
        access = "\n".join(small.lines)
    # It kept up with the run's start and the twelve sends, one event after another...
    assert seen[:13] == [[1, "scope.created"], *([number, "task.created"] for number in range(2, 14))], seen
    # ...then the stop's thirteen events (the run's end, twelve cancellations: 14 to 26) left only
    # the last 8 kept: the client started again from the oldest kept one, 19.
    assert seen[13:] == [[19, "task.cancelled"]], seen
    assert '"status":410' in access  # the watch that answered CURSOR_EXPIRED


HOLDER = """
with runstate.slots("one-seat", max=1):
    emit(event="holding")
    wait_file(ARGS["release"])
emit(released_at=time.time())
"""

STATUS_WHILE_WAITING = """
status = runstate.status()
emit(workers=[[w.worker, w.holding] for w in status.workers], waiting=[[w.kind, w.name, w.units] for w in status.waiting])
"""


def test_status_shows_who_holds_a_slot_and_who_waits_for_one(sdk_030, server, tmp_path):
    """One process holds the only slot of a pool; a second waits for it in the pool's line;
    `status()` from a third shows the holder holding one thing and the waiter waiting for one
    unit of `one-seat`; the waiter gets the slot once the holder gives it back."""
    if not _serves(server, "POST", "/permits/{permit_id}/wait"):
        pytest.skip("this server has no pool lines (POST /permits/{id}/wait)")
    run = "slot-status"
    (tmp_path / "at-once").touch()
    holder = _background(sdk_030, server, HOLDER, run, release=str(tmp_path / "release"))
    holder.wait_for("holding", timeout_s=60)
    waiter = _background(sdk_030, server, HOLDER, run, release=str(tmp_path / "at-once"))
    in_line = lambda: any(  # noqa: E731
        wait["on"] == "pool" and wait.get("permit") == "one-seat" and wait["holder"].endswith(f"-{waiter.process.pid}")
        for wait in _waits(server)
    )
    _wait_until("the second process in the pool's line", in_line, (holder, waiter))
    status = _finish(_start(sdk_030, server, STATUS_WHILE_WAITING, run), timeout_s=SCRIPT_S)
    assert status["waiting"] == [["slots", "one-seat", 1]], status
    assert [holding for worker, holding in status["workers"] if worker.endswith(f"-{holder.process.pid}")] == [1], status
    (tmp_path / "release").touch()
    first, second = holder.finish(timeout_s=SCRIPT_S), waiter.finish(timeout_s=SCRIPT_S)
    assert second["released_at"] >= first["released_at"]  # the waiter got the slot once it was given back
