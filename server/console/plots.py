"""The charts page's pictures: a space's buckets (`charts.py`) over a window, drawn as SVG paths.

Drawn on the server, as every page is (no chart library, no build step): each chart is a few
`<path>`s in a fixed viewBox, scaled to a rounded maximum, with a gap where the ring holds no
bucket (before the charts began, or while the server was down). Rates are per second over the
bucket; counts (takeovers, expiries) per bucket; the acquire times are the 50th and 99th
percentiles read from the bucket's histogram, interpolated within its bucket.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from ...actors.timestamps import format_ms
from .charts import (
    ACQUIRE_BOUNDS_S, ACQUIRES, COARSE_S, EXPIRIES, FAILED, INTERVAL_S, KINDS, OLDEST_S, QUEUED, REFUSED, REQUESTS,
    TAKEOVERS, Series,
)

__all__ = ["WINDOWS", "charts_of", "percentile"]

# A window's name in the URL -> (its length in seconds, whether it is drawn from the fine ring).
WINDOWS = {"5m": (300, True), "30m": (1800, True), "3h": (3 * 3600, False), "12h": (12 * 3600, False)}
WIDTH, HEIGHT, TOP = 600, 120, 6  # the viewBox of a chart, and the room kept above its highest point


def percentile(histogram: Sequence[int], q: float) -> float | None:
    """The `q` quantile (0-1) of an acquire histogram, in seconds; None when it is empty. Within
    its bucket the value is interpolated; the open last bucket is taken as up to twice its bound."""
    total = sum(histogram)
    if not total:
        return None
    rank, below = q * total, 0
    for index, count in enumerate(histogram):
        if count and below + count >= rank:
            lower = ACQUIRE_BOUNDS_S[index - 1] if index else 0.0
            upper = ACQUIRE_BOUNDS_S[index] if index < len(ACQUIRE_BOUNDS_S) else 2 * ACQUIRE_BOUNDS_S[-1]
            return lower + (upper - lower) * (rank - below) / count
        below += count
    raise AssertionError("a quantile past the histogram's total")


def _nice(value: float) -> float:
    """The smallest of 1, 2, 5 x 10^k at or above `value` (a chart's top)."""
    if value <= 0:
        return 1.0
    power: float = 10 ** math.floor(math.log10(value))  # (`int ** int` is typed Any: a float below 1)
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value - 1e-12)


def _path(values: list[float | None], top: float) -> str:
    """An SVG path through `values` (None: a gap) across the chart's width."""
    count = len(values)
    parts, drawing = [], False
    for index, value in enumerate(values):
        if value is None:
            drawing = False
            continue
        x = WIDTH * (index + 0.5) / count
        y = HEIGHT - (HEIGHT - TOP) * min(value, top) / top
        parts.append(f"{'L' if drawing else 'M'}{x:.1f} {y:.1f}")
        drawing = True
    return "".join(parts)


def _chart(name: str, title: str, unit: str, lines: list[tuple[str, list[float | None]]], note: str = "") -> dict[str, Any]:
    """One chart: its lines (name, values), its scale, and what each line last and at most was."""
    peak = max((value for _, values in lines for value in values if value is not None), default=0.0)
    top = _nice(peak)
    drawn = []
    for line_name, values in lines:
        known = [value for value in values if value is not None]
        drawn.append({"name": line_name, "path": _path(values, top), "last": known[-1] if known else None,
                      "peak": max(known, default=None), "points": " ".join("" if v is None else f"{v:.4g}" for v in values)})
    return {"name": name, "title": title, "unit": unit, "top": top, "lines": drawn, "note": note,
            "empty": not any(value for _, values in lines for value in values if value)}


def charts_of(series: Series | None, window: str) -> dict[str, Any]:
    """The charts of one space over `window` (a key of WINDOWS), from its newest bucket back."""
    span_s, fine = WINDOWS[window]
    step_s = INTERVAL_S if fine else COARSE_S
    if series is None or series.last is None:
        return {"charts": [], "step": step_s, "start": None, "end": None, "last": None}
    last = series.last if fine else series.last * INTERVAL_S // COARSE_S
    first = last - span_s // step_s + 1
    kept = [bucket for _, bucket in series.buckets(fine, first, last)]
    buckets: list[Any] = [None] * (span_s // step_s - len(kept)) + kept  # (None: no bucket, before the ring's oldest)

    def rate(field: int) -> list[float | None]:
        return [None if b is None else b[field] / step_s for b in buckets]

    def count(field: int) -> list[float | None]:
        return [None if b is None else float(b[field]) for b in buckets]

    def quantile(q: float) -> list[float | None]:
        found = [None if b is None else percentile(b[ACQUIRES:], q) for b in buckets]
        return [None if value is None else value * 1000 for value in found]

    kinds = [(kind, rate(index)) for index, kind in enumerate(KINDS)]
    shown = [(kind, values) for kind, values in kinds if any(values)] or kinds[:1]
    per = f"per {step_s} s"
    charts = [
        _chart("operations", "Operations per second, by kind", "/s", shown),
        _chart("acquire", "Claim acquire: time to answer (waits for a held claim included)", "ms",
               [("p50", quantile(0.5)), ("p99", quantile(0.99))], note="from a histogram; no point where no acquire was answered"),
        _chart("queue", "Messages and tasks waiting for a worker", "", [("waiting", count(QUEUED))],
               note="sampled at the end of each interval" + ("" if fine else "; the highest sample of each minute")),
        _chart("oldest", "Age of the oldest waiting message", "s", [("oldest", count(OLDEST_S))]),
        _chart("leases", f"Takeovers and expiries, {per}", "", [("takeovers", count(TAKEOVERS)), ("expiries", count(EXPIRIES))],
               note="takeovers: a claim taken after its lease expired; expiries: leases, runs and tasks whose time ran out"),
        _chart("errors", "API requests per second, and those refused (4xx) and failed (5xx)", "/s",
               [("requests", rate(REQUESTS)), ("refused", rate(REFUSED)), ("failed", rate(FAILED))]),
    ]
    start_ms, end_ms = first * step_s * 1000, (last + 1) * step_s * 1000
    return {"charts": charts, "step": step_s, "start": format_ms(start_ms), "end": format_ms(end_ms), "last": end_ms}
