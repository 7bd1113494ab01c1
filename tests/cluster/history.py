"""What the fault tests check: the calls the workers saw acknowledged, against what the cluster holds.

Pure functions, no IO: `check(calls, final)` takes every line the workers wrote (`worker_020.py`,
`worker_030.py`: one per call, with `ts` when it was sent and `ta` when its answer came, on the
host's one monotonic clock) and what the cluster answered once the faults were over (`Final`), and
returns a `Report`: the violations found (each a sentence naming the call) and how many changes of
each kind were checked. A call with `"ok": false` was not acknowledged: it may or may not have
happened, so nothing is concluded from it.

The properties, after any fault:

1. **No acknowledged change lost.** Every run created is there; every task submitted is there;
   every claim acquired (its generation and holder) and every claim released is in its space's
   event log; every acknowledged completion's result is its task's outcome; every event a reader
   was shown during the faults is in the final log under the same number, unchanged (nothing was
   shown that a failover took back).
2. **Generations strictly increasing per key.** Two acknowledged acquires of one claim never have
   the same generation, and one acknowledged before another was sent has the smaller; the event
   log's generations of a key only grow.
3. **Never two holders whose tokens are both accepted.** Once an acquire of generation g was
   acknowledged, no renewal or release sent later with the token of a generation below g is
   accepted; once a delivery's attempt a was acknowledged, no completion sent later for an
   earlier attempt is accepted.
4. **No task with two results.** The acknowledged completions of one task all carry the same result,
   and every caller of one `once` item got the same result.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

__all__ = ["Final", "Report", "check"]


@dataclass
class Final:
    """What the cluster answered after the faults."""

    scopes: dict[str, int] = field(default_factory=dict)  # run id -> status of GET
    tasks: dict[str, dict | None] = field(default_factory=dict)  # task id -> its view (None: 404)
    events: dict[str, list[dict]] = field(default_factory=dict)  # space -> its whole event log, in order
    seen: dict[str, dict[int, dict]] = field(default_factory=dict)  # space -> events read during the faults, by number


@dataclass
class Report:
    violations: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    refused: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # calls not acknowledged, by op

    def fail(self, text: str) -> None:
        self.violations.append(text)

    @property
    def changes(self) -> int:
        return sum(self.checked.values())


def _acked(calls: Iterable[dict], op: str) -> list[dict]:
    return [call for call in calls if call["op"] == op and call.get("ok", True)]


def _event_number(event: dict) -> int:
    return int(str(event["eventId"]).removeprefix("ev_"))


class _Earlier:
    """The largest value among calls acknowledged before a moment: `before(t)`."""

    def __init__(self, calls: list[dict], value: str) -> None:
        ordered = sorted(calls, key=lambda call: call["ta"])
        self.times = [call["ta"] for call in ordered]
        self.best: list[tuple[int, dict]] = []
        top: tuple[int, dict] | None = None
        for call in ordered:
            if top is None or call[value] > top[0]:
                top = (call[value], call)
            self.best.append(top)

    def before(self, moment: float) -> tuple[int, dict] | None:
        index = bisect.bisect_left(self.times, moment)
        return self.best[index - 1] if index else None


def check(calls: list[dict], final: Final) -> Report:
    report = Report()
    for call in calls:
        if not call.get("ok", True):
            report.refused[call["op"]] += 1
    _scopes(calls, final, report)
    _claims(calls, final, report)
    _deliveries(calls, final, report)
    _once(calls, report)
    _events(final, report)
    return report


def _scopes(calls: list[dict], final: Final, report: Report) -> None:
    for call in _acked(calls, "scope"):
        report.checked["runs created"] += 1
        status = final.scopes.get(call["id"])
        if status != 200:
            report.fail(f"run {call['id']} was acknowledged by {call['w']} at {call['ta']:.3f} and is gone (GET answered {status})")


def _claim_events(final: Final) -> dict[tuple[str, str, str], list[dict]]:
    """The event log's claim events by (space, run, key), in order."""
    found: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for space, events in final.events.items():
        for event in events:
            if event["type"].startswith("claim."):
                found[(space, event["scopeId"], event["aggregate"]["id"])].append(event)
    return found


