"""The console over plain HTTP, with calls parked in the server: a page shows what waits."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from .conftest import Console

pytestmark = pytest.mark.e2e


def _parked(console: Console, on: str) -> bool:
    waits = console.api.get("/v1/spaces/default/ops/waits").json()
    return any(wait["on"] == on for wait in waits["waits"])


def test_a_run_page_shows_an_acquire_parked_on_its_held_claim(console: Console):
    """An acquire waiting (waitMs) for a held claim is parked on the claim: the run's page lists it
    once, as an acquire waiting with its "why", and does not fail on it."""
    run = console.run("parked-acquire")["id"]
    assert console.claim(run, "shared/key", "first").status_code == 200
    waiting = threading.Thread(target=lambda: console.server.client().post("/v1/spaces/default/claims", json={
        "scopeId": run, "key": "shared/key", "holder": "second", "holderSession": "second-session", "leaseSeconds": 30,
        "waitMs": 8000}, timeout=20), daemon=True)
    waiting.start()
    deadline = time.monotonic() + 5
    while not _parked(console, "claim") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _parked(console, "claim")
    page = console.session().get(f"/console/s/default/runs/{run}")
    assert page.status_code == 200, page.text[-800:]
    assert page.text.count("acquire(s) waiting") == 1 and "parked call(s)" not in page.text
    assert f"/claims/why?run={run}&amp;key=shared/key" in page.text
    console.api.post(f"/v1/spaces/default/scopes/{run}/cancel")
    waiting.join(10)
