"""Claim cycles (acquire + release) per second with the Python SDK, for comparison with the
TypeScript client: `claim-cycles.mjs` runs it against the same server, the same way.

Usage: python claim_cycles.py BASE_URL API_KEY SPACE_ID SCOPE_ID CALLERS SECONDS WARMUP_SECONDS
Prints one JSON line: {"callers", "cycles", "seconds", "per_s", "client_cpu_ms_per_cycle"}: the last
is this process's CPU time per cycle, which a busy machine disturbs far less than the rate.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from runstate import AsyncRunstate


async def cycles(run, prefix: str, callers: int, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    counts = [0] * callers

    async def caller(index: int) -> None:
        claim = run.claim(f"{prefix}:{index}")
        while time.monotonic() < deadline:
            lease = await claim.acquire()
            await lease.release()
            counts[index] += 1

    await asyncio.gather(*(caller(index) for index in range(callers)))
    return sum(counts)


async def main(base_url: str, api_key: str, space_id: str, scope_id: str, callers: int, seconds: float, warmup_s: float) -> None:
    async with AsyncRunstate(api_key=api_key, space_id=space_id, base_url=base_url, holder="bench-py") as rs:
        run = rs.scope(scope_id)
        await cycles(run, "py-warmup", callers, warmup_s)
        started, cpu_started = time.monotonic(), time.process_time()
        count = await cycles(run, "py", callers, seconds)
        elapsed, cpu_s = time.monotonic() - started, time.process_time() - cpu_started
    print(json.dumps({
        "callers": callers, "cycles": count, "seconds": round(elapsed, 3), "per_s": round(count / elapsed, 1),
        "client_cpu_ms_per_cycle": round(cpu_s * 1000 / max(count, 1), 3),
    }))


if __name__ == "__main__":
    base, key, space, scope, callers, seconds, warmup = sys.argv[1:8]
    asyncio.run(main(base, key, space, scope, int(callers), float(seconds), float(warmup)))
