"""The wire shapes of the capacity primitives' typed views (`server/wire/pools.py`, ...): the bytes
clients read, and the OpenAPI components made from the same declaration.

The official clients 0.2.0 and 0.3.0 parse these answers as the server wrote them before the
kernel answered with typed views: each `*_before` function below is that shape, kept here as the
kernel built it then (its `view()` body, and the command's `update` after it), and every generated
view must encode to exactly its bytes, field order included.
"""

from __future__ import annotations

from typing import Any, Callable

import jsonschema
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runstate.actors.admission import AdmissionView, AdmittedConsumptionView, AdmittedGrantView
from runstate.actors.budgets import (
    ACTIVE, ActiveReservationView, BudgetMismatchView, BudgetReservationsView, BudgetView, InsufficientBudgetView,
    ReservationView,
)
from runstate.actors.limits import Limits
from runstate.actors.pools import (
    SIGNALED, GrantView, PoolUnavailableView, PoolView, PoolWaiterView, ReleasedGrantView, TurnGrantView,
)
from runstate.actors.quotas import (
    AllowanceExhaustedView, AllowanceMismatchView, AllowanceView, AllowanceWaiterView, ConsumptionView, CooldownView,
    RefundedAllowanceView,
)
from runstate.actors.timestamps import format_ms
from runstate.actors.work_limits import WorkLimitFullView, WorkLimitView
from runstate.server import wire
from runstate.server.openapi import openapi
from runstate.server.wire import admission as admission_shapes
from runstate.server.wire import budgets as budget_shapes
from runstate.server.wire import pools as pool_shapes
from runstate.server.wire import quotas as quota_shapes
from runstate.server.wire import work_limits as work_limit_shapes

# Any text a request may carry (names, holders, ids: unicode, quotes, controls, escapes).
_text = st.text(max_size=30)
_maybe_text = st.none() | _text
# Wall milliseconds from 1970 to 9999 (the timestamp format has four digits of year).
_instant = st.integers(min_value=0, max_value=253_402_300_799_999)
_maybe_instant = st.none() | _instant
_count = st.integers(min_value=0, max_value=2**53)
_lease_ms = st.integers(min_value=1, max_value=10**12)


def _components() -> dict[str, Any]:
    return openapi(Limits())["components"]["schemas"]


def _same_bytes(view: Any, before: dict[str, Any]) -> None:
    """Alone, inside a batch's results, and as the idempotency table keeps it: the old bytes."""
    assert wire.dumps(view) == orjson.dumps(before)
    assert wire.dumps({"results": [{"status": 200, "body": view}]}) == orjson.dumps({"results": [{"status": 200, "body": before}]})
    assert orjson.dumps(wire.encode(view)) == orjson.dumps(before)


def _validates(view: Any, component: str) -> None:
    """What the encoder writes is what the document says: every field documented with its JSON
    type, every required one there."""
    schema = _components()[component]
    body = orjson.loads(wire.dumps(view))
    jsonschema.validate(body, schema)
    assert set(body) <= set(schema["properties"]) and set(schema["required"]) <= set(body)


def _fields_and_types(component: str, shapes: tuple[wire.Shape, ...]) -> None:
    """The component lists exactly the fields the shapes write, in order, each with its schema,
    required where every shape writes it."""
    schema = _components()[component]
    written = [[field.name for field in shape.fields] for shape in shapes]
    assert list(schema["properties"]) == list(dict.fromkeys(name for names in written for name in names))
    assert schema["required"] == [name for name in written[0] if all(name in names for names in written)]
    for shape in shapes:
        for field in shape.fields:
            assert schema["properties"][field.name] == field.schema


# -- pools ---------------------------------------------------------------------------------------


def pool_before(view: PoolView) -> dict[str, Any]:
    """`PoolTable.view` as it was."""
    return {
        "id": view.id,
        "name": view.name,
        "unitsTotal": view.units_total,
        "units": view.units_total,  # 0.3.0's by-name answer calls the capacity `units`
        "unitsInUse": view.units_in_use,
        "unitsAvailable": view.units_total - view.units_in_use,
        "waiting": view.waiting,
        "createdAt": format_ms(view.created_ms),
    }


