"""The console is live: changes made through the API show on an open page without a reload."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from .conftest import Console, Tab

pytestmark = [pytest.mark.e2e, pytest.mark.browser]
# A kernel of several partitions: spaces spread over them, each with its own journal and actors.
SERVER_ARGS = ("--partitions", "3")


def test_a_claim_taken_through_the_api_appears_within_a_second_and_a_takeover_shows_the_next_generation(tab: Tab, console: Console, tmp_path):
    """On an open Claims page: an acquire through the API appears within a second; after its
    lease runs out, another holder's acquire shows generation 2 and the new holder, no reload."""
    run = console.run("live")
    tab.sign_in()
    tab.open("/console/s/default/claims?key=live:")
    tab.wait_live()
    page = tab.page
    loaded = page.evaluate("performance.timeOrigin")
    first = console.claim(run["id"], "live:acme", "worker-1", lease_s=1)
    assert first.status_code == 200, first.text
    row = page.locator("tr[data-claim='live:acme']")
    expect(row).to_be_visible(timeout=1000)
    expect(row.locator("td[data-generation]")).to_have_text("1")
    time.sleep(1.2)  # the first lease runs out (a real server, in real time)
    second = console.claim(run["id"], "live:acme", "worker-2")
    assert second.status_code == 200 and second.json()["generation"] == 2
    expect(row.locator("td[data-generation]")).to_have_text("2", timeout=1000)
    expect(row).to_contain_text("worker-2")
    assert page.evaluate("performance.timeOrigin") == loaded, "the page was not reloaded"
    tab.screenshot("claims-live", tmp_path)
    assert tab.errors() == []


def test_a_stale_write_shows_on_the_lease_swimlane(tab: Tab, console: Console, tmp_path):
    """After a takeover, the first holder's late release is refused (409 STALE_CLAIM) and the
    open swimlane shows it, in red, on the key's lane, next to both generations."""
    run = console.run("fenced")
    tab.sign_in()
    tab.open("/console/s/default/lanes?key=fenced:")
    tab.wait_live()
    old = console.claim(run["id"], "fenced:report", "paused-worker", lease_s=1).json()
    time.sleep(1.2)
    assert console.claim(run["id"], "fenced:report", "fresh-worker").json()["generation"] == 2
    late = console.api.post("/v1/spaces/default/claims/fenced:report/release", json={"token": old["token"]})
    assert late.status_code == 409 and late.json()["error"]["code"] == "STALE_CLAIM"
    lane = tab.page.locator("tr[data-lane='fenced:report']")
    expect(lane.locator("li.fenced-write")).to_contain_text("stale token refused", timeout=2000)
    expect(lane.locator("li.fenced-write")).to_contain_text("while generation 2 held the key")
    expect(lane).to_contain_text("generation 1: paused-worker")
    expect(lane).to_contain_text("fresh-worker took it over after the last lease expired")
    assert lane.locator("svg line.fenced").count() == 1 and lane.locator("svg rect.bar").count() == 2
    tab.screenshot("lanes", tmp_path)
    assert tab.errors() == []


def test_pause_live_holds_the_page_until_it_is_switched_back(tab: Tab, console: Console):
    """With "Pause live" on, a change does not show; switched off, the page catches up at once;
    the choice is remembered by the next page."""
    run = console.run("paused")
    tab.sign_in()
    tab.open("/console/s/default/claims?key=paused:")
    tab.wait_live()
    page = tab.page
    page.get_by_label("Pause live").check()
    expect(page.locator("#live-status")).to_have_text("paused")
    console.claim(run["id"], "paused:one", "worker-1")
    page.wait_for_timeout(1500)
    expect(page.locator("tr[data-claim='paused:one']")).to_have_count(0)
    page.reload()
    expect(page.get_by_label("Pause live")).to_be_checked()
    console.claim(run["id"], "paused:two", "worker-1")
    page.get_by_label("Pause live").uncheck()
    expect(page.locator("tr[data-claim='paused:two']")).to_be_visible(timeout=2000)
    tab.wait_live()


def test_every_page_updates_in_place(tab: Tab, console: Console):
    """Runs, Tasks, Queues and Events each show a change made through the API, without a reload."""
    tab.sign_in()
    page = tab.page
    tab.open("/console/s/default/runs?name=in-place")
    tab.wait_live()
    run = console.run("in-place")
    expect(page.locator(f"tr[data-run='{run['id']}']")).to_be_visible(timeout=2000)
    mailbox = console.api.put("/v1/spaces/default/mailboxes/by-name/in-place", json={}).json()
    tab.open("/console/s/default/queues")
    tab.wait_live()
    task = console.api.post("/v1/spaces/default/tasks", json={"scopeId": run["id"], "mailboxId": mailbox["id"], "taskKey": "k1", "input": {}}).json()
    expect(page.locator("tr[data-mailbox='in-place'] td[data-count='queued']")).to_have_text("1", timeout=2000)
    tab.open("/console/s/default/tasks?key=k")
    tab.wait_live()
    console.api.post(f"/v1/spaces/default/tasks/{task['id']}/cancel", json={})
    expect(page.locator(f"tr[data-task='{task['id']}']")).to_contain_text("CANCELLED", timeout=2000)
    tab.open("/console/s/default/events?types=scope.cancelled")
    tab.wait_live()
    console.api.post(f"/v1/spaces/default/scopes/{run['id']}/cancel")
    expect(page.locator("tr[data-event='scope.cancelled']")).to_have_count(1, timeout=2000)
    assert tab.errors() == []