def _claims(calls: list[dict], final: Final, report: Report) -> None:
    acquires: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for call in _acked(calls, "acquire"):
        acquires[(call["space"], call["key"])].append(call)
    logged = _claim_events(final)
    by_key = {(space, key): events for (space, _run, key), events in logged.items()}
    for (space, key), events in by_key.items():
        generations = [e["payload"]["generation"] for e in events if e["type"] in ("claim.acquired", "claim.taken_over")]
        if any(later <= earlier for earlier, later in zip(generations, generations[1:])):
            report.fail(f"claim {key} in {space}: the event log's generations do not only grow: {generations}")
    for (space, key), taken in acquires.items():
        events = by_key.get((space, key), [])
        held = {(e["payload"]["generation"], e["payload"].get("holder")) for e in events
                if e["type"] in ("claim.acquired", "claim.taken_over")}
        ended = {e["payload"]["generation"] for e in events if e["type"] in ("claim.released", "claim.expired")}
        released = {e["payload"]["generation"] for e in events if e["type"] == "claim.released"}
        by_generation: dict[int, list[dict]] = defaultdict(list)
        for call in taken:
            report.checked["claims acquired"] += 1
            by_generation[call["gen"]].append(call)
            if (call["gen"], call["holder"]) not in held:
                report.fail(f"claim {key} in {space}: generation {call['gen']} acknowledged to {call['holder']} "
                            f"at {call['ta']:.3f} is not in the event log")
        for generation, same in by_generation.items():
            if len(same) > 1:
                holders = ", ".join(f"{c['holder']} at {c['ta']:.3f}" for c in same)
                report.fail(f"claim {key} in {space}: generation {generation} was acknowledged twice ({holders})")
        earlier = _Earlier(taken, "gen")
        for call in taken:
            before = earlier.before(call["ts"])
            if before is not None and before[0] >= call["gen"]:
                report.fail(f"claim {key} in {space}: generation {call['gen']} acknowledged at {call['ta']:.3f} to "
                            f"{call['holder']}, though generation {before[0]} was acknowledged at {before[1]['ta']:.3f}, "
                            f"before it was asked for")
        for op in ("renew", "release"):
            for call in _acked(calls, op):
                if (call["space"], call["key"]) != (space, key):
                    continue
                report.checked[{"renew": "claims renewed", "release": "claims released"}[op]] += 1
                before = earlier.before(call["ts"])
                if before is not None and before[0] > call["gen"]:
                    report.fail(f"claim {key} in {space}: a {op} with the token of generation {call['gen']} was accepted "
                                f"(sent at {call['ts']:.3f}) after generation {before[0]} was acknowledged to "
                                f"{before[1]['holder']} at {before[1]['ta']:.3f}: two holders")
                if op == "release" and call["gen"] not in released and call["gen"] not in ended:
                    report.fail(f"claim {key} in {space}: the release of generation {call['gen']} acknowledged at "
                                f"{call['ta']:.3f} is not in the event log")


