"""`runstate inspect barriers|timers|groups|events` (events with --follow) against a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ..servers import ServerProcess
from .test_cli import as_json, runstate

pytestmark = pytest.mark.e2e


def test_inspect_barriers_timers_groups_and_events():
    """Each listing shows the run's own; events lists the log newest first, or from the oldest kept;
    --follow prints events as they happen."""
    with ServerProcess() as server:
        env = {"RUNSTATE_BASE_URL": server.base_url, "RUNSTATE_API_KEY": server.api_key}
        with server.client() as http:
            base = "/v1/spaces/default"
            run = http.post(base + "/scopes", json={}).json()["id"]
            mailbox = http.post(base + "/mailboxes", json={"name": "m"}).json()["id"]
            barrier = http.post(base + "/barriers", json={"scopeId": run, "target": 2}).json()["id"]
            timer = http.post(base + "/timers", json={"scopeId": run, "afterSeconds": 600}).json()["id"]
            group = http.post(base + "/task-groups", json={"mailboxId": mailbox, "condition": "ALL_TERMINAL", "parentScopeId": run}).json()
        assert [row["id"] for row in as_json(runstate("inspect", "barriers", run, "--json", env=env))["barriers"]] == [barrier]
        assert [row["id"] for row in as_json(runstate("inspect", "timers", run, "--json", env=env))["timers"]] == [timer]
        assert [row["id"] for row in as_json(runstate("inspect", "groups", run, "--json", env=env))["groups"]] == [group["groupId"]]
        table = runstate("inspect", "timers", run, env=env)
        assert table.returncode == 0 and table.stdout.split()[:2] == ["ID", "STATE"] and "ARMED" in table.stdout
        page = as_json(runstate("inspect", "events", "--from-start", "--json", env=env))
        types = [event["type"] for event in page["events"]]
        assert types[:3] == ["scope.created", "barrier.created", "timer.created"] and "group.created" in types
        newest = as_json(runstate("inspect", "events", "--json", env=env))
        assert newest["events"] == page["events"][::-1] and newest["nextCursor"] == page["nextCursor"]
        assert "barrier.created" in runstate("inspect", "events", env=env).stdout

        environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTATE_")}
        follow = subprocess.Popen(
            [sys.executable, "-m", "runstate.server.cli", "inspect", "events", "--follow", "--json", "--cursor", page["nextCursor"]],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**environ, **env},
        )
        try:  # (no need to wait for it to start: it prints what comes after the cursor, whenever it asks)
            with server.client() as http:
                http.post(f"/v1/spaces/default/barriers/{barrier}/arrive", json={"arrivalKey": "a"})
            line = follow.stdout.readline()
        finally:
            follow.kill()
            follow.wait()
        event = json.loads(line)
        assert event["type"] == "barrier.arrived" and event["aggregate"] == {"type": "barrier", "id": barrier}
