"""Every read of kernel state the console makes, in one module.

Each function here is `async (kernel, space, ...) -> dict` and reads through `kernel.read(space,
view)`: `view` runs at once on the space's state (None when nothing was ever recorded there; a
read never makes a space), must change nothing, and its result is returned once everything it
could see is durable, so the console never shows a change that a crash could take back. The
answers are plain dicts and lists for the templates, each with `cursor`: the number of the
newest event the read saw, from which the page's live stream resumes (no gap between what the
page shows and what the stream brings).

The shared reads of `actors/` (`reads.py`, `capacity_reads.py`, `coordination_reads.py`) take a
kernel and look the space up themselves (`space_view`); inside a read they are given `_Reading`,
which answers that lookup with the space the view was given. The tables' own `view` methods make the rows, so a
console row and an API answer say the same thing in the same words.

Lists are paged by cursor with a cap (`PAGE_MAX`): a cursor is the sort key of the last row shown,
so a page is the same whatever was added or removed before it. The event log is scanned in order
(`EventLog.scan`), never indexed row by row.

`why_*` explain what a piece of work waits for, one check per constraint, in the order the kernel
decides them (`actors/admission.py`, `actors/pools.py`, `actors/quotas.py`); `worker` finds what a
holder's crash took down, from the events that carry its name.
"""

from __future__ import annotations

import base64
import heapq
from typing import Any, Callable, Iterable, TypeVar

import orjson

from ...actors import coordination_reads, events as event_log
from ...actors.caps import view as caps_view
from ...actors.errors import NOT_FOUND, VALIDATION_FAILED, KernelError, quote
from ...actors.keys import digest
from ...actors.timestamps import format_ms

__all__ = [
    "PAGE_DEFAULT", "PAGE_MAX", "known_spaces", "newest_event", "runs", "run", "claims", "lanes", "tasks", "task",
    "queues", "queue", "capacity", "coordination", "events", "workers", "worker", "why_task", "why_waiter", "why_claim",
    "space_overview", "events_after", "key_spaces", "key_named",
]

T = TypeVar("T")

PAGE_DEFAULT = 50
PAGE_MAX = 500
# Rows of one run's subtree shown under it in the run tree; the rest are on the run's own page.
SUBTREE_ROWS_MAX = 20
# Lanes drawn at once, and the windows a lane may span (seconds).
LANES_MAX = 50
# The shortest axis a fitted swimlane draws (seconds), and the newest events a lane draws at most.
LANE_FIT_MIN_S = 30
LANE_EVENTS_MAX = 100
# Events listed on a task's or a run's page.
HISTORY_MAX = 100
# How much of a caller's value (a payload, a result) a row previews; the JSON view shows it whole.
PREVIEW_CHARS_MAX = 80
JSON_BYTES_MAX = 256 * 1024

# A claim's events: taken (a new generation), or ended (released, expired, or released by an
# operator without the holder's token).
_CLAIM_EVENTS = frozenset({"claim.acquired", "claim.taken_over", "claim.released", "claim.expired", "claim.force_released"})
_CLAIM_ENDS = {"claim.released": "released", "claim.expired": "expired", "claim.force_released": "released by an operator"}


# -- reading -----------------------------------------------------------------------------------


class _Reading:
    """What the shared reads of `actors/` need of a kernel, inside one `kernel.read`: the space
    given to the view (`space_view`), the clock, and the calls parked now."""

    __slots__ = ("_space", "clock", "_kernel")

    def __init__(self, kernel: Any, space: Any) -> None:
        self._space = space
        self.clock = kernel.clock
        self._kernel = kernel

    def space_view(self, space_id: str) -> Any:
        assert space_id == self._space.id, "a read looks at the one space it was given"
        return self._space

    def parked(self) -> list:
        return self._kernel.parked()


async def _read(kernel: Any, space_id: str, view: Callable[[Any, int], dict]) -> dict:
    """`view(space, now_ms)` with the cursor of the newest event it saw; an empty space is None."""

    def look(space: Any) -> dict:
        answer = view(space, kernel.clock.now_ms())
        answer["cursor"] = 0 if space is None else space.events.seq
        return answer

    return await kernel.read(space_id, look)


def _required(space: Any, what: str) -> Any:
    if space is None:
        raise KernelError(NOT_FOUND, f"{what} not found (nothing was ever recorded in this space)")
    return space


def key_spaces(kernel: Any, secret: str) -> frozenset[str]:
    """The spaces an API key opens now (none when it is unknown or revoked)."""
    return kernel.state.keys.spaces_for(secret)


def key_named(kernel: Any, secret: str) -> tuple[str | None, str | None, bool]:
    """An API key's id and name, and whether it was revoked; (None, None, False) when unknown."""
    key = kernel.state.keys.by_digest(digest(secret))
    return (None, None, False) if key is None else (key.id, key.name, key.revoked_ms is not None)


def known_spaces(kernel: Any) -> list[str]:
    """Every space the server knows: one that holds anything, or that a key opens (the admin's list)."""
    state = kernel.state
    return sorted(set(state.spaces) | state.keys.spaces())


async def newest_event(kernel: Any, space_id: str) -> int:
    """The number of the newest event of the space (0 when there is none)."""
    return await kernel.read(space_id, lambda space: 0 if space is None else space.events.seq)


# -- cursors and pages -------------------------------------------------------------------------


