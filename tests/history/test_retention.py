"""The history kept: checkpoints bound what a point replays, and retention bounds what is kept.

A server keeps `history_retention_s` of history (snapshots and WAL) and takes a checkpoint every
`history_checkpoint_every_records`; a busy space writes records for two minutes of virtual time.
Every point of the window is rebuilt from a snapshot plus at most one checkpoint interval (and
the records of one poll of the checkpoint task), snapshots and segments older than the window
(but the one the window starts from) are gone, and a point before what is kept is 410.
"""

from __future__ import annotations

import os

import pytest
import trio

from runstate.actors.timestamps import format_ms
from runstate.snapshots.recovery import list_segments, snapshot_dir, wal_dir
from runstate.snapshots.datadir import partition_dir
from runstate.snapshots.snapshot import list_snapshots, snapshot_point
from tests.history.helpers import start
from tests.server.asgi_client import AsgiClient

pytestmark = pytest.mark.trio

RETENTION_S = 60
CHECKPOINT_RECORDS = 400
CYCLES_PER_S = 10  # each a claim acquire and release: 4 records with their stored answers


async def busy(client: AsgiClient, seconds: int) -> list[int]:
    """Claim cycles every second for `seconds`; returns the time of each second's end."""
    run = await client.run()
    moments = []
    for second in range(seconds):
        for cycle in range(CYCLES_PER_S):
            taken = await client.post("/claims", {"scopeId": run, "key": f"k{cycle}", "holder": "w", "holderSession": "s"})
            assert taken.status == 200, taken
            released = await client.post(f"/claims/k{cycle}/release", {"token": taken.json["token"]})
            assert released.status == 200, released
        await trio.sleep(1)
        moments.append(client.runtime.kernel.clock.now_ms())
    return moments


async def test_checkpoints_bound_a_point_and_retention_bounds_what_is_kept(nursery, autojump_clock, tmp_path):
    data = str(tmp_path / "data")
    runtime = await start(
        nursery, data, history_retention_s=RETENTION_S, history_checkpoint_every_records=CHECKPOINT_RECORDS,
        store={"segment_bytes_max": 64 * 1024, "snapshot_poll_s": 1.0},
    )
    client = AsgiClient(runtime)
    moments = await busy(client, 2 * RETENTION_S)
    folder = partition_dir(data, 1)
    snaps = list_snapshots(snapshot_dir(folder))
    points = [snapshot_point(path) for _, path in snaps]
    newest_ms = points[-1][1]
    horizon_ms = newest_ms - RETENTION_S * 1000
    # Every snapshot stands inside the window, but the one the window starts from.
    assert [ms < horizon_ms for _, ms in points].count(True) == 1 and points[0][1] < horizon_ms
    store = runtime.data.stores[1]
    # Checkpoints come every interval (which grows with the state: its stored answers here).
    interval = store.checkpoint_every_records
    assert interval >= CHECKPOINT_RECORDS and len(snaps) >= 3
    segments = list_segments(wal_dir(folder))
    assert len(segments) > 1 and segments[0][0] <= points[0][0] + 1 < segments[1][0]

    kept = (await client.get("/history")).json["kept"]
    assert kept["oldest"] == {"lsn": points[0][0], "at": format_ms(points[0][1])}
    assert kept["diskBytes"] == sum(os.path.getsize(p) for _, p in snaps) + sum(os.path.getsize(p) for _, p in segments)
    replayed = []
    for at_ms in moments:
        answer = await client.get(f"/history/usage?at={format_ms(at_ms)}")
        if at_ms < points[0][1]:
            assert answer.status == 410 and answer.code == "HISTORY_NOT_KEPT", answer
            assert answer.json["error"]["details"]["oldestLsn"] == points[0][0]
            continue
        assert answer.status == 200, answer
        replayed.append(answer.json["asOf"]["recordsReplayed"])
    # A checkpoint is taken within a poll (1 s) of the WAL reaching the interval.
    assert len(replayed) >= RETENTION_S and max(replayed) <= interval + CYCLES_PER_S * 4, (interval, replayed)
    exactly = await client.get(f"/history/usage?at={format_ms(points[0][1])}")
    assert exactly.status == 200 and exactly.json["asOf"]["lsn"] >= points[0][0]
    # What it costs shows in /metrics, as in `runstate check`.
    from prometheus_client.parser import text_string_to_metric_families

    from runstate.server.http import serve_http
    from runstate.server.routes import ROUTER
    from runstate.snapshots.check import check
    from runstate.server.durable import state_model
    from runstate.testing import call_asgi

    async def app(scope, receive, send):
        await serve_http(runtime, ROUTER, scope, receive, send)

    status, _, body = await call_asgi(app, "GET", "/metrics", {}, None, client=("127.0.0.1", 40000))
    assert status == 200
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(body.decode()) for s in f.samples}
    on_disk = found[("runstate_history_disk_bytes", (("kind", "snapshots"), ("partition", "1")))] + found[
        ("runstate_history_disk_bytes", (("kind", "wal"), ("partition", "1")))]
    assert on_disk == kept["diskBytes"]
    assert found[("runstate_history_oldest_timestamp_seconds", (("partition", "1"),))] == points[0][1] / 1000
    assert found[("runstate_history_rebuilds_total", ())] >= len(replayed)
    report = check(data, state_model())
    assert report.ok and report.partitions[1].disk_bytes == kept["diskBytes"] and report.partitions[1].history_ms == points[0][1]
    assert "history kept: from " in report.format()


async def test_the_first_snapshots_keep_the_log_from_its_start_while_it_is_in_the_window(nursery, autojump_clock, tmp_path):
    """Snapshots taken within the first `history_retention_s` leave the WAL from LSN 1: a point before
    the oldest snapshot is rebuilt from the log's start (it was 410 once the first snapshot pruned it)."""
    data = str(tmp_path / "data")
    runtime = await start(
        nursery, data, history_retention_s=RETENTION_S, history_checkpoint_every_records=CHECKPOINT_RECORDS,
        store={"segment_bytes_max": 64 * 1024, "snapshot_poll_s": 1.0},
    )
    client = AsgiClient(runtime)
    moments = await busy(client, RETENTION_S * 2 // 3)
    folder = partition_dir(data, 1)
    snaps = list_snapshots(snapshot_dir(folder))
    assert snaps, snaps  # checkpoints were taken, every one inside the window
    segments = list_segments(wal_dir(folder))
    assert segments[0][0] == 1 and len(segments) > 1, segments
    kept = (await client.get("/history")).json["kept"]
    assert kept["oldest"]["lsn"] == 0, kept
    before = await client.get(f"/history/usage?at={format_ms(moments[0])}")
    assert before.status == 200, before
    assert before.json["asOf"]["lsn"] < snaps[0][0]
