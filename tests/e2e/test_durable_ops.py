"""Operating a durable server (a data directory): shutdown loses nothing acknowledged, keys and usage survive
restarts, the journal's metrics and log events are there."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ..servers import ServerProcess

pytestmark = pytest.mark.e2e

KEY = "e2e-key"
ADMIN = "e2e-admin-key-0123456789"


def events(process: ServerProcess) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for line in process.lines:
        if line.startswith("{"):
            record = json.loads(line)
            if "event" in record and record["logger"] != "runstate.access":
                found.setdefault(record["event"], []).append(record)
    return found


def metric(process: ServerProcess, name: str) -> float:
    text = httpx.get(process.base_url + "/metrics").text
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples if sample.name == name)


def usage(process: ServerProcess) -> dict:
    with process.client() as http:
        return http.get("/v1/spaces/default/usage").json()


def test_sigterm_under_load_then_restart_finds_every_acknowledged_change(tmp_path):
    """Clients create runs and claims as fast as they can; SIGTERM; the server exits 0 having flushed the journal and
    written a final snapshot; restarted on the same directory, every acknowledged run is there, recovery replays
    nothing past the final snapshot, and usage counts exactly what was applied."""
    data_dir = str(tmp_path / "data")
    process = ServerProcess("--data-dir", data_dir, "--fsync", "batch").start()
    acknowledged: list[str] = []
    failures: list[str] = []

    def client(n: int) -> None:
        with process.client() as http:
            while True:
                try:
                    answer = http.post("/v1/spaces/default/scopes", json={"name": f"load-{n}"})
                except httpx.TransportError:
                    return
                if answer.status_code != 201:
                    failures.append(f"{answer.status_code} {answer.text}")
                    return
                acknowledged.append(answer.json()["id"])

    threads = [threading.Thread(target=client, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 15
    while len(acknowledged) < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    process.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    assert process.proc.wait(30) == 0  # type: ignore[union-attr]
    process._reader.join(5)  # type: ignore[union-attr]
    for thread in threads:
        thread.join(10)
    assert failures == [] and len(acknowledged) >= 300
    first = events(process)
    applied = first["drained"][0]["operations"]
    assert len(acknowledged) <= applied
    # The space's partition (1 of 1): its final snapshot covers everything it flushed.
    flushed = first["journal_flushed"][0]["partitions"]["1"]
    final = [snapshot for snapshot in first["snapshot"] if snapshot["partition"] == 1][-1]
    assert final["lsn"] == flushed

    again = ServerProcess("--data-dir", data_dir).start()
    try:
        recovery = next(line for line in events(again)["recovery"] if line["partition"] == 1)
        assert recovery["records"] == 0 and recovery["snapshot_lsn"] == final["lsn"]
        with again.client() as http:
            missing = [run for run in acknowledged if http.get(f"/v1/spaces/default/scopes/{run}").status_code != 200]
        assert missing == []
        assert usage(again)["operations"]["scopes.create"] == applied
    finally:
        assert again.stop() == 0


def test_keys_made_and_revoked_through_the_admin_api_survive_a_restart(tmp_path):
    """key.registered and key.revoked are journaled: after a restart the new key still works and the revoked one does not."""
    data_dir = str(tmp_path / "data")
    env = {"RUNSTATE_ADMIN_KEY": ADMIN}
    admin = {"authorization": f"Bearer {ADMIN}"}
    process = ServerProcess("--data-dir", data_dir, env=env).start()
    try:
        kept = httpx.post(process.base_url + "/v1/admin/keys", json={"space": "kept"}, headers=admin).json()
        gone = httpx.post(process.base_url + "/v1/admin/keys", json={"space": "gone"}, headers=admin).json()
        assert httpx.post(f"{process.base_url}/v1/admin/keys/{gone['id']}/revoke", headers=admin).status_code == 200
    finally:
        assert process.stop() == 0
    again = ServerProcess("--data-dir", data_dir, env=env).start()
    try:
        with again.client(api_key=kept["key"]) as http:
            assert http.post("/v1/spaces/kept/scopes", json={}).status_code == 201
        with again.client(api_key=gone["key"]) as http:
            assert http.post("/v1/spaces/gone/scopes", json={}).status_code == 401
        listed = httpx.get(again.base_url + "/v1/admin/keys", headers=admin).json()["keys"]
        assert {key["id"]: key["revokedAt"] is not None for key in listed if key["id"] in (kept["id"], gone["id"])} == {
            kept["id"]: False,
            gone["id"]: True,
        }
    finally:
        again.stop()


def test_usage_replays_exactly_across_a_restart_without_a_final_snapshot(tmp_path):
    """Killed with SIGKILL (no flush, no snapshot): the WAL alone gives back the same counters, renewals and takeovers included."""
    data_dir = str(tmp_path / "data")
    process = ServerProcess("--data-dir", data_dir).start()
    with process.client() as http:
        run = http.post("/v1/spaces/default/scopes", json={}).json()
        claim = {"key": "k", "scopeId": run["id"], "holder": "a", "holderSession": "s", "leaseSeconds": 5}
        lease = http.post("/v1/spaces/default/claims", json=claim).json()
        for _ in range(3):
            http.post("/v1/spaces/default/claims/k/renew", json={"token": lease["token"]})
        http.post("/v1/spaces/default/claims/k/release", json={"token": lease["token"]})
    before = usage(process)
    process.kill()
    again = ServerProcess("--data-dir", data_dir).start()
    try:
        after = usage(again)
        assert after == before
        assert after["operations"] == {"claims.acquire": 1, "claims.release": 1, "scopes.create": 1}
        assert after["free"] == {"claims.renew": 3}
    finally:
        again.stop()


def test_journal_metrics_and_snapshot_events_move(tmp_path):
    """With a data directory the WAL append and fsync histograms fill, and a snapshot is timed and logged."""
    process = ServerProcess("--data-dir", str(tmp_path / "data"), "--snapshot-every-records", "5").start()
    try:
        with process.client() as http:
            for _ in range(10):
                assert http.post("/v1/spaces/default/scopes", json={}).status_code == 201
        assert metric(process, "runstate_wal_append_seconds_count") >= 10
        assert metric(process, "runstate_wal_fsync_seconds_count") >= 10
        deadline = time.monotonic() + 15
        while metric(process, "runstate_snapshot_duration_seconds_count") < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert metric(process, "runstate_snapshot_duration_seconds_count") >= 1
        snapshot = events(process)["snapshot"][0]
        assert snapshot["lsn"] > 0 and snapshot["seconds"] >= 0 and snapshot["entries"] > 0
        assert "recovery" in events(process)
    finally:
        assert process.stop() == 0
