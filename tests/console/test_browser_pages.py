"""What the console's pages show: why work waits, what a crash took down, capacity, queues,
coordination, lists paged with their filters in the URL, errors as errors, and the everyday
details (time zones, dark mode, a phone's screen)."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from .conftest import Console, Tab

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def test_why_is_it_waiting_names_the_full_pool_and_the_place_in_line(tab: Tab, console: Console, tmp_path):
    """A task that needs a unit of a full 1-unit pool: its page says the pool is 1/1 in use (and
    who holds it until when); a waiter in the pool's line is told it is 2nd."""
    api = console.api
    run = console.run("why")
    pool = api.post("/v1/spaces/default/permits", json={"name": "gpu", "units": 1}).json()
    held = api.post(f"/v1/spaces/default/permits/{pool['id']}/acquire",
                    json={"scopeId": run["id"], "units": 1, "holder": "trainer", "holderSession": "t", "leaseSeconds": 60})
    assert held.status_code == 200, held.text
    mailbox = api.put("/v1/spaces/default/mailboxes/by-name/gpu-jobs", json={}).json()
    task = api.post("/v1/spaces/default/tasks", json={
        "scopeId": run["id"], "mailboxId": mailbox["id"], "taskKey": "fine-tune", "input": {"model": "m"},
        "requirements": {"pools": [{"name": "gpu", "units": 1}]},
    }).json()
    first = api.post(f"/v1/spaces/default/permits/{pool['id']}/wait", json={"scopeId": run["id"], "holder": "first", "ttlSeconds": 60}).json()
    second = api.post(f"/v1/spaces/default/permits/{pool['id']}/wait", json={"scopeId": run["id"], "holder": "second", "ttlSeconds": 60}).json()
    tab.sign_in()
    tab.open(f"/console/s/default/tasks/{task['id']}")
    page = tab.page
    why = page.get_by_role("region", name="Why is it waiting?")
    expect(why.locator("li.check-no")).to_contain_text("pool gpu: 1/1 units in use; needs 1")
    expect(why.locator("li.check-no").first).to_contain_text("held by trainer")
    tab.screenshot("why-waiting", tmp_path)
    tab.open("/console/s/default/capacity")
    pool_panel = page.locator("section[data-pool='gpu']")
    expect(pool_panel.locator("[data-pool-use]")).to_have_text("1/1 in use")
    expect(pool_panel).to_contain_text("trainer")
    tab.screenshot("capacity", tmp_path)
    tab.open(f"/console/s/default/waiters/{second['waiterId']}/why")
    expect(page.get_by_role("main")).to_contain_text("2nd in line; ahead: first (1)")
    tab.open(f"/console/s/default/waiters/{first['waiterId']}/why")
    expect(page.get_by_role("main")).to_contain_text("1st in line")
    assert tab.errors() == []


def test_a_workers_blast_radius_names_what_its_crash_took_down_and_who_took_over(tab: Tab, console: Console, tmp_path):
    """A worker holds a claim and a delivery and stops renewing (a crash): its page lists the
    claim lease that expired and the delivery whose lease ran out, each with who took it next."""
    api = console.api
    run = console.run("blast")
    mailbox = api.put("/v1/spaces/default/mailboxes/by-name/blast", json={}).json()
    task = api.post("/v1/spaces/default/tasks", json={"scopeId": run["id"], "mailboxId": mailbox["id"], "taskKey": "crawl", "input": {}}).json()
    assert console.claim(run["id"], "blast:lock", "crashy", lease_s=1).status_code == 200
    delivery = api.post(f"/v1/spaces/default/mailboxes/{mailbox['id']}/recv",
                        json={"scopeId": run["id"], "holder": "crashy", "holderSession": "c", "leaseSeconds": 1})
    assert delivery.status_code == 200, delivery.text
    time.sleep(1.3)
    assert console.claim(run["id"], "blast:lock", "rescuer").json()["generation"] == 2
    again = api.post(f"/v1/spaces/default/mailboxes/{mailbox['id']}/recv",
                     json={"scopeId": run["id"], "holder": "rescuer", "holderSession": "r", "leaseSeconds": 30, "waitMs": 5000})
    assert again.status_code == 200 and again.json()["message"]["taskId"] == task["id"]
    tab.sign_in()
    tab.open("/console/s/default/workers")
    page = tab.page
    row = page.locator("tr[data-worker='crashy']")
    expect(row).to_be_visible()
    row.get_by_role("link", name="crashy").click()
    expired = page.locator("tr[data-loss='expired']")
    expect(expired).to_contain_text("claim blast:lock (generation 1): its lease expired")
    expect(expired).to_contain_text("rescuer (generation 2)")
    taken = page.locator("tr[data-loss='takenOver']")
    expect(taken).to_contain_text(f"task {task['id']} attempt 1: its lease ran out")
    expect(taken).to_contain_text("rescuer (attempt 2)")
    tab.screenshot("worker-blast-radius", tmp_path)
    assert tab.errors() == []


