"""A query parameter a route of the API does not take is refused with 400 naming it, as a body
field no command reads is: `GET /events?scopeId=...` answered an unfiltered page, and
`?olderThan=` on the dead letters listed them all, without a word. Known parameters work as
before, on every kind of route: a command's, a handler's, a history twin's.
"""

from __future__ import annotations

import pytest

from runstate.server.api import query_names
from runstate.server.routes import ROUTER

from .test_hostile_input import assert_envelope, new_run

pytestmark = pytest.mark.trio


def refusal(status: int, body: dict) -> str:
    assert_envelope(status, body, "VALIDATION_FAILED", 400)
    message: str = body["error"]["message"]
    return message


async def test_a_command_route_refuses_a_query_parameter_and_does_nothing(api, autojump_clock):
    """`POST /scopes` takes no query parameter: one is refused, and no run is made."""
    status, _, body = await api.post("/scopes?name=x", {"name": "y"})
    assert refusal(status, body) == "unknown query parameter 'name': this request takes no query parameters"
    status, _, listed = await api.get("/scopes")
    assert status == 200 and listed["scopes"] == [], listed


async def test_a_handler_route_refuses_an_unknown_parameter_with_the_nearest_it_takes(api, autojump_clock):
    status, _, made = await api.post("/mailboxes", {"name": "jobs"})
    assert status == 201, made
    status, _, body = await api.get(f"/mailboxes/{made['id']}/dead-letters?olderThan=60")
    assert refusal(status, body) == (
        "unknown query parameter 'olderThan' (did you mean 'olderThanSeconds'?): "
        "this request takes cursor, limit, newerThanSeconds, olderThanSeconds, reason"
    )
    status, _, body = await api.get("/events?scopeId=sc_1")
    assert refusal(status, body) == "unknown query parameter 'scopeId': this request takes cursor, latest, limit"
    status, _, body = await api.get("/events?types=claim.acquired")
    assert "unknown query parameter 'types'" in refusal(status, body)


async def test_a_command_read_refuses_a_typo_of_its_query_fields(api, autojump_clock):
    """`GET /once` parses its command from the query: a misspelt wait is refused, not ignored."""
    scope_id = await new_run(api)
    status, _, body = await api.get(f"/once?scopeId={scope_id}&key=k&waitMS=1000")
    assert refusal(status, body) == (
        "unknown query parameter 'waitMS' (did you mean 'waitMs'?): this request takes key, scopeId, waitMs"
    )


async def test_a_history_twin_refuses_what_neither_it_nor_its_read_takes(api, autojump_clock):
    status, _, body = await api.get("/history/events?at=lsn:1&scopeId=sc_1")
    assert refusal(status, body) == "unknown query parameter 'scopeId': this request takes at, cursor, latest, limit"
    status, _, body = await api.get("/history/scopes?at=lsn:1&limt=5")
    assert refusal(status, body) == "unknown query parameter 'limt' (did you mean 'limit'?): this request takes at, cursor, limit"


async def test_known_parameters_still_work(api, autojump_clock):
    for name in ("a", "b", "c"):
        status, _, _ = await api.post("/scopes", {"name": name})
        assert status == 201
    status, _, listed = await api.get("/scopes?limit=2")
    assert status == 200 and len(listed["scopes"]) == 2 and listed["truncated"] is True, listed
    status, _, page = await api.get("/events?latest=1")
    assert status == 200 and len(page["events"]) == 1, page
    status, _, page = await api.get(f"/watch?cursor=0&types=scope.created&limit=5&waitSeconds=0&scopeId={listed['scopes'][0]['id']}")
    assert status == 200 and [event["type"] for event in page["events"]] == ["scope.created"], page


async def test_an_empty_query_string_takes_nothing(api, autojump_clock):
    for tail in ("/scopes?", "/scopes?&", "/scopes?&&"):
        status, _, listed = await api.get(tail)
        assert status == 200, (tail, listed)
    status, _, body = await api.post("/scopes?", {"name": "x"})
    assert status == 201, body
    status, _, body = await api.get("/scopes?=5")
    assert refusal(status, body) == "unknown query parameter '': this request takes cursor, limit"
    status, _, body = await api.get("/scopes?limit")  # a name without a value is still the name
    assert "limit must be an integer from 1 to 1000, got ''" in refusal(status, body)


async def test_a_repeated_name_counts_once_with_its_last_value(api, autojump_clock):
    for name in ("a", "b", "c"):
        await api.post("/scopes", {"name": name})
    status, _, listed = await api.get("/scopes?limit=1&limit=3")
    assert status == 200 and len(listed["scopes"]) == 3, listed
    status, _, body = await api.get("/scopes?limit=1&lmit=2&lmit=3")
    assert refusal(status, body).startswith("unknown query parameter 'lmit' (did you mean 'limit'?)")


async def test_the_key_is_checked_before_the_query(api, autojump_clock):
    """An unknown key is 401 whatever its query: nothing about the route is said to it."""
    status, _, body = await api.get("/scopes?bogus=1", key="not-a-key")
    assert_envelope(status, body, "UNAUTHENTICATED", 401)


async def test_public_api_routes_are_checked_and_routes_outside_the_api_are_not(api, autojump_clock):
    status, _, body = await api.request("GET", "/v1/openapi.json?format=yaml", key=None)
    assert refusal(status, body) == "unknown query parameter 'format': this request takes no query parameters"
    status, _, document = await api.request("GET", "/v1/openapi.json", key=None)
    assert status == 200 and document["openapi"] == "3.1.0"
    status, _, _ = await api.request("GET", "/healthz?anything=1", key=None)
    assert status == 200


async def test_every_api_route_is_checked_with_what_it_declares():
    """The router's check and the OpenAPI document list the same names for every route."""
    from runstate.server.openapi import openapi

    document = openapi()
    for route in ROUTER.routes:
        if not route.path.startswith("/v1/"):
            assert route.query_names is None, route.path
            continue
        assert route.query_names == query_names(route.doc), route.path
        parameters = document["paths"][route.path][route.method.lower()]["parameters"]
        listed = set()
        for parameter in parameters:
            if "$ref" in parameter:
                parameter = document["components"]["parameters"][parameter["$ref"].rsplit("/", 1)[1]]
            if parameter["in"] == "query":
                listed.add(parameter["name"])
        assert listed == route.query_names, route.path
