"""The operator's actions in the console: release a stuck claim, requeue or delete dead letters
(one, picked, or all matching a filter, after a count), each confirmed, done through its API
route, and in the event log with who did it.

They go through the server's forced release and dead-letter routes, which the console offers
exactly where the API serves them (checked here too).
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .conftest import ADMIN_KEY, Console, Tab

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def _dead_letters(console: Console, run: str, mailbox: str, count: int, error: str, tasks: bool) -> list[str]:
    """`count` dead letters in `mailbox`: tasks' messages or plain messages, each rejected with `error`."""
    api = console.api
    ids = []
    for n in range(count):
        if tasks:
            api.post("/v1/spaces/default/tasks", json={"scopeId": run, "mailboxId": mailbox, "taskKey": f"{error}-{n}", "input": {"n": n}})
        else:
            api.post(f"/v1/spaces/default/mailboxes/{mailbox}/messages", json={"scopeId": run, "payload": {"n": n}})
        got = api.post(f"/v1/spaces/default/mailboxes/{mailbox}/recv",
                       json={"scopeId": run, "holder": "w", "holderSession": "s", "leaseSeconds": 30}).json()
        nacked = api.post(f"/v1/spaces/default/messages/{got['message']['id']}/nack", json={"token": got["token"], "retry": False, "error": error})
        assert nacked.status_code == 200, nacked.text
        ids.append(got["message"]["id"])
    return ids


