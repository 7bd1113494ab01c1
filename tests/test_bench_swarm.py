"""The swarm bench's ceiling (`bench.swarm.ceiling_per_s`): with half of the draws on 10 hot keys
held 20 ms, claim cycles come to at most about 1,000 a second whatever the peer, and the report
says how far over Redis's figure any peer could go."""

from __future__ import annotations

from bench.swarm import FULL, QUICK, PeerResult, ceiling_per_s, hot_keys_limit_per_s, notes_of, rows_of


def result(peer: str, cycles: int, hot_cycles: int, tasks: int) -> PeerResult:
    return PeerResult(
        peer=peer, agents=256, processes=4, window_s=20.0, cycles=cycles, hot_cycles=hot_cycles, tasks=tasks,
        produced=tasks, server_cpu_s=1.0, client_cpu_s=1.0, requests=100, contended=0, contended_p50_ms=0.0,
        contended_p99_ms=0.0, handoffs=0, handoff_p50_ms=0.0, handoff_p99_ms=0.0, latency_p50_ms=0.0,
        latency_p99_ms=0.0, errors={}, quoted=[], load_average=0.0,
    )


def test_the_ceiling_is_the_hot_keys_limit_over_their_share_plus_the_tasks_asked():
    assert hot_keys_limit_per_s() == 500
    assert ceiling_per_s(FULL) == 1000 + 160  # 4 processes of 64 agents: 8 producers each, 5 tasks/s
    assert ceiling_per_s(QUICK) == 1000 + 40  # 2 processes of 32 agents: 4 producers each


def test_the_hot_keys_efficiency_and_the_most_any_peer_could_do_against_redis():
    ours = result("ours", cycles=15_000, hot_cycles=7_500, tasks=3_200)  # 375 hot cycles/s of 500
    redis = result("redis", cycles=12_540, hot_cycles=6_280, tasks=3_200)  # 787 useful ops/s
    assert ours.hot_efficiency == 0.75
    notes = notes_of({"ours": ours, "redis": redis}, FULL)
    assert "375 (0.75)" in notes[0]
    assert "about 1,160 useful ops/s with perfect handoffs; against Redis's 787, no peer could do more than 1.47 times it" in notes[1]
    ceiling_row = next(row for row in rows_of({"ours": ours, "redis": redis}, {}, FULL) if "ceiling" in row.leg)
    assert ceiling_row.ratio == (15_000 + 3_200) / 20 / 1160
