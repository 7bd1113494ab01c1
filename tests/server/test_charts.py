"""The console's charts, kept by the server: per space, a bucket every interval of what the
requests and the journal did, in bounded memory (`server/console/charts.py`), in virtual time."""

from __future__ import annotations

import pathlib

import pytest
import trio

import runstate.testing
from runstate.server import telemetry
from runstate.server.console import charts as charts_module
from runstate.server.console.charts import (
    ACQUIRES, EXPIRIES, FIELDS, INTERVAL_S, KINDS, OLDEST_S, QUEUED, REFUSED, REQUESTS, SPACES_MAX, TAKEOVERS, Charts, Series,
)
from runstate.server.console.plots import charts_of, percentile

from .conftest import KEY, Api




@pytest.mark.trio
async def test_a_bucket_holds_the_operations_waits_queue_expiries_and_refusals_of_its_interval(autojump_clock, monkeypatch):
    """Claims taken, renewed, an acquire that waits 10 s for a held one, a mailbox and a task, a
    refused renewal, a lease that expires: the buckets count each, the acquire's wait is the p99
    of their histogram, and the charts of the window draw them. (Request times are read from
    trio's clock here, so that the wait is 10 virtual seconds.)"""
    monkeypatch.setattr(telemetry, "now", trio.current_time)
    async with runstate.testing.serve(api_key=KEY) as rs:
        api = Api(rs)
        charts = rs.app.runtime.telemetry.charts
        await trio.sleep(INTERVAL_S - trio.current_time() % INTERVAL_S + 0.1)  # the start of an interval
        status, _, run = await api.post("/scopes", {"name": "charted"})
        assert status == 201
        claim = {"key": "k", "scopeId": run["id"], "holder": "a", "holderSession": "a", "leaseSeconds": 5}
        await api.post("/claims", claim)  # (the first request makes the space's chart: its counts begin at the next interval)
        await trio.sleep(INTERVAL_S)
        _, _, held = await api.post("/claims", {**claim, "key": "k2", "leaseSeconds": 60})
        status, _, _ = await api.post("/claims/k2/renew", {"token": held["token"]})
        assert status == 200
        status, _, waited = await api.post("/claims", {**claim, "key": "k2", "holder": "b", "waitMs": 10_000, "leaseSeconds": 60})
        assert status == 409  # (held for 60 s: the wait ends first)
        _, _, mailbox = await api.post("/mailboxes", {"name": "jobs"})
        await api.post("/tasks", {"scopeId": run["id"], "mailboxId": mailbox["id"], "taskKey": "t", "input": {}})
        status, _, _ = await api.post("/claims/nope/renew", {"token": "nope"})
        assert status >= 400
        await trio.sleep(INTERVAL_S * 3)
        series = charts.series["default"]
        kept = [series.fine.get(n) for n in range(series.last - 20, series.last + 1)]
        total = [sum(bucket[field] for bucket in kept if bucket is not None) for field in range(FIELDS)]
        assert total[KINDS.index("renewals")] == 1 and total[KINDS.index("tasks")] == 1 and total[KINDS.index("messages")] == 1
        # Requests from the first on; operations from the first interval after it (the chart began then).
        assert total[KINDS.index("claims")] == 1 and total[REQUESTS] == 8
        assert total[REFUSED] == 2 and sum(total[ACQUIRES:]) == 3  # refused: the 409 after its wait, and a stranger's renewal
        assert 10.0 <= percentile(total[ACQUIRES:], 0.99) <= 15.0  # (within the histogram's bucket of 10-15 s)
        assert percentile(total[ACQUIRES:], 0.25) < 0.01
        last = series.fine.get(series.last)
        assert last is not None and last[QUEUED] == 1 and last[OLDEST_S] >= 10
        assert total[TAKEOVERS] == 0 and total[EXPIRIES] == 1  # the first claim's 5 s lease
        drawn = charts_of(series, "5m")
        names = {chart["name"]: chart for chart in drawn["charts"]}
        assert set(names) == {"operations", "acquire", "queue", "oldest", "leases", "errors"}
        assert not names["operations"]["empty"] and not names["queue"]["empty"] and names["acquire"]["lines"][1]["peak"] > 5000
        assert drawn["last"] == (series.last + 1) * INTERVAL_S * 1000


