"""The console leg: every page of the web console, and its live stream, over a loaded space.

A fresh `runstate serve` (in memory, keeping 100,000 events) is loaded through the API with
10,000 held claims over 100 runs, a mailbox of 2,000 tasks (some running, some done, some dead
letters), and claim acquire/release cycles on 100 hot keys until the space's event log holds
100,000 events. Then, signed in to the console as a browser would be (the session cookie):

- Pages: each page of the console (and the heavier filters: every claim key, a type filter over
  the whole log, the swimlanes fitted to what happened, a worker's blast radius) is fetched
  `PAGE_SAMPLES` times in a row; its 90th percentile is the figure, the slowest page's the verdict.
- Stream: one tab's stream is open while 16 writers make a burst of `BURST_CYCLES` acquire/release
  cycles; every event must arrive, in order, once, with no `reset`; the figure is how long the last
  one took after the burst and the fullest buffer the server saw (its spaces page says it).
"""

from __future__ import annotations

import asyncio
import re
import statistics
import threading
import time
from typing import TYPE_CHECKING

import httpx

from .procs import CPU_SERVER, Processes, python
from .report import Row, ms, n, verdict_at_most
from .targets import API_KEY, SPACE, Target, wait_healthy

if TYPE_CHECKING:
    from .run import Bench

ADMIN_KEY = "bench-admin-key-0123456789"
CLAIMS = 10_000
RUNS = 100
TASKS = 2_000
EVENTS = 100_000
# Keys cycled to fill the log: a multiple of WRITERS, so that each writer's keys are its own.
HOT_KEYS = 96
WRITERS = 16
PAGE_SAMPLES = 10
BURST_CYCLES = 2_500
# The targets (bench/README.md).
PAGE_MS = 300.0


def start_loaded_server(procs: Processes) -> Target:
    args = [python(), "-m", "runstate.server.cli", "serve", "--host", "127.0.0.1", "--port", "0",
            "--events-kept-max", str(EVENTS + 50_000), "--log-requests", "off"]
    proc = procs.start("console", args, cpu=CPU_SERVER, pattern=r"runstate: serving on (http://\S+)",
                       env={"RUNSTATE_API_KEY": API_KEY, "RUNSTATE_SPACE_ID": SPACE, "RUNSTATE_ADMIN_KEY": ADMIN_KEY})
    target = Target("console", proc.wait_ready(), proc)
    asyncio.run(wait_healthy(target))
    return target