def encode_cursor(key: tuple) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(key))).decode().rstrip("=")


def decode_cursor(text: str, shape: tuple[type, ...]) -> tuple:
    """A cursor made by `encode_cursor` for a key of these types; VALIDATION_FAILED for anything else."""
    try:
        key = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        key = None
    if not isinstance(key, list) or len(key) != len(shape) or not all(type(v) is t for v, t in zip(key, shape)):
        raise KernelError(VALIDATION_FAILED, f"cursor {quote(text)} is not one this list made; start again from the first page")
    return tuple(key)


def _paged(items: Iterable[T], key: Callable[[T], tuple], shape: tuple[type, ...], cursor: str | None, limit: int,
           newest_first: bool = True) -> tuple[list[T], str | None, int]:
    """The `limit` rows after `cursor` in the order of `key` (descending when `newest_first`), the
    cursor of the next page (None on the last) and how many rows match in all."""
    rows = list(items)
    total = len(rows)
    if cursor is not None:
        after = decode_cursor(cursor, shape)
        rows = [row for row in rows if (key(row) < after if newest_first else key(row) > after)]
    chosen = (heapq.nlargest if newest_first else heapq.nsmallest)(limit + 1, rows, key=key)
    more = len(chosen) > limit
    chosen = chosen[:limit]
    return chosen, encode_cursor(key(chosen[-1])) if more else None, total


def preview(value: Any) -> str:
    """A caller's value on one line, cut to PREVIEW_CHARS_MAX characters."""
    if value is None:
        return ""
    text = orjson.dumps(value).decode()
    return text if len(text) <= PREVIEW_CHARS_MAX else text[: PREVIEW_CHARS_MAX - 1] + "…"


def pretty(value: Any) -> str:
    """A caller's value as indented JSON, cut at JSON_BYTES_MAX with the full size said."""
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    if len(text) <= JSON_BYTES_MAX:
        return text
    return text[:JSON_BYTES_MAX] + f"\n… ({len(text)} characters in all; cut here)"


def _short_token(token: str | None) -> str | None:
    """A fencing token shortened for people: enough to tell two apart, never enough to use one."""
    return None if token is None else token[:10] + "…"


# -- runs --------------------------------------------------------------------------------------


def _activity(space: Any, now_ms: int) -> tuple[dict[str, set[str]], dict[str, int]]:
    """Per run: the holders of its live leases (claims and deliveries), and how many of its
    messages wait to be delivered."""
    holders: dict[str, set[str]] = {}
    for claim in space.claims.held():
        if claim.held_at(now_ms) and claim.holder is not None:
            holders.setdefault(claim.scope_id, set()).add(claim.holder)
    waiting: dict[str, int] = {}
    for message in space.messages.live():
        if message.state == "LEASED":
            if message.holder is not None and now_ms < message.expires_ms:
                holders.setdefault(message.scope_id, set()).add(message.holder)
        else:
            waiting[message.scope_id] = waiting.get(message.scope_id, 0) + 1
    return holders, waiting


