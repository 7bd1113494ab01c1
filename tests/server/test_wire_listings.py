"""The wire shapes of the listings the routes answered as dicts around the kernel's views (every
mailbox, pool, allowance, work limit or budget of a space; a receive of many's deliveries): the
bytes clients read, and the OpenAPI components made from the same declaration.

`listing_before` is the answer as the route built it before it was a typed view (a camelCase
dict around the entries' views, written by `wire.dumps` as then): every generated listing must
encode to exactly its bytes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.budgets import BudgetView
from runstate.actors.capacity_reads import AllowancesView, BudgetsView, PoolsView, WorkLimitsView
from runstate.actors.deliveries import DeliveriesView
from runstate.actors.limits import Limits
from runstate.actors.mailboxes import MailboxesView
from runstate.actors.work_limits import WorkLimitView
from runstate.server import wire
from runstate.server.openapi import openapi

from .test_wire_capacity import allowances, budgets, pools
from .test_wire_mailboxes import mailboxes
from .test_wire_messages import deliveries

_instant = st.integers(min_value=0, max_value=253_402_300_799_999)
_text = st.text(max_size=30)
work_limits = st.builds(WorkLimitView, _text, _text, _text, st.integers(1, 10**9), st.integers(0, 2**53), _instant)

# (the listing's view, its entries' strategy, the entries' name on the wire, its component, the
# entries' component, the route answering it)
KINDS: list[tuple[type, Any, str, str, str, str]] = [
    (MailboxesView, mailboxes, "mailboxes", "Mailboxes", "Mailbox", "GET /v1/spaces/{space}/mailboxes"),
    (DeliveriesView, deliveries(), "deliveries", "Deliveries", "Delivery", "POST /v1/spaces/{space}/mailboxes/{mailbox_id}/recv-many"),
    (PoolsView, pools(), "permits", "Pools", "Pool", "GET /v1/spaces/{space}/permits"),
    (AllowancesView, allowances(), "allowances", "Allowances", "Allowance", "GET /v1/spaces/{space}/allowances"),
    (WorkLimitsView, work_limits, "workLimits", "WorkLimits", "WorkLimit", "GET /v1/spaces/{space}/work-limits"),
    (BudgetsView, budgets().filter(lambda view: type(view) is BudgetView), "budgets", "Budgets", "Budget", "GET /v1/spaces/{space}/budgets"),
]


def listing_before(what: str, entries: tuple[Any, ...]) -> bytes:
    """The routes' `{what: [...]}` as they were."""
    return wire.dumps({what: list(entries)})


@st.composite
def listings(draw: st.DrawFn) -> tuple[Any, str, str]:
    view, entries, what, name, _, _ = draw(st.sampled_from(KINDS))
    return view(tuple(draw(st.lists(entries, max_size=4)))), what, name


@settings(max_examples=150, deadline=None)
@given(listings())
def test_every_listing_encodes_to_the_bytes_read_before(listing: tuple[Any, str, str]) -> None:
    """Alone, in a batch's results, and as the idempotency table keeps it: the same bytes as before."""
    view, what, _ = listing
    expected = orjson.loads(listing_before(what, view[0]))
    assert wire.dumps(view) == listing_before(what, view[0])
    assert wire.dumps({"results": [{"status": 200, "body": view}]}) == orjson.dumps({"results": [{"status": 200, "body": expected}]})
    assert orjson.dumps(wire.encode(view)) == orjson.dumps(expected)


@settings(max_examples=100, deadline=None)
@given(listings())
def test_each_encoded_listing_validates_against_its_component(listing: tuple[Any, str, str]) -> None:
    view, what, name = listing
    component = openapi(Limits())["components"]["schemas"][name]
    body = orjson.loads(wire.dumps(view))
    jsonschema.validate(body, component)
    assert list(body) == list(component["properties"]) == component["required"] == [what]


def test_the_listing_components_hold_their_entries_shape_and_the_routes_refer_to_them() -> None:
    document = openapi(Limits())
    components = document["components"]["schemas"]
    for _, _, what, name, entry, route in KINDS:
        items = components[name]["properties"][what]
        assert items["type"] == "array"
        # Each entry as its own shape writes it: the entry's component, or (a budget, whose
        # component also covers the read by id's reservations) exactly its listed fields.
        assert set(items["items"]["properties"]) <= set(components[entry]["properties"])
        assert items["items"]["required"] == [f for f in components[entry]["properties"] if f in items["items"]["required"]]
        method, path = route.split(" ")
        answer = document["paths"][path][method.lower()]["responses"]["200"]
        assert answer["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{name}"}
    assert components["Pools"]["properties"]["permits"]["items"] == components["Pool"]
    assert components["Mailboxes"]["properties"]["mailboxes"]["items"] == components["Mailbox"]
    assert "reservations" not in components["Budgets"]["properties"]["budgets"]["items"]["properties"]
