"""In-process legs, each run in its own process on one core (`python -m bench.inprocess LEG ...`).

- `kernel`: claim cycles per second through `actors/ops.py` with many concurrent callers and no
  HTTP: the kernel's own cost (state machines, actors, supervisor, in-memory journal).
- `scale`: resident memory per idle claim: N claims acquired with a long lease and left alone,
  measured as the growth of the process's RSS over an empty kernel (after a full collection).

Each prints one JSON line, `BENCH_JSON {...}`, that bench/run.py reads.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time

import orjson
import trio

from runstate.actors import ClaimOps, Clock, IdSource, Kernel, KernelState, Limits, ScopeOps

from .procs import pin_self, rss_bytes

SPACE = "default"


def report(document: dict) -> None:
    sys.stdout.write("BENCH_JSON " + orjson.dumps(document).decode() + "\n")
    sys.stdout.flush()


async def _with_kernel(body, limits: Limits | None = None):  # type: ignore[no-untyped-def]
    kernel = Kernel(state=KernelState(limits or Limits()), clock=Clock(), ids=IdSource())
    async with trio.open_nursery() as nursery:
        await nursery.start(kernel.run)
        try:
            return await body(kernel)
        finally:
            nursery.cancel_scope.cancel()


async def kernel_claims(callers: int, duration_s: float, warmup_s: float) -> dict:
    async def body(kernel: Kernel) -> dict:
        scopes, claims = ScopeOps(kernel), ClaimOps(kernel)
        scope_id = (await scopes.create(SPACE, name="bench"))["id"]
        counting = False
        stop = False
        cycles = 0

        async def caller(i: int) -> None:
            nonlocal cycles
            key = f"k{i}"
            holder, session = f"worker-{i}", f"session-{i}"
            while not stop:
                view = await claims.acquire(SPACE, scope_id=scope_id, key=key, holder=holder, session=session, lease_s=30)
                await claims.release(SPACE, key=key, token=view["token"])
                if counting:
                    cycles += 1

        async with trio.open_nursery() as nursery:
            for i in range(callers):
                nursery.start_soon(caller, i)
            await trio.sleep(warmup_s)
            counting = True
            began, cpu_began = time.perf_counter(), time.process_time()
            await trio.sleep(duration_s)
            counting = False
            elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu_began
            stop = True
        return {
            "callers": callers,
            "duration_s": elapsed,
            "cycles": cycles,
            "cycles_per_s": cycles / elapsed,
            "cpu": cpu / elapsed,
        }

    return await _with_kernel(body)


async def scale_claims(count: int, callers: int) -> dict:
    async def body(kernel: Kernel) -> dict:
        scopes, claims = ScopeOps(kernel), ClaimOps(kernel)
        scope_id = (await scopes.create(SPACE, name="bench"))["id"]
        # A first claim, so that every structure a claim needs exists before the baseline.
        await claims.acquire(SPACE, scope_id=scope_id, key="warm", holder="h", session="s", lease_s=600)
        gc.collect()
        baseline = rss_bytes()
        began = time.perf_counter()
        per_caller = count // callers

        async def caller(i: int) -> None:
            for j in range(per_caller):
                # Keys, holders and sessions as an agent swarm would send them (not interned).
                await claims.acquire(
                    SPACE, scope_id=scope_id, key=f"company:{i}-{j}", holder=f"worker-{i}", session=f"session-{i}", lease_s=600
                )

        async with trio.open_nursery() as nursery:
            for i in range(callers):
                nursery.start_soon(caller, i)
        built_s = time.perf_counter() - began
        gc.collect()
        grown = rss_bytes() - baseline
        made = per_caller * callers
        return {
            "claims": made,
            "rss_baseline_bytes": baseline,
            "rss_grown_bytes": grown,
            "bytes_per_claim": grown / made,
            "build_s": built_s,
            "actors_alive": kernel.actors,
        }

    return await _with_kernel(body)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="leg", required=True)
    k = commands.add_parser("kernel")
    k.add_argument("--callers", type=int, default=64)
    k.add_argument("--seconds", type=float, default=5)
    k.add_argument("--warmup", type=float, default=1)
    s = commands.add_parser("scale")
    s.add_argument("--claims", type=int, default=100_000)
    s.add_argument("--callers", type=int, default=100)
    args = parser.parse_args(argv)
    pin_self()
    if args.leg == "kernel":
        report(trio.run(kernel_claims, args.callers, args.seconds, args.warmup))
    elif args.leg == "scale":
        report(trio.run(scale_claims, args.claims, args.callers))


if __name__ == "__main__":
    main()