async def _load(target: Target) -> dict:
    """The space the pages are read over; returns the ids the pages need."""
    base = f"/v1/spaces/{SPACE}"
    async with httpx.AsyncClient(base_url=target.base_url, headers={"authorization": f"Bearer {API_KEY}"}, timeout=30,
                                 limits=httpx.Limits(max_connections=WRITERS)) as api:

        async def post(path: str, body: dict, ok: tuple[int, ...] = (200, 201)) -> dict:
            answer = await api.post(base + path, json=body)
            if answer.status_code not in ok:
                raise RuntimeError(f"POST {path} answered {answer.status_code}: {answer.text[:200]}")
            return answer.json()

        async def spread(count: int, work) -> None:  # type: ignore[no-untyped-def]
            async def writer(first: int) -> None:
                for index in range(first, count, WRITERS):
                    await work(index)

            await asyncio.gather(*(writer(w) for w in range(WRITERS)))

        runs = [(await post("/scopes", {"name": f"run-{r}"}))["id"] for r in range(RUNS)]
        await spread(CLAIMS, lambda i: post("/claims", {"scopeId": runs[i % RUNS], "key": f"company:{i:05d}",
                                                         "holder": f"worker-{i % 50}", "holderSession": "s", "leaseSeconds": 600}))
        mailbox = (await post("/mailboxes", {"name": "crawl"}))["id"]
        await spread(TASKS, lambda i: post("/tasks", {"scopeId": runs[i % RUNS], "mailboxId": mailbox, "taskKey": f"page-{i}",
                                                       "input": {"url": f"https://example.com/{i}"}}))

        async def work(i: int) -> None:
            got = await post(f"/mailboxes/{mailbox}/recv", {"scopeId": runs[i % RUNS], "holder": f"worker-{i % 50}",
                                                             "holderSession": "s", "leaseSeconds": 600})
            if i % 3 == 0:
                await post(f"/messages/{got['message']['id']}/complete", {"token": got["token"], "result": {"pages": i}})
            elif i % 3 == 1:
                await post(f"/messages/{got['message']['id']}/nack", {"token": got["token"], "retry": False, "error": "bad page"})

        await spread(600, work)
        async with _console(target, API_KEY) as console:
            newest = await _newest(console)
            while newest < EVENTS:  # each cycle is two events (a writer's hot keys are its own)
                await spread((EVENTS - newest + 1) // 2, lambda i: _cycle(post, runs[0], f"hot:{i % HOT_KEYS:03d}", i))
                newest = await _newest(console)
    return {"run": runs[0], "mailbox": mailbox, "events": newest}


class _console:
    """An async client signed in to the console (its session cookie set)."""

    def __init__(self, target: Target, key: str) -> None:
        self.target, self.key = target, key

    async def __aenter__(self) -> httpx.AsyncClient:
        self.client = httpx.AsyncClient(base_url=self.target.base_url, timeout=30)
        answer = await self.client.post("/console/login", data={"key": self.key}, headers={"origin": self.target.base_url})
        if answer.status_code != 303:
            raise RuntimeError(f"signing in to the console answered {answer.status_code}")
        return self.client

    async def __aexit__(self, *_: object) -> None:
        await self.client.aclose()


async def _newest(console: httpx.AsyncClient) -> int:
    """The number of the space's newest event, as its Events page says it."""
    page = (await console.get(f"/console/s/{SPACE}/events?limit=1")).text
    found = re.search(r"keeps events (\d+) to (\d+)", page)
    if found is None:
        raise RuntimeError("the console's Events page does not say which events it keeps")
    return int(found.group(2))


async def _cycle(post, run: str, key: str, i: int) -> None:  # type: ignore[no-untyped-def]
    """One acquire and release of a hot key: two events. (A key another writer holds is skipped.)"""
    body = {"scopeId": run, "key": key, "holder": f"churn-{i % WRITERS}", "holderSession": "s", "leaseSeconds": 30}
    got = await post("/claims", body, ok=(200, 201, 409))
    if "token" in got:
        await post(f"/claims/{key}/release", {"token": got["token"]})


def _pages(loaded: dict) -> list[tuple[str, str]]:
    base = f"/console/s/{SPACE}"
    return [
        ("runs", base + "/runs"), ("a run", f"{base}/runs/{loaded['run']}"), ("claims held", base + "/claims"),
        ("every claim key", base + "/claims?show=all"), ("swimlanes (fitted)", base + "/lanes"),
        ("swimlanes of a key prefix", base + "/lanes?key=hot:0&window=1h"), ("tasks", base + "/tasks"),
        ("queues", base + "/queues"), ("a mailbox", f"{base}/queues/{loaded['mailbox']}"), ("capacity", base + "/capacity"),
        ("coordination", base + "/coordination"), ("events", base + "/events"),
        ("events of one type", base + "/events?types=task.failed"), ("workers", base + "/workers"),
        ("a worker's blast radius", base + "/workers/worker-7"), ("space", base + "/space"),
    ]


def _signed_in(target: Target, key: str) -> httpx.Client:
    client = httpx.Client(base_url=target.base_url, timeout=30, follow_redirects=False)
    answer = client.post("/console/login", data={"key": key}, headers={"origin": target.base_url})
    if answer.status_code != 303:
        raise RuntimeError(f"signing in to the console answered {answer.status_code}")
    return client


def _time_pages(target: Target, loaded: dict) -> list[dict]:
    client = _signed_in(target, API_KEY)
    timed = []
    for name, path in _pages(loaded):
        samples = []
        for _ in range(PAGE_SAMPLES):
            began = time.perf_counter()
            answer = client.get(path)
            samples.append((time.perf_counter() - began) * 1000)
            if answer.status_code != 200:
                raise RuntimeError(f"{path} answered {answer.status_code}: {answer.text[:200]}")
        samples.sort()
        timed.append({"page": name, "path": path, "p50_ms": statistics.median(samples),
                      "p90_ms": samples[int(0.9 * (len(samples) - 1))], "max_ms": samples[-1], "bytes": len(answer.content)})
    return timed


def _burst(target: Target, loaded: dict) -> dict:
    """One stream open while writers make a burst; what it received, and when."""
    client = _signed_in(target, API_KEY)
    received: list[tuple[str, int | None, float]] = []
    opened = threading.Event()
    done = threading.Event()

    def read() -> None:
        with client.stream("GET", f"/console/s/{SPACE}/stream?after={loaded['events']}", timeout=None) as stream:
            opened.set()
            frame: dict = {}
            for line in stream.iter_lines():
                if line.startswith(("id: ", "event: ")):
                    name, _, value = line.partition(": ")
                    frame[name] = value
                elif not line and frame:
                    received.append((frame.get("event", ""), int(frame["id"]) if "id" in frame else None, time.monotonic()))
                    frame = {}
                if done.is_set():
                    return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    opened.wait(10)
    time.sleep(0.5)
    began = time.monotonic()

    async def burst() -> None:
        base = f"/v1/spaces/{SPACE}"
        async with httpx.AsyncClient(base_url=target.base_url, headers={"authorization": f"Bearer {API_KEY}"}, timeout=30) as api:
            async def post(path: str, body: dict, ok: tuple[int, ...] = (200, 201)) -> dict:
                answer = await api.post(base + path, json=body)
                if answer.status_code not in ok:
                    raise RuntimeError(f"POST {path} answered {answer.status_code}")
                return answer.json()

            async def writer(w: int) -> None:
                for i in range(w, BURST_CYCLES, WRITERS):
                    await _cycle(post, loaded["run"], f"burst:{w:02d}", i)

            await asyncio.gather(*(writer(w) for w in range(WRITERS)))

    asyncio.run(burst())
    written_s = time.monotonic() - began

    async def newest_now() -> int:
        async with _console(target, API_KEY) as console:
            return await _newest(console)

    newest = asyncio.run(newest_now())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(ident == newest for _, ident, _ in received):
        time.sleep(0.01)
    done.set()
    ids = [ident for kind, ident, _ in received if kind == "change"]
    last_at = max((at for _, ident, at in received if ident == newest), default=float("nan"))
    stats = _signed_in(target, ADMIN_KEY).get("/console/spaces").text
    high = re.search(r"fullest stream buffer (\d+)", stats)
    return {
        "events": newest - loaded["events"], "received": len(ids), "in_order_once": ids == list(range(loaded["events"] + 1, newest + 1)),
        "resets": sum(1 for kind, _, _ in received if kind == "reset"), "burst_s": written_s,
        # (0: the last event had arrived before the last writer had its answer)
        "last_after_burst_ms": max(0.0, (last_at - began - written_s) * 1000), "buffer_high_water": int(high.group(1)) if high else None,
    }


def run(bench: "Bench") -> list[Row]:
    from runstate.server.console.stream import STREAM_BUFFER_MAX

    target = start_loaded_server(bench.procs)
    try:
        loaded = asyncio.run(_load(target))
        pages = _time_pages(target, loaded)
        stream = _burst(target, loaded)
    finally:
        bench.procs.stop(target.proc)
    slowest = max(pages, key=lambda page: page["p90_ms"])
    rows = [Row(
        f"Console pages over {n(CLAIMS)} claims and {n(loaded['events'])} events ({len(pages)} pages, p90 of {PAGE_SAMPLES})",
        f"slowest {slowest['page']} p90 {ms(slowest['p90_ms'])} (p50 {ms(slowest['p50_ms'])}); median page p90 "
        f"{ms(statistics.median(page['p90_ms'] for page in pages))}",
        target=f"< {PAGE_MS:.0f} ms each", verdict=verdict_at_most(slowest["p90_ms"], PAGE_MS - 0.001), data={"pages": pages},
    )]
    within = stream["in_order_once"] and stream["resets"] == 0 and (stream["buffer_high_water"] or 0) <= STREAM_BUFFER_MAX
    rows.append(Row(
        f"Console stream under a burst of {n(stream['events'])} events ({n(stream['events'] / stream['burst_s'])} events/s)",
        f"{n(stream['received'])} received{' in order, once' if stream['in_order_once'] else ' (not in order, or not once)'}, "
        f"{stream['resets']} resets; the last {ms(stream['last_after_burst_ms'])} after the burst's last answer; "
        f"fullest buffer {stream['buffer_high_water']} of {n(STREAM_BUFFER_MAX)}",
        target="every event, within its buffer", verdict="PASS" if within else "MISS", data=stream,
    ))
    return rows
