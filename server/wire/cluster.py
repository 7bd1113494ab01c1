"""The wire shapes of the partition map (`server/cluster_view.py`'s views, `GET /v1/cluster`)."""

from __future__ import annotations

from typing import Any

from ..cluster_view import ClusterMapView, LeaderView, NodeView, PartitionView, StandbyView
from .shape import Shape, component

__all__ = ["CLUSTER_MAP", "COMPONENTS"]

LEADER = Shape(LeaderView)
STANDBY = Shape(StandbyView)
PARTITION = Shape(PartitionView)
NODE = Shape(NodeView)
CLUSTER_MAP = Shape(ClusterMapView)

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {"ClusterMap": component(CLUSTER_MAP)}
