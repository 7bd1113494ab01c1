"""Why is it waiting? One check per constraint, in the order the kernel decides them."""

from __future__ import annotations

from typing import Any

from ....actors.errors import quote
from .reading import _acquirers, _read, _required
from ....actors.space import SpaceState
from ...services import RouteKernel


def _check(ok: bool, what: str, detail: str) -> dict[str, Any]:
    return {"ok": ok, "what": what, "detail": detail}


def _seconds(ms: int) -> str:
    seconds = max(0, ms) / 1000
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _amount(budget: Any, minor: int) -> str:
    """An amount in a budget's minor units, written in its currency's units (500 at scale 2: 5.00)."""
    scale = budget.scale
    return f"{minor / 10 ** scale:.{scale}f}" if scale else str(minor)


def _money(budget: Any, minor: int) -> str:
    return f"{_amount(budget, minor)} {budget.currency}"


def _why_task(space: SpaceState, found: Any, now_ms: int) -> dict[str, Any]:
    """Each constraint a queued task meets or not before a worker can take it, in the kernel's order."""
    checks = []
    tree = space.scopes
    state = tree.effective(tree.get(found.scope_id), now_ms)
    checks.append(_check(state == "ACTIVE", "Run", f"run {found.scope_id} is {state.lower()}"
                         + ("" if state == "ACTIVE" else "; its tasks end with it")))
    if found.deadline_ms is not None:
        left = found.deadline_ms - now_ms
        checks.append(_check(left > 0, "Deadline", f"ends in {_seconds(left)}" if left > 0 else "has passed; the task expires"))
    message = space.messages.find(found.message_id)
    if message is not None and message.state == "DELAYED" and message.visible_ms > now_ms:
        checks.append(_check(False, "Retry backoff", f"attempt {message.attempts} failed; it can be taken again in "
                                                    f"{_seconds(message.visible_ms - now_ms)}"))
    mailbox = space.mailboxes.get(found.mailbox_id)
    if message is not None:
        ahead = sum(1 for other in space.messages.waiting_in_scopes([found.scope_id])
                    if other.mailbox_id == found.mailbox_id and other.seq < message.seq and other.state == "QUEUED")
        checks.append(_check(True, "Queue", f"{ahead} task(s) ahead of it in mailbox {mailbox.name} in this run"
                             if ahead else f"first in line in mailbox {mailbox.name} in this run"))
    needs = space.capacity.requirements.get(found.id, mailbox.requirements)
    if needs is not None:
        checks.extend(_capacity_checks(space, needs, found, message, now_ms))
    return {"checks": checks, "waiting": not all(check["ok"] for check in checks)}


def _capacity_checks(space: SpaceState, needs: dict[str, Any], found: Any, message: Any, now_ms: int) -> list[dict[str, Any]]:
    """Pools, quotas and budgets a task needs, as admission judges them (`admission._lacking`),
    and the older tasks of its queue that reserve the same resources first."""
    part = space.capacity
    checks = []
    for pool_id, units in needs["pools"]:
        pool = part.pools.get(pool_id)
        in_use, room, line = part.pools.in_use(pool, now_ms), part.pools.room(pool, now_ms), part.pools.lined_up(pool, now_ms)
        detail = f"pool {pool.name}: {in_use}/{pool.units_total} units in use; needs {units}"
        if line:
            detail += f"; {line} waiter(s) in its line go first"
        checks.append(_check(units <= room, "Pool", detail + _soonest_lease(part.pools, pool, now_ms, units > room)))
    for allowance_id, units in needs["quotas"]:
        allowance = part.allowances.get(allowance_id)
        checks.append(_quota_check(part.allowances, allowance, units, now_ms))
    for budget_id, amount in needs["budgets"]:
        checks.append(_budget_check(part.budgets, part.budgets.get(budget_id), int(amount)))
    if message is not None:
        blockers = _older_blockers(space, needs, found, message, now_ms)
        if blockers:
            checks.append(_check(False, "Order", "older task(s) in its queue wait for the same resources and go first: "
                                 + ", ".join(blockers[:5]) + (" …" if len(blockers) > 5 else "")))
    return checks


def _soonest_lease(pools: Any, pool: Any, now_ms: int, lacking: bool) -> str:
    if not lacking:
        return ""
    held = [g for g in pool.grants.values() if pools.held(g, now_ms)]
    if not held:
        return ""
    soonest = min(held, key=lambda g: g.expires_ms)
    return f"; the soonest lease ends in {_seconds(soonest.expires_ms - now_ms)} (held by {soonest.holder})"


