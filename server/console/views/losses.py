"""The workers, and what a holder's crash took down: from the events that name it."""

from __future__ import annotations

from typing import Any

from ....actors import events as event_log
from ....actors.space import SpaceState
from ....actors.timestamps import format_ms
from .lists import _claim_row
from .reading import PAGE_MAX, _read, _short_token
from .swimlanes import _CLAIM_EVENTS
from ...services import RouteKernel
from ... import wire


async def workers(kernel: RouteKernel, space_id: str, *, window_s: int) -> dict[str, Any]:
    """Every holder with a live lease, and every holder the window's events name, with counts."""

    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        if space is None:
            return {"workers": [], "windowSeconds": window_s, "more": 0}
        rows: dict[str, dict[str, Any]] = {}

        def row(holder: str) -> dict[str, Any]:
            return rows.setdefault(holder, {"holder": holder, "claims": 0, "once": 0, "deliveries": 0, "grants": 0, "expired": 0,
                                            "takenOver": 0, "retried": 0, "deadLettered": 0, "lastSeen": None})

        for claim in space.claims.held():
            if claim.held_at(now_ms) and claim.holder is not None:
                row(claim.holder)["claims"] += 1
        for slot in space.once.all():
            if slot.held_at(now_ms) and slot.holder is not None:
                row(slot.holder)["once"] += 1
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


def _losses(space: SpaceState, start_ms: int, holder: str | None) -> list[dict[str, Any]]:
    """What the window's events say ended badly under a holder (`holder`, or any), oldest first:
    claim leases that expired and deliveries whose lease ran out (each with who took it next),
    deliveries given back for a retry, and dead letters.

    Two passes over the log: the window, newest first, finds what ended badly in it (usually
    little); then the whole log kept, oldest first, looks only at those: a lease that expired in
    the window may have been taken before it (`claim.expired` names only the generation; its
    acquire names the holder), and who took it next may come after it.
    """
    log = space.events
    expired: set[tuple[str | None, str]] = set()  # (run, key) of the claims that expired in the window
    lost: set[str] = set()  # the messages whose delivery ended badly in the window
    for _, change, at_ms in log.scan(newest_first=True):
        if at_ms < start_ms:
            break
        kind = change[0]
        if kind == "claim.expired":
            expired.add((change[1], change[3]))
        elif kind in _LOSS_EVENTS:
            payload = change[4]
            lost.add(payload[0] if isinstance(payload, tuple) else payload["messageId"])
    if not expired and not lost:
        return []
    holders: dict[tuple[str | None, str, int], str | None] = {}  # (run, key, generation) -> who took it
    open_claims: dict[tuple[str | None, str], dict[str, Any]] = {}  # (run, key) -> an expiry waiting for the next holder
    open_deliveries: dict[str, dict[str, Any]] = {}  # message id -> a lost lease waiting for the next one
    losses: list[dict[str, Any]] = []
    for seq, change, at_ms in log.scan():
        kind, scope_id, aggregate_type, ident, payload = change
        if kind in _CLAIM_EVENTS:
            if (scope_id, ident) not in expired:
                continue
            if isinstance(payload, dict):
                generation, took = payload["generation"], payload.get("holder")
            else:  # most are kept as a tuple: read it as one
                generation, took = payload[0], payload[1] if len(payload) > 1 else None
            if kind in ("claim.acquired", "claim.taken_over"):
                who = took
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
        if kind not in _DELIVERY_EVENTS or (payload[0] if isinstance(payload, tuple) else payload["messageId"]) not in lost:
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


def _loss(holder: str, counts: str, what: str, scope_id: str | None, at_ms: int, seq: int) -> dict[str, Any]:
    return {"holder": holder, "counts": counts, "what": what, "run": scope_id, "at": format_ms(at_ms), "seq": seq, "next": None}


async def worker(kernel: RouteKernel, space_id: str, holder: str, *, window_s: int) -> dict[str, Any]:
    """One holder: what it holds now, and its blast radius over the window (what its crash or its
    failures took down, and who took over)."""

    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        if space is None:
            return {"holder": holder, "claims": [], "once": [], "deliveries": [], "grants": [], "losses": [], "windowSeconds": window_s}
        held_claims = [_claim_row(c, now_ms) for c in space.claims.held() if c.holder == holder and c.held_at(now_ms)]
        held_once = [{"key": slot.key, "scopeId": slot.scope_id, "attempt": slot.attempts, "leaseExpiresAt": format_ms(slot.expires_ms)}
                     for slot in space.once.all() if slot.holder == holder and slot.held_at(now_ms)]
        deliveries = []
        for message in space.messages.live():
            if message.state == "LEASED" and message.holder == holder and now_ms < message.expires_ms:
                row = wire.encode(space.messages.view(message))
                row["taskKey"] = None if message.task_id is None else space.tasks.get(message.task_id).key
                deliveries.append(row)
        pools = space.capacity.pools
        grants = [{**wire.encode(pools.grant_view(g, pools.get(g.pool_id))), "token": _short_token(g.token)}
                  for g in pools.grants() if g.holder == holder and pools.held(g, now_ms)]
        losses = list(_losses(space, now_ms - window_s * 1000, holder))
        losses.reverse()
        return {"holder": holder, "claims": held_claims[:PAGE_MAX], "once": held_once[:PAGE_MAX], "deliveries": deliveries[:PAGE_MAX], "grants": grants[:PAGE_MAX],
                "losses": losses[:PAGE_MAX], "windowSeconds": window_s}

    return await _read(kernel, space_id, view)
