"""The blocking client's classes are twins of the async ones: every public member of an async
handle has its twin, under the same name and with the same parameters (names, kinds, defaults),
and every handle a user reaches from `AsyncRunstate` has a blocking twin. Each twin says which
async class it wraps through `twin_of` (`runstate._docs.TWINS`)."""

from __future__ import annotations

import ast
import functools
import inspect
import os
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

import runstate
from runstate import blocking, capacity, claims, client, coordination, mailboxes, scopes, tasks
from runstate._docs import TWINS
from tests.interrupted import interrupt

# What an async handle has that its twin has not, on purpose, with the reason.
LEFT_OUT = {
    client.AsyncRunstate: {
        "aclose": "close() here",
        "events": "rs.events(...) is the run-bound API's (a run's events); the space's log is event_log",
    },
    claims.ClaimLease: {
        "aclose": "close() here",
        "lost_at": "a time on the client loop's clock, which the caller's thread does not read",
    },
    capacity.PoolLease: {
        "aclose": "close() here",
        "lost_at": "a time on the client loop's clock, which the caller's thread does not read",
    },
    mailboxes.MailboxRef: {
        "by_id": "a constructor over the async client's context: scope.mailbox_by_id() here",
        "by_name": "a constructor over the async client's context: scope.mailbox() here",
    },
}

# Every handle of the async client a caller reaches (from the client, a run, a mailbox...).
HANDLES = {
    client.AsyncRunstate, client.ScopesAPI, client.MailboxesAPI, scopes.ScopeHandle, claims.ClaimRef, claims.ClaimLease,
    mailboxes.MailboxRef, mailboxes.Delivery, tasks.TaskTicket, capacity.PoolsAPI, capacity.QuotasAPI,
    capacity.WorkLimitsAPI, capacity.BudgetsAPI, capacity.PoolRef, capacity.PoolLease, capacity.QuotaRef,
    capacity.BudgetRef, capacity.BudgetReservation, capacity.AdmittedWork, coordination.BarriersAPI,
    coordination.BarrierHandle, coordination.TimersAPI, coordination.TimerHandle, coordination.GroupsAPI,
    coordination.GroupHandle, coordination.EventsAPI, coordination.DiagnosticsAPI,
}


