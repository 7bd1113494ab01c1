"""The `runstate` admin commands as subprocesses against a real server: keys, spaces, inspect, --help."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time

import httpx
import pytest

from ..servers import ServerProcess

pytestmark = pytest.mark.e2e

ADMIN = "e2e-admin-key-0123456789"


def runstate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTATE_")}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "runstate.server.cli", *args], capture_output=True, text=True, env=environ, timeout=30)


@pytest.fixture(scope="module")
def admin_server():
    with ServerProcess(env={"RUNSTATE_ADMIN_KEY": ADMIN}) as process:
        yield process


def admin_env(server: ServerProcess) -> dict[str, str]:
    return {"RUNSTATE_BASE_URL": server.base_url, "RUNSTATE_ADMIN_KEY": ADMIN}


def as_json(done: subprocess.CompletedProcess[str]):
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_keys_create_list_revoke_take_effect_on_the_running_server(admin_server):
    """A key made by the command opens its space at once; after `keys revoke` the same key is refused."""
    env = admin_env(admin_server)
    made = as_json(runstate("keys", "create", "--space", "research", "--name", "cli", "--json", env=env))
    assert made["spaces"] == ["research"] and made["key"].startswith("rs_")
    with admin_server.client(api_key=made["key"]) as http:
        assert http.post("/v1/spaces/research/scopes", json={}).status_code == 201
    listed = as_json(runstate("keys", "list", "--space", "research", "--json", env=env))
    assert [key["id"] for key in listed["keys"]] == [made["id"]]
    assert made["key"] not in json.dumps(listed)
    table = runstate("keys", "list", env=env)
    assert table.returncode == 0 and table.stdout.startswith("ID ") and made["id"] in table.stdout
    revoked = runstate("keys", "revoke", made["id"], env=env)
    assert revoked.returncode == 0 and f"revoked {made['id']}" in revoked.stdout
    with admin_server.client(api_key=made["key"]) as http:
        assert http.post("/v1/spaces/research/scopes", json={}).status_code == 401
    again = runstate("keys", "revoke", "ak_nonexistent", env=env)
    assert again.returncode == 1 and "NOT_FOUND" in again.stderr and "request req_" in again.stderr


def test_keys_create_prints_the_key_once_ready_to_export(admin_server):
    """The export line has all a client needs, the server's URL included (the one the command used)."""
    done = runstate("keys", "create", "--space", "default", env=admin_env(admin_server))
    assert done.returncode == 0
    assert re.search(rf"export RUNSTATE_API_KEY=rs_\S+ RUNSTATE_SPACE_ID=default RUNSTATE_BASE_URL={re.escape(admin_server.base_url)}\n", done.stdout)
    assert "shown only now" in done.stdout


def test_keys_create_with_the_viewer_role_makes_a_key_that_only_reads(admin_server):
    """`keys create --role viewer`: the key reads its space and is refused a change; `keys list`
    shows its role."""
    env = admin_env(admin_server)
    done = runstate("keys", "create", "--space", "watched", "--name", "board", "--role", "viewer", env=env)
    assert done.returncode == 0 and "(viewer)" in done.stdout, done.stdout
    secret = re.search(r"RUNSTATE_API_KEY=(rs_\S+)", done.stdout).group(1)  # type: ignore[union-attr]
    with admin_server.client(api_key=secret) as http:
        assert http.get("/v1/spaces/watched/scopes").status_code == 200
        refused = http.post("/v1/spaces/watched/scopes", json={})
        assert refused.status_code == 403 and "viewer role" in refused.json()["error"]["message"]
    table = runstate("keys", "list", "--space", "watched", env=env)
    assert " ROLE " in table.stdout and "viewer" in table.stdout
    assert runstate("keys", "create", "--space", "watched", "--role", "owner", env=env).returncode == 2


