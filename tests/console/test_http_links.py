"""The console's links over plain HTTP: each names what it shows, whatever the text it carries."""

from __future__ import annotations

import html
import re

import pytest

from .conftest import Console

pytestmark = pytest.mark.e2e


def test_a_worker_whose_name_holds_a_slash_is_linked_to_its_own_page(console: Console):
    """A holder is free text ("node-1/worker-3"): its link keeps the name one path segment."""
    run = console.run("slashed-holder")["id"]
    assert console.claim(run, "slashed", "node-1/worker-3").status_code == 200
    session = console.session()
    claims = session.get("/console/s/default/claims", params={"run": run})
    links = re.findall(r'href="(/console/s/default/workers/[^"]+)">node-1/worker-3<', claims.text)
    assert links, claims.text[-800:]
    page = session.get(html.unescape(links[0]))
    assert page.status_code == 200, page.text[-600:]
    assert "<h1>Worker node-1/worker-3</h1>" in page.text and "slashed" in page.text