def test_releasing_a_stuck_claim_gives_the_next_holder_the_next_generation(tab: Tab, console: Console, tmp_path):
    """Release…: the confirmation names the holder and the next generation; confirmed, the claim
    is free, the old token is refused, the next acquire gets generation 2, and the event log says
    who released it."""
    run = console.run("stuck")
    old = console.claim(run["id"], "stuck:key", "hung-worker", lease_s=600).json()
    tab.sign_in()
    tab.open("/console/s/default/claims?key=stuck:")
    page = tab.page
    page.locator("tr[data-claim='stuck:key']").get_by_role("link", name="Release…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("hung-worker loses the claim now")
    expect(dialog).to_contain_text("the next holder of stuck:key gets generation 2")
    page.get_by_label("Reason (kept with it)").fill("worker hung")
    page.get_by_role("button", name="Release claim").click()
    expect(page.get_by_role("status").filter(has_text="Claim released")).to_be_visible()
    stale = console.api.post("/v1/spaces/default/claims/stuck:key/renew", json={"token": old["token"]})
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "STALE_CLAIM"
    assert console.claim(run["id"], "stuck:key", "fresh").json()["generation"] == 2
    events = console.api.get("/v1/spaces/default/events", params={"limit": 1000}).json()["events"]
    (released,) = [e for e in events if e["type"] == "claim.force_released" and e["aggregate"]["id"] == "stuck:key"]
    assert released["payload"]["reason"] == "worker hung" and released["payload"]["by"]
    tab.open("/console/s/default/lanes?key=stuck:")
    expect(page.locator("tr[data-lane='stuck:key']")).to_contain_text("released by an operator")


def test_dead_letters_are_counted_then_requeued_or_deleted(tab: Tab, console: Console, tmp_path):
    """Picked dead letters are requeued after a count (a task's is skipped, and the count says
    why); then every one whose reason matches a filter is deleted, the count first; each action
    is in the event log."""
    api = console.api
    run = console.run("dead-letters")
    mailbox = api.put("/v1/spaces/default/mailboxes/by-name/redrive", json={}).json()["id"]
    plain = _dead_letters(console, run["id"], mailbox, 2, "timeout", tasks=False)
    (task_message,) = _dead_letters(console, run["id"], mailbox, 1, "timeout", tasks=True)
    _dead_letters(console, run["id"], mailbox, 3, "malformed", tasks=True)
    tab.sign_in()
    tab.open(f"/console/s/default/queues/{mailbox}")
    page = tab.page
    for message_id in [*plain, task_message]:
        page.get_by_label(f"pick {message_id}").check()
    page.get_by_role("button", name="Requeue picked or all matching…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("2 dead letter(s) 3 picked go back to the end of their queue")
    expect(dialog).to_contain_text("skipped, as they cannot go back: 1 (a task's")
    tab.screenshot("requeue-dead-letters", tmp_path)
    page.get_by_role("button", name="Requeue 2").click()
    expect(page.get_by_role("status").filter(has_text="Dead letters requeued")).to_be_visible()
    counts = api.get(f"/v1/spaces/default/mailboxes/{mailbox}").json()["counts"]
    assert (counts["deadLetters"], counts["queued"]) == (4, 2)
    tab.open(f"/console/s/default/queues/{mailbox}?reason=malformed")
    page.get_by_role("button", name="Delete picked or all matching…").click()
    expect(page.get_by_role("dialog")).to_contain_text("3 dead letter(s) matching the filter are deleted")
    page.get_by_role("button", name="Delete 3").click()
    expect(page.get_by_role("status").filter(has_text="Dead letters deleted")).to_be_visible()
    counts = api.get(f"/v1/spaces/default/mailboxes/{mailbox}").json()["counts"]
    assert (counts["deadLetters"], counts["queued"]) == (1, 2)
    types = [e["type"] for e in api.get("/v1/spaces/default/events", params={"limit": 1000}).json()["events"]]
    assert "dead_letters.requeued" in types and "dead_letters.deleted" in types
    assert tab.errors() == []


def test_operator_actions_need_the_csrf_token_and_the_admin_key_may_act(console: Console):
    """A forced release or a dead-letter action without the session's CSRF token is 403 and
    changes nothing; with the admin key's session it goes through (the admin key may act)."""
    run = console.run("operator-csrf")
    console.claim(run["id"], "csrf:key", "w", lease_s=600)
    admin = console.session(ADMIN_KEY)
    path = f"/console/s/default/claims/release?run={run['id']}&key=csrf:key"
    same = {"origin": console.url}
    assert admin.post(path, data={}, headers=same).status_code == 403
    held = console.api.get(f"/v1/spaces/default/scopes/{run['id']}/claims").json()["claims"]
    assert [c["key"] for c in held] == ["csrf:key"]
    done = admin.post(path, data={"csrf": console.csrf(admin, path)}, headers=same)
    assert done.status_code == 303, done.text
    assert console.api.get(f"/v1/spaces/default/scopes/{run['id']}/claims").json()["claims"] == []


def test_the_actions_are_offered_where_the_api_serves_them(console: Console):
    """The console offers a forced release and dead-letter actions because the API serves their
    routes (it asks the API's router, so an action is never offered without its route)."""
    from runstate.server.console.actions import dead_letter_actions, release_offered

    assert release_offered()
    assert dead_letter_actions() == ("requeue", "delete")
    run = console.run("offered")
    console.claim(run["id"], "offered:key", "w")
    page = console.session().get("/console/s/default/claims?key=offered:").text
    assert "Release…" in page


def test_a_viewer_sees_no_action_and_a_forged_one_is_refused(tab: Tab, console: Console, tmp_path):
    """Signed in with a viewer key: the header names the role; a run, a task, a held claim and
    dead letters show no action; a confirmation page is 403; a forged release (with the
    session's CSRF token, from a page of this host) is the API's 403 and the claim stays held."""
    run = console.run("viewer")
    console.claim(run["id"], "viewer:key", "w", lease_s=600)
    mailbox = console.api.put("/v1/spaces/default/mailboxes/by-name/viewer", json={}).json()["id"]
    (dead,) = _dead_letters(console, run["id"], mailbox, 1, "bad", tasks=True)
    task = console.api.post("/v1/spaces/default/tasks", json={"scopeId": run["id"], "mailboxId": mailbox, "taskKey": "v", "input": {}}).json()
    made = console.admin.post("/v1/admin/keys", json={"space": "default", "name": "dashboard", "role": "viewer"})
    assert made.status_code == 201, made.text
    tab.sign_in(made.json()["key"])
    page = tab.page
    expect(page.locator("header .who")).to_contain_text("API key “dashboard”")
    expect(page.locator("header [data-role]")).to_have_text("viewer")
    tab.open(f"/console/s/default/runs/{run['id']}")
    expect(page.get_by_role("heading", name=f"Run {run['id']}")).to_be_visible()
    expect(page.get_by_role("link", name="Cancel run…")).to_have_count(0)
    tab.open(f"/console/s/default/tasks/{task['id']}")
    expect(page.get_by_role("link", name="Cancel task…")).to_have_count(0)
    tab.open("/console/s/default/claims?key=viewer:")
    expect(page.locator("tr[data-claim='viewer:key']")).to_be_visible()
    tab.wait_live()  # its stream is open too
    tab.screenshot("viewer-claims", tmp_path, full_page=False)
    expect(page.get_by_role("link", name="Release…")).to_have_count(0)
    tab.open(f"/console/s/default/queues/{mailbox}")
    expect(page.locator(f"tr[data-dead='{dead}']")).to_be_visible()
    expect(page.get_by_role("main").get_by_role("checkbox")).to_have_count(0)
    expect(page.get_by_role("button", name="Requeue picked or all matching…")).to_have_count(0)
    confirm = page.goto(console.url + f"/console/s/default/claims/release?run={run['id']}&key=viewer:key")
    assert confirm is not None and confirm.status == 403
    expect(page.get_by_role("alert")).to_contain_text("viewer role")
    tab.open("/console/s/default/claims?key=viewer:")
    csrf = page.evaluate("JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRF-Token']")
    forged = page.request.post(console.url + f"/console/s/default/claims/release?run={run['id']}&key=viewer:key",
                               form={"csrf": csrf}, headers={"origin": console.url}, max_redirects=0)
    assert forged.status == 403 and "viewer role" in forged.text()
    held = console.api.get(f"/v1/spaces/default/scopes/{run['id']}/claims").json()["claims"]
    assert [c["key"] for c in held] == ["viewer:key"]
    assert [e for e in tab.errors() if "status of 403" not in e] == []  # (the refused confirmation page)
