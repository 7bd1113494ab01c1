"""Load and leaks: many long polls, workers and a steady stream of claims and tasks against a real server.

    python -m bench.soak                        # 1000 receivers, 50 workers, 60 s
    python -m bench.soak --seconds 600 --receivers 1000 --workers 50

A `runstate serve` process (data directory, `--fsync batch`) gets, for a fixed time: `receivers`
clients each holding a long poll (`recv` with `waitMs` 20 s) on a queue nothing is ever sent to,
so about that many requests are always parked; `workers` clients long-polling a work queue and
completing what they get; and a steady stream of task submissions and claim acquire/release
cycles. The server's own `/metrics` gives its open file descriptors, resident memory and live trio
tasks. They are read once the server counts every client's connection and the load has settled,
again at the end of the load, and once more after every client has gone; under a steady load the
first two agree, and the last returns to where the idle server started. Every request must be answered (any HTTP status counts; a transport error or
a timeout does not). The report is one JSON document; `run()` returns it for tests.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import ssl
import sys
import tempfile
from dataclasses import asdict, dataclass, field

import httpx
import trio

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.servers import ServerProcess  # noqa: E402

API_KEY = "soak-key"
SPACE = "default"
BASE = f"/v1/spaces/{SPACE}"
METRICS = {
    "fds": "process_open_fds",
    "rss_mb": "process_resident_memory_bytes",
    "trio_tasks": "runstate_trio_tasks",
    "in_flight": "runstate_http_requests_in_flight",
    "actors": "runstate_kernel_actors",
    "actor_tasks_pooled": "runstate_kernel_actor_tasks_pooled",
}


@dataclass
class Counts:
    sent: int = 0
    answered: int = 0
    failed: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


@dataclass
class Window:
    """When the clients stop: set once the last sample under load is taken (until then, never)."""
    until: float = math.inf


# How long the clients may take to connect before the load begins anyway (the report's fds then
# say how many did).
CONNECT_S_MAX = 60.0


async def _until_connected(http: httpx.AsyncClient, fds: float) -> float:
    """Wait until the server holds `fds` descriptors (every client connected) or CONNECT_S_MAX
    has passed; how long it took."""
    began = trio.current_time()
    while trio.current_time() - began < CONNECT_S_MAX and (await _metrics(http))["fds"] < fds:
        await trio.sleep(0.2)
    return trio.current_time() - began


async def _metrics(http: httpx.AsyncClient) -> dict[str, float]:
    text = (await http.get("/metrics", timeout=10)).text
    found = {}
    for name, metric in METRICS.items():
        match = re.search(rf"^{metric} ([0-9.e+]+)$", text, re.MULTILINE)
        value = float(match.group(1)) if match else float("nan")
        found[name] = round(value / 2**20, 1) if name == "rss_mb" else value
    return found


async def _call(http: httpx.AsyncClient, counts: Counts, method: str, path: str, body: dict | None = None, timeout: float = 40) -> httpx.Response | None:
    counts.sent += 1
    try:
        response = await http.request(method, path, json=body, timeout=timeout)
    except httpx.HTTPError as error:
        counts.failed += 1
        if len(counts.errors) < 10:
            counts.errors.append(f"{method} {path}: {type(error).__name__}: {error}")
        return None
    counts.answered += 1
    key = str(response.status_code)
    counts.by_status[key] = counts.by_status.get(key, 0) + 1
    return response


# Unused on plain http, but httpx builds (and loads CA files into) one per client unless given one.
_TLS = ssl.create_default_context()


def _client(base_url: str) -> httpx.AsyncClient:
    """One client per simulated agent, as each agent process would have its own.

    One shared client with hundreds of connections measures httpcore instead of the server: its
    pool polls every idle connection each time it hands one out, and with a few hundred long
    polls finishing together that stalls the load generator for seconds. Connections are kept as
    long as the server keeps them (httpx's own default drops one idle for 5 s, which would measure
    connection churn rather than leaks: see docs/testing.md "Load and leaks").
    """
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=60)
    return httpx.AsyncClient(base_url=base_url, headers={"authorization": f"Bearer {API_KEY}"}, limits=limits, verify=_TLS)


async def _receiver(base_url: str, counts: Counts, mailbox_id: str, scope_id: str, number: int, window: Window, wait_ms: int) -> None:
    body = {"scopeId": scope_id, "holder": f"r{number}", "holderSession": f"s{number}", "waitMs": wait_ms}
    async with _client(base_url) as http:
        while trio.current_time() < window.until:
            await _call(http, counts, "POST", f"{BASE}/mailboxes/{mailbox_id}/recv", body)


async def _worker(base_url: str, counts: Counts, mailbox_id: str, scope_id: str, number: int, window: Window) -> None:
    body = {"scopeId": scope_id, "holder": f"w{number}", "holderSession": f"ws{number}", "waitMs": 5_000, "leaseSeconds": 30}
    async with _client(base_url) as http:
        while trio.current_time() < window.until:
            response = await _call(http, counts, "POST", f"{BASE}/mailboxes/{mailbox_id}/recv", body)
            if response is not None and response.status_code == 200:
                delivery = response.json()
                await _call(http, counts, "POST", f"{BASE}/messages/{delivery['message']['id']}/complete", {"token": delivery["token"], "result": {"payload": number}})


async def _producer(base_url: str, counts: Counts, mailbox_id: str, scope_id: str, per_s: float, window: Window) -> None:
    number = 0
    async with _client(base_url) as http:
        while trio.current_time() < window.until:
            number += 1
            await _call(http, counts, "POST", f"{BASE}/tasks", {"scopeId": scope_id, "mailboxId": mailbox_id, "taskKey": f"t{number}", "input": {"n": number}})
            await trio.sleep(1 / per_s)


async def _claimer(base_url: str, counts: Counts, scope_id: str, per_s: float, window: Window) -> None:
    number = 0
    async with _client(base_url) as http:
        while trio.current_time() < window.until:
            number += 1
            body = {"key": f"k{number % 50}", "scopeId": scope_id, "holder": "c", "holderSession": "cs", "leaseSeconds": 10}
            response = await _call(http, counts, "POST", f"{BASE}/claims", body)
            if response is not None and response.status_code == 200:
                await _call(http, counts, "POST", f"{BASE}/claims/k{number % 50}/release", {"token": response.json()["token"]})
            await trio.sleep(1 / per_s)


async def _soak(base_url: str, seconds: float, receivers: int, workers: int, rate: float, settle_s: float, wait_ms: int = 20_000) -> dict:
    async with _client(base_url) as http:
        idle_before = await _metrics(http)
        scope_id = (await http.post(f"{BASE}/scopes", json={"name": "soak"})).json()["id"]
        idle_box = (await http.post(f"{BASE}/mailboxes", json={"name": "idle"})).json()["id"]
        work_box = (await http.post(f"{BASE}/mailboxes", json={"name": "work"})).json()["id"]
        counts = Counts()
        window = Window()
        samples = []
        async with trio.open_nursery() as nursery:
            for number in range(receivers):
                nursery.start_soon(_receiver, base_url, counts, idle_box, scope_id, number, window, wait_ms)
            for number in range(workers):
                nursery.start_soon(_worker, base_url, counts, work_box, scope_id, number, window)
            nursery.start_soon(_producer, base_url, counts, work_box, scope_id, rate, window)
            nursery.start_soon(_claimer, base_url, counts, scope_id, rate, window)
            # Every client's connection, counted by the server, before the load is said to be
            # steady: on a busy machine a few hundred clients take longer than any fixed wait to
            # connect, and a sample taken while they still do measures the ramp, not a leak.
            connected_s = await _until_connected(http, idle_before["fds"] + receivers + workers + 2)
            started = trio.current_time()
            await trio.sleep(settle_s)
            under_load_start = await _metrics(http)
            while trio.current_time() < started + seconds:
                await trio.sleep(min(5.0, max(0.0, started + seconds - trio.current_time())))
                samples.append({"at_s": round(trio.current_time() - started, 1), **await _metrics(http)})
            under_load_end = samples[-1] if samples else await _metrics(http)
            # The clients stop only once the last sample is in: a slow answer to it must not
            # count the connections of clients already leaving.
            window.until = trio.current_time()
        ran_s = trio.current_time() - started
    async with _client(base_url) as http:
        await trio.sleep(2)  # connections close, parked requests end
        idle_after = await _metrics(http)
        healthy = (await http.get("/healthz")).status_code == 200
    return {
        "seconds": round(ran_s, 1),
        "connected_s": round(connected_s, 1),
        "receivers": receivers,
        "workers": workers,
        "rate_per_s": rate,
        "requests": asdict(counts),
        "requests_per_s": round(counts.answered / ran_s, 1),
        "idle_before": idle_before,
        "under_load_start": under_load_start,
        "under_load_end": under_load_end,
        "idle_after": idle_after,
        "samples": samples,
        "healthy_after": healthy,
    }


def run(seconds: float = 60, receivers: int = 1000, workers: int = 50, rate: float = 20, settle_s: float = 8, wait_ms: int = 20_000) -> dict:
    """Start a server, soak it, stop it; the report."""
    data_dir = tempfile.mkdtemp(prefix="runstate-soak-")
    try:
        with ServerProcess("--data-dir", data_dir, "--fsync", "batch", "--log-requests", "off", api_key=API_KEY, space_id=SPACE) as server:
            report = trio.run(_soak, server.base_url, seconds, receivers, workers, rate, settle_s, wait_ms)
            report["server_alive"] = server.proc is not None and server.proc.poll() is None
        return report
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--receivers", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=50)
    parser.add_argument("--rate", type=float, default=20, help="task submissions and claim cycles per second, each")
    args = parser.parse_args(argv)
    report = run(args.seconds, args.receivers, args.workers, args.rate)
    print(json.dumps(report, indent=2))
    ok = report["requests"]["failed"] == 0 and report["healthy_after"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
