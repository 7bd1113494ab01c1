"""The console over plain HTTP: where a browser lands, the headers every answer carries, and how
refusals look to a page and to its live regions."""

from __future__ import annotations

import re

import httpx
import pytest

from .conftest import Console

pytestmark = pytest.mark.e2e


def test_a_browser_at_the_root_is_sent_to_the_console_and_an_api_client_is_not(console: Console):
    html = httpx.get(console.url + "/", headers={"accept": "text/html,application/xhtml+xml"}, follow_redirects=False)
    assert html.status_code == 303 and html.headers["location"] == "/console"
    api = httpx.get(console.url + "/", headers={"accept": "application/json"})
    assert api.status_code == 404 and api.json()["error"]["code"] == "NOT_FOUND"
    assert httpx.get(console.url + "/consoles").json()["error"]["code"] == "NOT_FOUND"  # not the console's


def test_every_answer_carries_the_security_headers_and_pages_are_not_cached(console: Console):
    session = console.session()
    for answer in (session.get("/console/s/default/runs"), session.get("/console/s/default/tasks?state=NOPE"),
                   session.get("/console/nowhere"), httpx.get(console.url + "/console/login")):
        headers = answer.headers
        assert headers["content-security-policy"].startswith("default-src 'none'")
        assert (headers["x-frame-options"], headers["x-content-type-options"], headers["cache-control"]) == ("DENY", "nosniff", "no-store")
    assert session.get("/console/nowhere").status_code == 404
    static = httpx.get(console.url + "/console/static/htmx.min.js")
    assert static.status_code == 200 and "immutable" in static.headers["cache-control"]
    assert static.headers["content-type"].startswith("text/javascript")
    assert httpx.get(console.url + "/console/static/..%2Fsite.py").status_code == 404


def test_a_head_of_a_page_is_its_get_without_the_body(console: Console):
    """HEAD is served wherever GET is: the page's status and headers, no body."""
    session = console.session()
    got, head = session.get("/console/s/default/runs"), session.head("/console/s/default/runs")
    assert head.status_code == got.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == got.headers["content-length"] == str(len(got.content))
    assert head.headers["content-type"] == got.headers["content-type"]
    nowhere = session.head("/console/nowhere")
    assert nowhere.status_code == 404 and nowhere.content == b""
    assert httpx.head(console.url + "/console/login").status_code == 200


def test_a_live_region_of_a_signed_out_tab_is_sent_to_sign_in_and_a_refusal_is_its_message(console: Console):
    """htmx reloads get the message alone with their status (the page shows it as an error), and
    a tab whose session ended is sent to sign in (HX-Redirect)."""
    htmx = {"hx-request": "true", "hx-target": "region"}
    signed_out = httpx.get(console.url + "/console/s/default/claims", headers=htmx)
    assert signed_out.status_code == 401 and signed_out.headers["hx-redirect"].startswith("/console/login")
    session = console.session()
    region = session.get("/console/s/default/claims", headers=htmx)
    assert region.status_code == 200 and "<html" not in region.text and "<table>" in region.text
    refused = session.get("/console/s/default/tasks?state=NOPE", headers=htmx)
    assert refused.status_code == 400 and refused.text.startswith("VALIDATION_FAILED: state must be one of")


def test_a_form_too_large_is_refused_and_the_login_form_checks_its_origin(console: Console):
    big = httpx.post(console.url + "/console/login", data={"key": "x" * (2 * 1024 * 1024)}, headers={"origin": console.url})
    assert big.status_code == 413
    elsewhere = httpx.post(console.url + "/console/login", data={"key": "console-key-default"}, headers={"origin": "http://evil.example"})
    assert elsewhere.status_code == 403 and "set-cookie" not in elsewhere.headers


def test_a_search_text_too_long_is_refused_as_such_not_a_500(console: Console):
    """The header's search box shows the text searched for: on the refusal's own page too, where
    it must not fail again."""
    session = console.session()
    too_long = session.get("/console/s/default/search", params={"q": "a" * 513})
    assert too_long.status_code == 400, too_long.text[:300]
    assert "q is longer than 512 characters" in too_long.text and "<html" in too_long.text
    assert session.get("/console/s/default/search", params={"q": "a" * 512}).status_code == 200


