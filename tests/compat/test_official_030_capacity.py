"""The current official client, runstate-sdk 0.3.0, using capacity as users write code with it,
against a real server: `@runstate.limit` across processes, `@runstate.slots` across processes,
`@runstate.budget` to its limit, and `runstate.setup()`.

The client is installed into an isolated folder and each script runs in its own interpreter with
`PYTHONPATH` set to it (it imports as `runstate`, like our SDK). Processes meet at a wall-clock
instant passed in their arguments, so their calls really are concurrent. Where the claim is about
what the server granted (at most N per window), the server's own journal is read back: it holds
every grant with the window it counted in, which no client-side clock can show.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest

from runstate.snapshots.datadir import partition_dir, read_manifest
from runstate.snapshots.frame import FILE_HEADER_BYTES, Frame, read_frame
from runstate.snapshots.recovery import list_segments, wal_dir

from ..servers import ServerProcess, base_python
from .test_official_030 import _env, _finish, _start, sdk_030  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.compat, pytest.mark.e2e]

def _notes(folder: Path) -> list[list[str]]:
    return [line.split() for log in sorted(folder.glob("*.log")) for line in log.read_text().splitlines()]


def _journal(data_dir: Path) -> list[dict]:
    """Every record the server has written to its WALs so far (each partition's, in its order)."""
    records = []
    manifest = read_manifest(str(data_dir))
    assert manifest is not None, f"{data_dir} has no manifest"
    segments = [segment for number in manifest.numbers()
                for _, segment in list_segments(wal_dir(partition_dir(str(data_dir), number)))]
    for segment in segments:
        data = Path(segment).read_bytes()
        offset = FILE_HEADER_BYTES
        while True:
            frame = read_frame(data, offset)
            if not isinstance(frame, Frame):
                break
            records.append(orjson.loads(bytes(frame.body)))
            offset = frame.end
    return records


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory, sdk_030) -> Path:
    return tmp_path_factory.mktemp(f"capacity-030-data-{sdk_030.name}")


@pytest.fixture(scope="module")
def server(data_dir: Path):
    with ServerProcess("--data-dir", str(data_dir), "--fsync", "off") as process:
        yield process


LIMITED = """
@runstate.limit("search-api", max=3, per="second")
def search(q):
    note("start", time.time())
    return q

meet()
emit(results=[search(f"{os.getpid()}-{i}") for i in range(ARGS["calls"])])
"""


def test_limit_lets_at_most_three_calls_start_per_window_across_processes(sdk_030, server, data_dir, tmp_path):
    """Three processes call a function limited to 3 per second, 4 times each: all 12 calls run,
    the server granted at most 3 in any one window (its journal says which window each grant
    counted in), and the starts spread over at least the windows 12 calls need."""
    start_at = time.time() + 3.0
    workers = [_start(sdk_030, server, LIMITED, "limit-3", dir=str(tmp_path), start_at=start_at, calls=4) for _ in range(3)]
    results = [_finish(worker)["results"] for worker in workers]
    assert sum(len(r) for r in results) == 12
    starts = sorted(float(fields[1]) for fields in _notes(tmp_path))
    assert len(starts) == 12

    records = _journal(data_dir)
    allowance = next(r for r in records if r["type"] == "allowance.created" and r["name"] == "search-api")
    assert (allowance["units_limit"], allowance["window_ms"]) == (3, 1000)
    waiters = {r["id"] for r in records if r["type"] == "waiter.added" and r["allowance_id"] == allowance["id"]}
    windows = Counter(r["window_start_ms"] for r in records if r["type"] == "waiter.granted" and r["id"] in waiters)
    windows.update(r["window_start_ms"] for r in records if r["type"] == "allowance.consumed" and r["id"] == allowance["id"])
    assert sum(windows.values()) == 12, windows
    assert max(windows.values()) <= 3, f"more than 3 grants in a window: {windows}"
    assert len(windows) >= 4
    # Client-visible: 12 calls at 3 per second cannot all start together (four windows at least;
    # a granted waiter learns of its grant at its next poll, up to about a second later).
    assert starts[-1] - starts[0] >= 1.5, starts


SLOTS = """
@runstate.slots("browser", max=2)
def browse(i):
    note("enter", time.time())
    time.sleep(0.4)
    note("exit", time.time())
    return i

meet()
emit(results=[browse(i) for i in range(ARGS["calls"])])
"""


def test_slots_never_run_more_than_two_bodies_at_once_across_four_processes(sdk_030, server, tmp_path):
    """Four processes each call a function holding one of 2 slots, twice: every call runs, and
    at no instant are more than 2 bodies inside (their enter/exit times, from one clock); the
    pool's line serves the waiting processes, so all 8 finish well within their timeout."""
    start_at = time.time() + 3.0
    began = time.monotonic()
    workers = [_start(sdk_030, server, SLOTS, "slots-2", dir=str(tmp_path), start_at=start_at, calls=2) for _ in range(4)]
    results = [_finish(worker)["results"] for worker in workers]
    assert results == [[0, 1]] * 4
    events = sorted((float(at), 1 if kind == "enter" else -1) for kind, at in _notes(tmp_path))
    assert len(events) == 16
    inside, most = 0, 0
    for _, step in sorted(events, key=lambda event: (event[0], event[1])):  # an exit before an enter at one instant
        inside += step
        most = max(most, inside)
    assert inside == 0 and most <= 2, f"{most} bodies ran at once"
    assert most == 2, "two slots were used at once"
    assert time.monotonic() - began < 40


