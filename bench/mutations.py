"""Mutations per second through the kernel, for each fsync policy, in process.

    .venv/bin/python bench/mutations.py --seconds 5 --tasks 64

`--tasks` concurrent callers each loop acquire -> renew -> release on its own key through
the claim commands (as the HTTP shell runs them, minus HTTP), on a store in a temporary directory
opened by `open_store` with IO in worker threads. A mutation is one acknowledged call (its record
durable under the policy). Also printed: records per write batch (group commit) and fsyncs.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time

import trio

from runstate.actors import Clock, Kernel
from runstate.actors import commands as c
from runstate.server.durable import state_model
from runstate.snapshots import Disk, open_store
from runstate.snapshots.store import StoreConfig


async def measure(policy: str, seconds: float, tasks: int, data: str | None) -> dict:
    directory = tempfile.mkdtemp(prefix=f"runstate-{policy}-", dir=data)
    disk = Disk(fsync_slow_ms=1e9)
    clock = Clock()
    store = await open_store(directory, model=state_model(), config=StoreConfig(fsync=policy, snapshot_every_records=10**12), disk=disk, clock=clock)
    done = 0
    latencies: list[float] = []
    async with trio.open_nursery() as nursery:
        kernel = Kernel(state=store.state, journal=store.journal, clock=clock)
        await nursery.start(store.run, kernel.partitions[0])
        await nursery.start(kernel.run)
        scope_id = (await kernel.submit(kernel.parse(c.CreateScope, {}, {"space": "bench"}))).id
        fsyncs, batches = disk.fsyncs, store.journal.batches
        stop_at = trio.current_time() + seconds

        async def worker(number: int) -> None:
            nonlocal done
            key = f"key-{number}"
            while trio.current_time() < stop_at:
                began = time.perf_counter()
                body = {"scopeId": scope_id, "key": key, "holder": "h", "holderSession": "s", "leaseSeconds": 60}
                grant = await kernel.submit(kernel.parse(c.AcquireClaim, body, {"space": "bench"}))
                token = {"token": grant.token}
                await kernel.submit(kernel.parse(c.RenewClaim, token, {"space": "bench", "key": key}))
                await kernel.submit(kernel.parse(c.ReleaseClaim, token, {"space": "bench", "key": key}))
                latencies.append((time.perf_counter() - began) / 3)
                done += 3

        started = time.perf_counter()
        async with trio.open_nursery() as workers:
            for number in range(tasks):
                workers.start_soon(worker, number)
        took = time.perf_counter() - started
        batches = store.journal.batches - batches
        fsyncs = disk.fsyncs - fsyncs
        nursery.cancel_scope.cancel()
    store.close()
    shutil.rmtree(directory, ignore_errors=True)
    latencies.sort()
    return {
        "policy": policy,
        "per_s": done / took,
        "mutations": done,
        "records_per_batch": done / max(batches, 1),
        "fsyncs": fsyncs,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--dir", default=None, help="where to put the data directories (default: the system temp dir)")
    parser.add_argument("--policies", default="always,batch,off")
    args = parser.parse_args()
    print(f"{args.tasks} concurrent callers, {args.seconds:.0f} s per policy, acquire/renew/release loops")
    for policy in args.policies.split(","):
        result = trio.run(measure, policy, args.seconds, args.tasks, args.dir)
        print(
            f"fsync {policy:6s}: {result['per_s']:9,.0f} mutations/s  ({result['mutations']} in total, "
            f"{result['records_per_batch']:.1f} per write batch, {result['fsyncs']} fsyncs, "
            f"per call p50 {result['p50_ms']:.2f} ms p99 {result['p99_ms']:.2f} ms)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