def test_sign_in_goes_on_to_a_console_path_only_and_never_answers_500_for_a_strange_one(console: Console):
    """`next` (where to go after signing in) is a path of this console; another site, or a path with
    control characters (which a Location header cannot carry), goes to the console's start."""
    for following, location in [("/console/s/default/claims?key=a", "/console/s/default/claims?key=a"),
                                ("https://evil.example/console/", "/console"), ("//evil.example/console/", "/console"),
                                ("/console/x\r\nX-Evil: 1", "/console"), ("/console/\x00", "/console"), ("/console/x\ty", "/console")]:
        answer = httpx.post(console.url + "/console/login", data={"key": "console-key-default", "next": following},
                            headers={"origin": console.url})
        assert (answer.status_code, answer.headers.get("location")) == (303, location), (following, answer.text[:300])
        assert "x-evil" not in answer.headers


def test_as_many_dead_letters_as_one_page_lists_can_be_picked_for_one_action(console: Console):
    """A queue's page lists up to 500 dead letters, each with a box to pick it, and an action takes
    up to 500 picked: 210 picked (more than a form of 200 fields held) are counted, then requeued."""
    api = console.api
    _, mailbox = console.dead_letters("many-dead", 210)
    session = console.session()
    page = session.get(f"/console/s/default/queues/{mailbox}", params={"limit": 500})
    picks = re.findall(r'name="pick" value="([^"]+)"', page.text)
    assert len(picks) == 210
    csrf = console.csrf(session, f"/console/s/default/queues/{mailbox}")
    where = f"/console/s/default/queues/{mailbox}/dead-letters/requeue"
    counted = session.post(where + "/preview", data={"csrf": csrf, "pick": picks}, headers={"origin": console.url})
    assert counted.status_code == 200, counted.text[-600:]
    assert "210 dead letter(s) 210 picked go back" in counted.text
    done = session.post(where, data={"csrf": csrf, "messageIds": picks}, headers={"origin": console.url})
    assert done.status_code == 303, done.text[-600:]
    left = api.get(f"/v1/spaces/default/mailboxes/{mailbox}").json()["counts"]
    assert (left["deadLetters"], left["queued"]) == (0, 210)


def test_a_claims_events_show_what_its_release_observed_escaped(console: Console):
    """A release's observation is in the claim's events (Events, filtered by its key), as JSON and
    escaped; one too large for the event log is shown by its size."""
    run = console.run("observed")["id"]
    for key, observation in (("observed-small", {"saw": "<script>alert(1)</script>"}), ("observed-large", "y" * 5000)):
        held = console.claim(run, key, "w")
        assert held.status_code == 200, held.text
        released = console.api.post(f"/v1/spaces/default/claims/{key}/release", json={"token": held.json()["token"], "observation": observation})
        assert released.status_code in (200, 204), released.text
    session = console.session()
    small = session.get("/console/s/default/events?key=observed-small").text
    assert "<dt>observed</dt>" in small and "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in small, small[-3000:]
    assert "<script>alert(1)" not in small
    large = session.get("/console/s/default/events?key=observed-large").text
    assert "5002 bytes of JSON, too large to keep in the event log" in large and "yyyy" not in large, large[-3000:]


def test_a_finished_tasks_page_shows_its_input_escaped_beside_its_result(console: Console):
    """A task that succeeded keeps its input beside its result, and its page shows both, escaped;
    a cancelled one's page says its input is no longer kept."""
    api = console.api
    run = console.run("input-kept")["id"]
    mailbox = api.put("/v1/spaces/default/mailboxes/by-name/input-kept", json={}).json()["id"]
    asked = {"question": "<img src=x onerror=alert(1)>", "n": 7}
    task = api.post("/v1/spaces/default/tasks", json={"scopeId": run, "mailboxId": mailbox, "taskKey": "asked", "input": asked}).json()["id"]
    got = api.post(f"/v1/spaces/default/mailboxes/{mailbox}/recv",
                   json={"scopeId": run, "holder": "w", "holderSession": "s", "leaseSeconds": 30}).json()
    done = api.post(f"/v1/spaces/default/messages/{got['message']['id']}/complete", json={"token": got["token"], "result": {"answer": 42}})
    assert done.status_code == 200, done.text
    session = console.session()
    page = session.get(f"/console/s/default/tasks/{task}").text
    assert "<summary>Input (JSON)</summary>" in page and "&lt;img src=x onerror=alert(1)&gt;" in page, page[-3000:]
    assert "<img src=x" not in page and "<summary>Result (JSON)</summary>" in page and "42" in page

    cancelled = api.post("/v1/spaces/default/tasks", json={"scopeId": run, "mailboxId": mailbox, "taskKey": "dropped", "input": asked}).json()["id"]
    assert api.post(f"/v1/spaces/default/tasks/{cancelled}/cancel", json={}).status_code == 200
    page = session.get(f"/console/s/default/tasks/{cancelled}").text
    assert "<summary>Input (JSON)</summary>" not in page and "Its input is no longer kept" in page, page[-3000:]
