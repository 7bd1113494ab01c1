"""The Python harness: N concurrent workers on asyncio, each running one cycle after another.

It gives what wrk cannot: the latency of a whole cycle (acquire then release, with the token read
in between) and the same driver for our server and for the peer (a Redis lock through redis-py's
asyncio `Lock`), so the two figures differ only by what sits behind the client call. Each worker
has its own connection and its own key. The harness reports how much of its core it used: a harness
near 100% is the bottleneck, and its figure is a floor rather than the server's.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Protocol, TypeVar

import orjson

from .client import Connection
from .procs import cpu_seconds
from .targets import Target

T = TypeVar("T")


class Session(Protocol):
    async def cycle(self) -> None: ...
    async def close(self) -> None: ...


@dataclass
class HarnessResult:
    name: str
    concurrency: int
    duration_s: float
    cycles: int
    cycles_per_s: float
    p50_ms: float
    p99_ms: float
    harness_cpu: float
    server_cpu: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def percentile(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


async def drive(
    name: str,
    make_session: Callable[[int], Awaitable[Session]],
    *,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    server_pid: int | None,
) -> HarnessResult:
    sessions = [await make_session(i) for i in range(concurrency)]
    latencies: list[float] = []
    measuring = False
    stop = False
    cycles = 0

    async def worker(session: Session) -> None:
        nonlocal cycles
        clock = time.perf_counter
        while not stop:
            started = clock()
            await session.cycle()
            if measuring:
                latencies.append(clock() - started)
                cycles += 1

    tasks = [asyncio.create_task(worker(s)) for s in sessions]
    try:
        await asyncio.sleep(warmup_s)
        measuring = True
        cpu_before = time.process_time()
        server_before = cpu_seconds(server_pid) if server_pid else 0.0
        began = time.perf_counter()
        await asyncio.sleep(duration_s)
        measuring = False
        elapsed = time.perf_counter() - began
        harness_cpu = (time.process_time() - cpu_before) / elapsed
        server_cpu = (cpu_seconds(server_pid) - server_before) / elapsed if server_pid else float("nan")
        stop = True
        done, _ = await asyncio.wait(tasks, timeout=15)
        for task in done:
            task.result()  # a failed cycle fails the leg
    finally:
        stop = True
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for session in sessions:
            await session.close()
    return HarnessResult(
        name=name,
        concurrency=concurrency,
        duration_s=elapsed,
        cycles=cycles,
        cycles_per_s=cycles / elapsed,
        p50_ms=percentile(latencies, 50) * 1000,
        p99_ms=percentile(latencies, 99) * 1000,
        harness_cpu=harness_cpu,
        server_cpu=server_cpu,
    )


class ClaimSession:
    """Acquire then release one key through `runstate serve`, on one keep-alive connection."""

    def __init__(self, target: Target, scope_id: str, worker: int) -> None:
        self.conn = Connection(target.base_url, target.api_key)
        key = f"h{worker}"
        self.acquire_path = f"/v1/spaces/{target.space}/claims"
        self.release_path = f"/v1/spaces/{target.space}/claims/{key}/release"
        self.acquire_body = orjson.dumps(
            {"key": key, "scopeId": scope_id, "holder": f"bench-worker-{worker}", "holderSession": f"bench-session-{worker}", "leaseSeconds": 30}
        )

    async def open(self) -> "ClaimSession":
        await self.conn.open()
        return self

    async def cycle(self) -> None:
        status, body, _ = await self.conn.request("POST", self.acquire_path, self.acquire_body)
        if status != 200:
            raise RuntimeError(f"acquire answered {status}: {body[:300]!r}")
        token = orjson.loads(body)["token"]
        status, body, _ = await self.conn.request("POST", self.release_path, b'{"token":"%s"}' % token.encode())
        if status != 200:
            raise RuntimeError(f"release answered {status}: {body[:300]!r}")

    async def close(self) -> None:
        await self.conn.close()


class RedisLockSession:
    """Acquire then release one key with redis-py's asyncio `Lock` (SET NX PX, then a Lua release)."""

    def __init__(self, target: Target, worker: int) -> None:
        import redis.asyncio as aioredis

        self.client = aioredis.Redis.from_url(target.base_url, single_connection_client=True)
        self.lock = self.client.lock(f"bench:h{worker}", timeout=30, blocking=False)

    async def open(self) -> "RedisLockSession":
        await self.client.ping()
        return self

    async def cycle(self) -> None:
        if not await self.lock.acquire():
            raise RuntimeError("the Redis lock was held")
        await self.lock.release()

    async def close(self) -> None:
        await self.client.aclose()


# No leg driven from asyncio may take longer than this, whatever a server does.
LEG_TIMEOUT_S = 300


def run_bounded(coroutine: Awaitable[T]) -> T:
    """`asyncio.run(coroutine)`, cancelled after LEG_TIMEOUT_S."""
    return asyncio.run(asyncio.wait_for(coroutine, LEG_TIMEOUT_S))


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
