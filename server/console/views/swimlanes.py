"""Lease swimlanes: one lane per claim key over time, true at any density.

A lane is drawn in one of two ways, chosen per lane:

- **one bar per generation**, with its holder, when no column of the window holds more than one
  generation (so no two bars run together): a bar, the gap while the key was free, a tick at a
  takeover and at a live lease's latest renewal;
- **columns** otherwise: the window is cut into `columns` equal slices (`LANE_COLUMNS`, about a
  pixel or two each on a laptop's screen) and each shows the share of its time the key was held,
  and held by a generation that took it over after the previous lease expired. A busy key's lane
  then says how busy it was instead of running a hundred bars together into one. The lane is cut
  into `BANDS` stretches for its tooltips, each naming its first generations and their holders
  (the 400 columns of 50 lanes with a tooltip each would make a page of megabytes); dragging
  across a lane zooms every lane to that stretch (`between`), down to single generations.

Both are built from the same intervals (`_generations`), so the share a column shows is the
time the records say the key was held in it. Nothing is drawn before the lane's run began, nor
before the oldest event read for it (a lane reads at most `LANE_EVENTS_MAX` of its newest events
in the window, and all of a view's lanes `LANES_EVENTS_MAX`; a lane says so when there were more).
A generation that began before the window is
named by its holder when the event that began it is still in the log (`HOLDERS_LOOKBACK_MAX`
events further back at most); renewals make no event, so a live lease shows only its latest.

A busy space's log is mostly claim events, and a lane reads all of its own in the window: the
passes over events and generations below work on what the log keeps (`EventLog.scan`'s tuples)
and on small lists, making a dict only of what is drawn or told.
"""

from __future__ import annotations

from itertools import chain
from typing import Any, Iterable

from ....actors.events import PAYLOAD_NAMES, Change
from ....actors.space import SpaceState
from ....actors.timestamps import format_ms
from ...services import RouteKernel
from ..fenced import Fenced
from .reading import _read

# An event as the log keeps it (`EventLog.scan`): its number, the change, its time.
Logged = tuple[int, Change, int]

# Lanes drawn at once; the shortest axis a fitted swimlane draws (seconds).
LANES_MAX = 50
LANE_FIT_MIN_S = 30
# The newest claim events of one key read for its lane, at most, and for all the lanes of a view
# (a page of 50 keys each taken a thousand times in the hour reads the newest 20,000: each lane
# then says from when on it is drawn).
LANE_EVENTS_MAX = 5000
LANES_EVENTS_MAX = 20_000
# Columns a lane is cut into (fewer for a window shorter than that many milliseconds, so that a
# column is never shorter than the millisecond the records are kept in); stretches with a tooltip.
LANE_COLUMNS = 400
BANDS = 25
# Events looked at past the window to find who holds a generation that began before it.
HOLDERS_LOOKBACK_MAX = 20_000
# Generations told in words under a lane; holders named in its summary and in a tooltip.
GENERATIONS_TOLD = 6
HOLDERS_NAMED = 5
BAND_HOLDERS_NAMED = 3
# The narrowest window a zoom may ask for.
ZOOM_MS_MIN = 10

_STARTS = frozenset({"claim.acquired", "claim.taken_over"})
# A claim's events: taken (a new generation), or ended (released, expired, or released by an
# operator without the holder's token).
_CLAIM_EVENTS = _STARTS | {"claim.released", "claim.expired", "claim.force_released"}
_CLAIM_ENDS = {"claim.released": "released", "claim.expired": "expired", "claim.force_released": "released by an operator"}
# What the log keeps of a claim event's payload: (generation, holder, ...) in this order (read by
# position, with no dict made: `_payload`).
assert all(PAYLOAD_NAMES[kind][0] == "generation" for kind in _CLAIM_EVENTS)
# A release's payload names no holder (`claim.released`: generation, then what was observed).
assert all(PAYLOAD_NAMES[kind][1] == "holder" for kind in _CLAIM_EVENTS if "holder" in PAYLOAD_NAMES[kind])
_HOLDER_NAMED = frozenset(kind for kind in _CLAIM_EVENTS if "holder" in PAYLOAD_NAMES[kind])


