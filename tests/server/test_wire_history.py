"""The wire shapes of history's answers (`server/wire/history.py`): where a point stands (`asOf`),
what is kept (`GET .../history`) and what changed between two points (`GET .../history/diff`):
the bytes clients and `runstate replay` read, and the OpenAPI components made from the same
declaration.

Each `*_before` is the answer as `Point.view`, `History.kept`, the history route and `Diff.view`
built it before it was a typed view (camelCase dicts, kept here as they were written then): every
generated view must encode to exactly its bytes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.limits import Limits
from runstate.actors.timestamps import format_ms
from runstate.server import wire
from runstate.server.history import Point
from runstate.server.views import AsOfView, CountsView, CursorsView, DiffView, HistoryView, KeptPointView, KeptView
from runstate.server.openapi import openapi

from .test_wire_events import events


def point_before(point: Point) -> dict[str, Any]:
    """`Point.view` as it was."""
    return {
        "lsn": point.lsn,
        "at": format_ms(point.now_ms),
        "cursor": f"lsn:{point.lsn}",
        "partition": point.partition,
        "recordAt": format_ms(point.record_ms) if point.record_ms else None,
        "snapshotLsn": point.snapshot_lsn,
        "recordsReplayed": point.records,
    }


def kept_before(view: KeptView) -> dict[str, Any]:
    """`History.kept` as it was."""
    return {
        "partition": view.partition,
        "oldest": {"lsn": view.oldest.lsn, "at": None if view.oldest.at_ms is None else format_ms(view.oldest.at_ms)},
        "newest": {"lsn": view.newest.lsn, "at": format_ms(view.newest.at_ms or 0)},
        "retentionSeconds": view.retention_seconds,
        "checkpointEveryRecords": view.checkpoint_every_records,
        "diskBytes": view.disk_bytes,
    }


def history_before(view: HistoryView, point: Point | None) -> dict[str, Any]:
    """The history route's answer as it was."""
    answer: dict[str, Any] = {"spaceId": view.space_id, "kept": kept_before(view.kept)}
    if point is not None:
        answer["asOf"] = point_before(point)
    return answer


def diff_before(view: DiffView, first: Point, second: Point) -> dict[str, Any]:
    """`Diff.view` as it was."""
    return {
        "spaceId": view.space_id,
        "from": point_before(first),
        "to": point_before(second),
        "events": view.events,
        "causes": view.causes,
        "records": view.records,
        "states": {kind: {name: {"from": c.from_count, "to": c.to} for name, c in states.items()} for kind, states in view.states.items()},
        "changes": [orjson.loads(wire.dumps(event)) for event in view.changes],  # (each as `wire.encode` wrote it)
        "truncated": view.truncated,
        "eventCursors": {"from": view.event_cursors.from_cursor, "to": view.event_cursors.to},
    }


_text = st.text(max_size=20)
_n = st.integers(0, 2**53)
_instant = st.integers(min_value=1, max_value=253_402_300_799_999)
points = st.builds(Point, st.integers(1, 64), _n, _instant, st.just(0) | _instant, _n, _n, st.floats(0, 100))
_kept = st.builds(
    KeptView, st.integers(1, 64), st.builds(KeptPointView, _n, st.none() | _instant), st.builds(KeptPointView, _n, _instant),
    st.floats(0, 10**9, allow_nan=False), _n, _n,
)
_counts = st.dictionaries(_text, _n, max_size=3)


@st.composite
def diffs(draw: st.DrawFn) -> tuple[DiffView, Point, Point]:
    first, second = draw(points), draw(points)
    states = draw(st.dictionaries(_text, st.dictionaries(_text, st.builds(CountsView, _n, _n), max_size=3), max_size=3))
    changes = tuple(view for _, view in draw(st.lists(events(), max_size=3)))
    view = DiffView(
        draw(_text), first.view(), second.view(), draw(_counts), draw(st.dictionaries(_text, _counts, max_size=3)), draw(_counts),
        states, changes, draw(st.booleans()), CursorsView(str(draw(_n)), str(draw(_n))),
    )
    return view, first, second


def _components() -> dict[str, Any]:
    return openapi(Limits())["components"]["schemas"]


@settings(max_examples=150, deadline=None)
@given(points, _text, _kept, st.booleans())
def test_every_point_and_history_encodes_to_the_bytes_read_before(point: Point, space: str, kept: KeptView, at: bool) -> None:
    assert wire.dumps(point.view()) == orjson.dumps(point_before(point))
    assert wire.dumps(AsOfView(point.view())) == orjson.dumps({"asOf": point_before(point)})
    view = HistoryView(space, kept, point.view() if at else None)
    before = history_before(view, point if at else None)
    assert wire.dumps(view) == orjson.dumps(before)
    assert orjson.dumps(wire.encode(view)) == orjson.dumps(before)
    jsonschema.validate(orjson.loads(wire.dumps(view)), _components()["History"])
    jsonschema.validate({"asOf": point_before(point)}, _components()["AsOf"])


@settings(max_examples=150, deadline=None)
@given(diffs())
def test_every_diff_encodes_to_the_bytes_read_before(diff: tuple[DiffView, Point, Point]) -> None:
    view, first, second = diff
    before = diff_before(view, first, second)
    assert wire.dumps(view) == orjson.dumps(before)
    assert orjson.dumps(wire.encode(view)) == orjson.dumps(before)
    component = _components()["HistoryDiff"]
    body = orjson.loads(wire.dumps(view))
    jsonschema.validate(body, component)
    assert list(body) == list(component["properties"]) == component["required"]


def test_the_components_say_what_the_routes_wrote_by_hand_and_the_routes_refer_to_them() -> None:
    document = openapi(Limits())
    components = document["components"]["schemas"]
    point = components["AsOf"]["properties"]["asOf"]
    assert point["required"] == ["lsn", "at", "cursor", "partition", "recordAt", "snapshotLsn", "recordsReplayed"]
    assert point["properties"]["recordAt"]["type"] == ["string", "null"] and "newest record" in point["properties"]["recordAt"]["description"]
    assert components["History"]["properties"]["asOf"] == point and components["History"]["required"] == ["spaceId", "kept"]
    assert components["HistoryDiff"]["properties"]["from"] == components["HistoryDiff"]["properties"]["to"] == point
    counts = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert components["HistoryDiff"]["properties"]["causes"]["additionalProperties"] == counts
    states = components["HistoryDiff"]["properties"]["states"]["additionalProperties"]["additionalProperties"]
    assert list(states["properties"]) == ["from", "to"]
    change = components["HistoryDiff"]["properties"]["changes"]["items"]
    assert list(change["properties"]) == list(components["Event"]["properties"]) and change["required"] == components["Event"]["required"]
    for path, name in (("/v1/spaces/{space}/history", "History"), ("/v1/spaces/{space}/history/diff", "HistoryDiff")):
        answer = document["paths"][path]["get"]["responses"]["200"]
        assert answer["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{name}"}
    # A history read twins a read: that read's answer, and `asOf`.
    twin = document["paths"]["/v1/spaces/{space}/history/scopes"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert twin == {"allOf": [{"$ref": "#/components/schemas/Scopes"}, {"$ref": "#/components/schemas/AsOf"}]}
