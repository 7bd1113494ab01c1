"""The lists and the pages of one thing: runs, claims, tasks, queues, capacity, coordination,
events, and the space's usage and caps."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol, TypeVar

from ....actors import coordination_reads
from ....actors.caps import view as caps_view
from ....actors.claims import Claim
from ....actors.errors import quote
from ....actors.messages import Message
from ....actors.shapes import View
from ....actors.space import SpaceState
from ....actors.tasks import Task
from ....actors.timestamps import format_ms
from ...wire import TASK, encode
from .reading import (
    PAGE_MAX, _acquirers, _history, _paged, _read, _Reading, _required, _short_token, pretty, preview,
)
from .waiting import _money, _why_task
from ...services import RouteKernel
from ... import wire

# Rows of one run's subtree shown under it in the run tree; the rest are on the run's own page.
SUBTREE_ROWS_MAX = 20


class _Dated(Protocol):
    """A row of a coordination list (a task group, a barrier, a timer): listed by when it was made, then its id."""

    @property
    def created_ms(self) -> int: ...

    @property
    def id(self) -> str: ...


D = TypeVar("D", bound=_Dated)


# -- runs --------------------------------------------------------------------------------------


def _activity(space: SpaceState, now_ms: int) -> tuple[dict[str, set[str]], dict[str, int]]:
    """Per run: the holders of its live leases (claims, once keys, pools' units held apart from a
    delivery, and deliveries: as a run's page lists its workers), and how many of its messages
    wait to be delivered."""
    holders: dict[str, set[str]] = {}
    for claim in space.claims.held():
        if claim.held_at(now_ms) and claim.holder is not None:
            holders.setdefault(claim.scope_id, set()).add(claim.holder)
    for slot in space.once.all():
        if slot.held_at(now_ms) and slot.holder is not None:
            holders.setdefault(slot.scope_id, set()).add(slot.holder)
    for grant in space.capacity.pools.grants():
        if grant.message_id is None and now_ms < grant.expires_ms and grant.holder is not None:
            holders.setdefault(grant.scope_id, set()).add(grant.holder)
    waiting: dict[str, int] = {}
    for message in space.messages.live():
        if message.state == "LEASED":
            if message.holder is not None and now_ms < message.expires_ms:
                holders.setdefault(message.scope_id, set()).add(message.holder)
        else:
            waiting[message.scope_id] = waiting.get(message.scope_id, 0) + 1
    return holders, waiting


async def runs(kernel: RouteKernel, space_id: str, *, state: str | None, name: str | None, cursor: str | None, limit: int) -> dict[str, Any]:
    """The run tree: root runs newest first, each with its subtree (at most SUBTREE_ROWS_MAX rows)."""

    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        if space is None:
            return {"runs": [], "next": None, "total": 0, "rows": 0}
        tree = space.scopes
        holders, waiting = _activity(space, now_ms)
        acquiring: dict[str, int] = {}
        for (run_id, _), calls in _acquirers(kernel, space_id).items():
            acquiring[run_id] = acquiring.get(run_id, 0) + calls

        def row(scope: Any, depth: int) -> dict[str, Any]:
            return {
                **wire.encode(tree.view(scope, now_ms)), "depth": depth, "workers": sorted(holders.get(scope.id, ())),
                "waiting": waiting.get(scope.id, 0), "acquiring": acquiring.get(scope.id, 0),
            }

        def wanted(scope: Any) -> bool:
            return (state is None or tree.effective(scope, now_ms) == state) and (not name or name in (scope.name or ""))

        roots = (scope for scope in tree.all() if scope.parent_id is None and wanted(scope))
        chosen, following, total = _paged(roots, lambda s: (s.created_ms, s.id), (int, str), cursor, limit)
        rows = []
        for root in chosen:
            rows.append(row(root, 0))
            below = tree.subtree(root.id)[1:]
            for scope_id in below[:SUBTREE_ROWS_MAX]:
                scope = tree.get(scope_id)
                rows.append(row(scope, scope.depth - root.depth))
            if len(below) > SUBTREE_ROWS_MAX:
                rows.append({"more": len(below) - SUBTREE_ROWS_MAX, "id": root.id, "depth": 1})
        return {"runs": rows, "next": following, "total": total, "rows": sum(1 for row in rows if "more" not in row)}

    return await _read(kernel, space_id, view)


async def run(kernel: RouteKernel, space_id: str, scope_id: str) -> dict[str, Any]:
    """One run: its view, its ancestors, children, workers, what waits, counts, and its newest events."""

    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        space = _required(space, f"run {quote(scope_id)}")
        tree = space.scopes
        scope = tree.get(scope_id)
        ancestors = []
        parent = scope.parent_id
        while parent is not None:
            node = tree.get(parent)
            ancestors.append({"id": node.id, "name": node.name})
            parent = node.parent_id
        diagnosis = coordination_reads.run(_Reading(kernel, space), space.id, scope_id)
        children = [wire.encode(tree.view(tree.get(child), now_ms)) for child in scope.children[-PAGE_MAX:][::-1]]
        inside = frozenset(tree.subtree(scope_id))
        history = _history(space, lambda change: change[1] in inside)
        acquirers = [{"run": run_id, "key": key, "calls": calls}
                     for (run_id, key), calls in sorted(_acquirers(kernel, space.id).items()) if run_id in inside]
        ended = _history(space, lambda change: change[2] == "scope" and change[3] == scope_id and change[0] != "scope.created")
        return {
            "run": wire.encode(tree.view(scope, now_ms)), "ancestors": ancestors[::-1], "children": children,
            "childrenTotal": len(scope.children), **wire.encode(diagnosis), "acquirers": acquirers[:PAGE_MAX], "history": history,
            "endedBy": ended[0]["payload"].get("by") if ended else None,
        }

    return await _read(kernel, space_id, view)


# -- claims ------------------------------------------------------------------------------------


def _claim_row(claim: Any, now_ms: int) -> dict[str, Any]:
    held = claim.held_at(now_ms)
    return {
        "key": claim.key, "scopeId": claim.scope_id, "generation": claim.generation, "held": held,
        "holder": claim.holder if held else None, "holderSession": claim.session if held else None,
        "token": _short_token(claim.token) if held else None, "leaseSeconds": claim.lease_ms // 1000,
        "leaseExpiresAt": format_ms(claim.expires_ms) if claim.token is not None else None,
        "acquiredAt": format_ms(claim.acquired_ms) if claim.acquired_ms else None,
        # A renewal sets the end to now + the lease: a lease that ends later than one lease after
        # it was taken was renewed, last at its end minus its length.
        "renewedAt": format_ms(claim.expires_ms - claim.lease_ms)
        if held and claim.expires_ms - claim.lease_ms > claim.acquired_ms else None,
    }


async def claims(kernel: RouteKernel, space_id: str, *, run: str | None, key: str | None, holder: str | None, held_only: bool,
                 cursor: str | None, limit: int) -> dict[str, Any]:
    """Claims by key (then run): held ones, or every key the space remembers with its generation;
    each with the acquires waiting for it."""

    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        if space is None:
            return {"claims": [], "next": None, "total": 0}
        if held_only:
            found: Iterable[Claim] = (c for c in space.claims.held() if c.held_at(now_ms))
        else:
            found = (c for scope in space.scopes.all() for c in space.claims.in_scope(scope.id))
        if run:
            found = (c for c in found if c.scope_id == run)
        if key:
            found = (c for c in found if c.key.startswith(key))
        if holder:
            found = (c for c in found if c.holder == holder and c.held_at(now_ms))
        chosen, following, total = _paged(found, lambda c: (c.key, c.scope_id), (str, str), cursor, limit, newest_first=False)
        waiting = _acquirers(kernel, space_id)
        rows = [{**_claim_row(c, now_ms), "waiting": waiting.get((c.scope_id, c.key), 0)} for c in chosen]
        return {"claims": rows, "next": following, "total": total}

    return await _read(kernel, space_id, view)


# -- tasks -------------------------------------------------------------------------------------


def _task_row(space: SpaceState, task: Any, now_ms: int) -> dict[str, Any]:
    row = TASK.encode(space.tasks.view(task, now_ms))  # (the row a client reads, and more)
    message = space.messages.find(task.message_id)
    leased = message is not None and message.state == "LEASED"
    mailbox = space.mailboxes.find(task.mailbox_id)
    row.update(
        worker=message.holder if message is not None and leased else None,
        leaseExpiresAt=format_ms(message.expires_ms) if message is not None and leased else None,
        visibleAt=format_ms(message.visible_ms) if message is not None and message.state == "DELAYED" else None,
        mailboxName=None if mailbox is None else mailbox.name,
        preview=preview(row["outcome"]),
    )
    return row


async def tasks(kernel: RouteKernel, space_id: str, *, state: str | None, run: str | None, mailbox: str | None, key: str | None,
                cursor: str | None, limit: int) -> dict[str, Any]:
    """Tasks newest first, filtered by state, run, mailbox (id or name) and key prefix."""

    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        if space is None:
            return {"tasks": [], "next": None, "total": 0}
        found: Iterable[Task] = space.tasks.all()
        if state:
            found = (t for t in found if t.state == state)
        if run:
            found = (t for t in found if t.scope_id == run)
        if mailbox:
            named = space.mailboxes.by_name(mailbox)
            wanted = mailbox if named is None else named.id
            found = (t for t in found if t.mailbox_id == wanted)
        if key:
            found = (t for t in found if t.key.startswith(key))
        chosen, following, total = _paged(found, lambda t: (t.created_ms, t.id), (int, str), cursor, limit)
        return {"tasks": [_task_row(space, t, now_ms) for t in chosen], "next": following, "total": total}

    return await _read(kernel, space_id, view)


async def task(kernel: RouteKernel, space_id: str, task_id: str) -> dict[str, Any]:
    """One task: its view, its delivery, its input and result in full, its events, and why it waits."""

    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        space = _required(space, f"task {quote(task_id)}")
        found = space.tasks.get(task_id)
        row = _task_row(space, found, now_ms)
        message = space.messages.find(found.message_id)
        requirements = space.capacity.requirements.get(task_id)
        return {
            "task": row,
            "message": None if message is None else encode(space.messages.view(message)),
            # (a finished task's input while it is kept beside its result: `deliveries.complete`)
            "input": None if message is None or message.payload is None or row["tombstoned"] else pretty(message.payload),
            "result": None if row["outcome"] is None else pretty(row["outcome"]),
            "requirements": None if requirements is None else _requirements_named(space, requirements),
            "history": _history(space, lambda change: change[2] == "task" and change[3] == task_id),
            "why": _why_task(space, found, now_ms) if found.state == "QUEUED" else None,
        }

    return await _read(kernel, space_id, view)


def _requirements_named(space: SpaceState, needs: dict[str, Any]) -> list[str]:
    part = space.capacity
    named = [f"{units} unit(s) of pool {part.pools.get(pool_id).name}" for pool_id, units in needs["pools"]]
    named += [f"{units} unit(s) of quota {part.allowances.get(allowance_id).name}" for allowance_id, units in needs["quotas"]]
    named += [f"{_money(part.budgets.get(budget_id), int(amount))} of budget {part.budgets.get(budget_id).name}"
              for budget_id, amount in needs["budgets"]]
    return named


# -- queues ------------------------------------------------------------------------------------


def _receivers(kernel: RouteKernel, space_id: str) -> dict[str, int]:
    """Receives parked now, per mailbox (workers waiting for work)."""
    found: dict[str, int] = {}
    for key, calls in kernel.parked():
        if len(key) >= 3 and key[0] == "queue" and key[1] == space_id:  # (reads waiting for a task's end are not workers)
            found[key[2]] = found.get(key[2], 0) + coordination_reads.receives_parked(kernel, key, calls)
    return found


async def queues(kernel: RouteKernel, space_id: str) -> dict[str, Any]:
    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        if space is None:
            return {"mailboxes": []}
        receivers = _receivers(kernel, space_id)
        rows = [{**encode(space.mailboxes.view(m)), "receivers": receivers.get(m.id, 0)} for m in space.mailboxes.all()]
        return {"mailboxes": rows}

    return await _read(kernel, space_id, view)


async def queue(kernel: RouteKernel, space_id: str, mailbox_id: str, *, state: str | None, cursor: str | None, limit: int,
                reason: str | None, older_s: int | None, dead_cursor: str | None) -> dict[str, Any]:
    """A mailbox: its counts, its deliveries (paged), and its dead letters (newest first, paged)."""

    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        space = _required(space, f"mailbox {quote(mailbox_id)}")
        mailbox = space.mailboxes.get(mailbox_id)
        messages = space.messages
        found: Iterable[Message] = (m for m in messages.live() if m.mailbox_id == mailbox_id)
        if state:
            found = (m for m in found if m.state == state)
        chosen, following, total = _paged(found, lambda m: (m.seq,), (int,), cursor, limit, newest_first=False)
        deliveries = []
        for message in chosen:
            row = encode(messages.view(message))
            row["taskKey"] = None if message.task_id is None else space.tasks.get(message.task_id).key
            row["preview"] = preview(message.payload)
            deliveries.append(row)
        dead: Iterable[Message] = messages.dead_letters(mailbox_id)
        if reason:
            dead = (m for m in dead if reason in (m.reason or ""))
        if older_s:
            dead = (m for m in dead if m.finished_ms is not None and m.finished_ms <= now_ms - older_s * 1000)
        letters, dead_next, dead_total = _paged(dead, lambda m: (m.finished_ms or 0, m.id), (int, str), dead_cursor, limit)
        return {
            "mailbox": {**encode(space.mailboxes.view(mailbox)), "receivers": _receivers(kernel, space_id).get(mailbox_id, 0)},
            "deliveries": deliveries, "next": following, "total": total,
            "deadLetters": [{**encode(messages.view(m)), "preview": preview(m.payload), "json": pretty(m.payload)} for m in letters],
            "deadNext": dead_next, "deadTotal": dead_total,
        }

    return await _read(kernel, space_id, view)


# -- capacity ----------------------------------------------------------------------------------


async def capacity(kernel: RouteKernel, space_id: str) -> dict[str, Any]:
    """Pools with their holders and their FIFO line, quotas with their window and line, budgets as
    spent / reserved / remaining with what each run reserved, and work limits."""

    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        if space is None:
            return {"pools": [], "quotas": [], "budgets": [], "workLimits": []}
        part = space.capacity
        pools = []
        for pool in part.pools.all():
            grants = [{**wire.encode(part.pools.grant_view(g, pool)), "token": _short_token(g.token)}
                      for g in pool.grants.values() if part.pools.held(g, now_ms)]
            line = [{**wire.encode(part.pools.waiter_view(part.pools.waiter(w))), "position": i + 1} for i, w in enumerate(pool.line[:PAGE_MAX])]
            pools.append({**wire.encode(part.pools.view(pool, now_ms)), "grants": grants[:PAGE_MAX], "line": line, "lineTotal": len(pool.line)})
        quotas = []
        for allowance in part.allowances.all():
            line = [{**wire.encode(part.allowances.waiter_view(part.allowances.waiter(w))), "position": i + 1}
                    for i, w in enumerate(allowance.queue[:PAGE_MAX])]
            quotas.append({**wire.encode(part.allowances.view(allowance, now_ms)), "line": line})
        budgets = []
        for budget in part.budgets.all():
            reserved = [wire.encode(part.budgets.reservation_view(r)) for r in budget.reservations.values() if r.state == "ACTIVE"]
            row = wire.encode(part.budgets.view(budget))
            row.update(spent=_money(budget, budget.spent), reserved=_money(budget, budget.reserved),
                       remaining=_money(budget, budget.available), limit=_money(budget, budget.limit),
                       reservations=reserved[:PAGE_MAX])
            budgets.append(row)
        limits = [wire.encode(part.work_limits.view(limit)) for limit in part.work_limits.all()]
        return {"pools": pools, "quotas": quotas, "budgets": budgets, "workLimits": limits}

    return await _read(kernel, space_id, view)


# -- coordination ------------------------------------------------------------------------------


async def coordination(kernel: RouteKernel, space_id: str, *, run: str | None, cursors: dict[str, str | None], limit: int) -> dict[str, Any]:
    """Task groups, barriers and timers, newest first, each list paged on its own."""

    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        if space is None:
            names = ("groups", "barriers", "timers")
            return {name: [] for name in names} | {"next": dict.fromkeys(names), "totals": dict.fromkeys(names, 0)}
        part = space.coordination
        answer: dict[str, Any] = {"next": {}, "totals": {}}

        def page(name: str, found: Iterable[D], in_run: Callable[[D], bool], show: Callable[[D], Any]) -> None:
            if run:
                found = (item for item in found if in_run(item))
            chosen, following, total = _paged(found, lambda item: (item.created_ms, item.id), (int, str), cursors.get(name), limit)
            answer[name] = [wire.encode(show(item)) for item in chosen]  # (the kernel's views as the wire writes them)
            answer["next"][name], answer["totals"][name] = following, total

        page("groups", part.groups.all(), lambda g: g.scope_id == run or g.parent_scope_id == run, lambda g: part.groups.view(g, now_ms))
        page("barriers", part.barriers.all(), lambda b: b.scope_id == run, lambda b: part.barriers.view(b, now_ms))
        page("timers", part.timers.all(), lambda t: t.scope_id == run, part.timers.view)
        return answer

    return await _read(kernel, space_id, view)


# -- events ------------------------------------------------------------------------------------


async def events(kernel: RouteKernel, space_id: str, *, types: frozenset[str] | None, run: str | None, key: str | None,
                 before: int | None, limit: int) -> dict[str, Any]:
    """The event log newest first, filtered by type, run (its subtree) and key (an aggregate id:
    a claim key, a task or message id...); `before` pages back from an event number."""

    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        if space is None:
            return {"events": [], "next": None, "oldest": 0, "newest": 0}
        log = space.events
        inside = None
        if run:
            inside = frozenset(space.scopes.subtree(space.scopes.get(run).id))
        found: list[View] = []
        last = None
        for seq, change, at_ms in log.scan(newest_first=True):
            if before is not None and seq >= before:
                continue
            kind, scope_id, _, ident, _ = change
            if (types and kind not in types) or (inside is not None and scope_id not in inside) or (key and ident != key):
                continue
            if len(found) == limit:
                last = found[-1]["seq"]
                break
            found.append({"seq": seq, **wire.encode(log.made(seq, change, at_ms).view())})
        return {"events": found, "next": last, "oldest": log.oldest_seq, "newest": log.seq}

    return await _read(kernel, space_id, view)


# -- the space ---------------------------------------------------------------------------------


async def space_overview(kernel: RouteKernel, space_id: str) -> dict[str, Any]:
    """Usage (operations counted) and how full the space is against each of its caps."""

    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        if space is None:
            return {"usage": None, "caps": []}
        return {"usage": encode(space.usage.view(space.id)), "caps": caps_view(space)["caps"]}

    return await _read(kernel, space_id, view)
