"""The time scrubber: a page of the console at a past moment shows the space as it stood then,
and says so; "what changed between A and B" counts and lists the changes.

A claim is held by agent-a, its 1 s lease runs out and agent-b takes the key over. Signed in with
a viewer key (history is a read), the Claims page shows agent-b now; dragging the scrubber back to
a moment before the takeover shows agent-a holding the key at its first generation, with a banner
that says the page is of the past and not live, and the moment kept as the visitor moves to
another page. The changes from then to now name the takeover.
"""

from __future__ import annotations

import time
from typing import Iterator

import pytest
from playwright.sync_api import expect

from ..servers import ServerProcess
from .conftest import ADMIN_KEY, API_KEY, Console, Tab

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """A server that keeps a data directory (and so its history)."""
    data = tmp_path_factory.mktemp("history") / "data"
    env = {"RUNSTATE_ADMIN_KEY": ADMIN_KEY, "RUNSTATE_API_KEY": API_KEY}
    with ServerProcess("--lease-s-min", "1", "--data-dir", str(data), api_key=API_KEY, env=env) as server:
        yield Console(server)


def holders(tab: Tab) -> list[str]:
    return [text.strip() for text in tab.page.locator("#region table tbody tr td.wide-only").first.all_inner_texts()]


def test_scrubbing_back_before_a_takeover_shows_the_earlier_holder(tab: Tab, console: Console, tmp_path):
    run = console.run("history")
    first = console.claim(run["id"], "company:acme", "agent-a", lease_s=1)
    assert first.status_code == 200, first.text
    before_ms = int(time.time() * 1000)
    time.sleep(1.3)  # agent-a's lease runs out (a real server, a real second)
    second = console.claim(run["id"], "company:acme", "agent-b", lease_s=60)
    assert second.status_code == 200 and second.json()["generation"] == first.json()["generation"] + 1, second.text
    made = console.admin.post("/v1/admin/keys", json={"space": "default", "name": "dashboard", "role": "viewer"})
    assert made.status_code == 201, made.text

    tab.sign_in(made.json()["key"])
    tab.open(f"/console/s/default/claims?run={run['id']}")
    page = tab.page
    row = page.locator("#region tbody tr", has_text="company:acme")
    expect(row).to_contain_text("agent-b")
    tab.wait_live()
    expect(page.locator("#past-banner")).to_have_count(0)

    # Drag the scrubber to the moment before the takeover: the page reloads at that moment.
    page.locator("#scrub-range").fill(str(before_ms))
    page.wait_for_url("**at=*")
    banner = page.locator("#past-banner")
    expect(banner).to_contain_text("as it stood at")
    expect(banner).to_contain_text("not now: it does not update")
    expect(row).to_contain_text("agent-a")
    expect(row).not_to_contain_text("agent-b")
    expect(row).to_contain_text(str(first.json()["generation"]))
    expect(page.locator("#live-status")).to_have_text("past: not live")
    assert page.evaluate("document.body.dataset.stream") is None  # no live stream at a past point
    tab.screenshot("history-scrubbed", tmp_path)

    # The moment goes with the visitor to another page (the run's page lists its claims then).
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Runs").click()
    expect(page.locator("#past-banner")).to_contain_text("as it stood at")
    assert "at=" in page.url

    # What changed from then to now names the takeover.
    page.locator("#past-banner").get_by_role("link", name="What changed from then to now").click()
    events = page.locator("#changes-events")
    expect(events.locator("tr[data-event-type='claim.taken_over']")).to_contain_text("1")
    expect(page.locator("#region, main")).to_contain_text("agent-b")
    tab.screenshot("history-changes", tmp_path)

    # Back to now: agent-b again, live.
    tab.open(f"/console/s/default/claims?run={run['id']}&at=lsn:1")
    page.locator("#past-banner").get_by_role("link", name="Back to now").click()
    expect(page.locator("#region tbody tr", has_text="company:acme")).to_contain_text("agent-b")
    expect(page.locator("#past-banner")).to_have_count(0)
    tab.wait_live()
    assert not tab.errors(), tab.errors()


def test_a_point_before_anything_is_the_empty_space_and_a_bad_point_is_an_error_page(tab: Tab, console: Console):
    """Before the first record the space held nothing (said as a past page, not as now); a point in
    the future or not a point at all is an error page, never an empty list."""
    tab.sign_in()
    page = tab.page
    tab.open("/console/s/default/claims?at=2001-01-01T00:00:00Z")
    expect(page.locator("#past-banner")).to_contain_text("as it stood at")
    expect(page.locator("#region")).to_contain_text("No claims were held then")
    tab.open("/console/s/default/claims?at=2999-01-01T00:00:00Z")
    expect(page.get_by_role("main")).to_contain_text("is in the future: history is of the past")
    tab.open("/console/s/default/claims?at=yesterday")
    expect(page.get_by_role("main")).to_contain_text("at must be a time with a zone")


# What the pages offer an editor now, and never at a past point.
ACTIONS = ("formaction=", "Cancel run", "Cancel task", "Release…", "/release?")


def test_every_page_of_a_space_shows_a_past_point_and_says_so(console: Console):
    """Each page of the space at a past point answers 200 with the banner, no live stream and no
    action; the charts say they are not rebuilt from history."""
    run = console.run("pages")
    mailbox = console.api.put("/v1/spaces/default/mailboxes/by-name/past-jobs", json={}).json()
    task = console.api.post("/v1/spaces/default/tasks", json={"scopeId": run["id"], "mailboxId": mailbox["id"], "taskKey": "t"}).json()
    assert console.claim(run["id"], "k", "worker-1").status_code == 200
    at = console.api.get("/v1/spaces/default/history").json()["kept"]["newest"]["lsn"]
    console.claim(run["id"], "k2", "worker-2")
    session = console.session()
    base = "/console/s/default"
    pages = ["runs", f"runs/{run['id']}", "claims", "lanes", "tasks", f"tasks/{task['id']}", "queues", f"queues/{mailbox['id']}",
             "capacity", "coordination", "events", "workers", "workers/worker-1", "charts", "space", "search?q=k"]
    for path in pages:
        answer = session.get(f"{base}/{path}{'&' if '?' in path else '?'}at=lsn:{at}")
        assert answer.status_code == 200, (path, answer.text[:400])
        assert 'id="past-banner"' in answer.text and f"(LSN {at})" in answer.text, path
        main = answer.text.split("</header>", 1)[1]
        assert "data-stream=" not in answer.text and not any(action in main for action in ACTIONS), path
    live = session.get(f"{base}/runs/{run['id']}").text  # (now, the same key is offered them)
    assert "Cancel run" in live and 'id="past-banner"' not in live and "data-stream=" in live
    assert "worker-2" not in session.get(f"{base}/claims", params={"at": f"lsn:{at}"}).text
    assert 'id="charts-not-past"' in session.get(f"{base}/charts", params={"at": f"lsn:{at}"}).text
    changes = session.get(f"{base}/changes", params={"from": f"lsn:{at}"})
    assert changes.status_code == 200 and 'data-event-type="claim.acquired"' in changes.text