@pytest.mark.trio
async def test_a_takeover_after_an_expiry_is_counted_in_its_interval(autojump_clock):
    """A lease expires, another holder takes the claim: a takeover and an expiry in the charts."""
    async with runstate.testing.serve(api_key=KEY) as rs:
        api = Api(rs)
        series_of = rs.app.runtime.telemetry.charts.series
        _, _, run = await api.post("/scopes", {})
        claim = {"key": "k", "scopeId": run["id"], "holder": "a", "holderSession": "a", "leaseSeconds": 5}
        await api.post("/claims", claim)
        await trio.sleep(2 * INTERVAL_S)
        _, _, again = await api.post("/claims", {**claim, "holder": "b"})
        assert again["generation"] == 2
        await trio.sleep(2 * INTERVAL_S)
        series = series_of["default"]
        buckets = [series.fine.get(n) for n in range(series.last - 4, series.last + 1)]
        assert sum(b[TAKEOVERS] for b in buckets if b is not None) == 1
        assert sum(b[EXPIRIES] for b in buckets if b is not None) >= 1


def test_the_charts_keep_at_most_their_spaces_and_a_space_that_holds_nothing_makes_none():
    """Past SPACES_MAX spaces with requests, the least recently active one goes; requests to a
    space that holds nothing make no chart; a space's rings are fixed arrays whatever it does."""

    class Space:
        def __init__(self) -> None:
            from runstate.actors.usage import Usage

            self.usage = Usage()
            self.mailboxes = type("M", (), {"all": lambda self: []})()

    spaces = {f"s{n}": Space() for n in range(SPACES_MAX + 1)}
    charts = Charts()
    for number, space_id in enumerate(spaces):
        charts.count(space_id)[0] += 1
        charts.count("ghost")[0] += 1
        charts.sample(spaces.get, number, number * INTERVAL_S * 1000)
    assert len(charts.series) == SPACES_MAX and "s0" not in charts.series and "ghost" not in charts.series
    assert not charts.pending
    series = charts.series["s1"]
    assert len(series.fine.values) == FIELDS * charts_module.FINE_SLOTS and len(series.coarse.values) == FIELDS * charts_module.COARSE_SLOTS
    assert series.fine.values.itemsize == 4 and charts_module.SPACE_BYTES == 164_160  # what docs/console.md says
    docs = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "console.md").read_text()
    assert f"{charts_module.SPACE_BYTES // 1000} KB per space" in docs and f"at most {SPACES_MAX} spaces" in docs


def test_a_ring_forgets_what_is_older_than_its_slots_and_draws_a_gap_where_it_has_nothing():
    """The fine ring holds its last FINE_SLOTS buckets; a window over a stretch with no bucket
    (the server was down) draws nothing there, not zeros."""
    series = Series()
    bucket = [0] * FIELDS
    bucket[KINDS.index("claims")] = 5 * INTERVAL_S
    for number in range(1000, 1000 + 2 * charts_module.FINE_SLOTS + 10):
        if number % 100 < 50:  # half the time "down"
            series.add(number, bucket)
        else:
            series.last = number
    assert series.fine.get(1000) is None and series.fine.get(1000 + 2 * charts_module.FINE_SLOTS) is not None
    assert next(iter(series.buckets(True, 0, series.last)))[0] == series.last - charts_module.FINE_SLOTS + 1
    drawn = charts_of(series, "30m")
    (claims,) = drawn["charts"][0]["lines"]
    values = claims["points"].split(" ")
    assert len(values) == 1800 // INTERVAL_S and "" in values and "5" in values
    assert claims["path"].count("M") > 1  # a new stroke after each gap