def test_queues_show_counts_deliveries_and_dead_letters_with_their_payload(tab: Tab, console: Console, tmp_path):
    """A mailbox's page: queued, leased and dead-lettered counts, its deliveries, and a dead
    letter's reason and full JSON payload."""
    api = console.api
    run = console.run("queues")
    mailbox = api.put("/v1/spaces/default/mailboxes/by-name/reports", json={}).json()
    for n in range(3):
        api.post("/v1/spaces/default/tasks", json={"scopeId": run["id"], "mailboxId": mailbox["id"], "taskKey": f"r{n}", "input": {"n": n}})
    got = api.post(f"/v1/spaces/default/mailboxes/{mailbox['id']}/recv",
                   json={"scopeId": run["id"], "holder": "w", "holderSession": "s", "leaseSeconds": 30}).json()
    api.post(f"/v1/spaces/default/messages/{got['message']['id']}/nack", json={"token": got["token"], "retry": False, "error": "bad input"})
    tab.sign_in()
    tab.open("/console/s/default/queues")
    page = tab.page
    row = page.locator("tr[data-mailbox='reports']")
    expect(row.locator("td[data-count='queued']")).to_have_text("2")
    expect(row.locator("td[data-count='dead']")).to_have_text("1")
    row.get_by_role("link", name="reports").click()
    dead = page.locator(f"tr[data-dead='{got['message']['id']}']")
    expect(dead).to_contain_text("bad input")
    dead.locator("summary").click()
    expect(dead.locator("pre")).to_contain_text('"n": 0')
    tab.screenshot("queue", tmp_path)
    assert tab.errors() == []


def test_coordination_lists_groups_barriers_and_timers(tab: Tab, console: Console):
    """Barriers with arrivals, timers with when they fire, task groups with their condition."""
    api = console.api
    run = console.run("coordination")
    barrier = api.post("/v1/spaces/default/barriers", json={"scopeId": run["id"], "target": 3}).json()
    api.post(f"/v1/spaces/default/barriers/{barrier['id']}/arrive", json={"arrivalKey": "a"})
    timer = api.put("/v1/spaces/default/timers/by-name/nightly", json={"scopeId": run["id"], "afterSeconds": 600})
    assert timer.status_code in (200, 201), timer.text
    mailbox = api.put("/v1/spaces/default/mailboxes/by-name/group-work", json={}).json()
    group = api.post("/v1/spaces/default/task-groups", json={"mailboxId": mailbox["id"], "condition": "ALL_TERMINAL", "parentScopeId": run["id"]})
    assert group.status_code == 201, group.text
    tab.sign_in()
    tab.open(f"/console/s/default/coordination?run={run['id']}")
    main = tab.page.get_by_role("main")
    expect(main).to_contain_text("1/3")
    expect(main).to_contain_text("nightly")
    expect(main).to_contain_text("ALL_TERMINAL")
    assert tab.errors() == []


def test_lists_are_paged_by_cursor_with_their_filters_in_the_url(tab: Tab, console: Console):
    """60 claims: the first page shows 50, "Next page" the other 10, with the key filter kept in
    the link; a filtered Events view is a link that opens the same view."""
    run = console.run("paging")
    for n in range(60):
        assert console.claim(run["id"], f"page:{n:02d}", "pager").status_code == 200
    tab.sign_in()
    tab.open("/console/s/default/claims?key=page:")
    page = tab.page
    expect(page.locator("tr[data-claim]")).to_have_count(50)
    expect(page.get_by_role("main")).to_contain_text("60 in all")
    page.get_by_role("link", name="Next page »").click()
    expect(page.locator("tr[data-claim]")).to_have_count(10)
    assert "key=page%3A" in page.url and "cursor=" in page.url
    expect(page.locator("tr[data-claim]").first).to_contain_text("page:50")
    tab.open("/console/s/default/events?types=claim.acquired&key=page:07")
    expect(page.locator("tr[data-event]")).to_have_count(1)
    expect(page.get_by_label("Key (claim key or any id)")).to_have_value("page:07")


def test_a_bad_filter_or_a_missing_thing_is_shown_as_an_error(tab: Tab, console: Console):
    """A filter the server refuses is a 400 page that says why; an id that is not there is a 404
    page; neither is an empty list."""
    tab.sign_in()
    page = tab.page
    answer = page.goto(console.url + "/console/s/default/tasks?state=NAPPING")
    assert answer is not None and answer.status == 400
    expect(page.get_by_role("alert")).to_contain_text("state must be one of")
    answer = page.goto(console.url + "/console/s/default/tasks/tk_0000000000000000")
    assert answer is not None and answer.status == 404
    expect(page.get_by_role("alert")).to_contain_text("not found")
    answer = page.goto(console.url + "/console/s/default/events?types=claim.bogus")
    assert answer is not None and answer.status == 400
    expect(page.get_by_role("alert")).to_contain_text("no event type 'claim.bogus'")