def grant_before(view: GrantView | TurnGrantView | ReleasedGrantView) -> dict[str, Any]:
    """`PoolTable.grant_view` as it was, then the acquire's `waiterId` on a waiter's turn and the
    release's `update`."""
    body: dict[str, Any] = {
        "grantId": view.grant_id,
        "permitId": view.pool_id,
        "name": view.name,
        "scopeId": view.scope_id,
        "units": view.units,
        "token": view.token,
        "holder": view.holder,
        "holderSession": view.session,
        "leaseSeconds": view.lease_ms // 1000,
        "leaseExpiresAt": format_ms(view.expires_ms),
        "acquiredAt": format_ms(view.acquired_ms),
    }
    if isinstance(view, TurnGrantView):
        body["waiterId"] = view.waiter_id
    if isinstance(view, ReleasedGrantView):
        body.update(token=None, released=True, releasedAt=format_ms(view.released_ms))
    return body


def pool_waiter_before(view: PoolWaiterView) -> dict[str, Any]:
    """`PoolTable.waiter_view` as it was (the view's `turn_ends_ms` is already None unless SIGNALED)."""
    return {
        "waiterId": view.waiter_id,
        "id": view.waiter_id,
        "permitId": view.pool_id,
        "name": view.name,
        "scopeId": view.scope_id,
        "holder": view.holder,
        "units": view.units,
        "state": view.state,
        "position": view.position,
        "signaledAt": None if view.signaled_ms is None else format_ms(view.signaled_ms),
        "turnEndsAt": format_ms(view.turn_ends_ms) if view.state == SIGNALED and view.turn_ends_ms is not None else None,
        "grantId": view.grant_id,
        "expiresAt": format_ms(view.expires_ms),
        "createdAt": format_ms(view.created_ms),
        "endedAt": None if view.ended_ms is None else format_ms(view.ended_ms),
    }


@st.composite
def pools(draw: st.DrawFn) -> PoolView:
    total = draw(st.integers(1, 2**40))
    in_use = draw(st.integers(0, total))
    return PoolView(draw(_text), draw(_text), total, total, in_use, total - in_use, draw(_count), draw(_instant))


@st.composite
def grants(draw: st.DrawFn) -> GrantView | TurnGrantView | ReleasedGrantView:
    fields = (
        draw(_text), draw(_text), draw(_text), draw(_text), draw(st.integers(1, 2**40)), draw(_maybe_text), draw(_text),
        draw(_text), draw(_lease_ms), draw(_instant), draw(_instant),
    )
    kind = draw(st.sampled_from([GrantView, TurnGrantView, ReleasedGrantView]))
    if kind is GrantView:
        return GrantView(*fields)
    if kind is TurnGrantView:
        return TurnGrantView(*fields, draw(_text))
    return ReleasedGrantView(*GrantView(*fields)._replace(token=None), True, draw(_instant))


@st.composite
def pool_waiters(draw: st.DrawFn) -> PoolWaiterView:
    state = draw(st.sampled_from(["WAITING", "SIGNALED", "GRANTED", "CANCELLED", "EXPIRED"]))
    turn_ends_ms = draw(_instant) if state == SIGNALED else None
    return PoolWaiterView(
        draw(_text), draw(_text), draw(_text), draw(_text), draw(_text), draw(st.integers(1, 2**40)), state,
        draw(st.none() | st.integers(1, 10**6)), draw(_maybe_instant), turn_ends_ms, draw(_maybe_text), draw(_instant),
        draw(_instant), draw(_maybe_instant),
    )


_POOL_CASES: list[tuple[str, Callable[..., Any], Callable[[Any], dict[str, Any]], str]] = [
    ("pool", pools, pool_before, "Pool"),
    ("grant", grants, grant_before, "Grant"),
    ("pool waiter", pool_waiters, pool_waiter_before, "PoolWaiter"),
]


@settings(max_examples=150, deadline=None)
@given(st.one_of(*(st.tuples(st.just(index), case[1]()) for index, case in enumerate(_POOL_CASES))))
def test_every_pool_view_encodes_to_the_bytes_the_clients_read_before(case: tuple[int, Any]) -> None:
    index, view = case
    _, _, before, component = _POOL_CASES[index]
    _same_bytes(view, before(view))
    _validates(view, component)


