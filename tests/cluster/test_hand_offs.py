"""Which partitions a node leading more than its share gives up in one round (`cluster.hand_offs`).

A cluster started together has its first node take every partition; the others then get theirs
in hand-offs. Every partition that goes to the node it prefers goes in the same round (so the
cluster spreads at once, whatever its partition count), the others one a round, and never to a
node that is new or behind on the partition's log.
"""

from __future__ import annotations

from typing import Any

from runstate.server.cluster import HANDOFF_LAG_MAX, PUBLISH_EVERY_S, hand_offs, preference_order

NOW_MS = 1_000_000
LONG_AGO_MS = NOW_MS - int(4 * PUBLISH_EVERY_S * 1000)


def _said(leads: list[int], applied: dict[int, int], since_ms: int = LONG_AGO_MS) -> dict[str, Any]:
    """What a node says of itself in its key (`Cluster._node_value`), the parts hand-offs read."""
    return {"leads": leads, "applied": {str(n): lsn for n, lsn in applied.items()}, "at_ms": NOW_MS, "since_ms": since_ms}


def _started_together(partitions: int) -> tuple[dict[int, int], dict[str, Any]]:
    """n0 leads every partition (each at LSN 100); n1 and n2 follow them all, caught up."""
    led = {n: 100 for n in range(partitions)}
    nodes = {"n0": _said(sorted(led), led), "n1": _said([], led), "n2": _said([], led)}
    return led, nodes


def _prefers(partitions: int, live: set[str]) -> dict[int, str]:
    return {n: preference_order(live, n)[0] for n in range(partitions)}


def test_every_partition_another_node_is_preferred_for_goes_in_one_round() -> None:
    led, nodes = _started_together(33)
    prefers = _prefers(33, {"n0", "n1", "n2"})
    elsewhere = sorted(n for n, node in prefers.items() if node != "n0")
    given = hand_offs("n0", led, nodes, 33, NOW_MS)
    excess = 33 - 11
    assert len(elsewhere) > 1
    assert given == [(n, prefers[n]) for n in elsewhere][:excess]


def test_no_more_than_past_its_share_goes() -> None:
    # 3 partitions on 3 nodes: a share of 1. Whichever the others prefer, n0 keeps one at least.
    for partitions in range(2, 12):
        led, nodes = _started_together(partitions)
        share = -(-partitions // 3)
        given = hand_offs("n0", led, nodes, partitions, NOW_MS)
        assert 0 < len(given) <= partitions - share, (partitions, given)
        assert len({n for n, _ in given}) == len(given)


def test_a_node_within_its_share_gives_nothing() -> None:
    led, nodes = _started_together(9)
    mine = dict(list(led.items())[:3])
    nodes["n0"]["leads"] = sorted(mine)
    assert hand_offs("n0", mine, nodes, 9, NOW_MS) == []


def test_a_node_up_for_less_than_two_rounds_or_behind_on_the_log_gets_none() -> None:
    led, nodes = _started_together(33)
    prefers = _prefers(33, {"n0", "n1", "n2"})
    nodes["n1"]["since_ms"] = NOW_MS - int(PUBLISH_EVERY_S * 1000)  # up for one round only
    behind = min(n for n, node in prefers.items() if node == "n2")
    nodes["n2"]["applied"][str(behind)] = 100 - HANDOFF_LAG_MAX - 1
    given = hand_offs("n0", led, nodes, 33, NOW_MS)
    assert given and all(to == "n2" for _, to in given)
    assert behind not in {n for n, _ in given}
    assert {n for n, _ in given} == {n for n, node in prefers.items() if node == "n2" and n != behind}


def test_partitions_this_node_is_preferred_for_go_one_a_round_to_a_node_under_its_share() -> None:
    # n0 leads only partitions that prefer it, more than its share: the others take them one at a
    # time (each round the count each node leads is said again), never past their own share.
    live = {"n0", "n1", "n2"}
    prefers = _prefers(40, live)
    own = [n for n in range(40) if prefers[n] == "n0"]
    led = {n: 100 for n in own}
    share = -(-40 // 3)
    assert len(own) > share
    nodes = {"n0": _said(own, led), "n1": _said(list(range(share - 1)), led), "n2": _said(list(range(share)), led)}
    given = hand_offs("n0", led, nodes, 40, NOW_MS)
    assert len(given) == 1
    number, to = given[0]
    assert to == "n1" and number in own  # n2 is at its share
    assert preference_order(live, number)[1] == "n1"
