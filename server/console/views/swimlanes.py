"""Lease swimlanes: one lane per claim key over time, a bar per generation, and fenced writes."""

from __future__ import annotations

from typing import Any, Iterable

from ....actors.timestamps import format_ms
from .reading import _read

# Lanes drawn at once; the shortest axis a fitted swimlane draws (seconds); the newest events a
# lane draws at most.
LANES_MAX = 50
LANE_FIT_MIN_S = 30
LANE_EVENTS_MAX = 60

# A claim's events: taken (a new generation), or ended (released, expired, or released by an
# operator without the holder's token).
_CLAIM_EVENTS = frozenset({"claim.acquired", "claim.taken_over", "claim.released", "claim.expired", "claim.force_released"})
_CLAIM_ENDS = {"claim.released": "released", "claim.expired": "expired", "claim.force_released": "released by an operator"}


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
