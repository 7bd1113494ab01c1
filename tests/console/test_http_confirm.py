"""An action's confirmation over plain HTTP: it offers only what the API would do."""

from __future__ import annotations

import re

import httpx
import pytest

from .conftest import API_KEY, Console

pytestmark = pytest.mark.e2e


def _form(path: str) -> str:
    return f'<form method="post" action="{path}">'


def test_a_confirmation_for_what_has_already_ended_says_so_and_offers_nothing(console: Console):
    """Another operator (or a worker, or a deadline) got there first: a task that ended, a run
    that ended and a claim no longer held are refused at the confirmation with the API's 409,
    rather than a page that says what it will do and a button the API then refuses."""
    api = console.api
    run = console.run("already-ended")["id"]
    mailbox = api.put("/v1/spaces/default/mailboxes/by-name/already-ended", json={}).json()["id"]
    task = api.post("/v1/spaces/default/tasks", json={"scopeId": run, "mailboxId": mailbox, "taskKey": "done", "input": {}}).json()["id"]
    got = api.post(f"/v1/spaces/default/mailboxes/{mailbox}/recv",
                   json={"scopeId": run, "holder": "w", "holderSession": "s", "leaseSeconds": 30}).json()
    assert api.post(f"/v1/spaces/default/messages/{got['message']['id']}/complete", json={"token": got["token"]}).status_code == 200
    assert console.claim(run, "let-go", "w").status_code == 200
    session = console.session()
    release = f"/console/s/default/claims/release?run={run}&key=let-go"
    assert _form(release.replace("&", "&amp;")) in session.get(release).text  # (held: offered)
    assert api.post("/v1/spaces/default/claims/let-go/force-release", json={"scopeId": run}).status_code == 200

    for path, form, said in (
        (f"/console/s/default/tasks/{task}/cancel", _form(f"/console/s/default/tasks/{task}/cancel"), "already ended succeeded"),
        (release, _form(release.replace("&", "&amp;")), "is not held"),
    ):
        page = session.get(path)
        assert (page.status_code, form in page.text) == (409, False), (path, page.text[-800:])
        assert said in page.text, page.text[-800:]
    assert api.post(f"/v1/spaces/default/scopes/{run}/cancel").status_code == 200
    ended = session.get(f"/console/s/default/runs/{run}/cancel")
    assert (ended.status_code, _form(f"/console/s/default/runs/{run}/cancel") in ended.text) == (409, False), ended.text[-800:]
    assert "already cancelled" in ended.text


def test_a_quota_waiter_is_told_only_of_the_waiters_ahead_of_it(console: Console):
    """The first waiter in a quota's line has nobody going first: its "why" says the window is
    used up, not that a waiter (itself) goes first; the second is told of the first."""
    api = console.api
    run = console.run("quota-line")["id"]
    quota = api.put("/v1/spaces/default/allowances/by-name/line-quota", json={"unitsLimit": 1, "windowSeconds": 600}).json()
    assert api.post(f"/v1/spaces/default/allowances/{quota['id']}/consume", json={"scopeId": run, "units": 1, "holder": "early"}).status_code == 200
    waiters = [api.post(f"/v1/spaces/default/allowances/{quota['id']}/wait",
                        json={"scopeId": run, "units": 1, "holder": name, "ttlSeconds": 600}).json() for name in ("first", "second")]
    assert [w["state"] for w in waiters] == ["WAITING", "WAITING"], waiters
    session = console.session()
    first = session.get(f"/console/s/default/waiters/{waiters[0]['id']}/why").text
    second = session.get(f"/console/s/default/waiters/{waiters[1]['id']}/why").text
    assert "1/1 used in this window; needs 1; the window resets in" in first and "go first" not in first, first[-1500:]
    assert "1/1 used in this window; needs 1; 1 waiter(s) go first" in second, second[-1500:]