BUDGETED = """
@runstate.budget("llm", reserve=0.30, limit=1.00, cost=lambda spent: spent)
def call_model(spend):
    note("ran", spend)
    if spend == "fail":
        raise RuntimeError("the model call failed")
    return spend

spent = [call_model(0.10), call_model(0.50)]  # under the reserve (the rest goes back), over it (an overrun)
try:
    call_model("fail")
except RuntimeError:
    pass  # a failing call is charged nothing
spent.append(call_model(0.30))
try:
    call_model(0.05)
    stopped = None
except runstate.BudgetExceededError as error:
    stopped = {"code": error.code, "status": error.status, "message": error.message}
emit(spent=spent, stopped=stopped)
"""


def test_budget_stops_with_budget_exceeded_at_its_limit(sdk_030, server, tmp_path):
    """A 1.00 budget with a 0.30 reserve per call: costs under the reserve give the rest back,
    a cost over it is charged in full (an overrun the budget can still cover), a failing call is
    charged nothing, and the call whose reserve no longer fits raises BudgetExceededError
    without running. The server's view agrees to the cent."""
    done = _finish(_start(sdk_030, server, BUDGETED, "budget-1", dir=str(tmp_path)))
    assert done["spent"] == [0.10, 0.50, 0.30]
    assert done["stopped"]["code"] == "INSUFFICIENT_BUDGET" and done["stopped"]["status"] == 409, done
    assert [fields[1] for fields in _notes(tmp_path)] == ["0.1", "0.5", "fail", "0.3"], "the refused call did not run"
    with server.client() as http:
        budgets = http.get(f"/v1/spaces/{server.space_id}/budgets").json()["budgets"]
        budget = next(b for b in budgets if b["name"] == "llm")
    assert (budget["spentMinor"], budget["reservedMinor"], budget["availableMinor"]) == ("90", "0", "10")


SETUP = """
runstate.setup(
    limits={"setup-search": {"max": 60, "per": "minute"}},
    slots={"setup-browser": {"max": 5}},
    budgets={"setup-llm": {"limit": 20, "currency": "EUR", "scale": 2}},
)
runstate.setup(limits={"setup-search": {"max": 60, "per": "minute"}})  # the same again: fine
try:
    runstate.setup(slots={"setup-browser": {"max": 6}})
    conflict = None
except runstate.ConflictError as error:
    conflict = error.code
emit(conflict=conflict)
"""


def test_setup_creates_and_checks_limits_slots_and_budgets(sdk_030, server, tmp_path):
    """`runstate.setup()` creates each resource with its sizes, accepts the same sizes again, and
    raises ConflictError for different ones; the resources are then what it declared."""
    done = _finish(_start(sdk_030, server, SETUP, "setup-1", dir=str(tmp_path)))
    assert done == {"conflict": "CONFLICT"}
    with server.client() as http:
        base = f"/v1/spaces/{server.space_id}"
        pool = next(p for p in http.get(base + "/permits").json()["permits"] if p["name"] == "setup-browser")
        quota = next(a for a in http.get(base + "/allowances").json()["allowances"] if a["name"] == "setup-search")
        budget = next(b for b in http.get(base + "/budgets").json()["budgets"] if b["name"] == "setup-llm")
    assert pool["units"] == 5 and (quota["unitsLimit"], quota["windowSeconds"]) == (60, 60)
    assert (budget["limitMinor"], budget["currency"], budget["scale"]) == ("2000", "EUR", 2)


LEGACY_SLOTS = """
import asyncio, json, os, time
from runstate import AsyncRunstate
ARGS = json.loads(os.environ["TEST_ARGS"])

def note(*fields):
    with open(os.path.join(ARGS["dir"], f"{os.getpid()}.log"), "a") as out:
        out.write(" ".join(map(str, fields)) + "\\n")

async def main():
    rs = AsyncRunstate(holder=f"legacy-{os.getpid()}")
    await rs.pools.ensure("mixed-browser", capacity=2)
    run = await rs.scopes.create(name="legacy-slots")
    pool = rs.scope(run.id).pool("mixed-browser")
    while time.time() < ARGS["start_at"]:
        await asyncio.sleep(0.001)
    for _ in range(ARGS["calls"]):
        lease = await pool.acquire(units=1, timeout_ms=40_000)
        note("enter", time.time())
        await asyncio.sleep(0.4)
        note("exit", time.time())
        await lease.release()
    print(json.dumps({"done": ARGS["calls"]}))

asyncio.run(main())
"""

MIXED_SLOTS = SLOTS.replace('"browser"', '"mixed-browser"')


def test_both_official_clients_share_one_pool_on_one_server(official_client, sdk_030, server, tmp_path):
    """Teams upgrade one service at a time: 0.2.0's acquire loop and 0.3.0's slots() (which waits
    in the pool's line) use one 2-unit pool at the same time. Every call of both runs, and never
    more than 2 bodies at once."""
    start_at = time.time() + 3.0
    env = _env(official_client, server, "mixed-slots", {"dir": str(tmp_path), "start_at": start_at, "calls": 3})
    legacy = subprocess.Popen([base_python(), "-c", LEGACY_SLOTS], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    current = [_start(sdk_030, server, MIXED_SLOTS, "mixed-slots", dir=str(tmp_path), start_at=start_at, calls=2) for _ in range(2)]
    assert _finish(legacy) == {"done": 3}
    assert [_finish(worker)["results"] for worker in current] == [[0, 1], [0, 1]]
    events = sorted((float(at), 1 if kind == "enter" else -1) for kind, at in _notes(tmp_path))
    assert len(events) == 14
    inside, most = 0, 0
    for _, step in events:
        inside += step
        most = max(most, inside)
    assert inside == 0 and most <= 2, f"{most} bodies ran at once"