def _deliveries(calls: list[dict], final: Final, report: Report) -> None:
    for call in _acked(calls, "submit"):
        report.checked["tasks submitted"] += 1
        view = final.tasks.get(call["task"])
        if view is None:
            report.fail(f"task {call['task']} ({call['key']}) was acknowledged at {call['ta']:.3f} and is gone")
        elif view.get("taskKey") not in (None, call["key"]):
            report.fail(f"task {call['task']} was submitted as {call['key']} and is now {view.get('taskKey')}")
    leases: dict[str, list[dict]] = defaultdict(list)
    for call in _acked(calls, "lease"):
        report.checked["deliveries leased"] += 1
        leases[call["msg"]].append(call)
    earlier = {msg: _Earlier(taken, "attempt") for msg, taken in leases.items()}
    for msg, taken in leases.items():
        for call in taken:
            before = earlier[msg].before(call["ts"])
            if before is not None and before[0] >= call["attempt"]:
                report.fail(f"message {msg}: attempt {call['attempt']} leased to {call['holder']} at {call['ta']:.3f}, "
                            f"though attempt {before[0]} was leased at {before[1]['ta']:.3f}, before it was asked for")
    results: dict[str, list[dict]] = defaultdict(list)
    for call in _acked(calls, "complete"):
        report.checked["completions"] += 1
        results[call["key"]].append(call)
        before = earlier[call["msg"]].before(call["ts"]) if call["msg"] in earlier else None
        if before is not None and before[0] > call["attempt"]:
            report.fail(f"message {call['msg']}: the completion of attempt {call['attempt']} was accepted (sent at "
                        f"{call['ts']:.3f}) after attempt {before[0]} was leased to {before[1]['holder']} at "
                        f"{before[1]['ta']:.3f}: two holders")
    tasks_by_key = {call["key"]: call["task"] for call in _acked(calls, "submit")}
    for key, done in results.items():
        distinct = {repr(sorted(call["result"].items())) for call in done}
        if len(distinct) > 1:
            report.fail(f"task {key}: {len(distinct)} different completions were acknowledged: "
                        + "; ".join(f"{c['result']} at {c['ta']:.3f}" for c in done))
        task = tasks_by_key.get(key)
        view = final.tasks.get(task) if task is not None else None
        if task is not None and view is not None:
            if view.get("state") != "SUCCEEDED" or view.get("outcome") != done[0]["result"]:
                report.fail(f"task {key} ({task}): a completion with {done[0]['result']} was acknowledged at "
                            f"{done[0]['ta']:.3f}, and the task is {view.get('state')} with {view.get('outcome')}")


def _once(calls: list[dict], report: Report) -> None:
    bodies = {call["nonce"] for call in calls if call["op"] == "once_run"}
    answers: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for call in _acked(calls, "once"):
        report.checked["once results"] += 1
        answers[(call["space"], call["item"])].append(call)
    for (space, item), got in answers.items():
        distinct = {repr(sorted(call["result"].items())) for call in got}
        if len(distinct) > 1:
            report.fail(f"once item {item} in {space}: callers got {len(distinct)} different results: "
                        + "; ".join(f"{c['w']} got {c['result']} at {c['ta']:.3f}" for c in got))
        for call in got:
            if call["result"].get("nonce") not in bodies:
                report.fail(f"once item {item} in {space}: {call['w']} got {call['result']}, which no body returned")


def _events(final: Final, report: Report) -> None:
    for space, events in final.events.items():
        numbers = [_event_number(event) for event in events]
        if numbers and numbers != list(range(numbers[0], numbers[0] + len(numbers))):
            report.fail(f"the event log of {space} has gaps")
        oldest = numbers[0] if numbers else 1
        kept = {number: event for number, event in zip(numbers, events)}
        for number, event in sorted(final.seen.get(space, {}).items()):
            report.checked["events shown"] += 1
            if number < oldest:
                continue
            now = kept.get(number)
            if now is None:
                report.fail(f"event {number} of {space} ({event['type']} {event['aggregate']}) was shown during the "
                            f"faults and is not in the log (which ends at {numbers[-1] if numbers else 0})")
            elif _shown(now) != _shown(event):
                report.fail(f"event {number} of {space} was shown as {_shown(event)} and is now {_shown(now)}")


def _shown(event: dict) -> tuple[Any, ...]:
    return (event["type"], event.get("scopeId"), event["aggregate"].get("type"), event["aggregate"].get("id"),
            repr(sorted((event.get("payload") or {}).items())))
