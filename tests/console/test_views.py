"""The console's reads (`server/console/views.py`) against a kernel in virtual time: lanes,
"why is it waiting?", blast radius, paging, and that reading never makes a space."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from runstate.actors import Clock, IdSource, Kernel, KernelState
from runstate.actors import commands as c
from runstate.actors.errors import KernelError
from runstate.actors.journal import MemoryJournal
from runstate.actors.timestamps import format_ms, parse_timestamp
from runstate.server import wire
from runstate.server.console import views
from runstate.server.console.views import swimlanes
from runstate.server.console.fenced import Fenced
from ..single import only

T0 = 1_800_000_000_000
SPACE = "default"

pytestmark = pytest.mark.trio


class World:
    """A kernel and the commands the tests send, by their wire bodies; their answers as the wire
    writes them (`server/wire/`), as a client reads them."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    async def do(self, command: type, body: dict | None = None, **params: str) -> Any:
        kernel = self.kernel
        parsed = kernel.parse(command, body or {}, {"space": SPACE, **params})
        return wire.encode(await kernel.submit(parsed, wait_ms=getattr(parsed, "wait_ms", None)))

    async def run(self, name: str = "run") -> str:
        return (await self.do(c.CreateScope, {"name": name}))["id"]

    async def claim(self, run: str, key: str, holder: str, lease_s: int = 5) -> dict:
        body = {"scopeId": run, "key": key, "holder": holder, "holderSession": holder, "leaseSeconds": lease_s}
        return await self.do(c.AcquireClaim, body)


@pytest.fixture
async def world(nursery, autojump_clock):
    kernel = Kernel(state=KernelState(), journal=MemoryJournal(), clock=Clock(wall_anchor_ms=T0), ids=IdSource(seed=3))
    await nursery.start(kernel.run)
    return World(kernel)


async def test_reading_a_space_never_makes_it(world: World, autojump_clock):
    """Every page of a space nothing was recorded in reads as empty, and the space is not made."""
    kernel = world.kernel
    assert (await views.runs(kernel, "nowhere", state=None, name=None, cursor=None, limit=50))["runs"] == []
    assert (await views.claims(kernel, "nowhere", run=None, key=None, holder=None, held_only=True, cursor=None, limit=50))["claims"] == []
    assert (await views.events(kernel, "nowhere", types=None, run=None, key=None, before=None, limit=50))["events"] == []
    assert (await views.capacity(kernel, "nowhere"))["pools"] == []
    assert (await views.lanes(kernel, "nowhere", [], run=None, key=None, window_s=60))["lanes"] == []
    with pytest.raises(KernelError) as refused:
        await views.task(kernel, "nowhere", "tk_0")
    assert refused.value.code == "NOT_FOUND"
    assert "nowhere" not in only(kernel).state.spaces


async def test_a_lane_draws_each_generation_the_takeover_and_the_fenced_write(world: World, autojump_clock):
    """Generation 1 expires (its holder stopped renewing), generation 2 takes over 2 s later; a
    late release with the old token is marked on the lane, during generation 2."""
    run = await world.run()
    old = await world.claim(run, "report", "paused", lease_s=5)
    await trio.sleep(7)
    await world.claim(run, "report", "fresh", lease_s=30)
    fenced = [Fenced("claim", "report", "release", "token is not the current one", world.kernel.clock.now_ms())]
    assert old["generation"] == 1
    await trio.sleep(1)
    drawn = await views.lanes(world.kernel, SPACE, fenced, run=None, key="rep", window_s=60)
    (lane,) = drawn["lanes"]
    first, second = lane["bars"]
    assert (first["generation"], first["holder"], first["end"]) == (1, "paused", "expired")
    assert second["generation"] == 2 and second["holder"] == "fresh" and second["takeover"] and second["to"] is None
    assert first["toAt"] <= second["fromAt"]  # a gap while the key was free
    (mark,) = lane["fenced"]
    assert mark["generation"] == 2 and mark["operation"] == "release"
    assert 0 <= first["x"] < second["x"] <= mark["x"] <= 100
    fitted = await views.lanes(world.kernel, SPACE, fenced, run=None, key="rep", window_s=3600, fit=True)
    assert fitted["start"] >= drawn["end"] - 3600_000 and fitted["lanes"][0]["bars"][0]["x"] > 0


