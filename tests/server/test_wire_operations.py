"""The wire shapes of the operators' views: a run's subtree and a space's waits, the bytes the
0.3.0 client's `status()` and our SDK read, and the OpenAPI components made from the same
declaration.

The functions `*_before` below build each answer as the kernel built it before it answered with
typed views (camelCase dicts, entries with only the fields their kind names); every generated view
must encode to exactly their bytes.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.coordination_reads import (
    AllowanceWaitView, ParkedKeyView, ParkedQueueView, ParkedTaskView, ParkedTimersView, ParkedView, PoolWaitView, RunCounts, RunView,
    RunWaiter, RunWorker, WaitsView,
)
from runstate.actors.limits import Limits
from runstate.actors.timestamps import format_ms
from runstate.server import wire
from runstate.server.openapi import openapi


def parked_before(view: Any) -> dict[str, Any]:
    """`_parked`'s entry as it was (`holders` only where some are named)."""
    entry: dict[str, Any] = {"on": view.on, "calls": view.calls}
    if isinstance(view, ParkedQueueView):
        entry.update(mailboxId=view.mailbox_id, scopeId=view.scope_id)
    elif isinstance(view, ParkedTimersView):
        entry.update(scopeId=view.scope_id)
    elif isinstance(view, ParkedKeyView):
        entry.update(scopeId=view.scope_id, key=view.key)
    elif isinstance(view, ParkedTaskView):
        entry.update(scopeId=view.scope_id, taskId=view.task_id)
    holders = getattr(view, "holders", ())
    if holders:
        entry["holders"] = list(holders)
    return entry


def waiter_before(view: RunWaiter) -> dict[str, Any]:
    """`_pool_waiters`'s entry as it was."""
    return {
        "permit": view.permit, "permitId": view.permit_id, "units": view.units, "scopeId": view.scope_id,
        "holder": view.holder, "waiterId": view.waiter_id, "state": view.state, "since": format_ms(view.since_ms),
    }


def wait_before(view: Any) -> dict[str, Any]:
    """An entry of `waits` as it was."""
    if isinstance(view, PoolWaitView):
        fields = RunWaiter(view.permit, view.permit_id, view.units, view.scope_id, view.holder, view.waiter_id, view.state, view.since_ms)
        return {"on": "pool", "calls": 1, **waiter_before(fields)}
    if isinstance(view, AllowanceWaitView):
        return {
            "on": "allowance", "calls": 1, "scopeId": view.scope_id, "allowance": view.allowance, "allowanceId": view.allowance_id,
            "units": view.units, "holder": view.holder, "waiterId": view.waiter_id, "expiresAt": format_ms(view.expires_ms),
            "since": format_ms(view.since_ms),
        }
    return parked_before(view)


def run_before(view: RunView) -> dict[str, Any]:
    """`run` as it was."""
    counts = view.counts
    return {
        "scopeId": view.scope_id,
        "effective": view.effective,
        "workers": [
            {"holder": w.holder, "keys": list(w.keys), "deliveries": list(w.deliveries),
             "earliestLeaseExpiry": format_ms(w.earliest_lease_expiry_ms)}
            for w in view.workers
        ],
        "waiting": [waiter_before(waiter) for waiter in view.waiting],
        "parked": [parked_before(entry) for entry in view.parked],
        "counts": {
            "scopes": counts.scopes, "tasks": counts.tasks, "messages": counts.messages, "barriers": counts.barriers,
            "timers": counts.timers, "groups": counts.groups,
        },
    }


def waits_before(view: WaitsView) -> dict[str, Any]:
    return {"waits": [wait_before(entry) for entry in view.waits], "truncated": view.truncated}


