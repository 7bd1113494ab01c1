"""Writing large journals quickly for the benchmarks, straight through the segment writer.

The records are the ones the kernel writes (the same dicts `ClaimTable.decide_*` returns), so
recovery replays them through the real `apply`.
"""

from __future__ import annotations

import os
import time

import orjson

from runstate.actors.records import VERSION
from runstate.snapshots import Disk
from runstate.snapshots.recovery import wal_dir
from runstate.snapshots.wal import SegmentWriter

SPACE = "bench"
T0_MS = int(time.time() * 1000) - 60_000


def _records(claims: int, renews: int, releases: int, lease_ms: int):
    yield {"type": "kernel.booted", "epoch": 1, "fsync": "always", "generation_floor": 0, "at_ms": T0_MS}
    yield {"type": "scope.created", "space": SPACE, "id": "sc_bench", "name": None, "parent_id": None,
           "deadline_ms": None, "child_limit": None, "at_ms": T0_MS}
    at = T0_MS
    for number in range(claims):
        yield {"type": "claim.acquired", "space": SPACE, "scope_id": "sc_bench", "key": f"key-{number}",
               "generation": 1, "token": f"ct_{number:032x}", "holder": f"agent-{number % 500}",
               "session": "s1", "lease_ms": lease_ms, "expires_ms": at + lease_ms, "at_ms": at}
    for number in range(renews):
        yield {"type": "claim.renewed", "space": SPACE, "token": f"ct_{number % claims:032x}", "lease_ms": lease_ms,
               "expires_ms": at + lease_ms, "at_ms": at}
    for number in range(releases):
        yield {"type": "claim.released", "space": SPACE, "token": f"ct_{number:032x}", "key": f"key-{number}",
               "generation": 1, "at_ms": at}


def write_claims_log(data_dir: str, claims: int, renews: int = 0, releases: int = 0,
                     lease_ms: int = 600_000, batch: int = 1000) -> int:
    """A WAL of `claims` acquires, then renewals and releases; returns the number of records."""
    os.makedirs(wal_dir(data_dir), exist_ok=True)
    writer = SegmentWriter(wal_dir(data_dir), Disk(fsync_slow_ms=1e9), 64 * 1024 * 1024, version=VERSION)
    writer.start(1, 0)
    bodies: list[bytes] = []
    for record in _records(claims, renews, releases, lease_ms):
        bodies.append(orjson.dumps(record))
        if len(bodies) == batch:
            writer.write(writer.next_lsn, bodies, False)
            bodies = []
    if bodies:
        writer.write(writer.next_lsn, bodies, False)
    writer.sync()
    writer.close()
    return writer.next_lsn - 1
