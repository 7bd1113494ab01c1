"""What the HTTP shell reports about each request: one metrics observation and one log line.

`serve_http` calls `begin()` when a request arrives and `end(...)` once it is answered, whatever
the answer. The work per request is kept to what cannot be avoided: two `perf_counter` reads, a
dict lookup for the route's counts (`RouteMetrics`, made on its first request), a count by status
and a latency bucket added to (plain numbers, read when scraped), and the request line when request
logging is on. `in_flight` is what shutdown waits on.
"""

from __future__ import annotations

import time
from typing import Any

from .console.charts import P_FAILED, P_REFUSED, P_REQUESTS, Charts, acquire_bucket
from .console.fenced import FencedWrites
from .logs import AccessLog
from .metrics import Metrics, RouteMetrics

__all__ = ["Telemetry", "UNMATCHED", "CLIENT_GONE", "ACQUIRE_ROUTE"]

# The route label of requests no route matched (404, 405, an undecodable path).
UNMATCHED = "unmatched"
# The status recorded when the client went away before its answer (nginx's convention).
CLIENT_GONE = 499

# The route whose answer time is a claim acquire's wait, on the console's charts.
ACQUIRE_ROUTE = ("POST", ("v1", "spaces", "{space}", "claims"))

# Methods kept as they are in labels; any other becomes OTHER, so a client cannot make new series.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

now = time.perf_counter


class Telemetry:
    __slots__ = ("metrics", "access", "in_flight", "fenced", "charts", "_routes", "_unmatched")

    def __init__(self, metrics: Metrics | None = None, access: AccessLog | None = None) -> None:
        self.metrics = metrics or Metrics()
        self.access = access or AccessLog()
        self.in_flight = 0
        # Writes refused for a stale token, for the console's lease swimlanes (`console/fenced.py`).
        self.fenced = FencedWrites()
        # Per space, requests and acquire times for the console's charts (`console/charts.py`).
        self.charts = Charts()
        self._routes: dict[Any, RouteMetrics] = {}
        self._unmatched: dict[str, RouteMetrics] = {}

    def begin(self) -> float:
        self.in_flight += 1
        return now()

    def end(self, method: str, route: Any, status: int, started: float, request_id: str, code: str | None,
            space: str | None = None) -> None:
        """Record one answered request; `route` is the matched `Route` or None, `space` the space
        it named (for the console's charts)."""
        seconds = now() - started
        self.in_flight -= 1
        if route is not None:
            bound = self._routes.get(route)
            if bound is None:
                bound = self._routes[route] = self.metrics.route(route.method, "/" + "/".join(route.pattern))
                bound.acquire = (route.method, route.pattern) == ACQUIRE_ROUTE
            if space is not None and status != CLIENT_GONE:
                counts = self.charts.count(space)
                if counts is not None:
                    counts[P_REQUESTS] += 1
                    if status >= 400:
                        counts[P_FAILED if status >= 500 else P_REFUSED] += 1
                    if bound.acquire:
                        counts[acquire_bucket(seconds)] += 1
        else:
            label = method if method in _METHODS else "OTHER"
            bound = self._unmatched.get(label)
            if bound is None:
                bound = self._unmatched[label] = self.metrics.route(label, UNMATCHED)
        bound.observe(status, seconds)
        if self.access.enabled:
            self.access.line(method if route is not None else bound.method, bound.route, status, seconds, request_id, code)
