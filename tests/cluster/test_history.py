"""The fault tests' checker (`history.py`) finds each kind of violation it is there for, and passes a
history that has none: a checker that cannot fail would prove nothing about the cluster."""

from __future__ import annotations

import copy

from .history import Final, check

SPACE = "s"


def _event(number: int, kind: str, aggregate: str, payload: dict, aggregate_type: str = "claim", scope: str = "sc_1") -> dict:
    return {"eventId": f"ev_{number}", "type": kind, "scopeId": scope, "aggregate": {"type": aggregate_type, "id": aggregate},
            "payload": payload}


def _clean() -> tuple[list[dict], Final]:
    calls = [
        {"op": "scope", "w": "w0", "space": SPACE, "id": "sc_2", "ts": 0.0, "ta": 0.1},
        {"op": "acquire", "w": "w0", "space": SPACE, "key": "k", "gen": 1, "token": "t1", "holder": "a", "ts": 1.0, "ta": 1.1},
        {"op": "renew", "w": "w0", "space": SPACE, "key": "k", "gen": 1, "token": "t1", "ts": 1.5, "ta": 1.6},
        {"op": "release", "w": "w0", "space": SPACE, "key": "k", "gen": 1, "token": "t1", "ts": 2.0, "ta": 2.1},
        {"op": "acquire", "w": "w1", "space": SPACE, "key": "k", "gen": 2, "token": "t2", "holder": "b", "ts": 2.5, "ta": 2.6},
        {"op": "acquire", "w": "w1", "space": SPACE, "key": "k", "ok": False, "err": "UNAVAILABLE", "ts": 2.7, "ta": 2.8},
        {"op": "submit", "w": "w0", "space": SPACE, "key": "t-0", "task": "tk_1", "ts": 3.0, "ta": 3.1},
        {"op": "lease", "w": "w1", "space": SPACE, "msg": "ms_1", "attempt": 1, "token": "d1", "key": "t-0", "holder": "r", "ts": 3.2, "ta": 3.3},
        {"op": "lease", "w": "w1", "space": SPACE, "msg": "ms_1", "attempt": 2, "token": "d2", "key": "t-0", "holder": "q", "ts": 9.0, "ta": 9.1},
        {"op": "complete", "w": "w1", "space": SPACE, "msg": "ms_1", "attempt": 2, "key": "t-0", "result": {"n": "x"}, "ts": 9.5, "ta": 9.6},
        {"op": "once_run", "w": "w2", "space": SPACE, "item": 0, "nonce": "n1", "ts": 4.0},
        {"op": "once", "w": "w2", "space": SPACE, "item": 0, "result": {"nonce": "n1"}, "ts": 4.0, "ta": 5.0},
        {"op": "once", "w": "w3", "space": SPACE, "item": 0, "result": {"nonce": "n1"}, "ts": 4.5, "ta": 5.1},
    ]
    events = [
        _event(1, "scope.created", "sc_2", {"parentId": None}, "scope", "sc_2"),
        _event(2, "claim.acquired", "k", {"generation": 1, "holder": "a"}),
        _event(3, "claim.released", "k", {"generation": 1}),
        _event(4, "claim.acquired", "k", {"generation": 2, "holder": "b"}),
    ]
    final = Final(
        scopes={"sc_2": 200},
        tasks={"tk_1": {"taskKey": "t-0", "state": "SUCCEEDED", "outcome": {"n": "x"}}},
        events={SPACE: events},
        seen={SPACE: {2: copy.deepcopy(events[1]), 4: copy.deepcopy(events[3])}},
    )
    return calls, final


def _violations(calls: list[dict], final: Final) -> list[str]:
    return check(calls, final).violations


def test_a_history_without_violations_passes_and_counts_what_it_checked() -> None:
    calls, final = _clean()
    report = check(calls, final)
    assert report.violations == []
    assert report.checked["claims acquired"] == 2 and report.checked["claims renewed"] == 1
    assert report.checked["completions"] == 1 and report.checked["once results"] == 2 and report.checked["events shown"] == 2
    assert report.refused["acquire"] == 1


def test_a_lost_run_task_or_claim_is_found() -> None:
    calls, final = _clean()
    final.scopes["sc_2"] = 404
    final.tasks["tk_1"] = None
    final.events[SPACE] = [e for e in final.events[SPACE] if e["eventId"] != "ev_4"]
    found = _violations(calls, final)
    assert any("run sc_2" in v for v in found)
    assert any("task tk_1" in v for v in found)
    assert any("generation 2 acknowledged to b" in v for v in found)


def test_a_generation_given_twice_or_out_of_order_is_found() -> None:
    calls, final = _clean()
    calls.append({"op": "acquire", "w": "w2", "space": SPACE, "key": "k", "gen": 2, "token": "t3", "holder": "c", "ts": 2.55, "ta": 2.7})
    assert any("acknowledged twice" in v for v in _violations(calls, final))
    calls, final = _clean()
    calls[4]["gen"] = 1  # asked for after generation 1 was acknowledged, and given 1 again
    assert any("before it was asked for" in v for v in _violations(calls, final))


def test_a_stale_token_accepted_after_a_newer_holder_is_found() -> None:
    calls, final = _clean()
    calls.append({"op": "renew", "w": "w0", "space": SPACE, "key": "k", "gen": 1, "token": "t1", "ts": 3.0, "ta": 3.2})
    assert any("two holders" in v for v in _violations(calls, final))
    calls, final = _clean()
    calls.append({"op": "complete", "w": "w1", "space": SPACE, "msg": "ms_1", "attempt": 1, "key": "t-0", "result": {"n": "x"},
                  "ts": 9.2, "ta": 9.3})
    assert any("two holders" in v for v in _violations(calls, final))


def test_two_results_of_one_task_or_once_item_are_found() -> None:
    calls, final = _clean()
    calls.append({"op": "complete", "w": "w1", "space": SPACE, "msg": "ms_1", "attempt": 2, "key": "t-0", "result": {"n": "y"},
                  "ts": 9.5, "ta": 9.7})
    assert any("different completions" in v for v in _violations(calls, final))
    calls, final = _clean()
    final.tasks["tk_1"] = {"taskKey": "t-0", "state": "SUCCEEDED", "outcome": {"n": "other"}}
    assert any("a completion with" in v for v in _violations(calls, final))
    calls, final = _clean()
    calls.append({"op": "once_run", "w": "w3", "space": SPACE, "item": 0, "nonce": "n2", "ts": 6.0})
    calls.append({"op": "once", "w": "w3", "space": SPACE, "item": 0, "result": {"nonce": "n2"}, "ts": 6.0, "ta": 7.0})
    assert any("different results" in v for v in _violations(calls, final))


def test_an_event_shown_then_taken_back_or_changed_is_found() -> None:
    calls, final = _clean()
    final.seen[SPACE][5] = _event(5, "claim.acquired", "k", {"generation": 3, "holder": "z"})
    assert any("is not in the log" in v for v in _violations(calls, final))
    calls, final = _clean()
    final.seen[SPACE][4]["payload"] = {"generation": 2, "holder": "someone else"}
    assert any("was shown as" in v for v in _violations(calls, final))
    calls, final = _clean()
    final.events[SPACE].append(_event(9, "claim.acquired", "k", {"generation": 2, "holder": "c"}))
    found = _violations(calls, final)
    assert any("gaps" in v for v in found) and any("do not only grow" in v for v in found)