async def test_a_live_lease_shows_its_latest_renewal(world: World, autojump_clock):
    """Renewals make no event; a held lease's lane shows the last one from its lease end."""
    run = await world.run()
    taken = await world.claim(run, "renewed", "w", lease_s=10)
    await trio.sleep(4)
    await world.do(c.RenewClaim, {"token": taken["token"]}, key="renewed")
    (lane,) = (await views.lanes(world.kernel, SPACE, [], run=run, key=None, window_s=60))["lanes"]
    (bar,) = lane["bars"]
    taken_ms, renewed_ms, ends_ms = (parse_timestamp(bar[name]) for name in ("fromAt", "renewedAt", "leaseExpiresAt"))
    assert (renewed_ms - taken_ms, ends_ms - renewed_ms) == (4000, 10_000)


async def test_why_a_task_waits_checks_pool_quota_and_budget(world: World, autojump_clock):
    """A task needing a unit of a full pool, a quota spent in this window and more budget than is
    left: each check says why, with numbers; an older task needing the same pool goes first."""
    run = await world.run()
    other = await world.run("other")
    pool = await world.do(c.CreatePool, {"name": "gpu", "units": 4})
    for n in range(4):
        await world.do(c.AcquireGrant, {"scopeId": run, "units": 1, "holder": f"h{n}", "holderSession": "s", "leaseSeconds": 120},
                       permit_id=pool["id"])
    quota = await world.do(c.CreateAllowance, {"name": "openai", "unitsLimit": 2, "windowSeconds": 60})
    await world.do(c.Consume, {"scopeId": run, "units": 2, "holder": "h"}, allowance_id=quota["id"])
    budget = await world.do(c.CreateBudget, {"name": "usd", "currency": "USD", "scale": 2, "limitMinor": "500"})
    await world.do(c.Reserve, {"scopeId": other, "holder": "h", "amountMinor": "200"}, budget_id=budget["id"])
    mailbox = await world.do(c.CreateMailbox, {"name": "jobs"})
    needs = {"pools": [{"name": "gpu", "units": 1}], "quotas": [{"name": "openai", "units": 1}],
             "budgets": [{"name": "usd", "reserveMinor": "400"}]}
    await world.do(c.SubmitTask, {"scopeId": run, "mailboxId": mailbox["id"], "taskKey": "older", "requirements": needs})
    await trio.sleep(48)
    task = await world.do(c.SubmitTask, {"scopeId": run, "mailboxId": mailbox["id"], "taskKey": "waits", "requirements": needs})
    why = await views.why_task(world.kernel, SPACE, task["id"])
    checks = {check["what"]: check for check in why["checks"]}
    assert why["waiting"] and checks["Run"]["ok"] and checks["Queue"]["detail"].startswith("1 task(s) ahead")
    assert not checks["Pool"]["ok"]
    assert checks["Pool"]["detail"] == "pool gpu: 4/4 units in use; needs 1; the soonest lease ends in 72 s (held by h0)"
    assert not checks["Quota"]["ok"] and "2/2 used in this window" in checks["Quota"]["detail"]
    assert checks["Quota"]["detail"].endswith("the window resets in 12 s")
    assert not checks["Budget"]["ok"]
    assert checks["Budget"]["detail"] == f"budget usd: 3.00 of 5.00 USD left, 2.00 reserved by run {other}; needs 4.00 USD"
    assert not checks["Order"]["ok"] and "older task(s)" in checks["Order"]["detail"]


async def test_a_pool_waiter_is_told_its_place_in_line(world: World, autojump_clock):
    run = await world.run()
    pool = await world.do(c.CreatePool, {"name": "slots", "units": 1})
    await world.do(c.AcquireGrant, {"scopeId": run, "holder": "busy", "holderSession": "s", "leaseSeconds": 20}, permit_id=pool["id"])
    waiters = [await world.do(c.WaitPool, {"scopeId": run, "holder": f"w{n}", "ttlSeconds": 60}, permit_id=pool["id"]) for n in range(3)]
    why = await views.why_waiter(world.kernel, SPACE, waiters[2]["waiterId"])
    details = [check["detail"] for check in why["checks"]]
    assert why["waiting"]
    assert "pool slots: 1/1 units in use; needs 1; the soonest lease ends in 20 s (held by busy)" in details
    assert "3rd in line; ahead: w0 (1), w1 (1)" in details


