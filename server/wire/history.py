"""The wire shapes of history's answers (`server/views.py`'s, made by `history.py` and
`history_views.py`): where a past point stands (`asOf`, which every history read adds to the
answer it twins), what is kept, and what changed between two points.

The point's time is `at` and its cursor's and the diff's two ends are `from` and `to`, as the
requests name them (`?at=`, `?from=`, `?to=`).
"""

from __future__ import annotations

from typing import Any

from ..views import AsOfView, CountsView, CursorsView, DiffView, HistoryView, KeptPointView, KeptView, PointView
from . import events as _events  # (a diff lists events: their shape comes first)
from .shape import Shape, component

__all__ = ["POINT", "AS_OF", "HISTORY", "DIFF", "COMPONENTS"]

POINT = Shape(PointView, rename={"now_ms": "at"})
AS_OF = Shape(AsOfView)
KEPT_POINT = Shape(KeptPointView, rename={"at_ms": "at"})
KEPT = Shape(KeptView)
HISTORY = Shape(HistoryView, present=("as_of",))
COUNTS = Shape(CountsView, rename={"from_count": "from"})
CURSORS = Shape(CursorsView, rename={"from_cursor": "from"})
DIFF = Shape(DiffView, rename={"from_point": "from", "to_point": "to"})


def _described(schema: dict[str, Any], descriptions: dict[str, str]) -> dict[str, Any]:
    for name, description in descriptions.items():
        schema["properties"][name] = {**schema["properties"][name], "description": description}
    return schema


def _point() -> dict[str, Any]:
    return _described(component(POINT), {
        "lsn": "the last record of the space's partition applied",
        "at": "the time the state is judged at (leases, deadlines)",
        "cursor": "lsn:N: asks for the same records again, judged at recordAt (a point asked by a time later than recordAt is asked again by at)",
        "recordAt": "the time of the newest record up to lsn",
        "snapshotLsn": "the snapshot it was rebuilt from",
        "recordsReplayed": "records applied on top of that snapshot",
    })


def _history() -> dict[str, Any]:
    schema = component(HISTORY)
    schema["properties"]["asOf"] = _point()
    _described(schema["properties"]["kept"], {
        "oldest": "the oldest point kept (lsn 0, at null: the very beginning)",
        "diskBytes": "the partition's snapshots and WAL on disk",
    })
    return schema


def _diff() -> dict[str, Any]:
    schema = component(DIFF)
    schema["properties"]["from"] = schema["properties"]["to"] = _point()
    return _described(schema, {
        "events": "the events made between the points, by type",
        "causes": "by the cause their payload names",
        "records": "the journal's records of the space between the points, by type",
        "states": "kind -> state -> {from, to}: how many stood in each state at each point",
        "truncated": "more events were made than `changes` lists",
        "eventCursors": "the event log's cursors at the two points",
    })


# The OpenAPI components these shapes make, by name: `AsOf` is what a history read adds to the
# answer of the read it twins.
COMPONENTS: dict[str, dict[str, Any]] = {
    "AsOf": {**component(AS_OF), "properties": {"asOf": _point()}},
    "History": _history(),
    "HistoryDiff": _diff(),
}