_text = st.text(max_size=12)
_ids = st.lists(_text, max_size=3).map(tuple)
_count = st.integers(0, 10**6)
_instant = st.integers(min_value=0, max_value=253_402_300_799_999)
_counts = st.dictionaries(_text, _count, max_size=3)
_waiter_state = st.sampled_from(["WAITING", "SIGNALED"])
# The holders a parked entry names: None where its commands name none (the kernel never names an empty tuple).
_held = st.none() | st.lists(_text, min_size=1, max_size=3).map(tuple)
_parked = st.one_of(
    st.builds(ParkedView, _text, _count, _held),
    st.builds(ParkedQueueView, st.just("queue"), _count, _text, _text, _held),
    st.builds(ParkedTimersView, st.just("timers"), _count, _text, _held),
    st.builds(ParkedKeyView, st.sampled_from(["claim", "once"]), _count, _text, _text, _held),
    st.builds(ParkedTaskView, st.just("task"), _count, _text, _text),
)
_run_waiter = st.builds(RunWaiter, _text, _text, _count, _text, _text, _text, _waiter_state, _instant)
_wait = st.one_of(
    _parked,
    st.builds(PoolWaitView, st.just("pool"), st.just(1), _text, _text, _count, _text, _text, _text, _waiter_state, _instant),
    st.builds(AllowanceWaitView, st.just("allowance"), st.just(1), _text, _text, _text, _count, _text, _text, _instant, _instant),
)
runs = st.builds(
    RunView, _text, st.sampled_from(["ACTIVE", "CANCELLED", "COMPLETED", "EXPIRED"]),
    st.lists(st.builds(RunWorker, _text, _ids, _ids, _instant), max_size=3).map(tuple),
    st.lists(_run_waiter, max_size=3).map(tuple), st.lists(_parked, max_size=3).map(tuple),
    st.builds(RunCounts, _counts, _counts, _counts, _counts, _counts, _counts),
)
waits = st.builds(WaitsView, st.lists(_wait, max_size=5).map(tuple), st.booleans())


def _same_bytes(view: Any, before: dict[str, Any]) -> None:
    """Alone, in a batch's results, and as the idempotency table keeps it: the same bytes."""
    assert wire.dumps(view) == orjson.dumps(before)
    assert wire.dumps({"results": [{"status": 200, "body": view}]}) == orjson.dumps({"results": [{"status": 200, "body": before}]})
    assert orjson.dumps(wire.encode(view)) == orjson.dumps(before)


@settings(max_examples=150, deadline=None)
@given(runs, waits)
def test_every_run_and_waits_view_encodes_to_the_bytes_read_before(run: RunView, waiting: WaitsView) -> None:
    _same_bytes(run, run_before(run))
    _same_bytes(waiting, waits_before(waiting))


def _components() -> dict[str, Any]:
    return openapi(Limits())["components"]["schemas"]


@settings(max_examples=100, deadline=None)
@given(runs, waits)
def test_each_encoded_answer_validates_against_its_documented_component(run: RunView, waiting: WaitsView) -> None:
    """What the encoder writes is what the document says; each wait entry is a `Parked`."""
    components = _components()
    for name, view in (("OpsRun", run), ("OpsWaits", waiting)):
        body = orjson.loads(wire.dumps(view))
        jsonschema.validate(body, components[name])
        assert list(body) == components[name]["required"] == list(components[name]["properties"])
    parked = components["Parked"]
    for entry in orjson.loads(wire.dumps(waiting))["waits"]:
        jsonschema.validate(entry, parked)
        assert set(parked["required"]) <= set(entry) <= set(parked["properties"])


def test_the_components_list_exactly_the_encoders_fields() -> None:
    """`Parked` is every field a wait entry may write, `on` and `calls` in all of them; `holders`
    is an array of strings (never null: left out where no holder is named)."""
    components = _components()
    assert list(components["OpsRun"]["properties"]) == ["scopeId", "effective", "workers", "waiting", "parked", "counts"]
    worker = components["OpsRun"]["properties"]["workers"]["items"]
    assert list(worker["properties"]) == ["holder", "keys", "deliveries", "earliestLeaseExpiry"]
    waiter = components["OpsRun"]["properties"]["waiting"]["items"]
    assert list(waiter["properties"]) == ["permit", "permitId", "units", "scopeId", "holder", "waiterId", "state", "since"]
    assert waiter["properties"]["state"] == {"type": "string", "enum": ["WAITING", "SIGNALED"]}
    parked = components["Parked"]
    assert parked["required"] == ["on", "calls"]
    assert list(parked["properties"]) == [
        "on", "calls", "holders", "mailboxId", "scopeId", "taskId", "key", "permit", "permitId", "units", "holder", "waiterId", "state",
        "since", "allowance", "allowanceId", "expiresAt",
    ]
    assert parked["properties"]["holders"] == {"type": "array", "items": {"type": "string"}}
    run_parked = components["OpsRun"]["properties"]["parked"]["items"]["anyOf"]
    assert [entry["required"] for entry in run_parked] == [
        ["on", "calls"], ["on", "calls", "mailboxId", "scopeId"], ["on", "calls", "scopeId", "taskId"], ["on", "calls", "scopeId"],
        ["on", "calls", "scopeId", "key"],
    ]
    assert list(components["OpsWaits"]["properties"]) == ["waits", "truncated"]