def _payload(change: Change) -> tuple[int, str | None, str | None, str | None]:
    """A claim event's generation, holder, and an operator's reason and name (None where absent)."""
    payload = change[4]
    if payload.__class__ is dict:
        return payload["generation"], payload.get("holder"), payload.get("reason"), payload.get("by")
    padded = (*payload, None, None, None)
    if change[0] not in _HOLDER_NAMED:
        return padded[0], None, None, None
    return padded[0], padded[1], padded[2], padded[3]


class _Scan:
    """What one newest-first pass over the event log found for the lanes of a window."""

    __slots__ = ("found", "after", "cut", "holders", "more")

    def __init__(self) -> None:
        # (run, key) -> its claim events in the window, newest first (the lanes that changed last first).
        self.found: dict[tuple[str, str], list[Logged]] = {}
        # (run, key) -> its oldest claim event after the window (a zoomed window has them).
        self.after: dict[tuple[str, str], Logged] = {}
        # (run, key) -> when its oldest event read is, for a lane that had more than it reads.
        self.cut: dict[tuple[str, str], int] = {}
        # (run, key, generation) -> holder, for generations that began before what a lane read.
        self.holders: dict[tuple[str, str, int], str | None] = {}
        self.more = False


def _scan(space: SpaceState, start_ms: int, end_ms: int, run: str | None, key: str | None) -> _Scan:
    """The lanes of the LANES_MAX keys that changed last in [start_ms, end_ms], each with its
    newest LANE_EVENTS_MAX claim events there; then, a bounded way further back, who holds the
    generation each lane begins with when the event that began it was not read."""
    scan = _Scan()
    found, cut, after = scan.found, scan.cut, scan.after
    # Lanes whose oldest event read ends a generation not seen beginning: that generation.
    wanted: dict[tuple[str, str], int] = {}
    events = space.events.scan(newest_first=True)
    claim_events, starts, filtered = _CLAIM_EVENTS, _STARTS, bool(run or key)
    read = 0
    for raw in events:  # the window, newest first
        at_ms = raw[2]
        if at_ms < start_ms:
            events = chain((raw,), events)
            break
        change = raw[1]
        kind = change[0]
        if kind not in claim_events:
            continue
        if filtered and ((run and change[1] != run) or (key and not change[3].startswith(key))):
            continue
        lane = _lane_of(change)
        if at_ms > end_ms:
            after[lane] = raw  # (newest first: the last one kept is the oldest after the window)
            continue
        history = found.get(lane)
        if history is None:
            if len(found) >= LANES_MAX:
                scan.more = True
                continue
            history = found[lane] = []
        elif lane in cut:
            if kind in starts and lane in wanted:
                _named(scan, wanted, lane, change)
            continue
        history.append(raw)
        read += 1
        if len(history) == LANE_EVENTS_MAX:
            cut[lane] = at_ms
            if kind not in starts:
                wanted[lane] = _payload(change)[0]
            if len(cut) == LANES_MAX:  # every lane is chosen and full
                break
        if read == LANES_EVENTS_MAX:  # every lane is drawn from where it has got to
            for lane, history in found.items():
                if lane not in cut:
                    cut[lane] = history[-1][2]
                    if history[-1][1][0] not in starts:
                        wanted[lane] = _payload(history[-1][1])[0]
            break
    for lane, history in found.items():
        if history and lane not in cut and history[-1][1][0] not in _STARTS:
            wanted[lane] = _payload(history[-1][1])[0]
    for lane, (_, change, _) in after.items():  # held all through a zoomed window by the one that ended after it
        if lane not in found and change[0] not in _STARTS:
            wanted[lane] = _payload(change)[0]
    for looked, (seq, change, at_ms) in enumerate(events):  # further back, for the holders wanted
        if not wanted or looked >= HOLDERS_LOOKBACK_MAX:
            break
        if change[0] in _STARTS:
            lane = _lane_of(change)
            if lane in wanted:
                _named(scan, wanted, lane, change)
        elif at_ms >= start_ms and change[0] in _CLAIM_EVENTS and (change[1], change[3]) not in found:
            scan.more = True  # (a key that changed in the window when every lane was full)
    return scan


def _lane_of(change: Change) -> tuple[str, str]:
    """A claim event's lane: (its run, its key)."""
    scope_id = change[1]
    assert scope_id is not None, "a claim's event names its run"
    return scope_id, change[3]