def _quota_check(allowances: Any, allowance: Any, units: int, now_ms: int, ahead: int | None = None) -> dict[str, Any]:
    """A quota against `units`; `ahead`, for a waiter in its line, the waiters before it (else
    every waiter in the line goes first)."""
    window_end = allowance.window_at(now_ms) + allowance.window_ms
    if allowance.cooling_at(now_ms):
        reason = f" ({allowance.cooldown_reason})" if allowance.cooldown_reason else ""
        return _check(False, "Quota", f"quota {allowance.name} cools down{reason} for {_seconds(allowance.cooldown_until_ms - now_ms)}")
    used, waiting = allowance.used_at(now_ms), allowances.waiting_at(allowance, now_ms) if ahead is None else ahead
    detail = f"quota {allowance.name}: {used}/{allowance.units_limit} used in this window; needs {units}"
    fits = units <= allowance.remaining_at(now_ms) and not waiting
    if waiting:
        detail += f"; {waiting} waiter(s) go first"
    if not fits:
        detail += f"; the window resets in {_seconds(window_end - now_ms)}"
    return _check(fits, "Quota", detail)


def _budget_check(budgets: Any, budget: Any, amount: int) -> dict[str, Any]:
    """What is left of a budget, what is reserved and by which runs, against what a task reserves."""
    by_run: dict[str, int] = {}
    for reservation in budget.reservations.values():
        if reservation.state == "ACTIVE" and reservation.reserved:
            by_run[reservation.scope_id] = by_run.get(reservation.scope_id, 0) + reservation.reserved
    detail = f"budget {budget.name}: {_amount(budget, budget.available)} of {_money(budget, budget.limit)} left"
    if budget.spent:
        detail += f", {_amount(budget, budget.spent)} spent"
    if by_run:
        runs = sorted(by_run.items(), key=lambda item: -item[1])
        if len(runs) == 1:
            detail += f", {_amount(budget, budget.reserved)} reserved by run {runs[0][0]}"
        else:
            detail += f", {_amount(budget, budget.reserved)} reserved (" + ", ".join(
                f"run {scope}: {_amount(budget, minor)}" for scope, minor in runs[:3]) + (", …)" if len(runs) > 3 else ")")
    detail += f"; needs {_money(budget, amount)}"
    if amount > budget.limit - budget.spent:
        detail += "; more than it can ever give back, so it reserves nothing ahead and never fits"
    return _check(amount <= budget.available, "Budget", detail)


def _older_blockers(space: SpaceState, needs: dict[str, Any], found: Any, message: Any, now_ms: int) -> list[str]:
    """Older queued tasks of the same queue that do not fit and name a resource this one needs:
    admission keeps those resources for them (`admission.admit`)."""
    wants = {entry[0] for kind in ("pools", "quotas", "budgets") for entry in needs[kind]}
    part, blockers = space.capacity, []
    defaults = space.mailboxes.get(found.mailbox_id).requirements
    for other in space.messages.waiting_in_scopes([found.scope_id]):
        if other.mailbox_id != found.mailbox_id or other.seq >= message.seq or other.task_id is None or other.state != "QUEUED":
            continue
        theirs = part.requirements.get(other.task_id, defaults)
        if theirs is None:
            continue
        if wants & {entry[0] for kind in ("pools", "quotas", "budgets") for entry in theirs[kind]}:
            blockers.append(other.task_id)
    return blockers


async def why_task(kernel: RouteKernel, space_id: str, task_id: str) -> dict[str, Any]:
    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        space = _required(space, f"task {quote(task_id)}")
        found = space.tasks.get(task_id)
        if found.state != "QUEUED":
            return {"subject": f"task {task_id}", "state": found.state, "checks": [], "waiting": False}
        return {"subject": f"task {task_id}", "state": found.state, **_why_task(space, found, now_ms)}

    return await _read(kernel, space_id, view)


