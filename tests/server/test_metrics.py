"""`GET /metrics`: the families are there, they move with the traffic, and only loopback reads them without a key."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

import runstate.testing
from runstate.server.app import create_app
from runstate.server.settings import Settings
from runstate.testing import call_asgi

pytestmark = pytest.mark.trio

KEY = "test-key"
ADMIN = "admin-key-0123456789"

FAMILIES = {
    "runstate_http_requests",
    "runstate_http_request_duration_seconds",
    "runstate_http_requests_in_flight",
    "runstate_ready",
    "runstate_claims_live",
    "runstate_operations",
    "runstate_free_operations",
    "runstate_expiries",
    "runstate_claim_takeovers",
    "runstate_supervisor_fires",
    "runstate_supervisor_timers",
    "runstate_idempotency_replays",
    "runstate_kernel_turns",
    "runstate_kernel_actors",
    "runstate_kernel_actor_tasks_pooled",
    "runstate_api_keys",
    "runstate_tasks_queued",
    "runstate_tasks_running",
    "runstate_deliveries_in_flight",
    "runstate_wal_append_seconds",
    "runstate_wal_fsync_seconds",
    "runstate_snapshot_duration_seconds",
    "runstate_journal_refusing",
    "runstate_wal_errors",
    "runstate_dead_letters",
    "runstate_queue_oldest_age_seconds",
    "runstate_space_cap_held",
    "runstate_space_cap_limit",
    "runstate_connections",
    "runstate_connections_turned_away",
}


def settings(**changes):
    return Settings(api_key=KEY, seed=1, admin_key=ADMIN, **changes)


async def scrape(app, client=("127.0.0.1", 40000), key=None):
    headers = {"authorization": f"Bearer {key}"} if key else {}
    status, answer_headers, body = await call_asgi(app, "GET", "/metrics", headers, None, client=client)
    return status, {name.lower(): value for name, value in dict(answer_headers).items()}, body


def samples(body: bytes) -> dict[tuple, float]:
    """(sample name, sorted labels) -> value."""
    found = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def families(body: bytes) -> set[str]:
    return {family.name for family in text_string_to_metric_families(body.decode())}


async def post(app, path, json_body=None, key=KEY):
    import orjson

    body = orjson.dumps(json_body) if json_body is not None else b""
    status, _, raw = await call_asgi(app, "POST", "/v1/spaces/default" + path, {"authorization": f"Bearer {key}", "content-type": "application/json"}, body)
    return status, orjson.loads(raw) if raw else None


async def test_every_family_is_exported_in_prometheus_text_format():
    """All families are present from the start, those fed by later parts (queue, durable journal) included."""
    async with runstate.testing.serve_app(create_app(settings())) as rs:
        status, headers, body = await scrape(rs.app)
    assert status == 200
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    assert FAMILIES <= families(body)


async def test_the_numbers_move_with_requests_claims_expiries_and_takeovers(autojump_clock):
    """Requests are counted by route pattern and status; claims, usage, expiries and takeovers follow the state."""
    async with runstate.testing.serve_app(create_app(settings())) as rs:
        app = rs.app
        _, run = await post(app, "/scopes", {"name": "m"})
        claim = {"key": "file/a b", "scopeId": run["id"], "holder": "a", "holderSession": "s", "leaseSeconds": 5}
        status, lease = await post(app, "/claims", claim)
        assert status == 200
        assert (await post(app, "/claims", {**claim, "holder": "b"}))[0] == 409
        await post(app, "/claims/file%2Fa%20b/renew", {"token": lease["token"]})
        first = samples((await scrape(app))[2])
        await trio.sleep(6)
        await trio.testing.wait_all_tasks_blocked()
        await post(app, "/claims", {**claim, "holder": "b"})
        second = samples((await scrape(app))[2])

    route = ("route", "/v1/spaces/{space}/claims")
    assert first[("runstate_http_requests_total", (("method", "POST"), route, ("status", "200")))] == 1
    assert first[("runstate_http_requests_total", (("method", "POST"), route, ("status", "409")))] == 1
    renew_route = ("route", "/v1/spaces/{space}/claims/{key}/renew")
    assert first[("runstate_http_request_duration_seconds_count", (("method", "POST"), renew_route))] == 1
    assert first[("runstate_claims_live", (("space", "default"),))] == 1
    assert first[("runstate_operations_total", (("operation", "claims.acquire"), ("space", "default")))] == 1
    assert first[("runstate_free_operations_total", (("operation", "claims.renew"), ("space", "default")))] == 1
    assert first[("runstate_claim_takeovers_total", (("space", "default"),))] == 0
    assert first[("runstate_ready", ())] == 1

    assert second[("runstate_http_requests_total", (("method", "POST"), route, ("status", "200")))] == 2
    assert second[("runstate_claims_live", (("space", "default"),))] == 1
    assert second[("runstate_expiries_total", (("kind", "claim"), ("space", "default")))] == 1
    assert second[("runstate_claim_takeovers_total", (("space", "default"),))] == 1
    assert second[("runstate_supervisor_fires_total", ())] == 1
    assert second[("runstate_operations_total", (("operation", "claims.acquire"), ("space", "default")))] == 2


async def test_idempotent_replays_and_unmatched_routes_are_counted():
    """A retried Idempotency-Key is a replay; an unknown path counts under `unmatched`, not under its own path."""
    async with runstate.testing.serve_app(create_app(settings())) as rs:
        app = rs.app
        headers = {"authorization": f"Bearer {KEY}", "idempotency-key": "same-key-1"}
        for _ in range(3):
            await call_asgi(app, "POST", "/v1/spaces/default/scopes", headers, b"{}")
        await call_asgi(app, "GET", "/no/such/thing/123", {}, None)
        await call_asgi(app, "BREW", "/coffee", {}, None)
        found = samples((await scrape(app))[2])
    assert found[("runstate_idempotency_replays_total", ())] == 2
    assert found[("runstate_http_requests_total", (("method", "GET"), ("route", "unmatched"), ("status", "404")))] == 1
    assert found[("runstate_http_requests_total", (("method", "OTHER"), ("route", "unmatched"), ("status", "404")))] == 1
    assert not any("/no/such" in str(labels) for _, labels in found)


async def test_only_loopback_reads_metrics_without_a_key():
    """From another address: 401 without a key, 403 with an API key, 200 with the admin key; IPv6 loopback is loopback."""
    async with runstate.testing.serve_app(create_app(settings())) as rs:
        app = rs.app
        assert (await scrape(app, client=("::1", 40000)))[0] == 200
        assert (await scrape(app, client=("10.1.2.3", 40000)))[0] == 401
        assert (await scrape(app, client=("10.1.2.3", 40000), key=KEY))[0] == 403
        assert (await scrape(app, client=("10.1.2.3", 40000), key=ADMIN))[0] == 200


async def test_metrics_public_opens_them_to_every_address():
    async with runstate.testing.serve_app(create_app(settings(metrics_public=True))) as rs:
        assert (await scrape(rs.app, client=("10.1.2.3", 40000)))[0] == 200


async def test_the_journal_hooks_feed_their_histograms():
    """The durable journal reports append, fsync and snapshot times through `Metrics.journal`."""
    app = create_app(settings())
    journal = app.runtime.telemetry.metrics.journal
    journal.append(0.0002)
    journal.fsync(0.003)
    journal.snapshot(1.5)
    async with runstate.testing.serve_app(app) as rs:
        found = samples((await scrape(rs.app))[2])
    assert found[("runstate_wal_append_seconds_count", ())] == 1
    assert found[("runstate_wal_fsync_seconds_sum", ())] == pytest.approx(0.003)
    assert found[("runstate_snapshot_duration_seconds_bucket", (("le", "2.5"),))] == 1


async def test_queue_age_dead_letters_and_caps_follow_the_state(autojump_clock):
    """The oldest waiting message's age grows with the clock; dead letters and the space's caps show."""
    async with runstate.testing.serve_app(create_app(settings())) as rs:
        app = rs.app
        _, run = await post(app, "/scopes", {})
        _, mailbox = await post(app, "/mailboxes", {"name": "q", "maxAttempts": 1})
        _, sent = await post(app, f"/mailboxes/{mailbox['id']}/messages", {"scopeId": run["id"], "payload": "x"})
        await trio.sleep(30)
        await post(app, f"/mailboxes/{mailbox['id']}/messages", {"scopeId": run["id"], "payload": "y"})
        await trio.sleep(12)
        found = samples((await scrape(app))[2])
        by_mailbox = (("mailbox", "q"), ("space", "default"))
        assert found[("runstate_queue_oldest_age_seconds", by_mailbox)] == pytest.approx(42)
        _, delivery = await post(app, f"/mailboxes/{mailbox['id']}/recv", {"scopeId": run["id"], "holder": "w", "holderSession": "s"})
        await post(app, f"/messages/{sent['id']}/nack", {"token": delivery["token"], "retry": False})
        found = samples((await scrape(app))[2])
    assert found[("runstate_queue_oldest_age_seconds", by_mailbox)] == pytest.approx(12)  # the younger one waits now
    assert found[("runstate_dead_letters", by_mailbox)] == 1
    assert found[("runstate_space_cap_held", (("setting", "space_scopes_max"), ("space", "default")))] == 1
    assert found[("runstate_space_cap_limit", (("setting", "space_scopes_max"), ("space", "default")))] == 100_000
    assert found[("runstate_journal_refusing", ())] == 0


async def test_a_failed_wal_write_or_fsync_is_counted_from_0(tmp_path, monkeypatch):
    from runstate.server.metrics import MeteredDisk, Metrics
    from runstate.snapshots.disk import Disk

    metrics = Metrics()
    disk = MeteredDisk(metrics.journal)
    (tmp_path / "wal").mkdir()
    fd = disk.create(str(tmp_path / "wal" / "segment"))
    found = samples(metrics.render())  # shown from 0, so that the alert's increase() sees the first error
    assert found[("runstate_wal_errors_total", (("operation", "write"),))] == 0
    assert found[("runstate_wal_errors_total", (("operation", "fsync"),))] == 0

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Disk, "write", broken)
    monkeypatch.setattr(Disk, "fsync", broken)
    for call in (lambda: disk.write(fd, b"x"), lambda: disk.fsync(fd)):
        with pytest.raises(OSError):
            call()
    body = metrics.render()
    found = samples(body)
    assert found[("runstate_wal_errors_total", (("operation", "write"),))] == 1
    assert found[("runstate_wal_errors_total", (("operation", "fsync"),))] == 1


async def test_request_counts_and_latency_buckets_are_exact():
    """Each request counts once under its status and once in the first latency bucket whose bound
    it does not pass (`le`: a request of exactly 0.5 ms is in the 0.0005 bucket), cumulative in
    the text; the sum is the seconds added; the same method and route asked twice is one series."""
    from runstate.server.metrics import LATENCY_BUCKETS_S, Metrics

    metrics = Metrics(process=False)
    renew = metrics.route("POST", "/v1/spaces/{space}/claims/{key}/renew")
    assert metrics.route("POST", "/v1/spaces/{space}/claims/{key}/renew") is renew
    for status, seconds in ((200, 0.0005), (200, 0.00050001), (409, 0.00001), (200, 31.0), (200, 0.002)):
        renew.observe(status, seconds)
    metrics.route("GET", "unmatched").observe(404, 0.0001)
    found = samples(metrics.render())
    labels = (("method", "POST"), ("route", "/v1/spaces/{space}/claims/{key}/renew"))
    assert found[("runstate_http_requests_total", labels + (("status", "200"),))] == 4
    assert found[("runstate_http_requests_total", labels + (("status", "409"),))] == 1
    assert found[("runstate_http_requests_total", (("method", "GET"), ("route", "unmatched"), ("status", "404")))] == 1
    buckets = {le: found[("runstate_http_request_duration_seconds_bucket", tuple(sorted(labels + (("le", le),))))]
               for le in [str(bound) for bound in LATENCY_BUCKETS_S] + ["+Inf"]}
    assert buckets["0.0001"] == 1 and buckets["0.00025"] == 1
    assert buckets["0.0005"] == 2 and buckets["0.001"] == 3 and buckets["0.0025"] == 4
    assert buckets["30.0"] == 4 and buckets["+Inf"] == 5
    assert found[("runstate_http_request_duration_seconds_count", labels)] == 5
    assert found[("runstate_http_request_duration_seconds_sum", labels)] == pytest.approx(0.0005 + 0.00050001 + 0.00001 + 31.0 + 0.002)
    unmatched = (("method", "GET"), ("route", "unmatched"))
    assert found[("runstate_http_request_duration_seconds_bucket", tuple(sorted(unmatched + (("le", "0.0001"),))))] == 1


def documented_metrics() -> dict[str, set[str]]:
    """docs/operations.md's table of metrics: each name with its labels (`process_*` left out)."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    found: dict[str, set[str]] = {}
    for row in (line for line in section.splitlines() if line.startswith("| `")):
        names, _kind, labels = (cell.strip() for cell in row.strip("|").split("|")[:3])
        for name in re.findall(r"`([a-z_*]+)`", names):
            if not name.startswith("process_"):
                found[name] = {label.strip() for label in labels.split(",") if label.strip()}
    return found


async def test_the_metrics_table_in_the_docs_is_what_a_single_server_exports(tmp_path):
    """Name by name and label by label, both ways: every family a server with a data directory
    exports (the cluster's are in docs/cluster.md) is in docs/operations.md's table with its labels,
    and every name there is exported. Labels are read from the samples of families that have some."""
    async with runstate.testing.serve_app(create_app(settings(data_dir=str(tmp_path / "data")))) as rs:
        await post(rs.app, "/claims", {"key": "k", "holder": "h", "leaseSeconds": 30, "scopeId": None})
        await call_asgi(rs.app, "GET", "/nowhere", {}, None)
        status, _, body = await scrape(rs.app)
    assert status == 200
    exported: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(body.decode()):
        name = family.name + ("_total" if family.type == "counter" else "")
        if name.startswith("process_"):
            continue
        labels = exported.setdefault(name, set())
        for sample in family.samples:
            labels.update(label for label in sample.labels if label != "le")
    documented = documented_metrics()
    assert sorted(set(exported) - set(documented)) == [], "exported, not in docs/operations.md"
    assert sorted(set(documented) - set(exported)) == [], "in docs/operations.md, not exported"
    assert {name: labels for name, labels in exported.items() if labels and labels != documented[name]} == {}
