"""`runstate replay` on the data directory of a killed server shows what the server showed, and never
changes the directory it reads.

A real `runstate serve` process goes through two moments (a claim held by one agent with a task
queued; then the claim taken over by another after a forced release, the task leased), and what it
answered is recorded at each, with the host's time right after. It is killed (SIGKILL). Then
`runstate replay DIR --at T` answers, for each moment, what the server answered then, through
`inspect` exactly as `runstate inspect` printed it live, and the diff between the moments says
what changed; every file of the directory hashes the same before and after. A directory a server
holds is refused unless `--copy`.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from runstate.actors.timestamps import format_ms
from tests.servers import ServerProcess

ADMIN_KEY = "rs_history_test_admin_key_0123"


def fingerprint(data_dir: Path) -> dict[str, str]:
    """Every file under `data_dir` with its SHA-256 (its contents) and its modification time."""
    found = {}
    for path in sorted(data_dir.rglob("*")):
        if path.is_file():
            found[str(path.relative_to(data_dir))] = f"{hashlib.sha256(path.read_bytes()).hexdigest()} {path.stat().st_mtime_ns}"
    return found


def replay(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "runstate.server.cli", "replay", *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, **(env or {})},
    )


def inspect_live(server: ServerProcess, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "runstate.server.cli", "inspect", *args, "--url", server.base_url], capture_output=True, text=True,
        timeout=60, env={**os.environ, "RUNSTATE_ADMIN_KEY": ADMIN_KEY},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def now_ms() -> int:
    return int(time.time() * 1000)


def views(http, run: str) -> dict:
    paths = [f"/scopes/{run}/claims", f"/scopes/{run}/tasks", "/mailboxes", "/caps", f"/ops/runs/{run}"]
    return {path: http.get("/v1/spaces/default" + path).json() for path in paths}


def test_a_replay_of_a_killed_servers_directory_shows_what_it_showed_and_changes_nothing(tmp_path):
    data = tmp_path / "data"
    server = ServerProcess("--data-dir", str(data), "--fsync", "always", env={"RUNSTATE_ADMIN_KEY": ADMIN_KEY})
    with server:
        with server.client() as http:
            run = http.post("/v1/spaces/default/scopes", json={}).json()["id"]
            mailbox = http.post("/v1/spaces/default/mailboxes", json={"name": "research"}).json()["id"]
            http.post("/v1/spaces/default/claims", json={"scopeId": run, "key": "company:acme", "holder": "agent-a",
                                                           "holderSession": "sa", "leaseSeconds": 300}).raise_for_status()
            http.post("/v1/spaces/default/tasks", json={"scopeId": run, "mailboxId": mailbox, "taskKey": "report"}).raise_for_status()
            first = views(http, run)
            first_live = inspect_live(server, "claims", run)
            first_ms = now_ms()
            time.sleep(0.05)
            admin = server.client(ADMIN_KEY)
            admin.post(f"/v1/spaces/default/claims/company:acme/force-release", json={"scopeId": run, "reason": "hung"}).raise_for_status()
            http.post("/v1/spaces/default/claims", json={"scopeId": run, "key": "company:acme", "holder": "agent-b",
                                                           "holderSession": "sb", "leaseSeconds": 300}).raise_for_status()
            http.post(f"/v1/spaces/default/mailboxes/{mailbox}/recv", json={"scopeId": run, "holder": "w1", "holderSession": "s1",
                                                                          "leaseSeconds": 300}).raise_for_status()
            second = views(http, run)
            second_live = inspect_live(server, "claims", run)
            second_ms = now_ms()
        assert first != second
        server.kill()
    before = fingerprint(data)

    for at_ms, seen, printed in ((first_ms, first, first_live), (second_ms, second, second_live)):
        at = format_ms(at_ms)
        summary = replay(str(data), "--at", at, "--json")
        assert summary.returncode == 0, summary.stderr
        space = json.loads(summary.stdout)["spaces"]["default"]
        assert space["caps"] == seen["/caps"]["caps"]
        assert space["states"]["tasks"] == seen[f"/ops/runs/{run}"]["counts"]["tasks"]
        table = replay(str(data), "--at", at, "inspect", "claims", run)
        assert table.returncode == 0, table.stderr
        assert table.stdout == printed  # what `runstate inspect` printed live
        assert "as of LSN" in table.stderr
        claims = json.loads(replay(str(data), "--at", at, "inspect", "claims", run, "--json").stdout)
        assert claims["asOf"]["at"] == at and {k: v for k, v in claims.items() if k != "asOf"} == seen[f"/scopes/{run}/claims"]
        tasks = json.loads(replay(str(data), "--at", at, "inspect", "tasks", run, "--json").stdout)
        assert {k: v for k, v in tasks.items() if k != "asOf"} == seen[f"/scopes/{run}/tasks"]
        queues = json.loads(replay(str(data), "--at", at, "inspect", "queues", "--json").stdout)
        assert {k: v for k, v in queues.items() if k != "asOf"} == seen["/mailboxes"]

    diff = replay(str(data), "diff", "--from", format_ms(first_ms), "--to", format_ms(second_ms), "--json")
    assert diff.returncode == 0, diff.stderr
    changed = json.loads(diff.stdout)
    assert changed["events"]["claim.force_released"] == 1 and changed["events"]["claim.acquired"] == 1
    assert changed["states"]["tasks"]["QUEUED"] == {"from": 1, "to": 0} and changed["states"]["tasks"]["RUNNING"] == {"from": 0, "to": 1}
    table = replay(str(data), "diff", "--from", format_ms(first_ms), "--to", format_ms(second_ms))
    assert table.returncode == 0 and "claim.force_released" in table.stdout and "QUEUED" in table.stdout
    assert fingerprint(data) == before  # nothing written, nothing moved, nothing created

    # A directory a live server holds is refused, unless read from a copy.
    server.restart()
    try:
        held = replay(str(data), "--at", format_ms(second_ms))
        assert held.returncode == 1 and "in use by a running runstate server" in held.stderr and "--copy" in held.stderr
        copied = replay(str(data), "--copy", "--at", format_ms(second_ms), "inspect", "claims", run)
        assert copied.returncode == 0 and copied.stdout == second_live
    finally:
        server.stop()


def test_a_replay_diff_whose_to_stands_before_its_from_is_a_usage_error_and_an_event_never_made_is_said_so(tmp_path):
    """As the API's diff: a --to of another kind than --from that the log passed before --from is
    refused (status 2), not shown as standing at --from."""
    import trio
    import trio.testing

    from tests.history.helpers import start
    from tests.server.asgi_client import AsgiClient

    data = tmp_path / "data"
    moments: list[tuple[int, int]] = []

    async def write() -> None:
        async with trio.open_nursery() as nursery:
            runtime = await start(nursery, str(data))
            client = AsgiClient(runtime)
            run = await client.run()
            for holder in ("a", "b", "c"):
                await trio.sleep(1)
                taken = await client.post("/claims", {"scopeId": run, "key": holder, "holder": holder, "holderSession": "s"})
                assert taken.status == 200, taken
                moments.append((runtime.kernel.clock.now_ms(), runtime.kernel.partition_of(client.space).journal.durable_lsn))
            nursery.cancel_scope.cancel()

    trio.run(write, clock=trio.testing.MockClock(autojump_threshold=0))
    (early_ms, early_lsn), (late_ms, late_lsn) = moments[0], moments[-1]
    for start_at, end_at in ((format_ms(late_ms), f"lsn:{early_lsn}"), (f"lsn:{late_lsn}", format_ms(early_ms)), ("ev_4", format_ms(early_ms))):
        refused = replay(str(data), "diff", "--from", start_at, "--to", end_at)
        assert refused.returncode == 2 and "is after --to" in refused.stderr, (start_at, end_at, refused)
    never = replay(str(data), "--at", "ev_5", "inspect", "runs")
    assert never.returncode == 1 and "the space made no event 5 (its newest at the end of the journal is ev_4)" in never.stderr, never
    fine = replay(str(data), "diff", "--from", f"lsn:{early_lsn}", "--to", format_ms(late_ms), "--json")
    assert fine.returncode == 0, fine.stderr
    assert (json.loads(fine.stdout)["from"]["lsn"], json.loads(fine.stdout)["to"]["lsn"]) == (early_lsn, late_lsn)