def attributes_set_on_self(cls: type) -> set[str]:
    """The names a class (and its bases of the package) assign on `self` anywhere in its code."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("runstate"):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                for item in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name) and item.value.id == "self":
                        names.add(item.attr)
    return names


def public(cls: type) -> set[str]:
    every = set(dir(cls)) | attributes_set_on_self(cls)
    return {name for name in every if not name.startswith("_")}


def parameters(function, owner: type) -> list[tuple[str, object, object]]:
    """(name, kind, default) of each parameter but `self`; a `**name` of an async method stands
    for the keyword-only parameters of its method `name` (`PoolRef.run(fn, **acquire)`)."""
    found = []
    for parameter in list(inspect.signature(function).parameters.values())[1:]:
        if parameter.kind is inspect.Parameter.VAR_KEYWORD and hasattr(owner, parameter.name):
            found += [
                item for item in parameters(getattr(owner, parameter.name), owner)
                if item[1] is inspect.Parameter.KEYWORD_ONLY
            ]
            continue
        found.append((parameter.name, parameter.kind, parameter.default))
    return found


def test_every_handle_of_the_async_client_has_a_blocking_twin():
    twins = {source: twin for twin, source in TWINS.items() if twin.__module__.startswith("runstate")}
    assert HANDLES - set(twins) == set()
    for twin in twins.values():
        assert twin.__name__ in blocking.__all__, twin


def test_each_twin_has_every_member_of_its_async_class():
    for twin, source in TWINS.items():
        if source not in HANDLES:
            continue
        missing = public(source) - public(twin) - set(LEFT_OUT.get(source, {}))
        assert not missing, f"{twin.__name__} lacks {sorted(missing)} of {source.__name__}"
        assert "__getattr__" not in vars(twin), twin


def test_each_twin_takes_the_same_parameters_and_blocks():
    """Same names, kinds and defaults; a coroutine function's twin is a plain function, an async
    iterator's a plain iterator, an async context manager's a context manager."""
    compared = 0
    for twin, source in TWINS.items():
        if source not in HANDLES:
            continue
        for name in public(source) & public(twin):
            ours, theirs = inspect.getattr_static(twin, name, None), inspect.getattr_static(source, name, None)
            if not inspect.isfunction(theirs) or not inspect.isfunction(ours):
                continue
            assert parameters(ours, twin) == parameters(theirs, source), f"{twin.__name__}.{name}"
            assert not inspect.iscoroutinefunction(ours) and not inspect.isasyncgenfunction(ours), f"{twin.__name__}.{name}"
            if inspect.isasyncgenfunction(theirs):
                assert inspect.isgeneratorfunction(ours), f"{twin.__name__}.{name}"
            compared += 1
        if hasattr(source, "__aenter__"):
            assert hasattr(twin, "__enter__") and hasattr(twin, "__exit__"), twin
    assert compared > 100


def test_a_twin_without_a_docstring_of_its_own_reads_its_async_twins():
    for twin, source in ((blocking.BlockingPool, capacity.PoolRef), (blocking.BlockingBarrier, coordination.BarrierHandle),
                         (blocking.BlockingQuota, capacity.QuotaRef), (blocking.BlockingGroup, coordination.GroupHandle)):
        for name in ("acquire", "take", "wait", "join_task"):
            if hasattr(source, name):
                assert inspect.getdoc(getattr(twin, name)) == inspect.getdoc(getattr(source, name)), name


# -- against a real server ------------------------------------------------------------------------
# The blocking client runs its own loop in a thread of its own, so these talk to a server process
# over HTTP (as tests/sdk/test_sdk_operator.py's blocking tests do), in real time: the waits below
# are bounded by timeouts of a few hundred milliseconds, and one timer of 1 s.


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def rs(module_server):
    with runstate.Runstate(
        api_key=module_server.api_key, space_id=module_server.space_id, base_url=module_server.base_url, holder="twins",
    ) as client:
        yield client


def test_a_pool_grant_is_a_context_manager_and_a_full_pool_times_out(rs):
    """ensure() creates once and checks after; `with pool.acquire()` holds the units for the block
    and gives them back after it (an error inside too); a full pool answers try_acquire with
    capacity-unavailable, acquire(wait=False) with CAPACITY_UNAVAILABLE, and acquire() with
    WaitTimeoutError once its timeout has passed."""
    name = unique("gpu")
    created = rs.pools.ensure(name, capacity=2)
    assert rs.pools.ensure(name, capacity=2)["id"] == created["id"]
    with pytest.raises(runstate.ConflictError):
        rs.pools.ensure(name, capacity=3)
    assert any(row["name"] == name for row in rs.pools.list())
    run = rs.scopes.create(name="pools")
    pool = run.pool(name)
    assert pool.resolve_id() == created["id"] and run.pool_by_id(created["id"]).status()["unitsTotal"] == 2
    with pool.acquire(units=2, lease_seconds=10) as lease:
        assert isinstance(lease, blocking.BlockingPoolLease) and lease.units == 2 and lease.key == lease.grant_id
        assert lease.generation is None and not lease.is_lost and len(lease.token()) > 0
        assert pool.status()["unitsAvailable"] == 0
        assert pool.try_acquire() == {"kind": "capacity-unavailable"}
        with pytest.raises(runstate.ConflictError) as full:
            pool.acquire(wait=False)
        assert full.value.code == "CAPACITY_UNAVAILABLE"
        started = time.monotonic()
        with pytest.raises(runstate.WaitTimeoutError):
            pool.acquire(timeout_ms=300)
        assert time.monotonic() - started >= 0.3
        lease.renew(20)
    assert pool.status()["unitsAvailable"] == 2
    with pytest.raises(RuntimeError, match="inside"):
        with pool.acquire() as lease:
            raise RuntimeError("inside")
    assert pool.status()["unitsAvailable"] == 2
    attempt = pool.try_acquire(lease_seconds=10)
    assert attempt["kind"] == "acquired"
    attempt["lease"].release()
    assert pool.status()["unitsAvailable"] == 2


def test_a_pools_run_takes_a_plain_function_in_a_worker_thread(rs):
    """run(fn) calls fn with the blocking lease in a worker thread (where blocking calls work),
    returns its value and gives the units back; an error fn raises goes up as it is, units back."""
    name = unique("slots")
    rs.pools.ensure(name, capacity=1)
    run = rs.scopes.create(name="pool-run")
    caller = threading.current_thread()

    def work(lease):
        assert threading.current_thread() is not caller
        assert run.pool(name).try_acquire() == {"kind": "capacity-unavailable"}
        return lease.units, isinstance(lease, blocking.BlockingPoolLease)

    assert run.pool(name).run(work, lease_seconds=10) == (1, True)

    def fails(lease):
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        run.pool(name).run(fails, timeout_ms=1_000)
    assert run.pool(name).status()["unitsAvailable"] == 1


def test_a_quota_takes_until_used_then_refuses_or_times_out(rs):
    """try_take consumes, then says exhausted; take(wait=False) raises at once; take() waits in the
    server's line until its timeout (the waiter is then cancelled); cooldown is reported back; an
    unknown name is NotFoundError."""
    name = unique("llm")
    row = rs.quotas.ensure(name, units_per_window=2, window_seconds=3600)
    assert rs.quotas.ensure(name, units_per_window=2, window_seconds=3600)["id"] == row["id"]
    assert any(item["name"] == name for item in rs.quotas.list())
    run = rs.scopes.create(name="quotas")
    quota = run.quota(name)
    assert quota.try_take(units=2)["kind"] == "consumed"
    assert quota.try_take() == {"kind": "exhausted"}
    with pytest.raises(runstate.WaitTimeoutError):
        quota.take(wait=False)
    with pytest.raises(runstate.WaitTimeoutError):
        quota.take(timeout_ms=300)
    assert run.quota_by_id(row["id"]).status()["remaining"] == 0
    assert quota.cooldown(5, reason="429 upstream")["reason"] == "429 upstream"
    with pytest.raises(runstate.NotFoundError):
        run.quota(unique("missing")).try_take()


def test_a_budget_refuses_an_overspend_and_its_reservation_reads_each_settlement(rs):
    """A reservation that does not fit is BudgetExceededError (INSUFFICIENT_BUDGET); settle() and
    void() update what the reservation reads; status() counts in minor units; an amount finer than
    the scale is a ValidationError before anything is sent."""
    name = unique("spend")
    budget_row = rs.budgets.ensure(name, currency="EUR", scale=2, limit="1")
    assert budget_row["limitMinor"] == "100"
    run = rs.scopes.create(name="budgets")
    budget = run.budget(name)
    reservation = budget.reserve(amount="0.60")
    assert isinstance(reservation, blocking.BlockingBudgetReservation)
    assert (reservation.reserved, reservation.reserved_minor, reservation.state) == ("0.60", "60", "ACTIVE")
    with pytest.raises(runstate.BudgetExceededError) as over:
        budget.reserve(amount="0.50")
    assert over.value.code == "INSUFFICIENT_BUDGET"
    assert reservation.settle(amount="0.10", usage_key="call-1")["state"] == "ACTIVE" and reservation.reserved == "0.50"
    reservation.void(usage_key="call-1:void")
    assert reservation.state == "VOIDED"
    status = run.budget_by_id(budget_row["id"]).status()
    assert (status["spentMinor"], status["availableMinor"]) == ("10", "90")
    with pytest.raises(runstate.ValidationError):
        budget.reserve(amount="0.001")
    limit_name = unique("crawl")
    assert rs.work_limits.ensure(limit_name, scope_id=run.id, max_outstanding=1)["maxOutstanding"] == 1


def test_a_barrier_wait_is_released_by_the_last_arrival_from_another_thread(rs):
    """wait() in this thread returns RELEASED when another thread arrives last; a wait on a barrier
    short of its target times out; one whose run was cancelled raises BarrierCancelledError."""
    run = rs.scopes.create(name="barriers")
    barrier = run.barriers.create(target=2)
    assert run.barriers.scope_id == run.id and barrier.arrive(key="a")["arrived"] == 1
    with pytest.raises(runstate.WaitTimeoutError):
        barrier.wait(timeout_ms=300, poll_ms=50)
    arrival = threading.Thread(target=lambda: run.barriers.get(barrier.id).arrive(key="b"))
    arrival.start()
    assert barrier.wait(timeout_ms=5_000, poll_ms=50)["state"] == "RELEASED"
    arrival.join()
    other = run.barriers.create(target=2)
    run.cancel()
    with pytest.raises(runstate.BarrierCancelledError):
        other.wait(timeout_ms=2_000, poll_ms=50)


def test_a_timer_is_waited_for_and_a_cancelled_one_refuses_the_wait(rs):
    """wait() returns at the firing with its time, and acknowledges the timer; a timer cancelled
    before it fires makes wait() raise ConflictError; a wait shorter than the timer times out."""
    run = rs.scopes.create(name="timers")
    timer = run.timers.create(after_seconds=1)
    assert run.timers.scope_id == run.id and timer.scope_id == run.id and timer.status()["state"] == "ARMED"
    with pytest.raises(runstate.WaitTimeoutError):
        timer.wait(timeout_ms=100)
    fired = timer.wait(timeout_ms=10_000)
    assert fired["fired_at"] >= timer.fire_at and timer.status()["state"] == "ACKED"
    other = run.timers.create(after_seconds=60)
    assert other.cancel()["state"] == "CANCELLED"
    with pytest.raises(runstate.ConflictError):
        run.timers.get(other.id).wait(timeout_ms=2_000)


def test_a_group_joins_an_outside_task_and_is_waited_for(rs):
    """A group's members come from submit() (blocking tickets) and join_task(); accepting one
    finalizes a FIRST_ACCEPTED group, which wait() returns; seal() then refuses, close() repeats."""
    mailbox = unique("answers")
    rs.mailboxes.ensure(mailbox, mode="WORK")
    run = rs.scopes.create(name="groups")
    group = run.groups.create(mailbox=mailbox, condition="FIRST_ACCEPTED", parent_scope_id=run.id)
    first = group.submit({"n": 1}, key="a")
    assert isinstance(first, blocking.BlockingTicket) and first.scope_id == group.scope_id != run.id
    outside = run.mailbox(mailbox).submit({"x": 1}, key="x")
    group.join_task(outside.id)
    assert group.status()["state"] == "OPEN"
    with pytest.raises(runstate.WaitTimeoutError):
        group.wait(timeout_ms=200, poll_ms=50)
    group.reject(first.id)
    group.accept(outside.id)
    assert group.wait(timeout_ms=5_000, poll_ms=50) == {"outcome": "SUCCEEDED", "outcomeReason": "threshold_reached"}
    with pytest.raises(runstate.ConflictError):
        group.seal()
    assert group.close()["state"] == "FINALIZED"
    assert run.groups.by_id(group.id).status()["outcome"] == "SUCCEEDED"


def test_the_event_log_lists_and_watches_until_the_stop_flag(rs):
    """event_log.list(latest=0) gives the cursor of now; watch() from it yields what happened
    after, each with its page's cursor, and ends when the stop flag is set; rs.watch() is the same
    watch. diagnostics reads the run."""
    cursor = rs.event_log.list(latest=0)["nextCursor"]
    run = rs.scopes.create(name="watched")
    stop = rs.new_event()
    seen = []
    for event in rs.event_log.watch(cursor=cursor, scope_id=run.id, wait_seconds=1, stop_event=stop):
        seen.append(event)
        if event["type"] == "scope.cancelled":
            stop.set()
        elif len(seen) == 1:
            run.cancel()
    assert [event["type"] for event in seen][0] == "scope.created" and seen[-1]["type"] == "scope.cancelled"
    assert all(event["cursor"] for event in seen)
    again = next(iter(rs.watch(cursor=cursor, scope_id=run.id, wait_seconds=1)))
    assert again["eventId"] == seen[0]["eventId"]
    assert rs.diagnostics.run(run.id)["scopeId"] == run.id and rs.diagnostics.workers(run.id) == []
    assert "waits" in rs.diagnostics.waits()


def test_admit_gives_a_delivery_with_its_grant_and_a_blocking_ticket(rs):
    """mailbox.admit() takes the oldest task whose requirements fit, with them: its ticket and
    delivery are blocking twins, its grant is held until the delivery is settled; nothing fits
    while the pool is used up, so a second admit() answers None."""
    pool, mailbox = unique("admit-gpu"), unique("admit-jobs")
    rs.pools.ensure(pool, capacity=1)
    rs.mailboxes.ensure(mailbox, mode="WORK")
    run = rs.scopes.create(name="admission")
    box = run.mailbox(mailbox)
    needs = {"pools": [{"name": pool, "units": 1}]}
    ticket = box.submit({"n": 1}, key="a", requirements=needs)
    box.submit({"n": 2}, key="b", requirements=needs)
    work = box.admit(lease_seconds=30)
    assert isinstance(work, blocking.BlockingAdmittedWork) and isinstance(work.delivery, blocking.BlockingDelivery)
    assert work.task is not None and work.task.id == ticket.id and work.delivery.data == {"n": 1} and work.attempt == 1
    assert work.resources["grants"][0]["units"] == 1
    assert run.pool(pool).status()["unitsAvailable"] == 0
    assert box.admit() is None
    work.delivery.complete(result={"payload": "done"})
    assert ticket.result(timeout_ms=5_000)["state"] == "SUCCEEDED"
    assert run.pool(pool).status()["unitsAvailable"] == 1


def test_a_holder_view_holds_under_its_own_name_and_session(rs):
    """with_holder() gives a view whose claims and grants are held under its holder and one fresh
    session of its own, kept across calls; the client's own calls still go as the client; closing
    the view closes nothing."""
    run = rs.scopes.create(name="holders")
    view = rs.with_holder("agent-2")
    assert view.holder == "agent-2" and view.session == view.session != rs.session and rs.holder == "twins"
    elsewhere = view.with_space("elsewhere")
    assert (elsewhere.space_id, elsewhere.holder, elsewhere.session) == ("elsewhere", "agent-2", view.session)
    lease = view.scope(run.id).claim("k").acquire()
    assert rs.scope(run.id).claim("k").try_acquire() == {"kind": "busy"}
    assert {(row["key"], row["holder"]) for row in run.claims()["claims"]} == {("k", "agent-2")}
    lease.release()
    view.close()
    assert rs.scopes.create().id
    with pytest.raises(runstate.ValidationError):
        rs.with_holder("")


INTERRUPTED_POOL_RUN = """
    import os, time
    from runstate import Runstate

    name = os.environ["POOL"]
    rs = Runstate()
    rs.pools.ensure(name, capacity=1)
    run = rs.scopes.create()

    def work(lease):
        print("started", flush=True)
        time.sleep(3600)

    run.pool(name).run(work, lease_seconds=60)