def test_times_follow_the_chosen_zone_and_the_page_follows_dark_mode(tab: Tab, console: Console, tmp_path):
    """Times show in UTC when chosen (and stay so on the next page); the page is dark when the
    system is, and the theme button overrides it."""
    console.run("times")
    tab.sign_in()
    page = tab.page
    page.get_by_label("Times").select_option("utc")
    first = page.locator("main time").first
    expect(first).to_contain_text("UTC")
    page.reload()
    expect(page.locator("main time").first).to_contain_text("UTC")
    page.get_by_label("Times").select_option("relative")
    expect(page.locator("main time").first).to_contain_text("ago")
    page.emulate_media(color_scheme="dark")
    dark = page.evaluate("getComputedStyle(document.body).backgroundColor")
    page.emulate_media(color_scheme="light")
    light = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert dark != light
    page.get_by_role("button", name="Theme: auto").click()  # auto -> light -> dark
    page.get_by_role("button", name="Theme: light").click()
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == dark
    page.reload()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    tab.screenshot("dark-runs", tmp_path)


def test_usable_on_a_phone(chromium_browser, console: Console, tmp_path):
    """On a 390x844 screen the header takes less than a fifth of the screen, the page does not
    scroll sideways (wide tables scroll inside their frame), and the Claims table shows a lease's
    end and the acquires waiting without scrolling."""
    run = console.run("phone")
    console.claim(run["id"], "phone:a-rather-long-claim-key-to-widen-the-table", "worker-with-a-long-name")
    context = chromium_browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        tab = Tab(context.new_page(), console)
        tab.sign_in()
        tab.open("/console/s/default/claims?key=phone:")
        page = tab.page
        expect(page.get_by_role("link", name="Events", exact=True)).to_be_attached()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        header = page.locator("header").bounding_box()
        assert header is not None and header["height"] < 844 / 5, header
        for name in ("Lease ends", "Acquires waiting"):
            cell = page.get_by_role("columnheader", name=name).bounding_box()
            assert cell is not None and cell["x"] + cell["width"] <= 390, (name, cell)
        tab.screenshot("phone-claims", tmp_path, full_page=False)
    finally:
        context.close()


def test_the_words_say_what_they_count_and_a_search_finds_keys_holders_and_task_keys(tab: Tab, console: Console, tmp_path):
    """Runs count waiting messages and waiting acquires apart and say how many top-level runs
    there are when children are shown under them; a run ended by a cancel is not shown as a
    failure and says by whom; an event's payload is named fields with links; the search in the
    header finds a claim key, a holder and a task key across runs."""
    parent = console.run("words-parent")
    console.run("words-child", parent=parent["id"])
    console.claim(parent["id"], "words:ledger", "scribe-7")
    mailbox = console.api.put("/v1/spaces/default/mailboxes/by-name/words", json={}).json()
    console.api.post("/v1/spaces/default/tasks", json={"scopeId": parent["id"], "mailboxId": mailbox["id"], "taskKey": "words:invoice-9", "input": {}})
    stopped = console.run("words-stopped")
    assert console.api.post(f"/v1/spaces/default/scopes/{stopped['id']}/cancel").status_code == 200
    tab.sign_in()
    page = tab.page
    tab.open("/console/s/default/runs?name=words-")
    expect(page.get_by_role("columnheader", name="Messages waiting")).to_be_visible()
    expect(page.get_by_role("columnheader", name="Acquires waiting")).to_be_visible()
    expect(page.locator(f"tr[data-run='{parent['id']}'] td[data-count='messages']")).to_have_text("1")
    expect(page.locator("[data-total]")).to_have_text("2 top-level runs in all; this page shows 2 with the 1 run under them")
    cancelled = page.locator(f"tr[data-run='{stopped['id']}'] .state")
    expect(cancelled).to_have_text("CANCELLED")
    assert cancelled.evaluate("e => getComputedStyle(e).color") != page.evaluate(
        "getComputedStyle(document.documentElement).getPropertyValue('--bad')") and "not a failure" in (cancelled.get_attribute("title") or "")
    tab.open(f"/console/s/default/runs/{stopped['id']}")
    expect(page.locator("dd[data-ended]")).to_contain_text("cancelled by this key")
    tab.open("/console/s/default/events?types=claim.acquired&key=words:ledger")
    details = page.locator("tr[data-event='claim.acquired'] dl.payload")
    expect(details).to_contain_text("generation1")
    expect(details.get_by_role("link", name="scribe-7")).to_be_visible()
    for text, kind, row in (("LEDGER", "claims", "words:ledger"), ("scribe", "holders", "scribe-7"), ("invoice-9", "tasks", "words:invoice-9")):
        page.get_by_role("searchbox", name="Search this space").fill(text)
        page.get_by_role("searchbox", name="Search this space").press("Enter")
        expect(page.locator(f"section[data-found='{kind}']")).to_contain_text(row)
    tab.screenshot("search", tmp_path, full_page=False)
    page.get_by_role("searchbox", name="Search this space").fill("no-such-thing")
    page.get_by_role("searchbox", name="Search this space").press("Enter")
    expect(page.get_by_role("status").filter(has_text="Nothing in this space matches")).to_be_visible()
    assert tab.errors() == []