def test_spaces_list(admin_server):
    env = admin_env(admin_server)
    runstate("keys", "create", "--space", "listed", env=env)
    spaces = as_json(runstate("spaces", "list", "--json", env=env))["spaces"]
    assert {"id": "listed", "keys": 1, "runs": 0, "claimsLive": 0, "operations": 0} in spaces
    table = runstate("spaces", "list", env=env)
    assert table.stdout.splitlines()[0].split() == ["SPACE", "KEYS", "RUNS", "LIVE", "CLAIMS", "OPERATIONS"]


def test_inspect_runs_claims_and_usage(admin_server):
    """inspect reads with the API key (its own space) or the admin key (--space); tables and JSON agree."""
    with admin_server.client() as http:
        run = http.post("/v1/spaces/default/scopes", json={"name": "inspected"}).json()
        http.post("/v1/spaces/default/claims", json={"key": "company:acme", "scopeId": run["id"], "holder": "researcher-1", "holderSession": "s"})
    api_env = {"RUNSTATE_BASE_URL": admin_server.base_url, "RUNSTATE_API_KEY": admin_server.api_key}
    runs = as_json(runstate("inspect", "runs", "--json", env=api_env))["scopes"]
    assert runs[0]["id"] == run["id"] and runs[0]["effective"] == "ACTIVE"
    claims = as_json(runstate("inspect", "claims", run["id"], "--json", env=admin_env(admin_server)))["claims"]
    assert [(c["key"], c["holder"], c["generation"]) for c in claims] == [("company:acme", "researcher-1", 1)]
    table = runstate("inspect", "claims", run["id"], "--space", "default", env=admin_env(admin_server))
    assert table.returncode == 0
    assert table.stdout.splitlines()[0].split()[:3] == ["KEY", "HOLDER", "SESSION"]
    assert "company:acme" in table.stdout and "researcher-1" in table.stdout
    usage = as_json(runstate("inspect", "usage", "--json", env=api_env))
    assert usage["operations"]["claims.acquire"] >= 1 and usage["total"] >= 2
    assert "claims.acquire" in runstate("inspect", "usage", env=api_env).stdout


def test_inspect_mailboxes_and_tasks(admin_server):
    """Two tasks submitted, one received: the mailbox shows one queued and one leased, the run's tasks their states."""
    with admin_server.client() as http:
        run = http.post("/v1/spaces/default/scopes", json={"name": "queued"}).json()
        mailbox = http.post("/v1/spaces/default/mailboxes", json={"name": "inspected-work"}).json()
        for n in range(2):
            body = {"scopeId": run["id"], "mailboxId": mailbox["id"], "taskKey": f"task-{n}", "input": {"n": n}}
            assert http.post("/v1/spaces/default/tasks", json=body).status_code == 201
        received = http.post(
            f"/v1/spaces/default/mailboxes/{mailbox['id']}/recv",
            json={"scopeId": run["id"], "holder": "worker-1", "holderSession": "s"},
        )
        assert received.status_code == 200
    env = admin_env(admin_server)
    mailboxes = as_json(runstate("inspect", "mailboxes", "--json", env=env))["mailboxes"]
    row = next(m for m in mailboxes if m["name"] == "inspected-work")
    assert row["counts"]["queued"] == 1 and row["counts"]["leased"] == 1
    table = runstate("inspect", "mailboxes", env=env)
    assert table.returncode == 0 and table.stdout.splitlines()[0].split()[:3] == ["NAME", "ID", "MODE"]
    assert "inspected-work" in table.stdout
    tasks = as_json(runstate("inspect", "tasks", run["id"], "--json", env=env))["tasks"]
    assert sorted((t["taskKey"], t["state"]) for t in tasks) == [("task-0", "RUNNING"), ("task-1", "QUEUED")]
    table = runstate("inspect", "tasks", run["id"], env=env)
    assert table.returncode == 0 and "task-1" in table.stdout and "QUEUED" in table.stdout
    missing = runstate("inspect", "tasks", "sc_0000000000000000", env=env)
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr


