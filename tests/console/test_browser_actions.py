"""The console's actions: each confirmed, done through its API route, in the event log, and
refused without the session's CSRF token or from another origin."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .conftest import ADMIN_KEY, Console, Tab

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def _queued_task(console: Console, run: str, key: str) -> dict:
    mailbox = console.api.put("/v1/spaces/default/mailboxes/by-name/actions", json={}).json()
    answer = console.api.post("/v1/spaces/default/tasks", json={"scopeId": run, "mailboxId": mailbox["id"], "taskKey": key, "input": {"n": 1}})
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_cancelling_a_run_is_confirmed_then_done_and_logged(tab: Tab, console: Console, tmp_path):
    """Cancel run: a confirmation says what will end (its child run, its queued task, its held
    claim); confirmed, the run is CANCELLED through the API route and the event log says so."""
    run = console.run("to-cancel")
    console.run("child", parent=run["id"])
    _queued_task(console, run["id"], "doomed")
    console.claim(run["id"], "held-in-run", "worker-1")
    tab.sign_in()
    tab.open(f"/console/s/default/runs/{run['id']}")
    page = tab.page
    page.get_by_role("link", name="Cancel run…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("1 run(s) under it end with it")
    expect(dialog).to_contain_text("1 queued or running task(s) are cancelled")
    expect(dialog).to_contain_text("1 lease(s) held in it end")
    tab.screenshot("confirm-cancel-run", tmp_path)
    page.get_by_role("button", name="Cancel run").click()
    expect(page.get_by_role("status").filter(has_text="Run cancelled.")).to_be_visible()
    assert console.api.get(f"/v1/spaces/default/scopes/{run['id']}").json()["storedState"] == "CANCELLED"
    events = console.api.get("/v1/spaces/default/events", params={"limit": 1000}).json()["events"]
    assert any(e["type"] == "scope.cancelled" and e["aggregate"]["id"] == run["id"] for e in events)
    expect(page.get_by_role("main")).to_contain_text("scope.cancelled")
    assert tab.errors() == []


def test_cancelling_a_task_keeps_the_reason_given(tab: Tab, console: Console):
    """Cancel task, with a reason: the task ends CANCELLED with that reason, shown on its page."""
    run = console.run("task-cancel")
    task = _queued_task(console, run["id"], "to-cancel")
    tab.sign_in()
    tab.open(f"/console/s/default/tasks/{task['id']}")
    page = tab.page
    page.get_by_role("link", name="Cancel task…").click()
    page.get_by_label("Reason (kept with it)").fill("stuck on a bad input")
    page.get_by_role("button", name="Cancel task").click()
    expect(page.get_by_role("status").filter(has_text="Task cancelled.")).to_be_visible()
    expect(page.locator("dd[data-state]")).to_contain_text("CANCELLED")
    expect(page.locator("dd[data-state]")).to_contain_text("stuck on a bad input")
    answer = console.api.get(f"/v1/spaces/default/tasks/{task['id']}").json()
    assert (answer["state"], answer["outcomeReason"]) == ("CANCELLED", "stuck on a bad input")


def test_an_action_without_the_csrf_token_or_from_another_origin_is_refused_and_changes_nothing(console: Console):
    """A POST with the session's cookie but no CSRF token, or with the token from another
    origin, is 403 and the run stays ACTIVE; with both it goes through."""
    run = console.run("csrf")
    client = console.session()
    path = f"/console/s/default/runs/{run['id']}/cancel"
    token = console.csrf(client, path)
    same = {"origin": console.url}
    assert client.post(path, data={}, headers=same).status_code == 403
    assert client.post(path, data={"csrf": "forged"}, headers=same).status_code == 403
    assert client.post(path, data={"csrf": token}, headers={"origin": "http://evil.example"}).status_code == 403
    assert client.post(path, data={"csrf": token}).status_code == 403  # no Origin, no Referer
    assert console.api.get(f"/v1/spaces/default/scopes/{run['id']}").json()["storedState"] == "ACTIVE"
    done = client.post(path, data={"csrf": token}, headers=same)
    assert done.status_code == 303 and done.headers["location"] == f"/console/s/default/runs/{run['id']}"
    assert "Run cancelled." in client.get(done.headers["location"]).text
    assert console.api.get(f"/v1/spaces/default/scopes/{run['id']}").json()["storedState"] == "CANCELLED"
    other = console.session()
    assert other.post(f"/console/s/default/runs/{console.run('x')['id']}/cancel", data={"csrf": token}, headers=same).status_code == 403


def test_an_action_the_api_refuses_is_shown_as_its_error(tab: Tab, console: Console):
    """The console acts with the signed-in key through the API route, so the route's refusal is
    what the visitor sees, with its status and code: a run cancelled twice in two tabs, or an
    admin key the server lets only read inside a space."""
    run = console.run("refused")
    tab.sign_in()
    tab.open(f"/console/s/default/runs/{run['id']}/cancel")
    page = tab.page
    console.api.post(f"/v1/spaces/default/scopes/{run['id']}/complete")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.get_by_role("button", name="Cancel run").click()
    assert answer.value.status == 409
    expect(page.get_by_role("alert")).to_contain_text("CONFLICT")
    expect(page.get_by_role("alert")).to_contain_text("already completed")
    admin = console.session(ADMIN_KEY)
    other = console.run("admin-cancel")
    path = f"/console/s/default/runs/{other['id']}/cancel"
    refused = admin.post(path, data={"csrf": console.csrf(admin, path)}, headers={"origin": console.url})
    if refused.status_code == 403:  # an admin key that may only read inside a space
        assert "FORBIDDEN" in refused.text and "admin key" in refused.text
    else:  # an admin key that may act as an operator: the run is cancelled
        assert refused.status_code == 303
        assert console.api.get(f"/v1/spaces/default/scopes/{other['id']}").json()["storedState"] == "CANCELLED"
