"""The header's search over plain HTTP."""

from __future__ import annotations

import re

import pytest

from .conftest import Console

pytestmark = pytest.mark.e2e


def test_a_holder_of_a_pool_lease_only_is_found_as_workers_lists_it(console: Console):
    """A worker holding units of a pool and nothing else (pools make no events) is on Workers;
    the search finds it too, with the lease it holds, rather than saying nothing matches."""
    api = console.api
    run = console.run("pool-holder")["id"]
    pool = api.put("/v1/spaces/default/permits/by-name/search-pool", json={"units": 1}).json()
    held = api.post(f"/v1/spaces/default/permits/{pool['id']}/acquire",
                    json={"scopeId": run, "units": 1, "holder": "renderer-42", "holderSession": "r", "leaseSeconds": 60})
    assert held.status_code == 200, held.text
    session = console.session()
    assert "/workers/renderer-42" in session.get("/console/s/default/workers").text
    found = session.get("/console/s/default/search", params={"q": "RENDERER-4"})
    assert found.status_code == 200 and "Nothing in this space matches" not in found.text, found.text[-800:]
    assert '<tr data-holder="renderer-42"><td><a href="/console/s/default/workers/renderer-42">renderer-42</a></td><td>1</td></tr>' in found.text


def test_every_page_of_a_space_where_nothing_was_recorded_yet_answers(console: Console):
    """A new key's space holds nothing until its first write: its pages say so, none fails."""
    session = console.session(console.key_for("nothing-yet"))
    for page in ("runs", "claims?show=all", "tasks", "queues", "capacity", "coordination", "coordination?run=sc_x", "events",
                 "workers", "workers/someone", "lanes", "charts", "space", "search?q=a"):
        answer = session.get(f"/console/s/nothing-yet/{page}")
        assert answer.status_code == 200, (page, answer.text[-600:])
    coordination = session.get("/console/s/nothing-yet/coordination").text
    assert "No task groups." in coordination and coordination.count("0 in all") == 3
    assert "No workers" in session.get("/console/s/nothing-yet/workers").text


def test_the_runs_list_names_a_worker_holding_only_a_pools_units_as_the_runs_page_does(console: Console):
    """Runs' Workers column names the holders of the run's live leases: a pool's units held apart
    from a delivery are one, as the run's own page lists them."""
    api = console.api
    run = console.run("pool-worker-run")["id"]
    pool = api.put("/v1/spaces/default/permits/by-name/runs-pool", json={"units": 1}).json()
    held = api.post(f"/v1/spaces/default/permits/{pool['id']}/acquire",
                    json={"scopeId": run, "units": 1, "holder": "painter-7", "holderSession": "p", "leaseSeconds": 60})
    assert held.status_code == 200, held.text
    session = console.session()
    assert "/workers/painter-7" in session.get(f"/console/s/default/runs/{run}").text
    listed = session.get("/console/s/default/runs", params={"name": "pool-worker-run"}).text
    row = re.search(rf'<tr[^>]*data-run="{run}".*?</tr>', listed, re.S)
    assert row is not None and "/workers/painter-7" in row.group(0), listed[-1500:]


def test_a_worker_holding_only_a_once_key_is_on_workers_with_what_it_holds_and_found_by_search(console: Console):
    """A worker running a once function holds its key under a lease, as the run's page shows:
    Workers lists it, its own page says what it holds, and the search finds it."""
    run = console.run("once-holder")["id"]
    held = console.api.post("/v1/spaces/default/once/acquire",
                            json={"scopeId": run, "key": "report:acme", "holder": "summarizer-3", "holderSession": "s", "leaseSeconds": 60})
    assert held.status_code == 200 and held.json().get("token"), held.text
    session = console.session()
    assert "/workers/summarizer-3" in session.get(f"/console/s/default/runs/{run}").text
    workers = session.get("/console/s/default/workers").text
    assert re.search(r'<tr data-worker="summarizer-3">', workers), workers[-1500:]
    page = session.get("/console/s/default/workers/summarizer-3").text
    assert "once key report:acme" in page and "Nothing." not in page, page[-1500:]
    found = session.get("/console/s/default/search", params={"q": "summarizer"}).text
    assert '<tr data-holder="summarizer-3">' in found, found[-800:]
    listed = session.get("/console/s/default/runs", params={"name": "once-holder"}).text
    row = re.search(rf'<tr[^>]*data-run="{run}".*?</tr>', listed, re.S)
    assert row is not None and "/workers/summarizer-3" in row.group(0), listed[-1500:]
