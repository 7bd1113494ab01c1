"""A real `runstate serve` with small caps set by flag: a space filling past them gets 409
BACKLOG_FULL naming the setting, and after a kill -9 and a restart (the journal replayed) the
counts are the same (from a snapshot's image and the journal after it), so the same request is still refused and freeing one still lets it in."""

from __future__ import annotations

import time

import pytest

from runstate.snapshots.datadir import partition_dir
from runstate.snapshots.recovery import snapshot_dir
from runstate.snapshots.snapshot import list_snapshots

from ..servers import ServerProcess

pytestmark = pytest.mark.e2e

CAPS = ("--space-scopes-max", "2", "--space-tasks-max", "1", "--backlog-limit-max", "3")
# Snapshots every few records: the restart loads an image and replays the journal after it.
FLAGS = (*CAPS, "--snapshot-every-records", "3", "--snapshot-every-s", "1")


def test_caps_set_by_flag_hold_across_a_crash_and_a_restart(tmp_path):
    data_dir = str(tmp_path / "data")
    process = ServerProcess("--data-dir", data_dir, *FLAGS).start()
    try:
        with process.client() as http:
            first = http.post("/v1/spaces/default/scopes", json={}).json()["id"]
            second = http.post("/v1/spaces/default/scopes", json={}).json()["id"]
            refused = http.post("/v1/spaces/default/scopes", json={})
            assert refused.status_code == 409
            assert refused.headers["retry-after"] == "1"
            error = refused.json()["error"]
            assert error["code"] == "BACKLOG_FULL"
            assert error["message"] == (
                "space holds 2 live scopes (limit space_scopes_max; raise it with --space-scopes-max / RUNSTATE_SPACE_SCOPES_MAX)"
            )
            mailbox = http.post("/v1/spaces/default/mailboxes", json={"name": "jobs"}).json()["id"]
            task = {"scopeId": second, "mailboxId": mailbox, "input": {"n": 1}}
            assert http.post("/v1/spaces/default/tasks", json={**task, "taskKey": "a"}).status_code in (200, 201)
            assert http.post("/v1/spaces/default/tasks", json={**task, "taskKey": "b"}).json()["error"]["code"] == "BACKLOG_FULL"
        waited_until = time.monotonic() + 20  # the snapshot is taken in the background
        snapshots = snapshot_dir(partition_dir(data_dir, 1))  # the partition of space `default`
        while not list_snapshots(snapshots) and time.monotonic() < waited_until:
            time.sleep(0.1)
        assert list_snapshots(snapshots), "the restart is to load a snapshot"
        with process.client() as http:  # one more record, in the journal after the snapshot
            assert http.post("/v1/spaces/default/mailboxes", json={"name": "after"}).status_code == 201
    finally:
        process.kill()
    again = ServerProcess("--data-dir", data_dir, *FLAGS).start()
    try:
        with again.client() as http:
            still = http.post("/v1/spaces/default/scopes", json={})
            assert still.status_code == 409 and "space_scopes_max" in still.json()["error"]["message"]
            blocked = http.post("/v1/spaces/default/tasks", json={**task, "taskKey": "b"})
            assert blocked.status_code == 409 and "space_tasks_max" in blocked.json()["error"]["message"]
            assert http.post(f"/v1/spaces/default/scopes/{first}/cancel").status_code == 200
            assert http.post("/v1/spaces/default/scopes", json={}).status_code == 201
            big = http.post("/v1/spaces/default/mailboxes", json={"name": "big", "backlogLimit": 4})
            assert big.status_code == 400 and big.json()["error"]["code"] == "VALIDATION_FAILED"
    finally:
        again.stop()