async def test_a_crash_shows_as_expired_leases_and_deliveries_taken_over(world: World, autojump_clock):
    """A worker holding a claim and a delivery stops: the claim expires and is taken by another,
    the delivery's lease runs out and another worker gets attempt 2; both are its losses."""
    run = await world.run()
    mailbox = await world.do(c.CreateMailbox, {"name": "jobs"})
    task = await world.do(c.SubmitTask, {"scopeId": run, "mailboxId": mailbox["id"], "taskKey": "t"})
    await world.claim(run, "lock", "crashy", lease_s=5)
    await world.do(c.Receive, {"scopeId": run, "holder": "crashy", "holderSession": "s", "leaseSeconds": 5}, mailbox_id=mailbox["id"])
    await trio.sleep(6)
    await world.claim(run, "lock", "rescuer")
    await world.do(c.Receive, {"scopeId": run, "holder": "rescuer", "holderSession": "r", "leaseSeconds": 30}, mailbox_id=mailbox["id"])
    seen = await views.worker(world.kernel, SPACE, "crashy", window_s=3600)
    losses = {loss["counts"]: loss for loss in seen["losses"]}
    assert losses["expired"]["what"] == "claim lock (generation 1): its lease expired"
    assert losses["expired"]["next"] == "rescuer (generation 2)"
    assert losses["takenOver"]["what"] == f"task {task['id']} attempt 1: its lease ran out, back on the queue"
    assert losses["takenOver"]["next"] == "rescuer (attempt 2)"
    listed = {row["holder"]: row for row in (await views.workers(world.kernel, SPACE, window_s=3600))["workers"]}
    assert (listed["crashy"]["expired"], listed["crashy"]["takenOver"]) == (1, 1)
    assert (listed["rescuer"]["claims"], listed["rescuer"]["deliveries"]) == (1, 1)


async def test_pages_follow_their_cursor_and_refuse_one_they_did_not_make(world: World, autojump_clock):
    """Claims page by key: 5 then 2, the second page starting after the first's last key; a
    made-up cursor is VALIDATION_FAILED."""
    run = await world.run()
    for n in range(7):
        await world.claim(run, f"k{n}", "w", lease_s=60)
    first = await views.claims(world.kernel, SPACE, run=None, key=None, holder=None, held_only=True, cursor=None, limit=5)
    assert [row["key"] for row in first["claims"]] == ["k0", "k1", "k2", "k3", "k4"] and first["total"] == 7
    second = await views.claims(world.kernel, SPACE, run=None, key=None, holder=None, held_only=True, cursor=first["next"], limit=5)
    assert [row["key"] for row in second["claims"]] == ["k5", "k6"] and second["next"] is None
    with pytest.raises(KernelError) as refused:
        await views.claims(world.kernel, SPACE, run=None, key=None, holder=None, held_only=True, cursor="bm90LWEtY3Vyc29y", limit=5)
    assert refused.value.code == "VALIDATION_FAILED"


async def test_events_newest_first_filtered_by_type_run_and_key(world: World, autojump_clock):
    """The event log newest first; a run filter takes its subtree; `before` pages back."""
    parent = await world.run("parent")
    child = (await world.do(c.CreateScope, {"name": "child", "parentId": parent}))["id"]
    elsewhere = await world.run("elsewhere")
    for run, key in ((parent, "a"), (child, "b"), (elsewhere, "c")):
        await world.claim(run, key, "w")
    page = await views.events(world.kernel, SPACE, types=frozenset({"claim.acquired"}), run=parent, key=None, before=None, limit=50)
    assert [e["aggregate"]["id"] for e in page["events"]] == ["b", "a"]
    one = await views.events(world.kernel, SPACE, types=None, run=None, key="c", before=None, limit=50)
    assert [e["type"] for e in one["events"]] == ["claim.acquired"]
    newest = await views.events(world.kernel, SPACE, types=None, run=None, key=None, before=None, limit=2)
    older = await views.events(world.kernel, SPACE, types=None, run=None, key=None, before=newest["next"], limit=50)
    seqs = [e["seq"] for e in newest["events"] + older["events"]]
    assert seqs == sorted(seqs, reverse=True) == list(range(newest["newest"], 0, -1))


async def test_a_lane_ends_with_its_run_and_only_the_keys_that_changed_last_get_lanes(world: World, autojump_clock, monkeypatch):
    """A claim whose run is cancelled ends its bar there (it makes no claim event); past
    LANES_MAX keys, the lanes are those that changed last, and the view says more changed."""
    monkeypatch.setattr(swimlanes, "LANES_MAX", 3)
    run = await world.run()
    await world.claim(run, "ends-with-run", "w", lease_s=60)
    await trio.sleep(2)
    await world.do(c.CancelScope, {}, scope_id=run)
    await trio.sleep(2)
    (lane,) = (await views.lanes(world.kernel, SPACE, [], run=None, key="ends", window_s=60))["lanes"]
    (bar,) = lane["bars"]
    assert bar["end"] == "ended with its run" and not lane["held"]
    assert parse_timestamp(bar["toAt"]) - parse_timestamp(bar["fromAt"]) == 2000
    other = await world.run("other")
    for n in range(5):
        await world.claim(other, f"many:{n}", "w", lease_s=60)
    drawn = await views.lanes(world.kernel, SPACE, [], run=other, key=None, window_s=60)
    assert [lane["key"] for lane in drawn["lanes"]] == ["many:4", "many:3", "many:2"] and drawn["more"]