def _named(scan: _Scan, wanted: dict[tuple[str, str], int], lane: tuple[str, str], change: Change) -> None:
    generation, holder, _, _ = _payload(change)
    if generation == wanted[lane]:
        del wanted[lane]
        scan.holders[(*lane, generation)] = holder


async def lanes(kernel: RouteKernel, space_id: str, fenced: list[Fenced], *, run: str | None, key: str | None, window_s: int,
                fit: bool = False, between: tuple[int, int] | None = None) -> dict[str, Any]:
    """Lease swimlanes over the last `window_s` (with `fit`, from shortly before the first thing
    drawn), or over `between` (start, end) in wall milliseconds: a zoom. The lanes of the keys
    that changed most recently in the window come first, at most LANES_MAX.

    `fenced` are the refusals the shell saw in this space (`fenced.py`), oldest first: each is
    marked on the lanes of its key at its time.
    """

    def view(space: SpaceState | None, now_ms: int) -> dict[str, Any]:
        start_ms, end_ms = between if between is not None else (now_ms - window_s * 1000, now_ms)
        if end_ms > now_ms:  # (nothing to draw after now)
            start_ms, end_ms = min(start_ms, now_ms - ZOOM_MS_MIN), now_ms
        assert start_ms < end_ms, (start_ms, end_ms)
        answer = {"lanes": [], "start": start_ms, "end": end_ms, "windowSeconds": window_s, "more": False,
                  "zoomed": between is not None, "now": now_ms}
        if space is None:
            return {**answer, "columns": _columns_of(start_ms, end_ms)}
        scan = _scan(space, start_ms, end_ms, run, key)
        chosen = list(scan.found)  # the lanes that changed last come first
        if key or run or between is not None:  # asked for: keys held across the window get a lane too
            scan.more = _held_across(space, scan, chosen, start_ms, now_ms, run, key) or scan.more
        marks: dict[str, list[Fenced]] = {}
        for mark in fenced:
            if start_ms <= mark.at_ms <= end_ms:
                marks.setdefault(mark.ident, []).append(mark)
        if fit and between is None:
            firsts = [history[-1][2] for history in scan.found.values() if history]
            firsts += [marks[ident][0].at_ms for _, ident in chosen if ident in marks]
            first = min(firsts, default=now_ms)
            start_ms = max(start_ms, now_ms - max(LANE_FIT_MIN_S * 1000, (now_ms - first) * 11 // 10))
        grid = _Grid(start_ms, end_ms)
        drawn = [_lane(space, lane, scan, marks.get(lane[1], ()), grid, now_ms) for lane in chosen]
        return {**answer, "lanes": drawn, "start": start_ms, "more": scan.more, "columns": grid.columns}

    return await _read(kernel, space_id, view)


def _held_across(space: SpaceState, scan: _Scan, chosen: list[tuple[str, str]], start_ms: int, now_ms: int, run: str | None, key: str | None) -> bool:
    """Add the lanes of keys held all through the window (no event in it): held now since before
    it, or ended after it by the generation that held them. True when there was no room left."""
    candidates = [lane for lane, (_, change, _) in scan.after.items() if lane not in scan.found and change[0] not in _STARTS]
    for claim in space.claims.held():
        lane = (claim.scope_id, claim.key)
        if lane not in scan.found and lane not in scan.after and claim.held_at(now_ms) and claim.acquired_ms <= start_ms:
            if (not run or claim.scope_id == run) and (not key or claim.key.startswith(key)):
                candidates.append(lane)
    for lane in candidates:
        if len(chosen) >= LANES_MAX:
            return True
        chosen.append(lane)
    return False


def _columns_of(start_ms: int, end_ms: int) -> int:
    return max(1, min(LANE_COLUMNS, end_ms - start_ms))


class _Grid:
    """The window's time axis and its columns, shared by every lane of a view."""

    __slots__ = ("start_ms", "end_ms", "span", "columns", "edges", "xs", "per_band", "_texts")

    def __init__(self, start_ms: int, end_ms: int) -> None:
        self.start_ms, self.end_ms, self.span = start_ms, end_ms, end_ms - start_ms
        self.columns = columns = _columns_of(start_ms, end_ms)
        self.edges = [start_ms + self.span * index / columns for index in range(columns + 1)]
        self.xs = [f"{index * 100 / columns:.4g}" for index in range(columns + 1)]  # each edge on the axis, as drawn
        self.per_band = max(1, -(-columns // BANDS))  # columns in one tooltip's stretch
        self._texts: dict[int, str] = {}

    def x(self, at_ms: float) -> float:
        """Where `at_ms` is on the axis, in percent of the window."""
        return round(max(0.0, min(100.0, (at_ms - self.start_ms) * 100 / self.span)), 4)

    def column(self, at_ms: float) -> int:
        return min(self.columns - 1, max(0, int((at_ms - self.start_ms) * self.columns // self.span)))

    def text(self, index: int) -> str:
        """An edge's time of day, to the millisecond (a tooltip's)."""
        found = self._texts.get(index)
        if found is None:
            found = self._texts[index] = format_ms(int(self.edges[index]))[11:]
        return found


# A generation as it is built: [number, holder, from_ms, to_ms (None: held past the end), how it
# ended, whether it took the key over, the cursor of its first event]; a dict only when drawn or
# told (a busy lane has thousands).
_NUMBER, _HOLDER, _FROM, _TO, _END, _TAKEOVER, _CURSOR = range(7)
# (`Any`: the fields above are of several types, read by position.)
Generation = list[Any]


def _generations(space: SpaceState, lane: tuple[str, str], scan: _Scan, begin_ms: int, end_ms: int, now_ms: int) -> list[Generation]:
    """The generations of one key over [begin_ms, end_ms], oldest first (see `_NUMBER`...)."""
    scope_id, key = lane
    bars: list[Generation] = []
    opened: Generation | None = None
    holders = scan.holders
    history = scan.found.get(lane, ())
    starts, ends = _STARTS, _CLAIM_ENDS
    for index in range(len(history) - 1, -1, -1):  # (kept newest first)
        seq, change, at_ms = history[index]
        kind, payload = change[0], change[4]
        if isinstance(payload, dict):  # (what the log keeps: a tuple, (generation, holder, ...), or a dict)
            generation, holder = payload["generation"], payload.get("holder")
        else:
            generation, holder = payload[0], payload[1] if len(payload) > 1 else None
        if kind in starts:
            if opened is not None:  # (a lease ends with an event of its own; never drawn on past the next)
                opened[_TO], opened[_END] = at_ms, "ended"
            opened = [generation, holder, at_ms if at_ms > begin_ms else begin_ms, None, None, kind == "claim.taken_over", seq]
            bars.append(opened)
            continue
        if opened is None or opened[_NUMBER] != generation:  # it began before what was read
            opened = [generation, holder or holders.get((scope_id, key, generation)), begin_ms, None, None, False, None]
            bars.append(opened)
        opened[_TO], opened[_END] = at_ms, ends[kind]
        if kind == "claim.force_released":
            _, _, reason, by = _payload(change)
            opened[_END] += f" ({by}" + (f": {reason})" if reason else ")") if by else ""
        opened = None
    after = scan.after.get(lane)
    claim = space.claims.get(scope_id, key)
    if not history and after is not None and after[1][0] not in _STARTS:  # held all through by the one it ended
        generation, holder, _, _ = _payload(after[1])
        opened = [generation, holder or holders.get((scope_id, key, generation)), begin_ms, None, None, False, None]
        bars.append(opened)
    if not history and after is None and claim is not None and claim.held_at(now_ms):  # held now since before
        opened = [claim.generation, claim.holder, begin_ms, None, None, False, None]
        bars.append(opened)
    if opened is not None and after is None:
        if claim is not None and claim.held_at(now_ms) and claim.generation == opened[_NUMBER]:
            opened[_HOLDER] = claim.holder
        elif claim is None:  # ended with no event: its run ended
            scope = space.scopes.get(scope_id) if scope_id in space.scopes else None
            ended_ms = scope.ended_ms if scope is not None and scope.ended_ms is not None else now_ms
            opened[_TO], opened[_END] = max(opened[_FROM], ended_ms), "ended with its run"
        else:  # its lease ran out, and its expiry is not recorded yet
            opened[_TO], opened[_END] = max(opened[_FROM], min(claim.expires_ms, now_ms)), "expired"
    for bar in bars:  # drawn within the window; what ends after it is held past its end
        if bar[_TO] is not None and bar[_TO] > end_ms:
            bar[_TO], bar[_END] = None, None
    return bars


class _Cells:
    """Per column: milliseconds held, and held by a generation that took the key over; per
    tooltip stretch: how many generations touch it, how many took over, the first few of them."""

    __slots__ = ("held", "taken", "crowded", "counts", "takeovers", "firsts")

    def __init__(self, generations: list[Generation], grid: _Grid) -> None:
        columns, edges, end_ms, per_band = grid.columns, grid.edges, grid.end_ms, grid.per_band
        start_ms, scale = grid.start_ms, grid.columns / grid.span
        held, taken = [0.0] * columns, [0.0] * columns
        bands = -(-columns // per_band)
        counts, takeovers = [0] * bands, [0] * bands
        firsts: list[list[Generation]] = [[] for _ in range(bands)]
        touched = [0] * columns
        for generation in generations:
            a, b = generation[_FROM], generation[_TO] if generation[_TO] is not None else end_ms
            first = int((a - start_ms) * scale)
            last = int((b - start_ms) * scale)
            first = 0 if first < 0 else columns - 1 if first >= columns else first
            last = 0 if last < 0 else columns - 1 if last >= columns else last
            took = generation[_TAKEOVER]
            if first == last:  # (the usual case in a busy lane: within one column)
                held[first] += b - a
                if took:
                    taken[first] += b - a
                touched[first] += 1
            else:
                if b <= edges[last]:  # (it ends on an edge: the next column has none of it)
                    last -= 1
                for index in range(first, last + 1):
                    overlap = min(b, edges[index + 1]) - max(a, edges[index])
                    if overlap > 0:
                        held[index] += overlap
                        if took:
                            taken[index] += overlap
                    touched[index] += 1
            band = first // per_band
            counts[band] += 1
            takeovers[band] += took
            if len(firsts[band]) < BAND_HOLDERS_NAMED:
                firsts[band].append(generation)
            for band in range(band + 1, last // per_band + 1):
                counts[band] += 1
                takeovers[band] += took
                if len(firsts[band]) < BAND_HOLDERS_NAMED:
                    firsts[band].append(generation)
        self.held, self.taken, self.counts, self.takeovers, self.firsts = held, taken, counts, takeovers, firsts
        self.crowded = max(touched, default=0) > 1  # some column holds two generations: they cannot be drawn apart
        assert all(held[index] <= edges[index + 1] - edges[index] + 1e-6 for index in range(columns)), "held past a column"


def _lane(space: SpaceState, lane: tuple[str, str], scan: _Scan, refusals: Iterable[Fenced], grid: _Grid, now_ms: int) -> dict[str, Any]:
    """One key's lane: how it is drawn (bars or columns), and its story's numbers."""
    scope_id, key = lane
    start_ms, end_ms = grid.start_ms, grid.end_ms
    scope = space.scopes.get(scope_id) if scope_id in space.scopes else None
    run_ms = scope.created_ms if scope is not None else start_ms
    cut_ms = scan.cut.get(lane)
    begin_ms = max(start_ms, run_ms, cut_ms or start_ms)
    generations = _generations(space, lane, scan, begin_ms, end_ms, now_ms)
    cells = _Cells(generations, grid)
    claim = space.claims.get(scope_id, key)
    live = claim is not None and claim.held_at(now_ms)
    holders: dict[str, int] = {}
    for generation in generations:
        holders[generation[_HOLDER] or "?"] = holders.get(generation[_HOLDER] or "?", 0) + 1
    told = [_bar(generation, grid, claim if live else None) for generation in generations[-GENERATIONS_TOLD:]]
    drawn = {
        "scopeId": scope_id, "key": key, "count": len(generations), "told": told, "held": live,
        "generation": None if claim is None else claim.generation, "mode": "columns" if cells.crowded else "bars",
        "fenced": [{"x": grid.x(mark.at_ms), "at": format_ms(mark.at_ms), "operation": mark.operation, "message": mark.message,
                    "generation": _generation_at(generations, mark.at_ms)} for mark in refusals],
        "heldShare": round(sum(cells.held) / grid.span, 4), "takeovers": sum(1 for generation in generations if generation[_TAKEOVER]),
        "holders": sorted(holders.items(), key=lambda item: (-item[1], item[0]))[:HOLDERS_NAMED], "holdersTotal": len(holders),
        "runBeganAt": format_ms(run_ms) if run_ms > start_ms else None,
        "unreadBefore": format_ms(cut_ms) if cut_ms is not None and cut_ms > max(start_ms, run_ms) else None,
        "beginX": grid.x(begin_ms), "bars": [], "shares": "", "heldPath": "", "takenPath": "", "bands": [],
    }
    if not cells.crowded:
        drawn["bars"] = [_bar(generation, grid, claim if live else None) for generation in generations]
        return drawn
    begin = grid.column(begin_ms) if begin_ms > start_ms else 0
    shares = [round(held / (grid.edges[index + 1] - grid.edges[index]), 3) for index, held in enumerate(cells.held)]
    taken = [round(held / (grid.edges[index + 1] - grid.edges[index]), 3) for index, held in enumerate(cells.taken)]
    drawn.update(shares=" ".join(f"{share:g}" for share in shares), heldPath=_step_path(shares, begin, grid),
                 takenPath=_step_path(taken, begin, grid) if any(taken) else "", bands=_bands(cells, shares, begin, grid))
    return drawn


def _bar(generation: Generation, grid: _Grid, claim: Any) -> dict[str, Any]:
    """A generation as the page draws and tells it: placed on the axis, its times as text."""
    number, holder, from_ms, to_ms, end, takeover, cursor = generation
    bar = {"generation": number, "holder": holder, "from": from_ms, "to": to_ms, "end": end, "takeover": takeover,
           "cursor": cursor, "x": grid.x(from_ms), "fromAt": format_ms(from_ms), "toAt": None if to_ms is None else format_ms(to_ms)}
    bar["width"] = round(grid.x(to_ms if to_ms is not None else grid.end_ms) - bar["x"], 4)
    if claim is not None and to_ms is None and claim.generation == number:  # held now: its lease, its latest renewal
        bar["leaseExpiresAt"] = format_ms(claim.expires_ms)
        renewed_ms = claim.expires_ms - claim.lease_ms
        if renewed_ms > claim.acquired_ms:
            bar.update(renewedAt=format_ms(renewed_ms), renewedX=grid.x(renewed_ms))
    return bar


def _step_path(shares: list[float], begin: int, grid: _Grid) -> str:
    """An SVG path of the columns from `begin` on, each as tall as its share (of a 20-high lane
    whose foot is at 23), a step only where the share changes: one element for the whole lane."""
    xs, parts, level = grid.xs, [f"M{grid.xs[begin]} 23"], 0.0
    for index in range(begin, grid.columns):
        if shares[index] != level:
            level = shares[index]
            parts.append(f"H{xs[index]}V{23 - 20 * level:.4g}")
    parts.append(f"H{xs[grid.columns]}V23Z")
    return "".join(parts)


def _bands(cells: _Cells, shares: list[float], begin: int, grid: _Grid) -> list[dict[str, Any]]:
    """The lane's stretches from `begin` on, each with its tooltip: when, how much was held, and by
    which generations and holders."""
    per_band, columns, bands = grid.per_band, grid.columns, []
    for band in range(begin // per_band, len(cells.counts)):
        first, last = max(begin, band * per_band), min(columns, (band + 1) * per_band)
        when = f"{grid.text(first)}–{grid.text(last)}"
        count = cells.counts[band]
        if not count:
            title = f"{when}: free"
        else:
            held = sum(shares[first:last]) / (last - first)
            named = ", ".join(f"{g[_NUMBER]} {g[_HOLDER] or '(holder not in the kept events)'}" for g in cells.firsts[band])
            more = f" and {count - len(cells.firsts[band])} more" if count > len(cells.firsts[band]) else ""
            title = f"{when}: held {round(held * 100)} % by generation{'s' if count > 1 else ''} {named}{more}"
            if cells.takeovers[band]:
                title += f"; {cells.takeovers[band]} took it over after a lease expired"
        bands.append({"x": grid.xs[first], "width": f"{(last - first) * 100 / columns:.4g}", "title": title})
    return bands


def _generation_at(generations: list[Generation], at_ms: int) -> int | None:
    """The generation that held the key at `at_ms` (the one a late write was fenced by)."""
    current = None
    for generation in generations:
        if generation[_FROM] <= at_ms:
            current = generation[_NUMBER]
    return current