@settings(max_examples=100, deadline=None)
@given(_count, _count, _count)
def test_a_pool_unavailable_refusal_carries_the_details_it_carried_before(free: int, total: int, waiting: int) -> None:
    before = {"unitsAvailable": free, "unitsTotal": total, "waiting": waiting}
    assert wire.dumps(PoolUnavailableView(free, total, waiting)) == orjson.dumps(before)


def test_the_pool_components_list_exactly_the_encoders_fields_with_their_json_types() -> None:
    _fields_and_types("Pool", (pool_shapes.POOL,))
    _fields_and_types("Grant", (pool_shapes.GRANT, pool_shapes.TURN_GRANT, pool_shapes.RELEASED_GRANT))
    _fields_and_types("PoolWaiter", (pool_shapes.POOL_WAITER,))
    waiter = _components()["PoolWaiter"]["properties"]
    assert waiter["state"] == {"type": "string", "enum": ["WAITING", "SIGNALED", "GRANTED", "CANCELLED", "EXPIRED"]}
    assert waiter["position"] == {"type": ["integer", "null"]}
    assert _components()["Grant"]["properties"]["token"] == {"type": ["string", "null"]}


# -- quotas --------------------------------------------------------------------------------------


def allowance_before(view: AllowanceView) -> dict[str, Any]:
    """`AllowanceTable.view` as it was (the view's cooldown is already None unless it lasts)."""
    return {
        "id": view.id,
        "name": view.name,
        "unitsLimit": view.units_limit,
        "windowSeconds": view.window_ms // 1000,
        "windowStart": format_ms(view.window_start_ms),
        "windowEnd": format_ms(view.window_start_ms + view.window_ms),
        "used": view.used,
        "remaining": view.remaining,
        "waiting": view.waiting,
        "cooldownUntil": None if view.cooldown_until_ms is None else format_ms(view.cooldown_until_ms),
        "cooldownReason": view.cooldown_reason,
        "createdAt": format_ms(view.created_ms),
    }


def consumption_before(view: ConsumptionView) -> dict[str, Any]:
    """The consume's reply as it was."""
    return {
        "consumptionId": view.consumption_id,
        "allowanceId": view.allowance_id,
        "units": view.units,
        "windowStart": format_ms(view.window_start_ms),
        "remaining": view.remaining,
    }


def allowance_waiter_before(view: AllowanceWaiterView) -> dict[str, Any]:
    """`AllowanceTable.waiter_view` as it was."""
    return {
        "waiterId": view.waiter_id,
        "id": view.waiter_id,
        "allowanceId": view.allowance_id,
        "scopeId": view.scope_id,
        "holder": view.holder,
        "units": view.units,
        "state": view.state,
        "consumptionId": view.consumption_id,
        "windowStart": None if view.window_start_ms is None else format_ms(view.window_start_ms),
        "expiresAt": format_ms(view.expires_ms),
        "createdAt": format_ms(view.created_ms),
    }


def cooldown_before(view: CooldownView) -> dict[str, Any]:
    """The cooldown's reply as it was."""
    return {"allowanceId": view.allowance_id, "cooldownUntil": format_ms(view.cooldown_until_ms), "reason": view.reason}


_window_ms = st.integers(1, 10**10).map(lambda seconds: seconds * 1000)


@st.composite
def allowances(draw: st.DrawFn) -> AllowanceView:
    limit = draw(st.integers(1, 2**40))
    used = draw(st.integers(0, limit))
    window_ms = draw(_window_ms)
    start = draw(st.integers(0, 253_402_300_799_999 - window_ms))
    cooling = draw(st.booleans())
    return AllowanceView(
        draw(_text), draw(_text), limit, window_ms, start, start + window_ms, used, limit - used, draw(_count),
        draw(_instant) if cooling else None, draw(_maybe_text) if cooling else None, draw(_instant),
    )


@st.composite
def refunded_allowances(draw: st.DrawFn) -> RefundedAllowanceView:
    return RefundedAllowanceView(*draw(allowances()), draw(_count))


