"""The wire shape of the partition map (`server/wire/cluster.py`, `GET /v1/cluster`): the bytes
clients and `runstate cluster` read, and the OpenAPI component made from the same declaration.

`map_before` is the answer as `cluster_view.status` and the single node's route built it before it
was a typed view (camelCase dicts, kept here as they were written then): every generated map must
encode to exactly its bytes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.limits import Limits
from runstate.server import wire
from runstate.server.cluster_view import ClusterMapView, LeaderView, NodeView, PartitionView, StandbyView
from runstate.server.openapi import openapi


def map_before(view: ClusterMapView) -> dict[str, Any]:
    partitions = [
        {
            "partition": p.partition,
            "leader": None if p.leader is None else {"node": p.leader.node, "url": p.leader.url, "epoch": p.leader.epoch},
            "leaderLsn": p.leader_lsn,
            "appliedLsn": p.applied_lsn,
            "snapshotLsn": p.snapshot_lsn,
            "failovers": p.failovers,
            "handoffs": p.handoffs,
            "takeovers": p.takeovers,
            "logBytes": p.log_bytes,
            "standbys": [{"node": s.node, "appliedLsn": s.applied_lsn, "lagRecords": s.lag_records} for s in p.standbys],
        }
        for p in view.map
    ]
    nodes = [
        {"node": n.node, "url": n.url, "leads": list(n.leads), "live": n.live, "applied": n.applied, "snapshots": n.snapshots}
        for n in view.nodes
    ]
    return {
        "cluster": view.cluster, "node": view.node, "partitions": view.partitions, "layout": "crc32",
        "map": partitions, "nodes": nodes,
    }


_text = st.text(max_size=20)
_lsn = st.integers(0, 2**53)
_maybe_lsn = st.none() | _lsn
_by_partition = st.dictionaries(st.integers(1, 64).map(str), _lsn, max_size=4)
_leaders = st.builds(LeaderView, _text, st.none() | _text, _lsn)
_standbys = st.builds(StandbyView, _text, _maybe_lsn, _maybe_lsn)
_partitions = st.builds(
    PartitionView, st.integers(1, 64), st.none() | _leaders, _maybe_lsn, _lsn, _lsn, _lsn, _lsn, _lsn, _lsn,
    st.lists(_standbys, max_size=3).map(tuple),
)
_nodes = st.builds(NodeView, _text, st.none() | _text, st.lists(st.integers(1, 64), max_size=4).map(tuple), st.booleans(), _by_partition, _by_partition)
maps = st.builds(
    ClusterMapView, st.none() | _text, _text, st.integers(1, 64), st.just("crc32"),
    st.lists(_partitions, max_size=4).map(tuple), st.lists(_nodes, max_size=3).map(tuple),
)


@settings(max_examples=150, deadline=None)
@given(maps)
def test_every_map_encodes_to_the_bytes_read_before(view: ClusterMapView) -> None:
    before = map_before(view)
    assert wire.dumps(view) == orjson.dumps(before)
    assert orjson.dumps(wire.encode(view)) == orjson.dumps(before)


@settings(max_examples=100, deadline=None)
@given(maps)
def test_each_encoded_map_validates_against_its_component(view: ClusterMapView) -> None:
    component = openapi(Limits())["components"]["schemas"]["ClusterMap"]
    body = orjson.loads(wire.dumps(view))
    jsonschema.validate(body, component)
    assert list(body) == list(component["properties"]) == component["required"]


def test_the_component_lists_the_map_and_the_nodes_fields_and_the_route_refers_to_it() -> None:
    document = openapi(Limits())
    component = document["components"]["schemas"]["ClusterMap"]
    partition = component["properties"]["map"]["items"]
    assert partition["required"] == [
        "partition", "leader", "leaderLsn", "appliedLsn", "snapshotLsn", "failovers", "handoffs", "takeovers", "logBytes", "standbys",
    ]
    assert partition["properties"]["standbys"]["items"]["required"] == ["node", "appliedLsn", "lagRecords"]
    node = component["properties"]["nodes"]["items"]
    assert node["properties"]["applied"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert component["properties"]["layout"] == {"type": "string", "enum": ["crc32"]}
    answer = document["paths"]["/v1/cluster"]["get"]["responses"]["200"]
    assert answer["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ClusterMap"}
