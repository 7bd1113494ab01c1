"""The data directory is private whatever the umask, and the readiness probe says when the journal refuses changes.

WAL segments and snapshots hold live fencing tokens: 0600 files in 0700 folders, also when the
umask would allow more and when an older data directory was laxer. `/healthz` answers 503 with the
reason while an injected disk failure makes the journal refuse every change, and 200 once the
store has repaired itself; the liveness probe stays 200 throughout.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import stat

import pytest
import trio
import trio.testing

from runstate.actors import Clock
from runstate.snapshots import FaultyDisk
from runstate.snapshots.datadir import Manifest, make_data_dir, partition_dir
from runstate.snapshots.wal import inline
from runstate.server.runtime import Runtime
from runstate.server.settings import Settings

from ..server.asgi_client import API_KEY, SPACE, T0, AsgiClient

pytestmark = pytest.mark.trio


def _modes(root: str) -> dict[str, int]:
    found = {os.path.relpath(root, root): stat.S_IMODE(os.stat(root).st_mode)}
    for folder, names, files in os.walk(root):
        for name in names + files:
            path = os.path.join(folder, name)
            found[os.path.relpath(path, root)] = stat.S_IMODE(os.stat(path).st_mode)
    return found


class _FaultyRuntime(Runtime):
    """The server's runtime on a disk that fails on demand, its IO inline (virtual time)."""

    def __init__(self, settings: Settings, disk: FaultyDisk) -> None:
        super().__init__(settings, clock=Clock(wall_anchor_ms=T0))
        self.disk = disk

    def _store_options(self) -> dict:
        config = dataclasses.replace(self.settings.store_config(), probe_interval_s=1.0)
        return {"config": config, "disk": self.disk, "run_blocking": inline}


async def _start(nursery: trio.Nursery, data_dir: str, disk: FaultyDisk, **settings) -> _FaultyRuntime:
    runtime = _FaultyRuntime(Settings(api_key=API_KEY, space_id=SPACE, seed=7, data_dir=data_dir, **settings), disk)
    await nursery.start(runtime.run)
    while not runtime.ready:
        await trio.testing.wait_all_tasks_blocked()
    return runtime


@pytest.mark.parametrize("umask", [0o000, 0o022])
async def test_data_files_are_0600_and_folders_0700_whatever_the_umask(tmp_path, nursery, autojump_clock, umask):
    """Under umask 000 and 022 alike: WAL, snapshot, lock and admin key 0600; data, wal, snapshots 0700."""
    data_dir = str(tmp_path / "data")
    old = os.umask(umask)
    try:
        runtime = await _start(nursery, data_dir, FaultyDisk())
        client = AsgiClient(runtime)
        assert (await client.post("/scopes", {})).status == 201
        await runtime.data.snapshot()
    finally:
        os.umask(old)
    modes = _modes(data_dir)
    assert any(name.endswith(".wal") for name in modes) and any(name.endswith(".snap") for name in modes)
    assert "runstate.json" in modes and "partitions" in modes
    for name, mode in modes.items():
        wanted = 0o700 if os.path.isdir(os.path.join(data_dir, name)) else 0o600
        assert mode == wanted, (name, oct(mode))


async def test_an_older_lax_data_directory_is_made_private_at_start(tmp_path, nursery, autojump_clock):
    """Folders and files left 0755/0644 by an earlier start are tightened when the store opens."""
    data_dir = str(tmp_path / "data")
    make_data_dir(data_dir, Manifest(1))
    wal = os.path.join(partition_dir(data_dir, 1), "wal")
    for folder in (data_dir, wal):
        os.chmod(folder, 0o755)
    lax = os.path.join(wal, "stray")
    with open(lax, "w") as file:
        file.write("x")
    os.chmod(lax, 0o644)
    await _start(nursery, data_dir, FaultyDisk())
    assert stat.S_IMODE(os.stat(data_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(wal).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(lax).st_mode) == 0o600


async def test_healthz_is_503_with_the_reason_while_the_journal_refuses_changes(tmp_path, nursery, autojump_clock):
    """A failing fsync: readiness 503 naming the failure (liveness 200) until the disk works and the store repairs."""
    disk = FaultyDisk()
    runtime = await _start(nursery, str(tmp_path / "data"), disk)
    client = AsgiClient(runtime)
    assert (await client.get("/healthz")).status == 200

    disk.fail_fsync = True
    refused = await client.post("/scopes", {})
    assert refused.status == 503 and refused.code == "UNAVAILABLE"
    probe = await client.get("/healthz")
    assert probe.status == 503 and probe.code == "UNAVAILABLE"
    assert "journal refuses changes" in probe.json["error"]["message"]
    assert "injected fsync failure" in probe.json["error"]["message"]
    assert probe.headers["retry-after"] == "1"
    assert (await client.get("/healthz?probe=live")).status == 200
    await trio.sleep(5)  # the store's probes keep failing
    assert (await client.get("/healthz")).status == 503

    disk.fail_fsync = False
    await trio.sleep(1.5)  # the next probe repairs
    assert (await client.get("/healthz")).status == 200
    assert (await client.post("/scopes", {})).status == 201


@pytest.mark.parametrize("fault", ["fsync", "write"])
async def test_reads_answer_from_what_was_recorded_while_the_journal_refuses_changes(tmp_path, nursery, autojump_clock, fault):
    """A full or failing disk: changes are refused, but the state rebuilt from disk is read as
    ever (runs, a run, the event log), showing what was recorded and nothing of the failed batch;
    a second failure after the repair is read the same way."""
    disk = FaultyDisk()
    runtime = await _start(nursery, str(tmp_path / "data"), disk)
    client = AsgiClient(runtime)
    kept = await client.run()
    for round in range(2):
        setattr(disk, f"fail_{fault}", True)
        assert (await client.post("/scopes", {})).status == 503
        await trio.sleep(0.1)  # the first rebuild is handed over
        assert (await client.get("/healthz")).status == 503
        listed = await client.get("/scopes")
        assert listed.status == 200, listed.json
        assert [run["id"] for run in listed.json["scopes"]] == [kept]
        assert (await client.get(f"/scopes/{kept}")).status == 200
        assert (await client.get("/events")).status == 200
        await trio.sleep(3)  # the store's probes keep failing; reads go on
        assert (await client.get("/scopes")).status == 200
        setattr(disk, f"fail_{fault}", False)
        await trio.sleep(1.5)  # the next probe repairs
        assert (await client.get("/healthz")).status == 200


async def test_a_stop_while_the_journal_refuses_says_what_is_recorded(tmp_path, nursery, autojump_clock, caplog):
    """The shutdown's flush names the LSN each partition has recorded, not the failed batch's, and
    logs an error for a partition whose journal could not write."""
    caplog.set_level(logging.INFO)
    disk = FaultyDisk()
    runtime = await _start(nursery, str(tmp_path / "data"), disk)
    client = AsgiClient(runtime)
    await client.run()
    journal = runtime.kernel.partitions[1].journal
    recorded = journal.durable_lsn
    disk.fail_write = True
    assert (await client.post("/scopes", {})).status == 503
    assert journal.appended_lsn > recorded
    await runtime.flush()
    [flushed] = [record for record in caplog.records if getattr(record, "event", None) == "journal_flushed"]
    assert flushed.fields["partitions"]["1"] == recorded  # type: ignore[attr-defined]
    assert "partition 1: the journal could not write ([Errno 5] injected write failure): " \
        f"what it holds up to LSN {recorded} is recorded" in caplog.text
