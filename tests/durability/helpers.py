"""Shared helpers for the durability tests: building logs by hand and running a kernel on a store."""

from __future__ import annotations

import contextlib
import os
from typing import AsyncIterator

import orjson
import trio

from runstate.actors import Clock, Kernel
from runstate.actors.records import VERSION
from runstate.server.durable import state_model
from runstate.snapshots import CheckReport, Disk, load, open_store
from runstate.snapshots.check import check as check_dir
from runstate.snapshots.frame import FILE_HEADER_BYTES, Frame, read_frame
from runstate.snapshots.datadir import Manifest, make_data_dir, partition_dir
from runstate.snapshots.recovery import list_segments, wal_dir
from runstate.snapshots.store import StoreConfig
from runstate.snapshots.wal import SegmentWriter, inline

from ..ops import ClaimOps, KeyOps, ScopeOps

T0_MS = 1_800_000_000_000  # a fixed wall time for tests: 2027-01-15T08:00:00Z

# The kernel's state and record format, with the default limits, as the server hands them in.
MODEL = state_model()


def key_record(number: int) -> dict:
    """A small record that applies on its own (no space or scope needed)."""
    return {
        "type": "key.registered",
        "id": f"ak_{number}",
        "digest": f"{number:064x}",
        "name": None,
        "spaces": ["s1"],
        "at_ms": T0_MS + number,
    }


def write_log(data_dir: str, batches: list[list[dict]], segment_bytes_max: int = 1 << 20, partition: int = 0) -> None:
    """Write `batches` into `data_dir`'s WAL as the writer would, one write + fsync per batch."""
    os.makedirs(wal_dir(data_dir), exist_ok=True)
    writer = SegmentWriter(wal_dir(data_dir), Disk(), segment_bytes_max, version=VERSION, partition=partition)
    writer.start(1, 0)
    for batch in batches:
        writer.write(writer.next_lsn, [orjson.dumps(record) for record in batch], True)
    writer.close()


def write_server_log(data_dir: str, batches: list[list[dict]], partitions: int = 1, partition: int = 0) -> str:
    """A data directory a server opens (its manifest and partitions), with `batches` in the WAL of
    `partition` (0, the system one, for key records); returns that partition's folder."""
    make_data_dir(data_dir, Manifest(partitions))
    folder = partition_dir(data_dir, partition)
    write_log(folder, batches, partition=partition)
    return folder


def numbered_batches(*sizes: int) -> list[list[dict]]:
    batches, number = [], 0
    for size in sizes:
        batches.append([key_record(number + i) for i in range(1, size + 1)])
        number += size
    return batches


def frames(path: str) -> list[Frame]:
    with open(path, "rb") as file:
        data = file.read()
    found, offset = [], FILE_HEADER_BYTES
    while offset < len(data):
        frame = read_frame(data, offset)
        if not isinstance(frame, Frame):
            break
        found.append(frame)
        offset = frame.end
    return found


def segments(data_dir: str) -> list[str]:
    return [path for _, path in list_segments(wal_dir(data_dir))]


def flip_byte(path: str, offset: int) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        value = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([value ^ 0xFF]))


def reload(data_dir: str, repair: bool = False):
    return load(data_dir, MODEL, repair=repair)


def check(data_dir: str) -> CheckReport:
    """`runstate check` on `data_dir`, as the command runs it."""
    return check_dir(data_dir, MODEL)


class Running:
    """A kernel on a store, with the ops the shell would call."""

    def __init__(self, store, kernel: Kernel) -> None:
        self.store = store
        self.kernel = kernel
        self.claims = ClaimOps(kernel)
        self.scopes = ScopeOps(kernel)
        self.keys = KeyOps(kernel)


@contextlib.asynccontextmanager
async def running(
    data_dir: str,
    *,
    fsync: str = "always",
    wall_ms: int = T0_MS,
    config: StoreConfig | None = None,
    disk: Disk | None = None,
    threads: bool = False,
    **limits: object,
) -> AsyncIterator[Running]:
    """Open `data_dir`, run a kernel on it; on exit stop everything without a clean close (a crash).

    The directory lock is released, as the operating system does when a process dies.
    """
    from runstate.actors import Limits

    clock = Clock(wall_anchor_ms=wall_ms)
    store = await open_store(
        data_dir,
        model=state_model(Limits().replace(**limits) if limits else None),
        fsync=fsync,
        clock=clock,
        config=config,
        disk=disk,
        run_blocking=None if threads else inline,
    )
    try:
        async with trio.open_nursery() as nursery:
            kernel = Kernel(state=store.state, journal=store.journal, clock=clock)
            await nursery.start(store.run, kernel.partitions[0])
            await nursery.start(kernel.run)
            yield Running(store, kernel)
            nursery.cancel_scope.cancel()
    finally:
        store.journal.writer.close()  # the fd, as process death would; no final fsync
        os.close(store._lock_fd)
        store._lock_fd = None