def refunded_allowance_before(view: RefundedAllowanceView) -> dict[str, Any]:
    """A refund's answer: the allowance as `allowance_before` writes it, then `refunded`."""
    return {**allowance_before(AllowanceView(*view[:-1])), "refunded": view.refunded}


@st.composite
def consumptions(draw: st.DrawFn) -> ConsumptionView:
    return ConsumptionView(draw(_text), draw(_text), draw(st.integers(1, 2**40)), draw(_instant), draw(_count))


@st.composite
def allowance_waiters(draw: st.DrawFn) -> AllowanceWaiterView:
    state = draw(st.sampled_from(["WAITING", "GRANTED", "EXPIRED", "CANCELLED"]))
    granted = state == "GRANTED"
    return AllowanceWaiterView(
        draw(_text), draw(_text), draw(_text), draw(_text), draw(st.integers(1, 2**40)), state,
        draw(_text) if granted else None, draw(_instant) if granted else None, draw(_instant), draw(_instant),
    )


@st.composite
def cooldowns(draw: st.DrawFn) -> CooldownView:
    return CooldownView(draw(_text), draw(_instant), draw(_maybe_text))


_QUOTA_CASES: list[tuple[str, Callable[..., Any], Callable[[Any], dict[str, Any]], str]] = [
    ("allowance", allowances, allowance_before, "Allowance"),
    ("refunded allowance", refunded_allowances, refunded_allowance_before, "Allowance"),
    ("consumption", consumptions, consumption_before, "Consumption"),
    ("allowance waiter", allowance_waiters, allowance_waiter_before, "Waiter"),
    ("cooldown", cooldowns, cooldown_before, "Cooldown"),
]


@settings(max_examples=150, deadline=None)
@given(st.one_of(*(st.tuples(st.just(index), case[1]()) for index, case in enumerate(_QUOTA_CASES))))
def test_every_quota_view_encodes_to_the_bytes_the_clients_read_before(case: tuple[int, Any]) -> None:
    index, view = case
    _, _, before, component = _QUOTA_CASES[index]
    _same_bytes(view, before(view))
    _validates(view, component)