async def why_claim(kernel: RouteKernel, space_id: str, run: str, key: str) -> dict[str, Any]:
    """Why an acquire of a claim waits (or would): the run, who holds it until when, who else waits."""

    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        space = _required(space, f"claim {quote(key)}")
        tree = space.scopes
        state = tree.effective(tree.get(run), now_ms)
        claim = space.claims.get(run, key)
        checks = [_check(state == "ACTIVE", "Run", f"run {run} is {state.lower()}" + ("" if state == "ACTIVE" else "; nobody may take it"))]
        held = claim is not None and claim.held_at(now_ms)
        if claim is not None and held:
            renewed = claim.expires_ms - claim.lease_ms
            detail = (f"held by {claim.holder} at generation {claim.generation} until its lease ends in "
                      f"{_seconds(claim.expires_ms - now_ms)}" + (f" (renewed {_seconds(now_ms - renewed)} ago)" if renewed > claim.acquired_ms else ""))
            checks.append(_check(False, "Holder", detail + "; an acquire waits for its release or its expiry"))
        else:
            generation = 1 if claim is None else claim.generation + 1
            checks.append(_check(True, "Holder", f"free: the next acquire gets generation {generation}"))
        waiting = _acquirers(kernel, space_id).get((run, key), 0)
        if waiting:
            checks.append(_check(not held, "Line", f"{waiting} acquire(s) wait for it, served in arrival order"))
        return {"subject": f"claim {key} in run {run}", "state": "HELD" if held else "FREE", "checks": checks,
                "waiting": held and waiting > 0}

    return await _read(kernel, space_id, view)


async def why_waiter(kernel: RouteKernel, space_id: str, waiter_id: str) -> dict[str, Any]:
    """Why a waiter in a pool's line or a quota's line is still waiting."""

    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        part = _required(space, f"waiter {quote(waiter_id)}").capacity
        if waiter_id.startswith("aw_"):
            waiter = part.allowances.waiter(waiter_id)
            allowance = part.allowances.get(waiter.allowance_id)
            checks = []
            if waiter.state == "WAITING":
                position = allowance.queue.index(waiter.id) + 1 if waiter.id in allowance.queue else None
                if position:
                    checks.append(_check(position == 1, "Line", f"{_ordinal(position)} in the line of quota {allowance.name}"))
                before = sum(1 for other in allowance.queue[: (position or 1) - 1] if now_ms < part.allowances.waiter(other).expires_ms)
                checks.append(_quota_check(part.allowances, allowance, waiter.units, now_ms, before))
                checks.append(_check(now_ms < waiter.expires_ms, "Time to live", f"gives up in {_seconds(waiter.expires_ms - now_ms)}"))
            return {"subject": f"quota waiter {waiter_id} ({waiter.holder})", "state": waiter.state, "checks": checks,
                    "waiting": waiter.state == "WAITING"}
        pool_waiter = part.pools.waiter(waiter_id)
        pool = part.pools.get(pool_waiter.pool_id)
        checks = []
        if pool_waiter.state in ("WAITING", "SIGNALED"):
            in_use = part.pools.in_use(pool, now_ms)
            position = pool.line.index(pool_waiter.id) + 1 if pool_waiter.id in pool.line else None
            ahead = [part.pools.waiter(w) for w in pool.line[: (position or 1) - 1]]
            free = pool.units_total - in_use - part.pools.held_back(pool, now_ms)
            detail = f"pool {pool.name}: {in_use}/{pool.units_total} units in use; needs {pool_waiter.units}"
            checks.append(_check(pool_waiter.state == "SIGNALED" or pool_waiter.units <= free, "Pool",
                                 detail + _soonest_lease(part.pools, pool, now_ms, pool_waiter.units > free)))
            if position:
                names = ", ".join(f"{w.holder} ({w.units})" for w in ahead[:5]) + (" …" if len(ahead) > 5 else "")
                checks.append(_check(position == 1, "Line", f"{_ordinal(position)} in line" + (f"; ahead: {names}" if ahead else "")))
            if pool_waiter.state == "SIGNALED" and pool_waiter.turn_ends_ms is not None:
                checks.append(_check(True, "Turn", f"its units are held for it; its turn ends in {_seconds(pool_waiter.turn_ends_ms - now_ms)}"))
            else:
                checks.append(_check(now_ms < pool_waiter.expires_ms, "Time to live", f"gives up in {_seconds(pool_waiter.expires_ms - now_ms)}"))
        return {"subject": f"pool waiter {waiter_id} ({pool_waiter.holder})", "state": pool_waiter.state, "checks": checks,
                "waiting": pool_waiter.state == "WAITING"}

    return await _read(kernel, space_id, view)