def test_a_dead_letter_action_says_how_many_it_did_and_when_another_did_them_first(console: Console):
    """Two operators count the same dead letters; the first requeues them, and the second, acting
    on the same filter, is told that none was requeued rather than that they were."""
    _, mailbox = console.dead_letters("two-operators", 2)
    where = f"/console/s/default/queues/{mailbox}/dead-letters/requeue"
    operators = [console.session(), console.session()]
    tokens = [console.csrf(session, f"/console/s/default/queues/{mailbox}") for session in operators]
    for session, token in zip(operators, tokens):
        counted = session.post(where + "/preview", data={"csrf": token, "reason": "boom"}, headers={"origin": console.url})
        assert "2 dead letter(s) matching the filter go back" in counted.text, counted.text[-800:]
    notices = []
    for session, token in zip(operators, tokens):
        done = session.post(where, data={"csrf": token, "reason": "boom"}, headers={"origin": console.url})
        assert done.status_code == 303, done.text[-600:]
        notices.append(re.findall(r'<p class="notice" role="status">([^<]*)</p>', session.get(done.headers["location"]).text))
    assert notices == [["Dead letters requeued: 2."], ["No dead letter was requeued: none matches any more."]]


def test_a_dead_letter_count_of_none_says_there_is_nothing_to_do_and_offers_no_button(console: Console):
    """A queue whose dead letters were all requeued already: counting them again for a requeue or
    a delete says there is nothing to do, with no button (no "Requeue 0") and no form to post."""
    _, mailbox = console.dead_letters("nothing-left", 1)
    assert console.api.post(f"/v1/spaces/default/mailboxes/{mailbox}/dead-letters/requeue", json={"all": True}).json()["requeued"] == 1
    session = console.session()
    token = console.csrf(session, f"/console/s/default/queues/{mailbox}")
    for action in ("requeue", "delete"):
        where = f"/console/s/default/queues/{mailbox}/dead-letters/{action}"
        counted = session.post(where + "/preview", data={"csrf": token}, headers={"origin": console.url})
        assert counted.status_code == 200, counted.text[-800:]
        assert f"Nothing to {action}" in counted.text and f"no dead letter matching the filter is left to {action}" in counted.text
        assert f"{action.capitalize()} 0" not in counted.text and _form(where) not in counted.text, counted.text[-1500:]


def test_an_action_notice_shows_once_and_never_rides_through_sign_in(console: Console):
    """An action's notice is shown by the page it leads to, once: not again on a reload, not in
    that page's URL, and not after signing in again with that URL as the page to go back to."""
    notice = re.compile(r'<p class="notice" role="status">([^<]*)</p>')
    session = console.session()
    run = console.run("notice-once")["id"]
    path = f"/console/s/default/runs/{run}/cancel"
    done = session.post(path, data={"csrf": console.csrf(session, path)}, headers={"origin": console.url})
    assert done.status_code == 303, done.text[-600:]
    location = done.headers["location"]
    assert location == f"/console/s/default/runs/{run}", location
    assert notice.findall(session.get(location).text) == ["Run cancelled."]
    assert notice.findall(session.get(location).text) == []  # (a reload)

    _, mailbox = console.dead_letters("notice-once", 2)
    token = console.csrf(session, f"/console/s/default/queues/{mailbox}")
    done = session.post(f"/console/s/default/queues/{mailbox}/dead-letters/requeue", data={"csrf": token}, headers={"origin": console.url})
    location = done.headers["location"]
    assert "count" not in location and "done" not in location, location
    stranger = httpx.Client(base_url=console.url, follow_redirects=False, timeout=10)
    sign_in = stranger.get(location).headers["location"]
    assert sign_in == "/console/login?next=" + location, sign_in
    signed = stranger.post("/console/login", data={"key": API_KEY, "next": location}, headers={"origin": console.url})
    assert signed.headers["location"] == location
    assert notice.findall(stranger.get(location).text) == []
    assert notice.findall(session.get(location).text) == ["Dead letters requeued: 2."]
    assert notice.findall(session.get(location).text) == []
