"""The router, the OpenAPI document and the API reference in docs/ say the same thing, because all
three come from the route declarations: every route is declared with a summary and answers, the
document has exactly the router's operations, and `docs/api.md` is what the generator prints."""

from __future__ import annotations

import pathlib

from runstate.actors.fields import body_fields
from runstate.actors.transitions import TRANSITIONS
from runstate.server.apidoc import render
from runstate.server.openapi import openapi
from runstate.server.routes import ROUTER

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_every_route_is_declared_with_what_its_documents_need():
    for route in ROUTER.routes:
        assert route.doc is not None, f"{route.method} {route.path} is not declared"
        assert route.doc.summary and route.doc.replies, f"{route.method} {route.path}"


def test_the_document_has_exactly_the_routers_operations():
    document = openapi()
    described = {(method.upper(), path) for path, item in document["paths"].items() for method in item}
    assert described == {(route.method, route.path) for route in ROUTER.routes}


def test_every_command_a_route_runs_has_a_transition_and_its_body_is_described():
    document = openapi()
    for route in ROUTER.routes:
        command = route.doc.command
        if command is None:
            continue
        assert command in TRANSITIONS, f"{command.__name__} has no transition"
        wires = {spec.wire for spec in body_fields(command)}
        if wires:
            body = document["paths"][route.path][route.method.lower()]["requestBody"]
            assert set(body["content"]["application/json"]["schema"]["properties"]) == wires


def test_the_api_reference_in_docs_is_the_generated_one():
    """Regenerate with `python -m runstate.server.apidoc > docs/api.md` after changing a route."""
    assert DOCS.read_text() == render(), "docs/api.md is stale: regenerate it"
    for route in ROUTER.routes:
        assert f"| {route.method} | `{route.path}` |" in DOCS.read_text()
