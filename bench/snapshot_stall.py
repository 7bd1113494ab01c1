"""The worst event-loop stall while a snapshot of a large state is taken.

    .venv/bin/python bench/snapshot_stall.py --claims 1000000

Recovers a data directory holding N held claims (a WAL written for the purpose), runs the kernel
on it, and measures how late a task that sleeps 1 ms at a time wakes up: first for a while with no
snapshot, then while `store.snapshot()` rebuilds the state from disk and writes its image (in a
child process, the default; see snapshots/compaction.py). Meanwhile a few callers renew claims through the
kernel, so the loop has real work, and their latencies are reported too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import trio

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from runstate.actors import Clock, Kernel  # noqa: E402
from runstate.actors import commands as c  # noqa: E402
from runstate.server.durable import state_model  # noqa: E402
from runstate.snapshots import open_store  # noqa: E402


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    if not ordered:
        return "no samples"
    pick = lambda q: ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000  # noqa: E731
    return f"worst {ordered[-1] * 1000:.1f} ms, p99 {pick(0.99):.1f} ms, p50 {pick(0.5):.2f} ms ({len(ordered)} samples)"


async def main_async(claims: int, baseline_s: float) -> None:
    from _logs import SPACE, write_claims_log

    data = tempfile.mkdtemp(prefix="runstate-stall-")
    began = time.perf_counter()
    write_claims_log(data, claims)
    print(f"wrote {claims} acquires in {time.perf_counter() - began:.1f} s")
    clock = Clock()
    began = time.perf_counter()
    store = await open_store(data, model=state_model(), clock=clock)
    print(f"recovered in {time.perf_counter() - began:.1f} s: {store.report.counts}")
    async with trio.open_nursery() as nursery:
        kernel = Kernel(state=store.state, journal=store.journal, clock=clock)
        await nursery.start(store.run, kernel.partitions[0])
        began = time.perf_counter()
        await nursery.start(kernel.run)
        print(f"kernel armed {claims} lease timers in {time.perf_counter() - began:.2f} s (at start, before serving)")
        late: list[float] = []
        calls: list[float] = []

        worst = [0.0, 0.0]  # lateness, when (perf_counter)

        async def ticker() -> None:
            while True:
                before = time.perf_counter()
                await trio.sleep(0.001)
                lateness = time.perf_counter() - before - 0.001
                late.append(lateness)
                if lateness > worst[0]:
                    worst[:] = [lateness, before]

        async def renewer(number: int) -> None:
            while True:
                token = f"ct_{number:032x}"
                before = time.perf_counter()
                await kernel.submit(c.RenewClaim(space=SPACE, key=f"key-{number}", token=token, lease_s=None))
                calls.append(time.perf_counter() - before)
                await trio.sleep(0.005)

        nursery.start_soon(ticker)
        for number in range(8):
            nursery.start_soon(renewer, number)
        await trio.sleep(baseline_s)
        quiet, quiet_calls = late[:], calls[:]
        late.clear()
        calls.clear()
        worst[:] = [0.0, 0.0]
        began = time.perf_counter()
        lsn = await store.snapshot()
        took = time.perf_counter() - began
        size = os.path.getsize(os.path.join(data, "snapshots", f"{lsn:020d}.snap"))
        print(f"snapshot at LSN {lsn}: {took:.1f} s, {size / 2**20:.0f} MiB")
        print(f"loop lateness without a snapshot: {summary(quiet)}")
        print(f"loop lateness while snapshotting: {summary(late)}; the worst began {worst[1] - began:.2f} s in")
        print(f"renew call latency without / with: {summary(quiet_calls)} / {summary(calls)}")
        nursery.cancel_scope.cancel()
    store.close()
    shutil.rmtree(data, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claims", type=int, default=1_000_000)
    parser.add_argument("--baseline-s", type=float, default=3.0)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, switch interval {sys.getswitchinterval() * 1000:.0f} ms")
    trio.run(main_async, args.claims, args.baseline_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
