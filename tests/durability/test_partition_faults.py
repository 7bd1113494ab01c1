"""One partition's journal fails; the other partitions go on serving.

With `--partitions 8`, a disk that fails under one partition's folder makes that partition refuse
its spaces' changes (503 with the reason, `/healthz` 503 naming it) while every other space keeps
taking changes, and once the disk works again the partition repairs itself and serves. Virtual
time: the store's repair probes run on the clock.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import trio
import trio.testing

from runstate.actors import Clock
from runstate.actors.layout import Layout
from runstate.server.runtime import Runtime
from runstate.server.settings import Settings
from runstate.snapshots import FaultyDisk
from runstate.snapshots.datadir import partition_dir
from runstate.snapshots.wal import inline

from ..server.asgi_client import T0, AsgiClient

pytestmark = pytest.mark.trio

PARTITIONS = 8
ADMIN_KEY = "admin-key-for-the-partition-tests"


def one_space_per_partition(count: int) -> dict[int, str]:
    layout, spaces, number = Layout(count), {}, 0
    while len(spaces) < count:
        spaces.setdefault(layout.of(f"team-{number}"), f"team-{number}")
        number += 1
    return spaces


class _Runtime(Runtime):
    def __init__(self, settings: Settings, disk: FaultyDisk) -> None:
        super().__init__(settings, clock=Clock(wall_anchor_ms=T0))
        self.disk = disk

    def _store_options(self) -> dict:
        config = dataclasses.replace(self.settings.store_config(), probe_interval_s=1.0, snapshot_process=False)
        return {"config": config, "disk": self.disk, "run_blocking": inline}


async def test_a_failing_disk_under_one_partition_stops_only_its_spaces(tmp_path, nursery, autojump_clock):
    spaces = one_space_per_partition(PARTITIONS)
    broken = 3
    data_dir = str(tmp_path / "data")
    disk = FaultyDisk(only_under=partition_dir(data_dir, broken))
    settings = Settings(data_dir=data_dir, partitions=PARTITIONS, admin_key=ADMIN_KEY, api_key="rs_unused", seed=2)
    runtime = _Runtime(settings, disk)
    await nursery.start(runtime.run)
    while not runtime.ready:
        await trio.testing.wait_all_tasks_blocked()
    admin = AsgiClient(runtime, api_key=ADMIN_KEY)
    made = await admin.post("/v1/admin/keys", {"spaces": list(spaces.values())})
    assert made.status == 201, made
    clients = {number: AsgiClient(runtime, api_key=made.json["key"], space=space) for number, space in spaces.items()}
    for client in clients.values():
        assert (await client.post("/scopes", {})).status == 201

    disk.fail_fsync = True
    refused = await clients[broken].post("/scopes", {})
    assert refused.status == 503 and refused.code == "UNAVAILABLE"
    assert "injected fsync failure" in refused.json["error"]["message"]
    probe = await admin.get("/healthz")
    assert probe.status == 503 and f"partition {broken}:" in probe.json["error"]["message"]
    for number, client in clients.items():
        if number != broken:
            assert (await client.post("/scopes", {})).status == 201, f"partition {number} stopped too"
    await trio.sleep(5)  # the broken partition's probes keep failing; the others are untouched
    assert (await clients[broken].post("/scopes", {})).status == 503
    assert disk.failures >= 2

    disk.fail_fsync = False
    await trio.sleep(1.5)  # its next probe repairs it
    assert (await admin.get("/healthz")).status == 200
    for client in clients.values():
        assert (await client.post("/scopes", {})).status == 201
    runs = await clients[broken].get("/scopes")
    assert runs.status == 200 and len(runs.json["scopes"]) == 2  # the refused change was never recorded


async def test_a_partition_whose_disk_failed_at_the_start_opens_once_the_disk_works(tmp_path, nursery, autojump_clock):
    """A start on a disk that fails under one partition (full, say) leaves it out; freeing space
    changes none of its files, yet it is tried again every few seconds and serves once the disk works."""
    spaces = one_space_per_partition(2)
    broken = 1
    data_dir = str(tmp_path / "data")
    disk = FaultyDisk(only_under=partition_dir(data_dir, broken))
    disk.fail_write = True
    settings = Settings(data_dir=data_dir, partitions=2, admin_key=ADMIN_KEY, api_key="rs_unused", seed=2)
    runtime = _Runtime(settings, disk)
    await nursery.start(runtime.run)
    while not runtime.ready:
        await trio.testing.wait_all_tasks_blocked()
    admin = AsgiClient(runtime, api_key=ADMIN_KEY)
    probe = await admin.get("/healthz")
    assert probe.status == 503 and f"partition {broken}: it cannot begin its journal" in probe.json["error"]["message"]
    assert "tried again" in probe.json["error"]["message"] and "runstate check" not in probe.json["error"]["message"]
    made = await admin.post("/v1/admin/keys", {"spaces": list(spaces.values())})
    client = AsgiClient(runtime, api_key=made.json["key"], space=spaces[broken])
    assert (await client.post("/scopes", {})).status == 503
    await trio.sleep(10)  # still failing: still refused
    assert (await client.post("/scopes", {})).status == 503

    disk.fail_write = False
    await trio.sleep(2.5)  # the next round opens it
    assert (await admin.get("/healthz")).status == 200
    assert (await client.post("/scopes", {})).status == 201


async def test_starts_on_a_full_disk_leave_no_empty_file_behind(tmp_path, nursery, autojump_clock):
    """A partition whose disk is full is tried again every few seconds: each try creates its
    first segment and cannot write a byte of it. None of them leaves a file behind, neither that
    empty segment nor a `.broken` copy of it set aside by the next try; once there is room again
    the partition opens on a log with no trace of the failed tries."""
    spaces = one_space_per_partition(2)
    broken = 1
    data_dir = str(tmp_path / "data")
    folder = partition_dir(data_dir, broken)
    disk = FaultyDisk(only_under=folder)
    disk.full = True
    settings = Settings(data_dir=data_dir, partitions=2, admin_key=ADMIN_KEY, api_key="rs_unused", seed=2)
    runtime = _Runtime(settings, disk)
    await nursery.start(runtime.run)
    while not runtime.ready:
        await trio.testing.wait_all_tasks_blocked()
    await trio.sleep(10)  # a few tries, each refused by the full disk
    assert disk.failures >= 3
    assert _files(folder) == []

    disk.full = False
    await trio.sleep(2.5)  # the next try opens it
    admin = AsgiClient(runtime, api_key=ADMIN_KEY)
    assert (await admin.get("/healthz")).status == 200
    made = await admin.post("/v1/admin/keys", {"spaces": list(spaces.values())})
    assert (await AsgiClient(runtime, api_key=made.json["key"], space=spaces[broken]).post("/scopes", {})).status == 201
    files = _files(folder)
    assert files and not [name for name, size in files if name.endswith(".broken") or size == 0], files


def _files(folder: str) -> list[tuple[str, int]]:
    """(path under `folder`, size) of every file in it."""
    return sorted((os.path.relpath(os.path.join(root, name), folder), os.path.getsize(os.path.join(root, name)))
                  for root, _, names in os.walk(folder) for name in names)
