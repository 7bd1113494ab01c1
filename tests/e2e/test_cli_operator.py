"""The operator's commands as subprocesses against a real server: runs, tasks, claims, mailboxes
and dead letters, with the admin key or a space's API key, as tables and as JSON."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import httpx
import pytest

from ..servers import ServerProcess

pytestmark = pytest.mark.e2e

ADMIN = "e2e-admin-key-0123456789"
KEY = "ops-space-key-1"


def runstate(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTATE_")}
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "runstate.server.cli", *args], capture_output=True, text=True, env=environ, timeout=60,
        input=stdin if stdin is not None else "",
    )


@pytest.fixture(scope="module")
def server():
    with ServerProcess(api_key=KEY, space_id="ops", env={"RUNSTATE_ADMIN_KEY": ADMIN}) as process:
        yield process


def admin(server: ServerProcess) -> dict[str, str]:
    return {"RUNSTATE_BASE_URL": server.base_url, "RUNSTATE_ADMIN_KEY": ADMIN, "RUNSTATE_SPACE_ID": "ops"}


def space_key(server: ServerProcess) -> dict[str, str]:
    return {"RUNSTATE_BASE_URL": server.base_url, "RUNSTATE_API_KEY": KEY}


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, done.stderr
    return done


def as_json(done: subprocess.CompletedProcess[str]):
    return json.loads(ok(done).stdout)


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.base_url + "/v1/spaces/ops", headers={"authorization": f"Bearer {KEY}"}, timeout=10) as client:
        yield client


def dead_letters(http: httpx.Client, mailbox: str, run: str, count: int, error: str = "bad row") -> list[str]:
    made = []
    for n in range(count):
        sent = http.post(f"/mailboxes/{mailbox}/messages", json={"scopeId": run, "payload": {"n": n}}).json()
        delivery = http.post(f"/mailboxes/{mailbox}/recv", json={"scopeId": run, "holder": "w", "holderSession": "s"}).json()
        http.post(f"/messages/{sent['id']}/nack", json={"token": delivery["token"], "retry": False, "error": error})
        made.append(sent["id"])
    return made


def test_runs_are_created_listed_and_cancelled(server):
    made = as_json(runstate("runs", "create", "--name", "nightly", "--json", env=space_key(server)))
    assert made["name"] == "nightly" and made["storedState"] == "ACTIVE"
    listed = as_json(runstate("runs", "list", "--json", env=admin(server)))
    assert made["id"] in [run["id"] for run in listed["scopes"]]
    table = ok(runstate("runs", "list", env=space_key(server))).stdout
    assert table.startswith("ID ") and made["id"] in table
    cancelled = ok(runstate("runs", "cancel", made["id"], env=admin(server)))
    assert f"run {made['id']} is CANCELLED" in cancelled.stdout
    refused = runstate("runs", "create", env=admin(server))
    assert refused.returncode == 2 and "needs the space's API key" in refused.stderr


def test_listings_are_read_a_page_at_a_time_with_the_cursor_each_page_prints(server, http):
    """runs, tasks and claims list --limit N print the next page's --cursor; following it reads
    every row once (more than one page could not be read past the first)."""
    run = http.post("/scopes", json={"name": "paged"}).json()["id"]
    mailbox = http.post("/mailboxes", json={"name": "cli-paged"}).json()["id"]
    for n in range(5):
        http.post("/tasks", json={"scopeId": run, "mailboxId": mailbox, "taskKey": f"t{n}"})
        http.post("/claims", json={"scopeId": run, "key": f"k{n}", "holder": "h", "holderSession": "s"})
    for what, args, made in (("tasks", [run], {f"t{n}" for n in range(5)}), ("claims", [run], {f"k{n}" for n in range(5)})):
        seen: list[str] = []
        cursor: list[str] = []
        for _ in range(5):
            table = ok(runstate(what, "list", *args, "--limit", "2", *cursor, env=admin(server))).stdout
            seen += [word for word in table.split() if word in made]
            more = re.search(r"next page --cursor (\S+)\)", table)
            if more is None:
                break
            cursor = ["--cursor", more.group(1)]
        assert sorted(seen) == sorted(made), (what, seen)
    http.post("/scopes", json={"name": "paged-2"})  # (two runs at least, whatever ran before)
    page = as_json(runstate("runs", "list", "--limit", "1", "--json", env=admin(server)))
    assert page["nextCursor"] and len(page["scopes"]) == 1
    after = as_json(runstate("runs", "list", "--limit", "1", "--cursor", page["nextCursor"], "--json", env=admin(server)))
    assert after["scopes"][0]["id"] != page["scopes"][0]["id"]


def test_a_task_is_cancelled_with_a_reason_and_the_event_says_who(server, http):
    run = http.post("/scopes", json={}).json()["id"]
    mailbox = http.post("/mailboxes", json={"name": "cli-tasks"}).json()["id"]
    task = http.post("/tasks", json={"scopeId": run, "mailboxId": mailbox, "taskKey": "k"}).json()["taskId"]
    view = as_json(runstate("tasks", "cancel", task, "--reason", "not needed", "--json", env=admin(server)))
    assert view["state"] == "CANCELLED" and view["outcomeReason"] == "not needed"
    assert task in ok(runstate("tasks", "list", run, env=admin(server))).stdout
    events = http.get("/watch", params={"types": "task.cancelled", "aggregate": f"task:{task}", "waitSeconds": 0}).json()["events"]
    assert events[0]["payload"] == {"reason": "not needed", "by": "admin"}


def test_a_claim_is_forced_free_and_its_old_token_refused(server, http):
    run = http.post("/scopes", json={}).json()["id"]
    lease = http.post("/claims", json={"scopeId": run, "key": "company:acme/1", "holder": "h", "holderSession": "s"}).json()
    assert "company:acme/1" in ok(runstate("claims", "list", run, env=admin(server))).stdout
    done = ok(runstate("claims", "release", run, "company:acme/1", "--reason", "holder hung", env=space_key(server)))
    assert "forced free from h (generation 1)" in done.stdout
    stale = http.post("/claims/company%3Aacme%2F1/renew", json={"token": lease["token"]})
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "STALE_CLAIM"
    again = runstate("claims", "release", run, "company:acme/1", env=space_key(server))
    assert again.returncode == 1 and "CONFLICT" in again.stderr and "not held" in again.stderr


def test_a_mailbox_is_purged_after_a_count_and_a_yes(server, http):
    run = http.post("/scopes", json={}).json()["id"]
    mailbox = http.post("/mailboxes", json={"name": "cli-purge"}).json()["id"]
    for n in range(3):
        http.post(f"/mailboxes/{mailbox}/messages", json={"scopeId": run, "payload": n})
    dry = ok(runstate("mailboxes", "purge", "cli-purge", "--dry-run", env=admin(server)))
    assert "would purge 3 waiting in mailbox cli-purge" in dry.stdout
    unasked = runstate("mailboxes", "purge", "cli-purge", env=admin(server))
    assert unasked.returncode == 2 and "this would purge" in unasked.stderr and "--yes" in unasked.stderr
    assert http.get(f"/mailboxes/{mailbox}").json()["backlog"] == 3
    done = as_json(runstate("mailboxes", "purge", "cli-purge", "--run", run, "--yes", "--json", env=admin(server)))
    assert done["purged"] == 3 and done["remaining"] == 0
    assert http.get(f"/mailboxes/{mailbox}").json()["backlog"] == 0
    listed = ok(runstate("mailboxes", "list", env=space_key(server))).stdout
    assert "cli-purge" in listed and listed.startswith("NAME ")
    missing = runstate("mailboxes", "purge", "no-such-box", "--yes", env=admin(server))
    assert missing.returncode == 1 and "no mailbox 'no-such-box'" in missing.stderr


def test_dead_letters_are_listed_requeued_and_deleted(server, http):
    run = http.post("/scopes", json={}).json()["id"]
    mailbox = http.post("/mailboxes", json={"name": "cli-dead", "maxAttempts": 1}).json()["id"]
    letters = dead_letters(http, mailbox, run, 2, "timeout talking to crm") + dead_letters(http, mailbox, run, 1, "malformed")
    page = as_json(runstate("dead-letters", "list", "cli-dead", "--limit", "2", "--json", env=admin(server)))
    assert [letter["id"] for letter in page["deadLetters"]] == [letters[2], letters[1]] and page["nextCursor"]
    table = ok(runstate("dead-letters", "list", mailbox, "--reason", "timeout", env=admin(server))).stdout
    assert letters[0] in table and letters[2] not in table and "2 shown of 2 matching, 3 kept" in table
    dry = ok(runstate("dead-letters", "requeue", "cli-dead", "--reason", "timeout", "--dry-run", env=admin(server)))
    assert "would requeue 2 of 2 matching dead letters" in dry.stdout
    done = as_json(runstate("dead-letters", "requeue", "cli-dead", "--reason", "timeout", "--yes", "--json", env=admin(server)))
    assert done["requeued"] == 2 and set(done["requeuedAs"]) == set(letters[:2])
    delivery = http.post(f"/mailboxes/{mailbox}/recv", json={"scopeId": run, "holder": "w", "holderSession": "s"}).json()
    assert delivery["message"]["id"] == done["requeuedAs"][letters[0]] and delivery["message"]["attempt"] == 1
    by_id = ok(runstate("dead-letters", "delete", "cli-dead", "--id", letters[2], env=space_key(server)))
    assert "deleted 1 of 1 matching dead letters" in by_id.stdout
    none = runstate("dead-letters", "delete", "cli-dead", env=admin(server))
    assert none.returncode == 2 and "name the dead letters one way" in none.stderr
    bad = runstate("dead-letters", "list", "cli-dead", "--older-than", "soon", env=admin(server))
    assert bad.returncode == 2 and "not a duration" in bad.stderr


def test_an_action_over_more_than_a_thousand_is_repeated_until_none_remain(server, http):
    """1005 dead letters: one command, two requests, all deleted."""
    run = http.post("/scopes", json={}).json()["id"]
    mailbox = http.post("/mailboxes", json={"name": "cli-many", "maxAttempts": 1}).json()["id"]
    dead_letters(http, mailbox, run, 1005)
    done = as_json(runstate("dead-letters", "delete", "cli-many", "--older-than", "0s", "--yes", "--json", env=admin(server)))
    assert done["deleted"] == 1005 and done["requests"] == 2 and done["remaining"] == 0 and len(done["deletedIds"]) == 1005
    assert http.get(f"/mailboxes/{mailbox}").json()["counts"]["deadLetters"] == 0


def test_spaces_alone_lists_them_and_takes_json(server):
    """`runstate spaces --json`, as the quickstart writes it, is `spaces list --json`."""
    listed = as_json(runstate("spaces", "--json", env=admin(server)))
    assert "ops" in [space["id"] for space in listed["spaces"]]
    assert ok(runstate("spaces", env=admin(server))).stdout.startswith("SPACE ")


def read_until(proc: subprocess.Popen, done, timeout_s: float = 20) -> list[str]:
    """Lines of `proc`'s output until `done(lines)` is true (or the time is up). Reads the pipe's
    bytes itself: a buffered reader could hold a second line that `select` then never reports."""
    import select
    import time

    fd = proc.stdout.fileno()
    pending = b""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while not done(lines) and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        pending += chunk
        *complete, pending = pending.split(b"\n")
        lines.extend(line.decode() for line in complete)
    return lines


def test_events_follow_starts_now_under_a_header_and_filters(server, http):
    """The backlog is not replayed (--from-start does that); --type, --run and --key keep only those."""
    run = http.post("/scopes", json={}).json()["id"]
    other = http.post("/scopes", json={}).json()["id"]
    for key in ("old-1", "old-2"):
        http.post("/claims", json={"scopeId": run, "key": key, "holder": "h", "holderSession": "s"})
        http.post(f"/claims/{key}/force-release", json={"scopeId": run})
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTATE_")}
    environ.update(admin(server))
    command = [sys.executable, "-m", "runstate.server.cli", "inspect", "events", "--follow", "--type", "claim.force_released",
               "--run", run, "--key", "new-1"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environ)
    try:
        header = read_until(proc, lambda lines: len(lines) >= 1)
        assert header and header[0].split()[:3] == ["CURSOR", "TYPE", "AT"]
        for scope, key in ((other, "new-1"), (run, "new-2"), (run, "new-1")):
            http.post("/claims", json={"scopeId": scope, "key": key, "holder": "h", "holderSession": "s"})
            http.post(f"/claims/{key}/force-release", json={"scopeId": scope, "reason": "test"})
        lines = read_until(proc, lambda lines: len(lines) >= 1)
        assert len(lines) == 1 and "claim.force_released" in lines[0] and "claim:new-1" in lines[0] and run in lines[0]
        assert lines[0].split()[-1].startswith("ak_")  # BY: the id of the space's key that forced it
    finally:
        proc.terminate()
        proc.wait(10)
    replay = subprocess.Popen([*command[:-2], "--from-start", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environ)
    try:
        lines = read_until(replay, lambda lines: len(lines) >= 4)
        keys = [json.loads(line)["aggregate"]["id"] for line in lines]
        assert keys == ["old-1", "old-2", "new-2", "new-1"]  # this run's forced releases, from the oldest kept
    finally:
        replay.terminate()
        replay.wait(10)


def test_top_draws_a_live_view_in_place_at_a_terminal(server, http):
    """At a terminal each frame goes home and clears what is left: the holder of a claim taken
    between two frames shows in the second; piped, frames follow one another; --json, one a line."""
    import pty

    run = http.post("/scopes", json={"name": "top-run"}).json()["id"]
    mailbox = http.post("/mailboxes", json={"name": "top-queue"}).json()["id"]
    http.post(f"/mailboxes/{mailbox}/messages", json={"scopeId": run, "payload": 1})
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTATE_")}
    environ.update(admin(server))
    environ["COLUMNS"] = "200"
    main, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "runstate.server.cli", "top", "--interval", "1", "--frames", "3"],
        stdin=secondary, stdout=secondary, stderr=subprocess.PIPE, env=environ,
    )
    os.close(secondary)
    output = b""
    import select
    import time

    deadline = time.monotonic() + 30
    took = False
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(main, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        if not took and output.count(b"\x1b[H") >= 1:
            http.post("/claims", json={"scopeId": run, "key": "top-key", "holder": "top-holder", "holderSession": "s"})
            took = True
        if proc.poll() is not None and not ready:
            break
    proc.wait(10)
    os.close(main)
    text = output.decode()
    frames = text.split("\x1b[H")[1:]
    assert proc.returncode == 0 and len(frames) == 3, text
    assert "\x1b[K" in frames[0] and frames[0].rstrip().endswith("\x1b[J")
    assert "top-queue" in frames[0] and "top-holder" not in frames[0]
    assert "top-holder" in frames[-1] and "top-key" in frames[-1]
    piped = ok(runstate("top", "--frames", "2", "--interval", "0.1", env=admin(server))).stdout
    assert "\x1b[" not in piped and piped.count("WHO HOLDS WHAT") == 2
    lines = ok(runstate("top", "--frames", "1", "--json", env=admin(server))).stdout.splitlines()
    snap = json.loads(lines[0])
    assert snap["space"] == "ops" and any(m["name"] == "top-queue" for m in snap["mailboxes"])


def test_top_names_the_key_a_parked_acquire_waits_for_and_who_waits(server, http):
    """Two holders wait (`waitMs`) for a held claim: top's WAITING row names the claim's key and
    run and both waiters, oldest first; RECENT EVENTS says who took the claim (its holder) and who
    forced its release (the key's id), where before both read "-"."""
    import threading
    import time

    run = http.post("/scopes", json={"name": "top-wait"}).json()["id"]
    first = {"scopeId": run, "key": "busy-key", "holder": "first-holder", "holderSession": "s", "leaseSeconds": 600}
    assert http.post("/claims", json=first).status_code == 200  # (a lease that outlasts the test)
    granted: dict[str, dict] = {}

    def acquire(holder: str) -> None:
        """Wait for the key as a client does: again after each wait that ended (30 s at most each)."""
        with httpx.Client(base_url=server.base_url + "/v1/spaces/ops", headers={"authorization": f"Bearer {KEY}"}, timeout=60) as own:
            body = {"scopeId": run, "key": "busy-key", "holder": holder, "holderSession": holder, "waitMs": 30_000}
            for _ in range(4):
                answer = own.post("/claims", json=body)
                if answer.status_code != 409:
                    break
            granted[holder] = answer.json() if answer.status_code == 200 else {"status": answer.status_code}

    # top cuts its lines at the terminal's width (120 when piped): the BY column is the last, and
    # the events of the module's other tests in the space (longer ids) can push it past 120.
    wide = {**admin(server), "COLUMNS": "400"}
    waiters = []
    for holder in ("waiter-a", "waiter-b"):  # one after the other, so their order is known
        waiters.append(threading.Thread(target=acquire, args=(holder,), daemon=True))
        waiters[-1].start()
        parked = _wait_for_parked(http, run, calls=len(waiters))
    assert parked == {"on": "claim", "calls": 2, "scopeId": run, "key": "busy-key", "holders": ["waiter-a", "waiter-b"]}
    frame = ok(runstate("top", "--frames", "1", env=wide)).stdout.splitlines()
    waiting = [line.split() for line in frame[frame.index("WAITING") + 1:frame.index("RECENT EVENTS")] if line.strip()]
    row = next(cells for cells in waiting if cells[0] == "claim")
    # (A wait of 30 s that ended under a very slow machine is made again, behind the other.)
    assert row[1:4] == ["busy-key", "in", run] and row[4] in ("waiter-a,waiter-b", "waiter-b,waiter-a") and row[5] == "2", frame
    events = frame[frame.index("RECENT EVENTS") + 2:]
    acquired = next(line for line in events if "claim.acquired" in line and "claim:busy-key" in line)
    assert acquired.split()[-1] == "first-holder", frame
    assert http.post("/claims/busy-key/force-release", json={"scopeId": run}).status_code == 200
    released: set[str] = set()
    deadline = time.monotonic() + 90
    while len(released) < 2 and time.monotonic() < deadline:  # each gets the key in turn as the one before lets go
        for holder, answer in list(granted.items()):
            if holder not in released:
                assert answer.get("holder") == holder, granted
                http.post("/claims/busy-key/release", json={"token": answer["token"]})
                released.add(holder)
        time.sleep(0.02)
    assert released == {"waiter-a", "waiter-b"}, granted
    frame = ok(runstate("top", "--frames", "1", env=wide)).stdout.splitlines()
    forced = next(line for line in frame if "claim.force_released" in line and "claim:busy-key" in line)
    assert forced.split()[-1].startswith("ak_"), frame


def _wait_for_parked(http: httpx.Client, run: str, calls: int, timeout_s: float = 20) -> dict:
    """The parked claim entry of `run` in /ops/waits once it counts `calls` waiting acquires."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for wait in http.get("/ops/waits").json()["waits"]:
            if wait["on"] == "claim" and wait.get("scopeId") == run and wait["calls"] == calls:
                return wait
        time.sleep(0.05)
    raise AssertionError(f"no {calls} parked acquire(s) in {run}: {http.get('/ops/waits').json()}")


def test_inspect_events_lists_the_newest_first_and_replays_from_the_start(server, http):
    """By default the newest events come first (with and without filters, `--limit` of them);
    `--from-start` lists from the oldest kept in the order they happened; `--cursor` continues
    after a cursor in that order. (Other tests' leases may still end beside this one: what is
    compared exactly is this run's.)"""
    run = http.post("/scopes", json={}).json()["id"]
    for number in range(5):
        body = {"scopeId": run, "key": f"order-{number}", "holder": f"h{number}", "holderSession": "s", "leaseSeconds": 600}
        assert http.post("/claims", json=body).status_code == 200  # (a lease that outlasts the test: no expiry events)
    env = admin(server)

    def numbers(page: dict) -> list[int]:
        return [int(event["eventId"].split("_", 1)[-1]) for event in page["events"]]

    newest = as_json(runstate("inspect", "events", "--json", env=env))
    assert numbers(newest) == sorted(numbers(newest), reverse=True) and len(newest["events"]) >= 6
    ours = [event["aggregate"]["id"] for event in newest["events"] if event["aggregate"]["id"].startswith("order-")]
    assert ours == [f"order-{n}" for n in range(4, -1, -1)]
    assert newest["nextCursor"] == str(numbers(newest)[0])  # where following from now on starts
    two = as_json(runstate("inspect", "events", "--limit", "2", "--json", env=env))
    assert len(two["events"]) == 2 and numbers(two)[0] > numbers(two)[1] >= numbers(newest)[1]
    in_run = as_json(runstate("inspect", "events", "--run", run, "--json", env=env))
    assert [event["type"] for event in in_run["events"]] == ["claim.acquired"] * 5 + ["scope.created"]
    assert numbers(in_run) == sorted(numbers(in_run), reverse=True)
    acquired = as_json(runstate("inspect", "events", "--run", run, "--type", "claim.acquired", "--limit", "3", "--json", env=env))
    assert [event["payload"]["holder"] for event in acquired["events"]] == ["h4", "h3", "h2"]
    by_key = as_json(runstate("inspect", "events", "--key", "order-1", "--json", env=env))
    assert [event["aggregate"]["id"] for event in by_key["events"]] == ["order-1"]
    replay = as_json(runstate("inspect", "events", "--from-start", "--limit", "3", "--json", env=env))
    assert numbers(replay) == [1, 2, 3]  # the oldest kept: this server has made fewer than it keeps
    replay = as_json(runstate("inspect", "events", "--from-start", "--run", run, "--json", env=env))
    assert numbers(replay) == numbers(in_run)[::-1]
    after = as_json(runstate("inspect", "events", "--run", run, "--cursor", str(numbers(in_run)[2]), "--json", env=env))
    assert numbers(after) == numbers(in_run)[1::-1]
    table = ok(runstate("inspect", "events", "--run", run, "--limit", "2", env=env)).stdout.splitlines()
    assert table[0].split()[:3] == ["CURSOR", "TYPE", "AT"]
    assert [line.split()[0] for line in table[1:3]] == [str(n) for n in numbers(in_run)[:2]]
    assert table[1].split()[-1] == "h4"  # BY: the holder that took the claim
    refused = runstate("inspect", "events", "--limit", "0", env=env)
    assert refused.returncode == 2 and "argument --limit: must be from 1 to 1000" in refused.stderr
