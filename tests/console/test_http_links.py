"""The console's links over plain HTTP: each names what it shows, whatever the text it carries."""

from __future__ import annotations

import html
import re
from typing import Iterator

import pytest

from ..servers import ServerProcess
from .conftest import ADMIN_KEY, API_KEY, Console

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """A server that keeps a data directory (and so its history, for the scrubber's `at`)."""
    data = tmp_path_factory.mktemp("links") / "data"
    env = {"RUNSTATE_ADMIN_KEY": ADMIN_KEY, "RUNSTATE_API_KEY": API_KEY}
    with ServerProcess("--lease-s-min", "1", "--data-dir", str(data), api_key=API_KEY, env=env) as server:
        yield Console(server)


def test_a_worker_whose_name_holds_a_slash_is_linked_to_its_own_page(console: Console):
    """A holder is free text ("node-1/worker-3"): its link keeps the name one path segment."""
    run = console.run("slashed-holder")["id"]
    assert console.claim(run, "slashed", "node-1/worker-3").status_code == 200
    session = console.session()
    claims = session.get("/console/s/default/claims", params={"run": run})
    links = re.findall(r'href="(/console/s/default/workers/[^"]+)">node-1/worker-3<', claims.text)
    assert links, claims.text[-800:]
    page = session.get(html.unescape(links[0]))
    assert page.status_code == 200, page.text[-600:]
    assert "<h1>Worker node-1/worker-3</h1>" in page.text and "slashed" in page.text


def test_an_action_is_not_offered_at_a_past_point(console: Console):
    """A page of the past offers no action: a confirmation reached with the scrubber's `at` (which
    would show the numbers of now under a banner of then) says to go back to now."""
    run = console.run("past-cancel")["id"]
    session = console.session()
    now = session.get(f"/console/s/default/runs/{run}/cancel")
    form = f'<form method="post" action="/console/s/default/runs/{run}/cancel">'
    assert now.status_code == 200 and form in now.text
    point = console.api.get("/v1/spaces/default/history").json()["kept"]["newest"]["lsn"]
    past = session.get(f"/console/s/default/runs/{run}/cancel", params={"at": f"lsn:{point}"})
    assert past.status_code == 400, past.text[-600:]
    assert form not in past.text and "Back to now" in past.text and "go back to now to cancel a run" in past.text


@pytest.mark.parametrize("holder", [".", ".."])
def test_a_worker_named_as_a_dot_segment_is_linked_to_its_own_page(console: Console, holder: str):
    """A browser drops "." and ".." from a path (even written %2E): such a worker's link names it
    in the query instead, and its page keeps it there through the window filter."""
    run = console.run("dotted-holder")["id"]
    assert console.claim(run, f"dotted{len(holder)}", holder).status_code == 200
    session = console.session()
    claims = session.get("/console/s/default/claims", params={"run": run})
    links = re.findall(rf'href="(/console/s/default/workers[^"]*)">{re.escape(holder)}<', claims.text)
    assert links, claims.text[-800:]
    page = session.get(html.unescape(links[0]))
    assert page.status_code == 200, page.text[-600:]
    assert f"<h1>Worker {holder}</h1>" in page.text and f"dotted{len(holder)}" in page.text
    assert f'<input type="hidden" name="holder" value="{holder}">' in page.text