"""


def test_ctrl_c_in_a_pools_run_gives_the_units_back_at_once(module_server, rs):
    """SIGINT while run(fn) holds a 60 s grant: the process ends with KeyboardInterrupt and the
    units are free at once, not when the lease would have run out."""
    name = unique("interrupted")
    interrupt(module_server, INTERRUPTED_POOL_RUN, POOL=name)
    row = next(row for row in rs.pools.list() if row["name"] == name)
    assert row["unitsAvailable"] == 1, row


def test_the_documented_blocking_capacity_example_runs_verbatim(module_server, monkeypatch):
    """docs/python.md's blocking example, run as written against a server (its `render` is the
    reader's own function: here one that checks it runs while the unit is held)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "python.md").read_text()
    after = text[text.index("<!-- blocking-capacity-snippet"):]
    start = after.index("```python\n") + len("```python\n")
    snippet = after[start:after.index("\n```", start) + 1]
    monkeypatch.setattr(runstate, "Runstate", functools.partial(
        runstate.Runstate, api_key=module_server.api_key, space_id=module_server.space_id,
        base_url=module_server.base_url,
    ))
    held = []

    def render(token):
        rows = {row["name"]: row for row in namespace["rs"].pools.list()}
        held.append((token, rows["gpu"]["unitsAvailable"]))
        return "frames"

    namespace = {"render": render}
    try:
        exec(compile(snippet, "docs/python.md", "exec"), namespace)
    finally:
        if "rs" in namespace:
            namespace["rs"].close()
    assert namespace["frames"] == "frames" and [units for _, units in held] == [1, 1] and held[0][0] != held[1][0]