def test_missing_credentials_and_unreachable_servers_are_explained():
    """No admin key: exit 2 with what to set; nothing listening: exit 1 naming the URL."""
    no_key = runstate("keys", "list", env={"RUNSTATE_BASE_URL": "http://127.0.0.1:9"})
    assert no_key.returncode == 2 and "RUNSTATE_ADMIN_KEY" in no_key.stderr
    unreachable = runstate("spaces", "list", env={"RUNSTATE_BASE_URL": "http://127.0.0.1:9", "RUNSTATE_ADMIN_KEY": ADMIN})
    assert unreachable.returncode == 1 and "cannot reach the runstate server at http://127.0.0.1:9" in unreachable.stderr
    wrong = runstate("inspect", "runs", env={"RUNSTATE_BASE_URL": "http://127.0.0.1:9"})
    assert wrong.returncode == 2 and "RUNSTATE_API_KEY" in wrong.stderr


def test_the_admin_key_lives_in_the_data_directory_with_mode_0600(tmp_path):
    """With --data-dir and no admin key configured, the server writes DATA_DIR/admin.key once and reuses it."""
    data_dir = tmp_path / "data"
    process = ServerProcess("--data-dir", str(data_dir)).start()
    try:
        key_file = data_dir / "admin.key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        secret = key_file.read_text().strip()
        assert secret not in "\n".join(process.lines)  # never printed, never logged
        env = {"RUNSTATE_BASE_URL": process.base_url}
        assert runstate("spaces", "list", "--data-dir", str(data_dir), env=env).returncode == 0
        assert runstate("spaces", "list", "--admin-key-file", str(key_file), env=env).returncode == 0
    finally:
        assert process.stop() == 0
    again = ServerProcess("--data-dir", str(data_dir)).start()
    try:
        assert key_file.read_text().strip() == secret
        answer = httpx.get(again.base_url + "/v1/admin/keys", headers={"authorization": f"Bearer {secret}"})
        assert answer.status_code == 200
    finally:
        again.stop()


HELP = [
    (),
    ("serve",),
    ("config",),
    ("check",),
    ("keys",),
    ("keys", "create"),
    ("keys", "list"),
    ("keys", "revoke"),
    ("spaces",),
    ("spaces", "list"),
    ("inspect",),
    ("inspect", "runs"),
    ("inspect", "claims"),
    ("inspect", "tasks"),
    ("inspect", "mailboxes"),
    ("inspect", "usage"),
]


@pytest.mark.parametrize("command", HELP, ids=lambda c: " ".join(c) or "runstate")
def test_every_command_explains_itself_with_examples(command, capsys):
    """Each command and subcommand has --help with examples (in-process: argparse exits 0 after printing)."""
    from runstate.server.cli import main

    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "usage: runstate" in out
    assert "examples:" in out or "Examples:" in out


def test_help_as_a_subprocess_through_the_installed_command():
    """The installed `runstate` entry point answers --help too (the SDK's command forwards to the server's)."""
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "runstate"), "inspect", "claims", "--help"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "runstate inspect claims sc_" in done.stdout


def test_a_real_servers_log_line_carries_the_error_envelopes_request_id(admin_server):
    """The JSON request line on the server's stderr has the requestId the client got in the envelope, and no key."""
    with admin_server.client() as http:
        refused = http.get("/v1/spaces/default/scopes/sc_missing")
    request_id = refused.json()["error"]["requestId"]
    assert refused.headers["x-request-id"] == request_id
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = [json.loads(line) for line in admin_server.lines if request_id in line]
        if lines:
            break
        time.sleep(0.05)
    assert lines == [lines[0]] and lines[0]["status"] == 404 and lines[0]["code"] == "NOT_FOUND"
    assert lines[0]["route"] == "/v1/spaces/{space}/scopes/{scope_id}" and lines[0]["method"] == "GET"
    assert not any(admin_server.api_key in line or ADMIN in line for line in admin_server.lines)
