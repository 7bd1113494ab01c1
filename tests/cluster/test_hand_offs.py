"""Which partitions a node leading more than its share gives up in one round (`cluster.hand_offs`).

A cluster started together has its first node take every partition; the others then get theirs
in hand-offs. Every partition that goes to the node it prefers goes in the same round (so the
cluster spreads at once, whatever its partition count); a node still past its share then fills
the others' room at once when it is the only one past it (else one a round), each partition to
the first node in its preference with room; never to a node that is new or behind on the
partition's log.
"""

from __future__ import annotations

from typing import Any

from runstate.server.cluster import HANDOFF_LAG_MAX, PUBLISH_EVERY_S, campaign_order, hand_offs, preference_order

NOW_MS = 1_000_000
LONG_AGO_MS = NOW_MS - int(4 * PUBLISH_EVERY_S * 1000)


def _said(applied: dict[int, int], since_ms: int = LONG_AGO_MS) -> dict[str, Any]:
    """What a node says of itself in its key (`Cluster._node_value`), the parts hand-offs read."""
    return {"applied": {str(n): lsn for n, lsn in applied.items()}, "at_ms": NOW_MS, "since_ms": since_ms}


def _caught_up(partitions: int) -> dict[str, Any]:
    """n0, n1 and n2, up for long and caught up on every partition (each at LSN 100)."""
    every = {n: 100 for n in range(partitions)}
    return {name: _said(every) for name in ("n0", "n1", "n2")}


def _prefers(partitions: int) -> dict[int, list[str]]:
    return {n: preference_order({"n0", "n1", "n2"}, n) for n in range(partitions)}


def _led_by(leaders: dict[int, str | None], node: str) -> dict[int, int]:
    return {n: 100 for n, leader in leaders.items() if leader == node}


def test_every_partition_another_node_is_preferred_for_goes_in_one_round() -> None:
    leaders: dict[int, str | None] = {n: "n0" for n in range(33)}
    prefers = _prefers(33)
    elsewhere = sorted(n for n, order in prefers.items() if order[0] != "n0")
    given = hand_offs("n0", _led_by(leaders, "n0"), _caught_up(33), leaders, NOW_MS)
    assert len(elsewhere) > 1
    assert given == [(n, prefers[n][0]) for n in elsewhere][:33 - 11]