async def test_a_waiting_acquire_is_told_who_holds_the_claim_until_when(world: World, autojump_clock, nursery):
    """An acquire parked on a held claim (waitMs) shows on the claim's row and run, and "why"
    names the holder, its generation and when its lease ends."""
    run = await world.run()
    await world.claim(run, "busy", "holder-1", lease_s=10)
    body = {"scopeId": run, "key": "busy", "holder": "second", "holderSession": "s", "leaseSeconds": 5, "waitMs": 20_000}
    nursery.start_soon(world.do, c.AcquireClaim, body)
    await trio.sleep(1)
    (row,) = (await views.claims(world.kernel, SPACE, run=None, key="busy", holder=None, held_only=True, cursor=None, limit=5))["claims"]
    assert row["waiting"] == 1
    assert (await views.run(world.kernel, SPACE, run))["acquirers"] == [{"run": run, "key": "busy", "calls": 1}]
    (row,) = (await views.runs(world.kernel, SPACE, state=None, name=None, cursor=None, limit=5))["runs"]
    assert (row["acquiring"], row["waiting"]) == (1, 0)  # an acquire waits; no message does
    why = await views.why_claim(world.kernel, SPACE, run, "busy")
    details = [check["detail"] for check in why["checks"]]
    assert why["waiting"] and "held by holder-1 at generation 1 until its lease ends in 9.0 s" in details[1]
    assert details[2] == "1 acquire(s) wait for it, served in arrival order"
    await trio.sleep(10)  # the lease ends: the parked acquire takes the claim
    (row,) = (await views.claims(world.kernel, SPACE, run=None, key="busy", holder=None, held_only=True, cursor=None, limit=5))["claims"]
    assert (row["holder"], row["generation"], row["waiting"]) == ("second", 2, 0)


def _held_intervals(events: list[dict]) -> list[tuple[int, int, int, str]]:
    """(generation, from, to, holder) of a key, from its claim events as the API lists them."""
    intervals, open_one = [], None
    for event in sorted(events, key=lambda e: e["seq"]):
        at = parse_timestamp(event["createdAt"])
        if event["type"] in ("claim.acquired", "claim.taken_over"):
            if open_one is not None:
                intervals.append((*open_one[:2], at, open_one[2]))
            open_one = (event["payload"]["generation"], at, event["payload"]["holder"])
        elif open_one is not None:
            intervals.append((open_one[0], open_one[1], at, open_one[2]))
            open_one = None
    assert open_one is None
    return intervals


def _share(intervals: list, a: float, b: float) -> float:
    return sum(max(0.0, min(to, b) - max(since, a)) for _, since, to, _ in intervals) / (b - a)