async def runs(kernel: Any, space_id: str, *, state: str | None, name: str | None, cursor: str | None, limit: int) -> dict:
    """The run tree: root runs newest first, each with its subtree (at most SUBTREE_ROWS_MAX rows)."""

    def view(space: Any, now_ms: int) -> dict:
        if space is None:
            return {"runs": [], "next": None, "total": 0}
        tree = space.scopes
        holders, waiting = _activity(space, now_ms)

        def row(scope: Any, depth: int) -> dict:
            return {
                **tree.view(scope, now_ms), "depth": depth, "workers": sorted(holders.get(scope.id, ())),
                "waiting": waiting.get(scope.id, 0),
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
        return {"runs": rows, "next": following, "total": total}

    return await _read(kernel, space_id, view)


async def run(kernel: Any, space_id: str, scope_id: str) -> dict:
    """One run: its view, its ancestors, children, workers, what waits, counts, and its newest events."""

    def view(space: Any, now_ms: int) -> dict:
        tree = _required(space, f"run {quote(scope_id)}").scopes
        scope = tree.get(scope_id)
        ancestors = []
        parent = scope.parent_id
        while parent is not None:
            node = tree.get(parent)
            ancestors.append({"id": node.id, "name": node.name})
            parent = node.parent_id
        diagnosis = coordination_reads.run(_Reading(kernel, space), space.id, scope_id)
        children = [tree.view(tree.get(child), now_ms) for child in scope.children[-PAGE_MAX:][::-1]]
        inside = frozenset(tree.subtree(scope_id))
        history = _history(space, lambda change: change[1] in inside)
        acquirers = [{"run": run_id, "key": key, "calls": calls}
                     for (run_id, key), calls in sorted(_acquirers(kernel, space.id).items()) if run_id in inside]
        return {
            "run": tree.view(scope, now_ms), "ancestors": ancestors[::-1], "children": children,
            "childrenTotal": len(scope.children), **diagnosis, "acquirers": acquirers[:PAGE_MAX], "history": history,
        }

    return await _read(kernel, space_id, view)


def _history(space: Any, match: Callable[[tuple], bool]) -> list[dict]:
    """The newest HISTORY_MAX events whose change matches, newest first."""
    found = []
    for seq, change, at_ms in space.events.scan(newest_first=True):
        if match(change):
            found.append(space.events.made(seq, change, at_ms).view())
            if len(found) >= HISTORY_MAX:
                break
    return found


# -- claims ------------------------------------------------------------------------------------


def _claim_row(claim: Any, now_ms: int) -> dict:
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


def _acquirers(kernel: Any, space_id: str) -> dict[tuple[str, str], int]:
    """Acquires parked now (waitMs), per claim (run, key): who waits for a held claim."""
    return {(key[2], key[3]): calls for key, calls in kernel.parked() if key[0] == "claim" and key[1] == space_id}


async def claims(kernel: Any, space_id: str, *, run: str | None, key: str | None, holder: str | None, held_only: bool,
                 cursor: str | None, limit: int) -> dict:
    """Claims by key (then run): held ones, or every key the space remembers with its generation;
    each with the acquires waiting for it."""

    def view(space: Any, now_ms: int) -> dict:
        if space is None:
            return {"claims": [], "next": None, "total": 0}
        if held_only:
            found: Iterable = (c for c in space.claims.held() if c.held_at(now_ms))
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


def _lanes_of(space: Any, start_ms: int, run: str | None, key: str | None) -> tuple[dict[tuple[str, str], list], bool]:
    """The lanes of the LANES_MAX keys that changed last in the window (scanning newest first, the
    first keys met are those), each with its newest LANE_EVENTS_MAX claim events as
    `(seq, change, at_ms)`, newest first; and whether more keys changed in the window."""
    found: dict[tuple[str, str], list] = {}
    complete = 0  # lanes that have all the events they draw
    more = False
    for seq, change, at_ms in space.events.scan(newest_first=True):
        if at_ms < start_ms:
            break
        if change[0] not in _CLAIM_EVENTS:
            continue
        scope_id, ident = change[1], change[3]
        if (run and scope_id != run) or (key and not ident.startswith(key)):
            continue
        history = found.get((scope_id, ident))
        if history is None:
            if len(found) < LANES_MAX:
                found[(scope_id, ident)] = [(seq, change, at_ms)]
                continue
            more = True
            if complete == LANES_MAX:
                break  # every lane drawn is full: nothing older would show
        elif len(history) < LANE_EVENTS_MAX:
            history.append((seq, change, at_ms))
            complete += len(history) == LANE_EVENTS_MAX
    return found, more


async def lanes(kernel: Any, space_id: str, fenced: list, *, run: str | None, key: str | None, window_s: int,
                fit: bool = False) -> dict:
    """Lease swimlanes: one lane per claim key over the last `window_s`, a bar per generation and
    holder (acquired, renewed, released or expired), takeovers, and the writes fenced off; with
    `fit`, the time axis starts shortly before the first thing drawn instead. The lanes of the
    keys that changed most recently come first, at most LANES_MAX.

    `fenced` are the refusals the shell saw in this space (`fenced.py`), oldest first: each is
    marked on the lanes of its key at its time. Renewals make no event; a lease still held shows
    its latest renewal and its current end.
    """

    def view(space: Any, now_ms: int) -> dict:
        start_ms = now_ms - window_s * 1000
        if space is None:
            return {"lanes": [], "start": start_ms, "end": now_ms, "windowSeconds": window_s, "more": 0}
        found, more = _lanes_of(space, start_ms, run, key)
        if key or run:  # asked for: keys held now get a lane even with nothing in the window
            for claim in space.claims.held():
                if claim.held_at(now_ms) and (not run or claim.scope_id == run) and (not key or claim.key.startswith(key)):
                    if (claim.scope_id, claim.key) not in found:
                        if len(found) >= LANES_MAX:
                            more = True
                            break
                        found[(claim.scope_id, claim.key)] = []
        chosen = list(found.items())  # the lanes that changed last come first
        marks: dict[str, list] = {}
        for mark in fenced:
            if mark.kind == "claim" and mark.at_ms >= start_ms:
                marks.setdefault(mark.ident, []).append(mark)
        if fit:
            firsts = [history[-1][2] for _, history in chosen if history]
            firsts += [marks[ident][0].at_ms for (_, ident), _ in chosen if ident in marks]
            first = min(firsts, default=now_ms)
            start_ms = max(start_ms, now_ms - max(LANE_FIT_MIN_S * 1000, (now_ms - first) * 11 // 10))
        made = space.events.made
        drawn = [_lane(space, scope_id, ident, [made(*raw) for raw in reversed(history)], marks.get(ident, ()), start_ms, now_ms)
                 for (scope_id, ident), history in chosen]
        return {"lanes": drawn, "start": start_ms, "end": now_ms, "windowSeconds": window_s, "more": more}

    return await _read(kernel, space_id, view)


def _lane(space: Any, scope_id: str, key: str, history: list, refusals: Iterable, start_ms: int, now_ms: int) -> dict:
    """One key's lane: its bars (one per generation), its gaps' takeovers, and fenced writes."""
    span = max(1, now_ms - start_ms)

    def x(at_ms: int) -> float:
        return round(max(0.0, min(100.0, (at_ms - start_ms) * 100 / span)), 3)

    bars: list[dict] = []
    open_bar: dict | None = None
    for event in history:
        generation = event.payload["generation"]
        if event.type in ("claim.acquired", "claim.taken_over"):
            if open_bar is not None:  # (a lease ends with an event of its own; never drawn on past the next)
                open_bar["to"], open_bar["end"] = event.at_ms, "ended"
            open_bar = {"generation": generation, "holder": event.payload["holder"], "from": event.at_ms, "to": None,
                        "end": None, "takeover": event.type == "claim.taken_over", "cursor": event.seq}
            bars.append(open_bar)
        else:
            if open_bar is None or open_bar["generation"] != generation:  # taken before the window
                open_bar = {"generation": generation, "holder": event.payload.get("holder"), "from": start_ms, "to": None,
                            "end": None, "takeover": False, "cursor": event.seq}
                bars.append(open_bar)
            open_bar["to"], open_bar["end"] = event.at_ms, _CLAIM_ENDS[event.type]
            if event.payload.get("by"):
                open_bar["end"] += f" ({event.payload['by']}" + (f": {event.payload['reason']})" if event.payload.get("reason") else ")")
            open_bar = None
    claim = space.claims.get(scope_id, key)
    live = claim is not None and claim.held_at(now_ms)
    if not live and open_bar is not None:  # ended with no event: its run ended, or its end is not yet recorded
        if claim is None:
            scope = space.scopes.get(scope_id) if scope_id in space.scopes else None
            ended_ms = scope.ended_ms if scope is not None and scope.ended_ms is not None else now_ms
            open_bar["to"], open_bar["end"] = max(open_bar["from"], ended_ms), "ended with its run"
        else:
            open_bar["to"], open_bar["end"] = max(open_bar["from"], min(claim.expires_ms, now_ms)), "expired"
    if live:
        if not bars or bars[-1]["generation"] != claim.generation:  # taken before the window
            bars.append({"generation": claim.generation, "holder": claim.holder, "from": max(start_ms, claim.acquired_ms),
                         "to": None, "end": None, "takeover": False, "cursor": None})
        bars[-1].update(holder=claim.holder, leaseExpiresAt=format_ms(claim.expires_ms))
        if claim.expires_ms - claim.lease_ms > claim.acquired_ms:
            renewed_ms = claim.expires_ms - claim.lease_ms
            bars[-1].update(renewedAt=format_ms(renewed_ms), renewedX=x(renewed_ms))
    for bar in bars:
        ends = bar["to"] if bar["to"] is not None else now_ms
        bar.update(x=x(bar["from"]), width=round(max(0.4, x(ends) - x(bar["from"])), 3), fromAt=format_ms(bar["from"]),
                   toAt=None if bar["to"] is None else format_ms(bar["to"]))
    marks = [{"x": x(mark.at_ms), "at": format_ms(mark.at_ms), "operation": mark.operation, "message": mark.message,
              "generation": _generation_at(bars, mark.at_ms)} for mark in refusals]
    return {"scopeId": scope_id, "key": key, "bars": bars, "fenced": marks, "held": live,
            "generation": None if claim is None else claim.generation}


def _generation_at(bars: list[dict], at_ms: int) -> int | None:
    """The generation that held the key at `at_ms` (the one a late write was fenced by)."""
    current = None
    for bar in bars:
        if bar["from"] <= at_ms:
            current = bar["generation"]
    return current


# -- tasks -------------------------------------------------------------------------------------


def _task_row(space: Any, task: Any, now_ms: int) -> dict:
    row = space.tasks.view(task, now_ms)
    message = space.messages.find(task.message_id)
    leased = message is not None and message.state == "LEASED"
    mailbox = space.mailboxes.find(task.mailbox_id)
    row.update(
        worker=message.holder if leased else None,
        leaseExpiresAt=format_ms(message.expires_ms) if leased else None,
        visibleAt=format_ms(message.visible_ms) if message is not None and message.state == "DELAYED" else None,
        mailboxName=None if mailbox is None else mailbox.name,
        preview=preview(row["outcome"]),
    )
    return row


async def tasks(kernel: Any, space_id: str, *, state: str | None, run: str | None, mailbox: str | None, key: str | None,
                cursor: str | None, limit: int) -> dict:
    """Tasks newest first, filtered by state, run, mailbox (id or name) and key prefix."""

    def view(space: Any, now_ms: int) -> dict:
        if space is None:
            return {"tasks": [], "next": None, "total": 0}
        found: Iterable = space.tasks.all()
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


async def task(kernel: Any, space_id: str, task_id: str) -> dict:
    """One task: its view, its delivery, its input and result in full, its events, and why it waits."""

    def view(space: Any, now_ms: int) -> dict:
        space = _required(space, f"task {quote(task_id)}")
        found = space.tasks.get(task_id)
        row = _task_row(space, found, now_ms)
        message = space.messages.find(found.message_id)
        requirements = space.capacity.requirements.get(task_id)
        return {
            "task": row,
            "message": None if message is None else space.messages.view(message),
            "input": None if message is None or message.payload is None else pretty(message.payload),
            "result": None if row["outcome"] is None else pretty(row["outcome"]),
            "requirements": None if requirements is None else _requirements_named(space, requirements),
            "history": _history(space, lambda change: change[2] == "task" and change[3] == task_id),
            "why": _why_task(space, found, now_ms) if found.state == "QUEUED" else None,
        }

    return await _read(kernel, space_id, view)


def _requirements_named(space: Any, needs: dict) -> list[str]:
    part = space.capacity
    named = [f"{units} unit(s) of pool {part.pools.get(pool_id).name}" for pool_id, units in needs["pools"]]
    named += [f"{units} unit(s) of quota {part.allowances.get(allowance_id).name}" for allowance_id, units in needs["quotas"]]
    named += [f"{_money(part.budgets.get(budget_id), int(amount))} of budget {part.budgets.get(budget_id).name}"
              for budget_id, amount in needs["budgets"]]
    return named


# -- why is it waiting? ------------------------------------------------------------------------


def _check(ok: bool, what: str, detail: str) -> dict:
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


def _why_task(space: Any, found: Any, now_ms: int) -> dict:
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


def _capacity_checks(space: Any, needs: dict, found: Any, message: Any, now_ms: int) -> list[dict]:
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


def _quota_check(allowances: Any, allowance: Any, units: int, now_ms: int) -> dict:
    window_end = allowance.window_at(now_ms) + allowance.window_ms
    if allowance.cooling_at(now_ms):
        reason = f" ({allowance.cooldown_reason})" if allowance.cooldown_reason else ""
        return _check(False, "Quota", f"quota {allowance.name} cools down{reason} for {_seconds(allowance.cooldown_until_ms - now_ms)}")
    used, waiting = allowance.used_at(now_ms), allowances.waiting_at(allowance, now_ms)
    detail = f"quota {allowance.name}: {used}/{allowance.units_limit} used in this window; needs {units}"
    fits = units <= allowance.remaining_at(now_ms) and not waiting
    if waiting:
        detail += f"; {waiting} waiter(s) go first"
    if not fits:
        detail += f"; the window resets in {_seconds(window_end - now_ms)}"
    return _check(fits, "Quota", detail)


def _budget_check(budgets: Any, budget: Any, amount: int) -> dict:
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


def _older_blockers(space: Any, needs: dict, found: Any, message: Any, now_ms: int) -> list[str]:
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


async def why_task(kernel: Any, space_id: str, task_id: str) -> dict:
    def view(space: Any, now_ms: int) -> dict:
        found = _required(space, f"task {quote(task_id)}").tasks.get(task_id)
        if found.state != "QUEUED":
            return {"subject": f"task {task_id}", "state": found.state, "checks": [], "waiting": False}
        return {"subject": f"task {task_id}", "state": found.state, **_why_task(space, found, now_ms)}

    return await _read(kernel, space_id, view)


async def why_claim(kernel: Any, space_id: str, run: str, key: str) -> dict:
    """Why an acquire of a claim waits (or would): the run, who holds it until when, who else waits."""

    def view(space: Any, now_ms: int) -> dict:
        space = _required(space, f"claim {quote(key)}")
        tree = space.scopes
        state = tree.effective(tree.get(run), now_ms)
        claim = space.claims.get(run, key)
        checks = [_check(state == "ACTIVE", "Run", f"run {run} is {state.lower()}" + ("" if state == "ACTIVE" else "; nobody may take it"))]
        held = claim is not None and claim.held_at(now_ms)
        if held:
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


async def why_waiter(kernel: Any, space_id: str, waiter_id: str) -> dict:
    """Why a waiter in a pool's line or a quota's line is still waiting."""

    def view(space: Any, now_ms: int) -> dict:
        part = _required(space, f"waiter {quote(waiter_id)}").capacity
        if waiter_id.startswith("aw_"):
            waiter = part.allowances.waiter(waiter_id)
            allowance = part.allowances.get(waiter.allowance_id)
            checks = []
            if waiter.state == "WAITING":
                position = allowance.queue.index(waiter.id) + 1 if waiter.id in allowance.queue else None
                if position:
                    checks.append(_check(position == 1, "Line", f"{_ordinal(position)} in the line of quota {allowance.name}"))
                checks.append(_quota_check(part.allowances, allowance, waiter.units, now_ms))
                checks.append(_check(now_ms < waiter.expires_ms, "Time to live", f"gives up in {_seconds(waiter.expires_ms - now_ms)}"))
            return {"subject": f"quota waiter {waiter_id} ({waiter.holder})", "state": waiter.state, "checks": checks,
                    "waiting": waiter.state == "WAITING"}
        waiter = part.pools.waiter(waiter_id)
        pool = part.pools.get(waiter.pool_id)
        checks = []
        if waiter.state in ("WAITING", "SIGNALED"):
            in_use = part.pools.in_use(pool, now_ms)
            position = pool.line.index(waiter.id) + 1 if waiter.id in pool.line else None
            ahead = [part.pools.waiter(w) for w in pool.line[: (position or 1) - 1]]
            free = pool.units_total - in_use - part.pools.held_back(pool, now_ms)
            detail = f"pool {pool.name}: {in_use}/{pool.units_total} units in use; needs {waiter.units}"
            checks.append(_check(waiter.state == "SIGNALED" or waiter.units <= free, "Pool",
                                 detail + _soonest_lease(part.pools, pool, now_ms, waiter.units > free)))
            if position:
                names = ", ".join(f"{w.holder} ({w.units})" for w in ahead[:5]) + (" …" if len(ahead) > 5 else "")
                checks.append(_check(position == 1, "Line", f"{_ordinal(position)} in line" + (f"; ahead: {names}" if ahead else "")))
            if waiter.state == "SIGNALED" and waiter.turn_ends_ms is not None:
                checks.append(_check(True, "Turn", f"its units are held for it; its turn ends in {_seconds(waiter.turn_ends_ms - now_ms)}"))
            else:
                checks.append(_check(now_ms < waiter.expires_ms, "Time to live", f"gives up in {_seconds(waiter.expires_ms - now_ms)}"))
        return {"subject": f"pool waiter {waiter_id} ({waiter.holder})", "state": waiter.state, "checks": checks,
                "waiting": waiter.state == "WAITING"}

    return await _read(kernel, space_id, view)


# -- queues ------------------------------------------------------------------------------------


def _receivers(kernel: Any, space_id: str) -> dict[str, int]:
    """Receives parked now, per mailbox (workers waiting for work)."""
    found: dict[str, int] = {}
    for key, calls in kernel.parked():
        if len(key) >= 3 and key[0] == "queue" and key[1] == space_id:
            found[key[2]] = found.get(key[2], 0) + calls
    return found


async def queues(kernel: Any, space_id: str) -> dict:
    def view(space: Any, now_ms: int) -> dict:
        if space is None:
            return {"mailboxes": []}
        receivers = _receivers(kernel, space_id)
        rows = [{**space.mailboxes.view(m), "receivers": receivers.get(m.id, 0)} for m in space.mailboxes.all()]
        return {"mailboxes": rows}

    return await _read(kernel, space_id, view)


async def queue(kernel: Any, space_id: str, mailbox_id: str, *, state: str | None, cursor: str | None, limit: int,
                reason: str | None, older_s: int | None, dead_cursor: str | None) -> dict:
    """A mailbox: its counts, its deliveries (paged), and its dead letters (newest first, paged)."""

    def view(space: Any, now_ms: int) -> dict:
        space = _required(space, f"mailbox {quote(mailbox_id)}")
        mailbox = space.mailboxes.get(mailbox_id)
        messages = space.messages
        found: Iterable = (m for m in messages.live() if m.mailbox_id == mailbox_id)
        if state:
            found = (m for m in found if m.state == state)
        chosen, following, total = _paged(found, lambda m: (m.seq,), (int,), cursor, limit, newest_first=False)
        deliveries = []
        for message in chosen:
            row = messages.view(message)
            row["taskKey"] = None if message.task_id is None else space.tasks.get(message.task_id).key
            row["preview"] = preview(message.payload)
            deliveries.append(row)
        dead: Iterable = messages.dead_letters(mailbox_id)
        if reason:
            dead = (m for m in dead if reason in (m.reason or ""))
        if older_s:
            dead = (m for m in dead if m.finished_ms is not None and m.finished_ms <= now_ms - older_s * 1000)
        letters, dead_next, dead_total = _paged(dead, lambda m: (m.finished_ms or 0, m.id), (int, str), dead_cursor, limit)
        return {
            "mailbox": {**space.mailboxes.view(mailbox), "receivers": _receivers(kernel, space_id).get(mailbox_id, 0)},
            "deliveries": deliveries, "next": following, "total": total,
            "deadLetters": [{**messages.view(m), "preview": preview(m.payload), "json": pretty(m.payload)} for m in letters],
            "deadNext": dead_next, "deadTotal": dead_total,
        }

    return await _read(kernel, space_id, view)


# -- capacity ----------------------------------------------------------------------------------


async def capacity(kernel: Any, space_id: str) -> dict:
    """Pools with their holders and their FIFO line, quotas with their window and line, budgets as
    spent / reserved / remaining with what each run reserved, and work limits."""

    def view(space: Any, now_ms: int) -> dict:
        if space is None:
            return {"pools": [], "quotas": [], "budgets": [], "workLimits": []}
        part = space.capacity
        pools = []
        for pool in part.pools.all():
            grants = [{**part.pools.grant_view(g, pool), "token": _short_token(g.token)}
                      for g in pool.grants.values() if part.pools.held(g, now_ms)]
            line = [{**part.pools.waiter_view(part.pools.waiter(w)), "position": i + 1} for i, w in enumerate(pool.line[:PAGE_MAX])]
            pools.append({**part.pools.view(pool, now_ms), "grants": grants[:PAGE_MAX], "line": line, "lineTotal": len(pool.line)})
        quotas = []
        for allowance in part.allowances.all():
            line = [{**part.allowances.waiter_view(part.allowances.waiter(w)), "position": i + 1}
                    for i, w in enumerate(allowance.queue[:PAGE_MAX])]
            quotas.append({**part.allowances.view(allowance, now_ms), "line": line})
        budgets = []
        for budget in part.budgets.all():
            reserved = [part.budgets.reservation_view(r) for r in budget.reservations.values() if r.state == "ACTIVE"]
            row = part.budgets.view(budget)
            row.update(spent=_money(budget, budget.spent), reserved=_money(budget, budget.reserved),
                       remaining=_money(budget, budget.available), limit=_money(budget, budget.limit),
                       reservations=reserved[:PAGE_MAX])
            budgets.append(row)
        limits = [part.work_limits.view(limit) for limit in part.work_limits.all()]
        return {"pools": pools, "quotas": quotas, "budgets": budgets, "workLimits": limits}

    return await _read(kernel, space_id, view)


# -- coordination ------------------------------------------------------------------------------


async def coordination(kernel: Any, space_id: str, *, run: str | None, cursors: dict[str, str | None], limit: int) -> dict:
    """Task groups, barriers and timers, newest first, each list paged on its own."""

    def view(space: Any, now_ms: int) -> dict:
        if space is None:
            return {name: [] for name in ("groups", "barriers", "timers")} | {"next": {}, "totals": {}}
        part = space.coordination
        answer: dict[str, Any] = {"next": {}, "totals": {}}
        for name, table, in_run, show in (
            ("groups", part.groups, lambda g: g.scope_id == run or g.parent_scope_id == run, lambda g: part.groups.view(g, now_ms)),
            ("barriers", part.barriers, lambda b: b.scope_id == run, lambda b: part.barriers.view(b, now_ms)),
            ("timers", part.timers, lambda t: t.scope_id == run, part.timers.view),
        ):
            found: Iterable = table.all()
            if run:
                found = (item for item in found if in_run(item))
            chosen, following, total = _paged(found, lambda item: (item.created_ms, item.id), (int, str), cursors.get(name), limit)
            answer[name] = [show(item) for item in chosen]
            answer["next"][name], answer["totals"][name] = following, total
        return answer

    return await _read(kernel, space_id, view)


# -- events ------------------------------------------------------------------------------------


async def events(kernel: Any, space_id: str, *, types: frozenset | None, run: str | None, key: str | None,
                 before: int | None, limit: int) -> dict:
    """The event log newest first, filtered by type, run (its subtree) and key (an aggregate id:
    a claim key, a task or message id...); `before` pages back from an event number."""

    def view(space: Any, now_ms: int) -> dict:
        if space is None:
            return {"events": [], "next": None, "oldest": 0, "newest": 0}
        log = space.events
        inside = None
        if run:
            inside = frozenset(space.scopes.subtree(space.scopes.get(run).id))
        found, last = [], None
        for seq, change, at_ms in log.scan(newest_first=True):
            if before is not None and seq >= before:
                continue
            kind, scope_id, _, ident, _ = change
            if (types and kind not in types) or (inside is not None and scope_id not in inside) or (key and ident != key):
                continue
            if len(found) == limit:
                last = found[-1]["seq"]
                break
            found.append({"seq": seq, **log.made(seq, change, at_ms).view()})
        return {"events": found, "next": last, "oldest": log.oldest_seq, "newest": log.seq}

    return await _read(kernel, space_id, view)


async def events_after(kernel: Any, space_id: str, after: int, limit: int) -> tuple[list[dict], int]:
    """Events after the cursor `after`, oldest first, at most `limit`, and the cursor after them
    (CURSOR_EXPIRED for one no longer kept): what a stream resuming at `after` sends first."""

    def view(space: Any) -> tuple[list[dict], int]:
        if space is None:
            if after:
                raise KernelError(event_log.CURSOR_EXPIRED, f"cursor {after} is ahead of this space's events (none)")
            return [], 0
        page = event_log.page(space, after, limit, None, None, None)
        return page["events"], int(page["nextCursor"])

    return await kernel.read(space_id, view)


# -- workers and what their crash took down ---------------------------------------------------


async def workers(kernel: Any, space_id: str, *, window_s: int) -> dict:
    """Every holder with a live lease, and every holder the window's events name, with counts."""

    def view(space: Any, now_ms: int) -> dict:
        if space is None:
            return {"workers": [], "windowSeconds": window_s}
        rows: dict[str, dict] = {}

        def row(holder: str) -> dict:
            return rows.setdefault(holder, {"holder": holder, "claims": 0, "deliveries": 0, "grants": 0, "expired": 0,
                                            "takenOver": 0, "retried": 0, "deadLettered": 0, "lastSeen": None})

        for claim in space.claims.held():
            if claim.held_at(now_ms) and claim.holder is not None:
                row(claim.holder)["claims"] += 1
        for message in space.messages.live():
            if message.state == "LEASED" and message.holder is not None and now_ms < message.expires_ms:
                row(message.holder)["deliveries"] += 1
        for grant in space.capacity.pools.grants():
            if grant.message_id is None and space.capacity.pools.held(grant, now_ms) and grant.holder is not None:
                row(grant.holder)["grants"] += 1
        for loss in _losses(space, now_ms - window_s * 1000, None):
            entry = row(loss["holder"])
            entry[loss["counts"]] += 1
            entry["lastSeen"] = max(entry["lastSeen"] or "", loss["at"])
        ordered = sorted(rows.values(), key=lambda r: (-(r["expired"] + r["takenOver"] + r["deadLettered"]), r["holder"]))
        return {"workers": ordered[:PAGE_MAX], "windowSeconds": window_s, "more": max(0, len(ordered) - PAGE_MAX)}

    return await _read(kernel, space_id, view)


def _losses(space: Any, start_ms: int, holder: str | None) -> list[dict]:
    """What the window's events say ended badly under a holder (`holder`, or any), oldest first:
    claim leases that expired and deliveries whose lease ran out (each with who took it next),
    deliveries given back for a retry, and dead letters.

    Two passes over the log: the window, newest first, finds what ended badly in it (usually
    little); then the whole log kept, oldest first, looks only at those: a lease that expired in
    the window may have been taken before it (`claim.expired` names only the generation; its
    acquire names the holder), and who took it next may come after it.
    """
    log = space.events
    expired: set[tuple] = set()  # (run, key) of the claims that expired in the window
    lost: set[str] = set()  # the messages whose delivery ended badly in the window
    for _, change, at_ms in log.scan(newest_first=True):
        if at_ms < start_ms:
            break
        kind = change[0]
        if kind == "claim.expired":
            expired.add((change[1], change[3]))
        elif kind in _LOSS_EVENTS:
            payload = change[4]
            lost.add(payload[0] if payload.__class__ is tuple else payload["messageId"])
    if not expired and not lost:
        return []
    holders: dict[tuple, str] = {}  # (run, key, generation) -> who took it
    open_claims: dict[tuple, dict] = {}  # (run, key) -> an expiry waiting for the next holder
    open_deliveries: dict[str, dict] = {}  # message id -> a lost lease waiting for the next one
    losses: list[dict] = []
    for seq, change, at_ms in log.scan():
        kind, scope_id, aggregate_type, ident, payload = change
        if kind in _CLAIM_EVENTS:
            if (scope_id, ident) not in expired:
                continue
            values = payload if payload.__class__ is dict else None  # most are kept as a tuple: read it as one
            generation = payload[0] if values is None else values["generation"]
            if kind in ("claim.acquired", "claim.taken_over"):
                who = payload[1] if values is None else values["holder"]
                holders[(scope_id, ident, generation)] = who
                found = open_claims.pop((scope_id, ident), None)
                if found is not None:
                    found["next"] = f"{who} (generation {generation})"
            elif kind == "claim.expired" and at_ms >= start_ms:
                who = holders.get((scope_id, ident, generation))
                if who is not None and (holder is None or who == holder):
                    found = _loss(who, "expired", f"claim {ident} (generation {generation}): its lease expired", scope_id, at_ms, seq)
                    open_claims[(scope_id, ident)] = found
                    losses.append(found)
            continue
        if kind not in _DELIVERY_EVENTS or (payload[0] if payload.__class__ is tuple else payload["messageId"]) not in lost:
            continue
        values = event_log.payload_of(kind, payload)
        if kind in ("task.started", "delivery.leased"):
            found = open_deliveries.pop(values["messageId"], None)
            if found is not None:  # the next lease of a delivery is its next attempt
                found["next"] = f"{values.get('holder')} (attempt {found['attempt'] + 1})"
            continue
        who = values.get("holder")
        if at_ms < start_ms or who is None or (holder is not None and who != holder):
            continue
        what = f"{aggregate_type} {ident}"
        if kind == "delivery.dead_lettered":  # (a task's also makes task.failed: counted once, here)
            losses.append(_loss(who, "deadLettered", f"{what}: dead-lettered ({values.get('reason') or 'no reason'})", scope_id, at_ms, seq))
        else:
            expired_lease = values.get("cause") == "expired"
            found = _loss(who, "takenOver" if expired_lease else "retried",
                          f"{what} attempt {values['attempt']}: " + ("its lease ran out, back on the queue" if expired_lease else "failed, retried"),
                          scope_id, at_ms, seq)
            found["attempt"] = values["attempt"]
            open_deliveries[values["messageId"]] = found
            losses.append(found)
    return losses


# The events of a delivery (a task's or a plain message's) that name the holder of its lease, and
# those of them that end it badly (its payload's first value, or `messageId`, names the message).
_DELIVERY_EVENTS = frozenset({"task.started", "delivery.leased", "task.retried", "delivery.requeued", "delivery.dead_lettered"})
_LOSS_EVENTS = frozenset({"task.retried", "delivery.requeued", "delivery.dead_lettered"})


def _loss(holder: str, counts: str, what: str, scope_id: str | None, at_ms: int, seq: int) -> dict:
    return {"holder": holder, "counts": counts, "what": what, "run": scope_id, "at": format_ms(at_ms), "seq": seq, "next": None}


async def worker(kernel: Any, space_id: str, holder: str, *, window_s: int) -> dict:
    """One holder: what it holds now, and its blast radius over the window (what its crash or its
    failures took down, and who took over)."""

    def view(space: Any, now_ms: int) -> dict:
        if space is None:
            return {"holder": holder, "claims": [], "deliveries": [], "grants": [], "losses": [], "windowSeconds": window_s}
        held_claims = [_claim_row(c, now_ms) for c in space.claims.held() if c.holder == holder and c.held_at(now_ms)]
        deliveries = []
        for message in space.messages.live():
            if message.state == "LEASED" and message.holder == holder and now_ms < message.expires_ms:
                row = space.messages.view(message)
                row["taskKey"] = None if message.task_id is None else space.tasks.get(message.task_id).key
                deliveries.append(row)
        pools = space.capacity.pools
        grants = [pools.grant_view(g, pools.get(g.pool_id)) for g in pools.grants() if g.holder == holder and pools.held(g, now_ms)]
        for grant in grants:
            grant["token"] = _short_token(grant["token"])
        losses = list(_losses(space, now_ms - window_s * 1000, holder))
        losses.reverse()
        return {"holder": holder, "claims": held_claims[:PAGE_MAX], "deliveries": deliveries[:PAGE_MAX], "grants": grants[:PAGE_MAX],
                "losses": losses[:PAGE_MAX], "windowSeconds": window_s}

    return await _read(kernel, space_id, view)


# -- the space ---------------------------------------------------------------------------------


async def space_overview(kernel: Any, space_id: str) -> dict:
    """Usage (operations counted) and how full the space is against each of its caps."""

    def view(space: Any, now_ms: int) -> dict:
        if space is None:
            return {"usage": None, "caps": []}
        return {"usage": space.usage.view(space.id), "caps": caps_view(space)["caps"]}

    return await _read(kernel, space_id, view)
