"""The console's tests: a real `runstate serve`, and Debian's Chromium driven by Playwright.

Playwright's sync API runs its own asyncio loop, which stays current while it is open: the
browser is opened per test module and closed at its end, and the browser tests live in files of
their own (`test_browser_*.py`), apart from the trio tests of this folder, so no trio or anyio
test ever runs while it is open.

Chromium comes from Debian (`make test` installs it as root; Playwright's own download cannot be
used here). Without it the browser tests fail under CI=true, and are skipped otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from ..servers import ServerProcess

ADMIN_KEY = "console-admin-key-0123456789"
API_KEY = "console-key-default"
# Where the browser tests save the screenshots docs/console.md shows (set it to docs/console to
# make them again); by default they go to a temporary folder.
SCREENSHOTS = "CONSOLE_SCREENSHOTS"


def chromium_path() -> str:
    """Debian's Chromium, or a failure in CI and a skip elsewhere when it is missing."""
    found = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if os.path.exists(found):
        return found
    message = f"Chromium is not installed at {found}: `make test` installs it as root (apt-get install chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


class Console:
    """A real server for the console's tests, with the admin key, a key for `default` and helpers."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.url = server.base_url
        self.api = server.client()
        self.admin = server.client(ADMIN_KEY)

    def run(self, name: str = "run", parent: str | None = None) -> dict:
        body: dict[str, Any] = {"name": name} if parent is None else {"name": name, "parentId": parent}
        answer = self.api.post("/v1/spaces/default/scopes", json=body)
        assert answer.status_code == 201, answer.text
        return answer.json()

    def claim(self, run: str, key: str, holder: str, lease_s: int = 30, api: httpx.Client | None = None, space: str = "default") -> httpx.Response:
        body = {"scopeId": run, "key": key, "holder": holder, "holderSession": holder + "-session", "leaseSeconds": lease_s}
        return (api or self.api).post(f"/v1/spaces/{space}/claims", json=body)

    def dead_letters(self, name: str, count: int) -> tuple[str, str]:
        """A run and a queue `name` holding `count` dead letters (each sent, received and rejected):
        (run id, mailbox id)."""
        run = self.run(name)["id"]
        mailbox = self.api.put(f"/v1/spaces/default/mailboxes/by-name/{name}", json={}).json()["id"]
        for n in range(count):
            self.api.post(f"/v1/spaces/default/mailboxes/{mailbox}/messages", json={"scopeId": run, "payload": {"n": n}})
            got = self.api.post(f"/v1/spaces/default/mailboxes/{mailbox}/recv",
                                json={"scopeId": run, "holder": "w", "holderSession": "s", "leaseSeconds": 30}).json()
            assert self.api.post(f"/v1/spaces/default/messages/{got['message']['id']}/nack",
                                 json={"token": got["token"], "retry": False, "error": "boom"}).status_code == 200
        return run, mailbox

    def key_for(self, space: str) -> str:
        """A new API key that opens `space` only."""
        answer = self.admin.post("/v1/admin/keys", json={"space": space, "name": f"key of {space}"})
        assert answer.status_code == 201, answer.text
        return answer.json()["key"]

    def session(self, key: str = API_KEY) -> httpx.Client:
        """An HTTP client signed in to the console with `key` (its cookie set)."""
        client = httpx.Client(base_url=self.url, follow_redirects=False, timeout=10)
        answer = client.post("/console/login", data={"key": key}, headers={"origin": self.url})
        assert answer.status_code == 303, answer.text
        return client

    def csrf(self, client: httpx.Client, path: str) -> str:
        """The CSRF token of `client`'s session, from a page it can see."""
        page = client.get(path)
        found = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert found, page.text[:500]
        return found.group(1)


@pytest.fixture(scope="module")
def console(request: pytest.FixtureRequest) -> Iterator[Console]:
    """One server per test module: leases may be as short as 1 s, so a takeover takes a second;
    a module's `SERVER_ARGS` adds flags (`--partitions`)."""
    env = {"RUNSTATE_ADMIN_KEY": ADMIN_KEY, "RUNSTATE_API_KEY": API_KEY}
    extra = getattr(request.module, "SERVER_ARGS", ())
    with ServerProcess("--lease-s-min", "1", *extra, api_key=API_KEY, env=env) as server:
        yield Console(server)


@pytest.fixture(scope="module")
def chromium_browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    with sync_playwright() as playwright:
        opened = playwright.chromium.launch(executable_path=path)
        try:
            yield opened
        finally:
            opened.close()


class Tab:
    """A browser tab on the console, with the console messages and page errors it logged."""

    def __init__(self, page: Any, console: Console) -> None:
        self.page = page
        self.console = console
        self.messages: list[str] = []
        page.on("console", lambda message: self.messages.append(f"{message.type}: {message.text}"))
        page.on("pageerror", lambda error: self.messages.append(f"pageerror: {error}"))

    def sign_in(self, key: str = API_KEY) -> None:
        page = self.page
        page.goto(self.console.url + "/console")
        page.get_by_label("API key").fill(key)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_load_state()

    def open(self, path: str) -> None:
        self.page.goto(self.console.url + path)

    def wait_live(self) -> None:
        """Wait until the page's event stream is open."""
        self.page.locator("#live-status.live").wait_for(timeout=10_000)

    def errors(self) -> list[str]:
        """What the page logged as an error (a CSP violation, a failed load, a script error)."""
        return [m for m in self.messages if m.startswith(("error", "pageerror"))]

    def screenshot(self, name: str, tmp: Path, full_page: bool = True) -> None:
        folder = Path(os.environ.get(SCREENSHOTS) or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(folder / f"{name}.png"), full_page=full_page)


@pytest.fixture
def tab(chromium_browser: Any, console: Console) -> Iterator[Tab]:
    """A fresh browser context (no cookies) and tab, 1280x800."""
    context = chromium_browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        yield Tab(context.new_page(), console)
    finally:
        context.close()
