"""Signing in to the console in a real browser, what a session's cookie may do, and who sees what."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import expect

from .conftest import ADMIN_KEY, API_KEY, Console, Tab

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

NAV = ("Runs", "Claims", "Tasks", "Queues", "Capacity", "Coordination", "Events")


def test_a_wrong_key_gets_a_clear_message_and_no_session(tab: Tab, console: Console):
    """A wrong key is answered on the sign-in form with a message that says so (401), no trace."""
    page = tab.page
    page.goto(console.url + "/console")
    expect(page).to_have_url(console.url + "/console/login?next=/console")
    page.get_by_label("API key").fill("not-a-key-of-this-server")
    with page.expect_response(lambda r: r.url.endswith("/console/login")) as answer:
        page.get_by_role("button", name="Sign in").click()
    assert answer.value.status == 401
    expect(page.get_by_role("alert")).to_contain_text("That key is not valid")
    assert "Traceback" not in page.content()
    assert page.context.cookies() == []


def test_sign_in_with_an_api_key_opens_its_space_with_every_page_in_the_navigation(tab: Tab, console: Console, tmp_path):
    """The key's space opens on Runs; the navigation names every page; the cookie is HttpOnly,
    SameSite=Strict and scoped to /console; no page breaks the Content-Security-Policy."""
    console.run("signed-in")
    tab.sign_in()
    page = tab.page
    expect(page).to_have_url(console.url + "/console/s/default/runs")
    tab.screenshot("sign-in-runs", tmp_path)
    nav = page.get_by_role("navigation", name="Pages")
    for name in NAV:
        expect(nav.get_by_role("link", name=name, exact=True)).to_be_visible()
    (cookie,) = page.context.cookies()
    assert (cookie["name"], cookie["path"], cookie["httpOnly"], cookie["sameSite"]) == ("runstate_console", "/console", True, "Strict")
    for name in NAV:
        nav.get_by_role("link", name=name, exact=True).click()
        expect(page.get_by_role("heading", level=1)).to_have_text(name)
    csp = httpx.get(console.url + "/console/login").headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert tab.errors() == []


def test_the_api_never_takes_the_console_cookie(console: Console):
    """A request to /v1 with the console's session cookie and no bearer key is 401."""
    session = console.session()
    cookie = session.cookies.get("runstate_console")
    answer = httpx.get(console.url + "/v1/spaces/default/scopes", headers={"cookie": f"runstate_console={cookie}"})
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "UNAUTHENTICATED"


def test_signing_out_ends_the_session(tab: Tab, console: Console):
    """After Sign out the old cookie opens nothing: a page sends the visitor to sign in again."""
    tab.sign_in()
    page = tab.page
    (cookie,) = page.context.cookies()
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(console.url + "/console/login")
    stale = httpx.get(console.url + "/console/s/default/runs", headers={"cookie": f"runstate_console={cookie['value']}"})
    assert stale.status_code == 303 and stale.headers["location"].startswith("/console/login")


def test_a_space_key_never_sees_another_space(tab: Tab, console: Console):
    """A key of space `other` sees `other` only: `default`'s pages, stream and ids are 404."""
    secret = console.key_for("other")
    run = console.run("secret-run")
    console.claim(run["id"], "hidden-key", "w1")
    tab.sign_in(secret)
    page = tab.page
    expect(page).to_have_url(console.url + "/console/s/other/runs")
    expect(page.get_by_role("main")).not_to_contain_text("secret-run")
    answer = page.goto(console.url + "/console/s/default/claims")
    assert answer is not None and answer.status == 404
    expect(page.get_by_role("alert")).to_contain_text("not found")
    assert "hidden-key" not in page.content()
    session = console.session(secret)
    assert session.get("/console/s/default/stream").status_code == 404
    assert session.get(f"/console/s/default/runs/{run['id']}").status_code == 404
    assert session.get(f"/console/s/other/runs/{run['id']}").status_code == 404


def test_the_admin_key_switches_spaces_and_sees_keys_and_usage(tab: Tab, console: Console, tmp_path):
    """The admin key lists every space with its keys and operations, switches between them, and
    lists the keys (never their secrets)."""
    console.key_for("research")
    tab.sign_in(ADMIN_KEY)
    page = tab.page
    expect(page).to_have_url(console.url + "/console/spaces")
    for space in ("default", "research"):
        expect(page.locator(f"tr[data-space-row='{space}']")).to_be_visible()
    tab.screenshot("admin-spaces", tmp_path)
    page.get_by_label("Space").select_option(label="research")
    expect(page).to_have_url(console.url + "/console/s/research/runs")
    page.get_by_role("link", name="Keys").click()
    expect(page.get_by_role("main")).to_contain_text("key of research")
    assert API_KEY not in page.content()
    page.goto(console.url + "/console/s/default/space")
    expect(page.get_by_role("main")).to_contain_text("operations counted")
    assert tab.errors() == []
