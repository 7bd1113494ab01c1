"""Recovery time and peak memory for a large log.

    .venv/bin/python bench/recovery.py --records 1000000

Writes a WAL of N records (a scope, then claim acquires, renewals and releases: 60/25/15 %), then
starts a fresh process that opens it exactly as `runstate serve --data-dir` does (`open_store`:
lock, read and verify every frame, replay through `KernelState.apply`, boot and restart records) and
reports the time and the peak resident memory of that process. Then the same after a snapshot.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

CHILD = r"""
import json, resource, sys, time, trio
from runstate.actors import Clock
from runstate.server.durable import state_model
from runstate.snapshots import open_store
async def main():
    started = time.perf_counter()
    store = await open_store(sys.argv[1], model=state_model(), clock=Clock(), fsync="always")
    took = time.perf_counter() - started
    snapshot_s = None
    if sys.argv[2] == "snapshot":
        began = time.perf_counter()
        await store.snapshot()
        snapshot_s = time.perf_counter() - began
    store.close()
    report = store.report
    print(json.dumps({"seconds": took, "records": report.records, "snapshot_lsn": report.snapshot_lsn,
                      "counts": report.counts, "wal_bytes": report.wal_bytes, "snapshot_s": snapshot_s,
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
trio.run(main)
"""


def open_in_child(data: str, then: str = "") -> dict:
    output = subprocess.run([sys.executable, "-c", CHILD, data, then], check=True, capture_output=True, text=True)
    return json.loads(output.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    from _logs import write_claims_log

    data = tempfile.mkdtemp(prefix="runstate-recovery-")
    claims = int(args.records * 0.6)
    started = time.perf_counter()
    written = write_claims_log(data, claims, renews=int(args.records * 0.25), releases=args.records - claims - int(args.records * 0.25) - 2)
    print(f"wrote {written} records in {time.perf_counter() - started:.1f} s to {data}")
    baseline = json.loads(subprocess.run([sys.executable, "-c", "import json, resource, trio, runstate.snapshots, runstate.actors;"
                                           "print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))"],
                                          check=True, capture_output=True, text=True).stdout)
    first = open_in_child(data, "snapshot")
    print(f"recovery from the WAL alone: {first['records']} records ({first['wal_bytes'] / 2**20:.0f} MiB) in "
          f"{first['seconds']:.2f} s = {first['records'] / first['seconds']:,.0f} records/s; "
          f"peak RSS {first['peak_rss_mib']:.0f} MiB (an idle interpreter with the imports: {baseline:.0f} MiB); "
          f"entities {first['counts']}")
    print(f"then a snapshot of that state took {first['snapshot_s']:.2f} s (in a child process)")
    second = open_in_child(data)
    print(f"recovery from the snapshot (+ {second['records']} WAL records): {second['seconds']:.2f} s; "
          f"peak RSS {second['peak_rss_mib']:.0f} MiB")
    shutil.rmtree(data, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
