"""Takeover: how soon after a lease ends can the next worker have the claim?

A first worker acquires `keys` claims with the shortest lease (5 s) and never renews them. For each
key a second worker tries to acquire at once, gets 409 CLAIM_HELD with `Retry-After` (the time left
on the lease, to the millisecond), sleeps until 10 ms before that and then asks back to back until
it succeeds. The leases end 50 ms apart, so takeovers do not queue behind each other. The figure is
the time from the first lease's `leaseExpiresAt` to the moment the second worker has its answer,
so it includes one round trip. The server treats a lease past its end as ended at once (the
supervisor's expiry record comes whenever it comes), so this measures the kernel's readiness at
expiry, not a polling interval.

The SDK's own wait loop tries again every 0.225-0.375 s instead: `sdk_loop`
measures that, for reference; its figure is dominated by the polling interval, by design.
"""

from __future__ import annotations

import asyncio
import time

import orjson

from .client import Connection
from .harness import percentile
from .targets import Target, create_scope

LEASE_S = 5
# How long before the end of the lease the second worker starts asking again.
EARLY_S = 0.010
# Leases are taken this far apart, so that one takeover's retries do not delay the next.
STAGGER_S = 0.050


def parse_ms(stamp: str) -> float:
    """Wall milliseconds of an ISO 8601 UTC timestamp like 2024-01-01T00:00:00.123Z."""
    from datetime import datetime, timezone

    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp() * 1000


async def _takeover_one(target: Target, scope_id: str, key: str, delay_s: float) -> float:
    await asyncio.sleep(delay_s)
    path = f"/v1/spaces/{target.space}/claims"
    first = await Connection(target.base_url, target.api_key).open()
    second = await Connection(target.base_url, target.api_key).open()
    try:
        body = {"key": key, "scopeId": scope_id, "holder": "first", "holderSession": "first-1", "leaseSeconds": LEASE_S}
        status, view, _ = await first.post_json(path, body)
        if status != 200:
            raise RuntimeError(f"first acquire answered {status}: {view}")
        expires_ms = parse_ms(view["leaseExpiresAt"])  # type: ignore[index]
        body = {**body, "holder": "second", "holderSession": "second-1"}
        for _ in range(100_000):
            status, answer, headers = await second.post_json(path, body)
            if status == 200:
                return time.time() * 1000 - expires_ms
            if status != 409:
                raise RuntimeError(f"second acquire answered {status}: {answer}")
            # Wake a little early and then ask back to back, so the figure is the server's
            # readiness at expiry rather than how late the client's timer fires.
            await asyncio.sleep(max(0.0, float(headers.get("retry-after", "0")) - EARLY_S))
        raise RuntimeError("the second worker never got the claim")
    finally:
        await first.close()
        await second.close()


async def takeover_retry_after(target: Target, keys: int) -> dict:
    scope_id = await create_scope(target, "takeover")
    samples = await asyncio.gather(*(_takeover_one(target, scope_id, f"takeover-{i}", i * STAGGER_S) for i in range(keys)))
    return _summary(list(samples))


async def takeover_sdk_loop(target: Target, keys: int) -> dict:
    """The same with our SDK's `acquire(wait=True)`: the request parks on the claim's actor
    (`waitMs`) and is answered at the expiry (servers without the extension: polls every ~0.3 s).
    Leases are taken STAGGER_S apart, as in the Retry-After leg, so takeovers do not queue."""
    from runstate import AsyncRunstate

    scope_id = await create_scope(target, "takeover-sdk")
    path = f"/v1/spaces/{target.space}/claims"
    rs = AsyncRunstate(base_url=target.base_url, api_key=target.api_key, space_id=target.space, holder="second")
    try:
        run = rs.scope(scope_id)

        async def one(i: int) -> float:
            key = f"takeover-sdk-{i}"
            await asyncio.sleep(i * STAGGER_S)
            first = await Connection(target.base_url, target.api_key).open()
            try:
                body = {"key": key, "scopeId": scope_id, "holder": "first", "holderSession": "first-1", "leaseSeconds": LEASE_S}
                status, view, _ = await first.post_json(path, body)
            finally:
                await first.close()
            if status != 200:
                raise RuntimeError(f"first acquire answered {status}: {view}")
            expires_ms = parse_ms(view["leaseExpiresAt"])  # type: ignore[index]
            second = await run.claim(key).acquire(lease_seconds=30, wait=True, timeout_ms=30_000)
            took = time.time() * 1000 - expires_ms
            await second.release()
            return took

        samples = await asyncio.gather(*(one(i) for i in range(keys)))
    finally:
        await rs.aclose()
    return _summary(list(samples))


def _summary(samples: list[float]) -> dict:
    return {
        "samples": len(samples),
        "p50_ms": percentile(samples, 50),
        "p99_ms": percentile(samples, 99),
        "max_ms": max(samples),
        "min_ms": min(samples),
        "all_ms": [round(s, 2) for s in samples],
    }


def dumps(document: dict) -> str:
    return orjson.dumps(document).decode()
