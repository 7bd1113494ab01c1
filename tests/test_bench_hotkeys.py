"""The hot-keys bench's trace (`bench.hotkeys.trace_line`): from the agents' moments, a handoff is
timed only where another agent was already waiting, and a next holder that asked after the
release began is counted apart (and whether it was the releasing agent again)."""

from __future__ import annotations

from bench.hotkeys import trace_line


def test_a_handoff_is_timed_from_the_release_sent_to_the_waiter_holding_the_key():
    # (key, acquire sent, held, release sent, release answered, agent), in seconds.
    moments = [
        ["k", 0.000, 0.000, 0.020, 0.023, 1],
        ["k", 0.001, 0.024, 0.044, 0.046, 2],  # waited since 1 ms: a handoff of 4 ms
        ["k", 0.050, 0.050, 0.070, 0.071, 2],  # asked after its own release began: the same agent again
        ["k", 0.075, 0.075, 0.095, 0.096, 3],  # asked after the release began: another agent, late
    ]
    line = trace_line(moments, 20, {})
    assert line.startswith("4 cycles traced; handoff p50 4.00 ms")
    assert "release sent -> answered p50 2.00 ms" in line
    assert "waiter held - release answered p50 +1.00 ms" in line
    assert "2 of 3 next holders asked after the release began (1 the same agent again)" in line


def test_the_servers_counts_are_given_per_cycle():
    moments = [["k", 0.0, 0.0, 0.02, 0.021, 1], ["k", 0.001, 0.022, 0.042, 0.043, 2]]
    counted = {"fsyncs": 1.0, "fsync_s": 0.0005, "commits": 1.0, "turns": 6.0,
               "requests /v1/spaces/{space}/claims": 2.0, "request_s /v1/spaces/{space}/claims": 0.004}
    line = trace_line(moments, 20, counted)
    assert "0.50 fsyncs (mean 0.50 ms), 0.50 group commits, 3.00 turns" in line
    assert "/v1/spaces/{space}/claims 1.00 (2.00 ms)" in line
