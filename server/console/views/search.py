"""Search across a space's runs: runs, claim keys, holders, task keys and mailboxes matching a text.

One box for what a person remembers of a piece of work (part of a claim key, a worker's name, a
task key, a run's id or name), rather than a filter per page. Matching is a case-insensitive
"contains" (an id also matches by its start), over every run of the space; each kind of result
stops at `RESULTS_MAX`, and says when there were more. Holders are found where they are named
now (claims held, once keys held, deliveries leased, pool units held) and in the newest `EVENTS_LOOKED_MAX` events (who held
something lately), so a worker that crashed an hour ago is still found while the log keeps it.
"""

from __future__ import annotations

from typing import Any

from .lists import _claim_row
from .reading import _read
from ....actors.events import Change
from ....actors.shapes import View
from ....actors.space import SpaceState
from ...services import RouteKernel
from ... import wire

RESULTS_MAX = 20
EVENTS_LOOKED_MAX = 20_000


async def search(kernel: RouteKernel, space_id: str, text: str) -> dict[str, Any]:
    """What in the space matches `text`, by kind: runs, claims, holders, tasks, mailboxes."""
    needle = text.casefold()

    def matches(value: str | None) -> bool:
        return value is not None and needle in value.casefold()

    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        found: dict[str, list[View]] = {"runs": [], "claims": [], "holders": [], "tasks": [], "mailboxes": []}
        more = dict.fromkeys(found, False)
        if space is None:
            return {"results": found, "more": more, "text": text}

        def add(kind: str, row: View) -> bool:
            """Keep a row; False once the kind is full (more were found)."""
            if len(found[kind]) >= RESULTS_MAX:
                more[kind] = True
                return False
            found[kind].append(row)
            return True

        tree = space.scopes
        for scope in tree.all():
            if (scope.id.startswith(text) or matches(scope.name)) and not add("runs", wire.encode(tree.view(scope, now_ms))):
                break
        for scope in tree.all():
            for claim in space.claims.in_scope(scope.id):
                if matches(claim.key) and not add("claims", _claim_row(claim, now_ms)):
                    break
            if more["claims"]:
                break
        for task in space.tasks.all():
            if (matches(task.key) or task.id == text) and not add("tasks", wire.TASK.encode(space.tasks.view(task, now_ms))):
                break
        for mailbox in space.mailboxes.all():
            if (matches(mailbox.name) or mailbox.id == text) and not add("mailboxes", wire.encode(space.mailboxes.view(mailbox))):
                break
        for name, holds in sorted(_holders(space, now_ms).items()):
            if matches(name) and not add("holders", {"holder": name, "holds": holds}):
                break
        return {"results": found, "more": more, "text": text}

    return await _read(kernel, space_id, view)


def _holders(space: SpaceState, now_ms: int) -> dict[str, int]:
    """Every holder named now or in the newest events, with how many leases it holds now."""
    holders: dict[str, int] = {}
    for claim in space.claims.held():
        if claim.holder is not None and claim.held_at(now_ms):
            holders[claim.holder] = holders.get(claim.holder, 0) + 1
    for message in space.messages.live():
        if message.state == "LEASED" and message.holder is not None and now_ms < message.expires_ms:
            holders[message.holder] = holders.get(message.holder, 0) + 1
    for slot in space.once.all():
        if slot.holder is not None and slot.held_at(now_ms):
            holders[slot.holder] = holders.get(slot.holder, 0) + 1
    for grant in space.capacity.pools.grants():  # (a pool's units, held apart from a delivery; as Workers counts them)
        if grant.message_id is None and grant.holder is not None and space.capacity.pools.held(grant, now_ms):
            holders[grant.holder] = holders.get(grant.holder, 0) + 1
    log = space.events
    for looked, (seq, change, at_ms) in enumerate(log.scan(newest_first=True)):
        if looked >= EVENTS_LOOKED_MAX:
            break
        holder = log.made(seq, change, at_ms).payload.get("holder") if _names_holder(change) else None
        if isinstance(holder, str):
            holders.setdefault(holder, 0)
    return holders


def _names_holder(change: Change) -> bool:
    """Whether an event's payload may name a holder (without making the event of every one)."""
    payload = change[4]
    return "holder" in payload if isinstance(payload, dict) else len(payload) > 1