def test_no_more_than_past_its_share_goes() -> None:
    for partitions in range(2, 40):
        leaders: dict[int, str | None] = {n: "n0" for n in range(partitions)}
        share = -(-partitions // 3)
        given = hand_offs("n0", _led_by(leaders, "n0"), _caught_up(partitions), leaders, NOW_MS)
        assert 0 < len(given) <= partitions - share, (partitions, given)
        assert len({n for n, _ in given}) == len(given)


def test_a_node_within_its_share_gives_nothing() -> None:
    leaders: dict[int, str | None] = {n: ("n0", "n1", "n2")[n % 3] for n in range(9)}
    assert hand_offs("n0", _led_by(leaders, "n0"), _caught_up(9), leaders, NOW_MS) == []


def test_a_node_up_for_less_than_two_rounds_or_behind_on_the_log_gets_none() -> None:
    leaders: dict[int, str | None] = {n: "n0" for n in range(33)}
    nodes = _caught_up(33)
    prefers = _prefers(33)
    nodes["n1"]["since_ms"] = NOW_MS - int(PUBLISH_EVERY_S * 1000)  # up for one round only
    behind = min(n for n, order in prefers.items() if order[0] == "n2")
    nodes["n2"]["applied"][str(behind)] = 100 - HANDOFF_LAG_MAX - 1
    given = hand_offs("n0", _led_by(leaders, "n0"), nodes, leaders, NOW_MS)
    assert {n for n, _ in given} == {n for n, order in prefers.items() if order[0] == "n2" and n != behind}
    assert all(to == "n2" for _, to in given)


def _preferred_by_n0_past_its_share(partitions: int) -> tuple[dict[int, str | None], list[int], int]:
    """n0 leads every partition that prefers it, more than its share; n1 and n2 split the rest."""
    prefers = _prefers(partitions)
    own = [n for n in range(partitions) if prefers[n][0] == "n0"]
    rest = [n for n in range(partitions) if prefers[n][0] != "n0"]
    leaders: dict[int, str | None] = {n: "n0" for n in own}
    leaders.update({n: ("n1", "n2")[i % 2] for i, n in enumerate(rest)})
    share = -(-partitions // 3)
    assert len(own) > share
    return leaders, own, share


def test_alone_past_its_share_a_node_fills_the_others_room_at_once() -> None:
    # Partitions preferring n0 outnumber its share: it gives the extra ones, in one round, each to
    # the first node in the partition's preference under its share, none past it.
    leaders, own, share = _preferred_by_n0_past_its_share(65)
    given = hand_offs("n0", _led_by(leaders, "n0"), _caught_up(65), leaders, NOW_MS)
    assert len(given) == len(own) - share
    after = dict(leaders)
    after.update(dict(given))
    counts = {name: sum(1 for leader in after.values() if leader == name) for name in ("n0", "n1", "n2")}
    assert max(counts.values()) <= share, counts
    prefers = _prefers(65)
    for number, to in given:
        order = prefers[number]
        assert order[0] == "n0" and to in order[1:]


def test_with_another_node_past_its_share_a_node_gives_one_a_round() -> None:
    # Two nodes filling the same room would overfill it: each gives one a round.
    leaders, own, share = _preferred_by_n0_past_its_share(65)
    n1 = [n for n, leader in leaders.items() if leader == "n1"]
    for n in n1[:1] + [m for m in own if leaders[m] == "n0"][: share + 1 - len(n1)]:
        leaders[n] = "n1"  # n1 past its share too
    assert sum(1 for leader in leaders.values() if leader == "n1") > share
    given = hand_offs("n0", _led_by(leaders, "n0"), _caught_up(65), leaders, NOW_MS)
    assert len(given) == 1 and given[0][1] == "n2"


def test_a_partition_whose_next_node_is_full_goes_to_the_one_after() -> None:
    leaders, own, share = _preferred_by_n0_past_its_share(65)
    # n1 at its share exactly: everything n0 gives goes to n2, even where n1 comes second.
    counts_n1 = sum(1 for leader in leaders.values() if leader == "n1")
    movable = [n for n, leader in leaders.items() if leader == "n2"]
    for n in movable[: share - counts_n1]:
        leaders[n] = "n1"
    assert sum(1 for leader in leaders.values() if leader == "n1") == share
    given = hand_offs("n0", _led_by(leaders, "n0"), _caught_up(65), leaders, NOW_MS)
    prefers = _prefers(65)
    assert given and all(to == "n2" for _, to in given)
    assert any(prefers[number][1] == "n1" for number, _ in given)


def _settle(names: tuple[str, ...], partitions: int, *, honour_target: bool = True) -> tuple[int, dict[int, str | None]]:
    """Rounds of hand-offs from the first node leading every partition, each hand-off won by the
    first node of `campaign_order` as the other nodes see it; (rounds, leaders) once none is left."""
    said = {name: _said({n: 100 for n in range(partitions)}) for name in names}
    leaders: dict[int, str | None] = {n: names[0] for n in range(partitions)}
    for rounds in range(1, 20):
        moved = False
        for name in names:
            for number, to in hand_offs(name, _led_by(leaders, name), said, leaders, NOW_MS):
                observer = next(node for node in names if node != name)
                order = campaign_order(observer, preference_order(set(names), number), name, False,
                                       to if honour_target else None)
                leaders[number] = order[0]
                moved = True
        if not moved:
            return rounds, leaders
    return 0, leaders


def test_a_partition_handed_to_a_node_under_its_share_stays_there() -> None:
    """n1, n2 and n3 with 8 data partitions and the system one (docs/cluster.md): n1 is preferred
    by four, one past its share, and gives partition 0 to n3, the one with room; n3 campaigns first
    and keeps it. Had n2 (next in 0's preference) won it, n2 would be past its share and give it
    back to n1, which prefers it: round after round, each a moment without a leader."""
    names = ("n1", "n2", "n3")
    assert [order[0] for order in (preference_order(set(names), n) for n in range(9))].count("n1") == 4
    rounds, leaders = _settle(names, 9)
    assert rounds and all(list(leaders.values()).count(name) == 3 for name in names), leaders
    assert _settle(names, 9, honour_target=False)[0] == 0  # (the round after round, without the target)
    for partitions in range(2, 40):  # and any other count settles too
        assert _settle(("n0", "n1", "n2"), partitions)[0], partitions


def test_the_node_a_partition_was_handed_to_campaigns_first_and_the_one_that_gave_it_last() -> None:
    preferred = ["n1", "n2", "n3"]
    assert campaign_order("n2", preferred, "n1", False, "n3") == ["n3", "n2"]
    assert campaign_order("n1", preferred, "n1", True, "n3") == ["n3", "n2", "n1"]
    assert campaign_order("n2", preferred, "n1", False, None) == ["n2", "n3"]  # a failover: preference
    assert campaign_order("n2", preferred, "n1", False, "n9") == ["n2", "n3"]  # a target no longer live
