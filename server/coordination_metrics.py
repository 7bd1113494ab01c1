"""Gauges of barriers, timers, task groups and the event log, read from the state when scraped.

A source for `Metrics` (`metrics.py`): nothing is counted on the request path. Creations, firings
and the like are counted as operations and events by the usage counters already
(`runstate_operations_total{operation="timers.create"}`, `runstate_expiries`...); these are the
states things are in now.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from ..actors.space import SpaceState

__all__ = ["coordination_families"]


def coordination_families(spaces: "Mapping[str, SpaceState]", now_ms: int) -> Iterator[Metric]:
    barriers = GaugeMetricFamily("runstate_barriers", "Barriers by state (OPEN, RELEASED, CANCELLED), by space.", labels=["space", "state"])
    timers = GaugeMetricFamily("runstate_timers", "Timers by state (ARMED, FIRED, ACKED, CANCELLED, EXPIRED), by space.", labels=["space", "state"])
    groups = GaugeMetricFamily("runstate_task_groups", "Task groups by state (OPEN, SEALED, FINALIZED), by space.", labels=["space", "state"])
    events = GaugeMetricFamily("runstate_events_kept", "Events kept in the space's event log.", labels=["space"])
    for space_id, space in spaces.items():
        part = getattr(space, "coordination", None)
        if part is None:
            continue
        for family, found in (
            (barriers, (part.barriers.state_of(barrier, now_ms) for barrier in part.barriers.all())),
            (timers, (timer.state for timer in part.timers.all())),
            (groups, (group.state for group in part.groups.all())),
        ):
            counts: dict[str, int] = {}
            for name in found:
                counts[name] = counts.get(name, 0) + 1
            for name, count in sorted(counts.items()):
                family.add_metric([space_id, name], count)
        events.add_metric([space_id], len(space.events))
    yield from (barriers, timers, groups, events)