async def test_a_busy_lane_shows_the_held_share_of_each_column_and_a_zoom_shows_each_generation(world: World, autojump_clock):
    """200 generations of one key in the window (some ended by expiry and taken over): the lane
    is drawn in columns, each showing the share of its time the records say the key was held,
    nothing before its run began; zoomed to three generations, it draws them one by one, each
    with its holder."""
    await trio.sleep(600)  # the window opens well before the run does
    run = await world.run()
    for n in range(200):
        taken = await world.claim(run, "busy", f"agent-{n % 7}", lease_s=5)
        if n % 25 == 24:
            await trio.sleep(6)  # its holder stops renewing: it expires, and the next one takes over
            continue
        await trio.sleep(0.2 + (n % 5) * 0.1)
        await world.do(c.ReleaseClaim, {"token": taken["token"]}, key="busy")
        await trio.sleep(0.15)
    drawn = await views.lanes(world.kernel, SPACE, [], run=None, key="busy", window_s=3600)
    (lane,) = drawn["lanes"]
    start, end, columns = drawn["start"], drawn["end"], drawn["columns"]
    assert lane["mode"] == "columns" and lane["count"] == 200 and lane["takeovers"] == 7
    listed = await views.events(world.kernel, SPACE, types=None, run=None, key="busy", before=None, limit=500)
    intervals = _held_intervals(listed["events"])
    assert len(intervals) == 200
    assert lane["heldShare"] == pytest.approx(_share(intervals, start, end), abs=1e-4)
    run_began = parse_timestamp((await views.run(world.kernel, SPACE, run))["run"]["createdAt"])
    width = (end - start) / columns
    shares = [float(share) for share in lane["shares"].split()]
    assert len(shares) == columns == 400
    for index, share in enumerate(shares):
        assert share == pytest.approx(_share(intervals, start + index * width, start + (index + 1) * width), abs=0.0015), index
    drawn_from = float(lane["heldPath"][1:].split()[0])  # the path's first point: where the lane begins
    assert drawn_from == pytest.approx((run_began - start) * 100 / (end - start), abs=100 / columns) and drawn_from > 90
    assert lane["bands"][0]["title"].startswith(format_ms(int(start + width * (drawn_from * columns // 100)))[11:])
    assert any("by generations 1 agent-0, 2 agent-1, 3 agent-2 and " in band["title"] for band in lane["bands"])
    assert lane["holders"][0][1] == 29 and {name for name, _ in lane["holders"]} <= {f"agent-{n}" for n in range(7)}
    (g100, g101, g102) = [i for i in intervals if i[0] in (100, 101, 102)]
    zoomed = await views.lanes(world.kernel, SPACE, [], run=None, key="busy", window_s=3600, between=(g100[1] - 5, g102[2] + 5))
    (lane,) = zoomed["lanes"]
    assert lane["mode"] == "bars" and lane["shares"] == ""
    assert [(bar["generation"], bar["holder"]) for bar in lane["bars"]] == [(100, "agent-1"), (101, "agent-2"), (102, "agent-3")]


async def test_a_lane_read_in_part_names_the_holder_of_its_first_generation_and_draws_nothing_before(world: World, autojump_clock, monkeypatch):
    """A lane that had more events than it reads starts at the oldest one read, says so, and
    names the holder of the generation that was under way then (found further back in the log)."""
    monkeypatch.setattr(swimlanes, "LANE_EVENTS_MAX", 9)
    run = await world.run()
    for n in range(10):
        taken = await world.claim(run, "cut", f"w{n}", lease_s=30)
        await trio.sleep(1)
        await world.do(c.ReleaseClaim, {"token": taken["token"]}, key="cut")
        await trio.sleep(1)
    (lane,) = (await views.lanes(world.kernel, SPACE, [], run=None, key="cut", window_s=600))["lanes"]
    first = lane["told"][0]
    assert lane["unreadBefore"] == first["fromAt"] and first["generation"] == 6 and first["holder"] == "w5"
    assert lane["count"] == 5 and [bar["holder"] for bar in lane["told"]] == ["w5", "w6", "w7", "w8", "w9"]
    assert lane["beginX"] > 0 and float(lane["heldPath"][1:].split()[0]) >= lane["beginX"] - 100 / 400


async def test_the_lanes_of_a_view_read_at_most_their_budget_and_each_says_from_when(world: World, autojump_clock, monkeypatch):
    """Two keys taken in turn, past what a view reads in all: both lanes are drawn from the
    oldest change read, each saying so, and their first generations still name their holders."""
    monkeypatch.setattr(swimlanes, "LANES_EVENTS_MAX", 12)
    run = await world.run()
    for n in range(8):
        for key in ("left", "right"):
            taken = await world.claim(run, key, f"{key}-{n}", lease_s=30)
            await trio.sleep(1)
            await world.do(c.ReleaseClaim, {"token": taken["token"]}, key=key)
    drawn = await views.lanes(world.kernel, SPACE, [], run=run, key=None, window_s=600)
    assert [lane["key"] for lane in drawn["lanes"]] == ["right", "left"]
    for lane in drawn["lanes"]:
        assert lane["unreadBefore"] is not None and lane["count"] == 3
        assert [bar["holder"] for bar in lane["told"]] == [f"{lane['key']}-{n}" for n in (5, 6, 7)]


async def test_a_zoom_into_a_long_lease_draws_it_held_all_through_by_its_holder(world: World, autojump_clock):
    """Zoomed into the middle of a 100 s lease (no change of the key in the window), the lane is
    there, held all through by its holder, whose acquire is found before the window."""
    run = await world.run()
    taken = await world.claim(run, "long", "steady", lease_s=300)
    await trio.sleep(100)
    await world.do(c.ReleaseClaim, {"token": taken["token"]}, key="long")
    now = world.kernel.clock.now_ms()
    (lane,) = (await views.lanes(world.kernel, SPACE, [], run=None, key=None, window_s=600, between=(now - 80_000, now - 70_000)))["lanes"]
    (bar,) = lane["bars"]
    assert (lane["key"], lane["mode"], bar["holder"], bar["generation"]) == ("long", "bars", "steady", 1)
    assert bar["x"] == 0 and bar["width"] == 100 and bar["to"] is None and lane["heldShare"] == 1