@settings(max_examples=100, deadline=None)
@given(_count, _instant, _count, _text, _window_ms)
def test_the_quota_refusals_carry_the_details_they_carried_before(remaining, window_start_ms, waiting, allowance_id, window_ms) -> None:
    """ALLOWANCE_EXHAUSTED's details, and the CONFLICT of an allowance declared otherwise."""
    exhausted = {"remaining": remaining, "windowStart": format_ms(window_start_ms), "waiting": waiting}
    assert wire.dumps(AllowanceExhaustedView(remaining, window_start_ms, waiting)) == orjson.dumps(exhausted)
    mismatch = {"id": allowance_id, "unitsLimit": remaining, "windowSeconds": window_ms // 1000}
    assert wire.dumps(AllowanceMismatchView(allowance_id, remaining, window_ms)) == orjson.dumps(mismatch)


def test_the_quota_components_list_exactly_the_encoders_fields_with_their_json_types() -> None:
    _fields_and_types("Allowance", (quota_shapes.ALLOWANCE, quota_shapes.REFUNDED_ALLOWANCE))
    _fields_and_types("Consumption", (quota_shapes.CONSUMPTION,))
    _fields_and_types("Waiter", (quota_shapes.ALLOWANCE_WAITER,))
    _fields_and_types("Cooldown", (quota_shapes.COOLDOWN,))
    allowance = _components()["Allowance"]["properties"]
    assert allowance["windowStart"] == wire.TIMESTAMP and allowance["cooldownUntil"] == wire.nullable(wire.TIMESTAMP)
    assert _components()["Waiter"]["properties"]["state"]["enum"] == ["WAITING", "GRANTED", "EXPIRED", "CANCELLED"]


# -- budgets -------------------------------------------------------------------------------------


def budget_before(view: BudgetView | BudgetReservationsView) -> dict[str, Any]:
    """`BudgetTable.view` as it was (`reservations=True` for a budget read by its id)."""
    body: dict[str, Any] = {
        "id": view.id,
        "name": view.name,
        "currency": view.currency,
        "scale": view.scale,
        "limitMinor": str(view.limit_minor),
        "reservedMinor": str(view.reserved_minor),
        "spentMinor": str(view.spent_minor),
        "availableMinor": str(view.available_minor),
        "createdAt": format_ms(view.created_ms),
    }
    if isinstance(view, BudgetReservationsView):
        body["reservations"] = [
            {"id": r.id, "scopeId": r.scope_id, "state": r.state, "reservedMinor": str(r.reserved_minor), "holder": r.holder}
            for r in view.reservations
        ]
    return body


def reservation_before(view: ReservationView) -> dict[str, Any]:
    """`BudgetTable.reservation_view` as it was."""
    return {
        "reservationId": view.reservation_id,
        "budgetId": view.budget_id,
        "scopeId": view.scope_id,
        "holder": view.holder,
        "state": view.state,
        "reservedMinor": str(view.reserved_minor),
        "settledMinor": str(view.settled_minor),
        "settleBy": format_ms(view.settle_by_ms),
        "createdAt": format_ms(view.created_ms),
    }


# Amounts of any size: a JSON number would lose them past 2**53, a decimal string does not.
_minor = st.integers(0, 10**30)


@st.composite
def budgets(draw: st.DrawFn) -> BudgetView | BudgetReservationsView:
    limit, spent = draw(_minor), draw(_minor)
    spent = min(spent, limit)
    reserved = draw(st.integers(0, limit - spent))
    fields = (draw(_text), draw(_text), draw(_text), draw(st.integers(0, 18)), limit, reserved, spent, limit - spent - reserved, draw(_instant))
    if not draw(st.booleans()):
        return BudgetView(*fields)
    active = st.builds(ActiveReservationView, _text, _text, st.just(ACTIVE), _minor, _text)
    return BudgetReservationsView(*fields, tuple(draw(st.lists(active, max_size=4))))


@st.composite
def reservations(draw: st.DrawFn) -> ReservationView:
    return ReservationView(
        draw(_text), draw(_text), draw(_text), draw(_text), draw(st.sampled_from(["ACTIVE", "SETTLED", "VOIDED", "RELEASED"])),
        draw(_minor), draw(_minor), draw(_instant), draw(_instant),
    )


_BUDGET_CASES: list[tuple[str, Callable[..., Any], Callable[[Any], dict[str, Any]], str]] = [
    ("budget", budgets, budget_before, "Budget"),
    ("reservation", reservations, reservation_before, "Reservation"),
]


@settings(max_examples=150, deadline=None)
@given(st.one_of(*(st.tuples(st.just(index), case[1]()) for index, case in enumerate(_BUDGET_CASES))))
def test_every_budget_view_encodes_to_the_bytes_the_clients_read_before(case: tuple[int, Any]) -> None:
    index, view = case
    _, _, before, component = _BUDGET_CASES[index]
    _same_bytes(view, before(view))
    _validates(view, component)


@settings(max_examples=100, deadline=None)
@given(_minor, _minor, _text, _text, st.integers(0, 18))
def test_the_budget_refusals_carry_the_details_they_carried_before(available, requested, budget_id, currency, scale) -> None:
    """INSUFFICIENT_BUDGET's details, and the CONFLICT of a budget declared otherwise."""
    insufficient = {"availableMinor": str(available), "requestedMinor": str(requested)}
    assert wire.dumps(InsufficientBudgetView(available, requested)) == orjson.dumps(insufficient)
    mismatch = {"id": budget_id, "limitMinor": str(available), "currency": currency, "scale": scale}
    assert wire.dumps(BudgetMismatchView(budget_id, available, currency, scale)) == orjson.dumps(mismatch)


def test_the_budget_components_list_exactly_the_encoders_fields_with_their_json_types() -> None:
    _fields_and_types("Budget", (budget_shapes.BUDGET, budget_shapes.BUDGET_RESERVATIONS))
    _fields_and_types("Reservation", (budget_shapes.RESERVATION,))
    budget = _components()["Budget"]["properties"]
    assert budget["limitMinor"] == {"type": "string", "pattern": "^(0|[1-9][0-9]*)$", "description": "minor units"}
    assert budget["reservations"]["items"] == budget_shapes.ACTIVE_RESERVATION.schema()
    assert "reservations" not in _components()["Budget"]["required"]


# -- work limits ---------------------------------------------------------------------------------


def work_limit_before(view: WorkLimitView) -> dict[str, Any]:
    """`WorkLimitTable.view` as it was."""
    return {
        "id": view.id,
        "name": view.name,
        "scopeId": view.scope_id,
        "maxOutstanding": view.max_outstanding,
        "outstanding": view.outstanding,
        "createdAt": format_ms(view.created_ms),
    }


@settings(max_examples=100, deadline=None)
@given(st.builds(WorkLimitView, _text, _text, _text, st.integers(1, 10**9), _count, _instant))
def test_every_work_limit_encodes_to_the_bytes_the_clients_read_before(view: WorkLimitView) -> None:
    _same_bytes(view, work_limit_before(view))
    _validates(view, "WorkLimit")


@settings(max_examples=100, deadline=None)
@given(_count, st.integers(1, 10**9))
def test_a_full_work_limit_refusal_carries_the_details_it_carried_before(outstanding: int, max_outstanding: int) -> None:
    before = {"outstanding": outstanding, "maxOutstanding": max_outstanding}
    assert wire.dumps(WorkLimitFullView(outstanding, max_outstanding)) == orjson.dumps(before)


def test_the_work_limit_component_lists_exactly_the_encoders_fields_with_their_json_types() -> None:
    _fields_and_types("WorkLimit", (work_limit_shapes.WORK_LIMIT,))
    assert _components()["WorkLimit"]["required"] == ["id", "name", "scopeId", "maxOutstanding", "outstanding", "createdAt"]


# -- admission -----------------------------------------------------------------------------------


def admission_before(view: AdmissionView) -> dict[str, Any]:
    """`admit`'s reply as it was (its lease's end as the delivery's view wrote it)."""
    return {
        "taskId": view.task_id,
        "taskKey": view.task_key,
        "messageId": view.message_id,
        "scopeId": view.scope_id,
        "payload": view.payload,
        "attempt": view.attempt,
        "token": view.token,
        "leaseExpiresAt": format_ms(view.expires_ms),
        "leaseSeconds": view.lease_ms // 1000,
        "grants": [
            {"grantId": g.grant_id, "permitId": g.pool_id, "name": g.name, "units": g.units, "leaseExpiresAt": format_ms(g.expires_ms)}
            for g in view.grants
        ],
        "consumptions": [
            {"consumptionId": c.consumption_id, "allowanceId": c.allowance_id, "name": c.name, "units": c.units,
             "windowStart": format_ms(c.window_start_ms)}
            for c in view.consumptions
        ],
        "reservations": list(view.reservations),
    }


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def admissions(draw: st.DrawFn) -> AdmissionView:
    end = draw(_instant)
    grants = draw(st.lists(st.builds(AdmittedGrantView, _text, _text, _text, st.integers(1, 2**40), st.just(end)), max_size=3))
    consumptions = draw(st.lists(st.builds(AdmittedConsumptionView, _text, _text, _text, st.integers(1, 2**40), _instant), max_size=3))
    return AdmissionView(
        draw(_maybe_text), draw(_maybe_text), draw(_text), draw(_text), draw(_json), draw(st.integers(1, 10**6)), draw(_text),
        end, draw(_lease_ms), tuple(grants), tuple(consumptions), tuple(draw(st.lists(_text, max_size=3))),
    )


@settings(max_examples=150, deadline=None)
@given(admissions())
def test_every_admission_encodes_to_the_bytes_the_clients_read_before(view: AdmissionView) -> None:
    _same_bytes(view, admission_before(view))
    _validates(view, "Admission")


def test_the_admission_component_lists_exactly_the_encoders_fields_with_their_json_types() -> None:
    _fields_and_types("Admission", (admission_shapes.ADMISSION,))
    admission = _components()["Admission"]["properties"]
    assert admission["grants"]["items"] == admission_shapes.ADMITTED_GRANT.schema()
    assert admission["consumptions"]["items"] == admission_shapes.ADMITTED_CONSUMPTION.schema()
    assert admission["reservations"] == {"type": "array", "items": {"type": "string"}}
