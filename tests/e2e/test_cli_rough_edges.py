"""The `runstate` command's rough edges, against real servers: version, closed pipes, key precedence, messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from ..servers import ServerProcess

pytestmark = pytest.mark.e2e

ADMIN = "e2e-admin-key-0123456789"
WRONG = "not-the-admin-key-0123456789"


def runstate(*args: str, env: dict[str, str] | None = None, **options) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTATE_")}
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "runstate.server.cli", *args], capture_output=True, text=True, env=environ, timeout=30,
        **options,
    )


@pytest.fixture(scope="module")
def research_server():
    """A server whose only API key opens the space `research`, with an admin key from the environment."""
    with ServerProcess(api_key="research-key-1", space_id="research", env={"RUNSTATE_ADMIN_KEY": ADMIN}) as process:
        yield process


def test_version_is_the_installed_one():
    """`runstate --version` prints the package's version and exits 0."""
    done = runstate("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"runstate {version('runstate')}"


def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    """`runstate config` writing into a pipe nobody reads exits without a traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line, like `| head -0`
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTATE_")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "runstate.server.cli", "config"], stdout=write_end, stderr=subprocess.PIPE,
            text=True, env=environ, timeout=30,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr


def test_check_takes_json(tmp_path):
    """`runstate check --json` prints the report as one JSON object."""
    done = runstate("check", "--data-dir", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["dataDir"] == str(tmp_path) and "lastLsn" in report


def test_the_admin_key_flag_beats_the_environment_and_the_message_says_where_it_came_from(research_server, tmp_path):
    """--admin-key-file wins over RUNSTATE_ADMIN_KEY; a refused key names its source and the URL."""
    wrong_file = tmp_path / "admin.key"
    wrong_file.write_text(WRONG + "\n")
    env = {"RUNSTATE_BASE_URL": research_server.base_url, "RUNSTATE_ADMIN_KEY": ADMIN}
    refused = runstate("spaces", "list", "--admin-key-file", str(wrong_file), env=env)
    assert refused.returncode == 1
    assert "UNAUTHENTICATED" in refused.stderr
    assert f"the admin key from --admin-key-file {wrong_file}, sent to {research_server.base_url}" in refused.stderr
    assert runstate("spaces", "list", env=env).returncode == 0


def test_the_help_and_the_docs_give_the_admin_keys_order_the_commands_use():
    """--admin-key-file, then RUNSTATE_ADMIN_KEY, then DATA_DIR/admin.key (the test above and below), as said."""
    helped = runstate("spaces", "--help")
    assert helped.returncode == 0
    assert "(it wins over RUNSTATE_ADMIN_KEY and --data-dir)" in " ".join(helped.stdout.split())
    operations = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    assert "look for it in this order: `--admin-key-file FILE`" in " ".join(operations.split())


def test_the_environment_beats_the_data_directory_as_it_does_for_serve(research_server, tmp_path):
    """RUNSTATE_ADMIN_KEY wins over DATA_DIR/admin.key, as in `runstate serve`; without it the file is used."""
    (tmp_path / "admin.key").write_text(WRONG)
    env = {"RUNSTATE_BASE_URL": research_server.base_url, "RUNSTATE_ADMIN_KEY": ADMIN}
    assert runstate("spaces", "list", "--data-dir", str(tmp_path), env=env).returncode == 0
    env.pop("RUNSTATE_ADMIN_KEY")
    from_file = runstate("spaces", "list", "--data-dir", str(tmp_path), env=env)
    assert from_file.returncode == 1 and f"the admin key from {tmp_path / 'admin.key'} (--data-dir)" in from_file.stderr
    empty = tmp_path / "empty.key"
    empty.write_text("\n")
    assert runstate("spaces", "list", "--admin-key-file", str(empty), env=env).returncode == 2


def test_inspect_with_only_an_api_key_reads_its_own_space(research_server):
    """With RUNSTATE_API_KEY alone inspect asks the server which space the key opens (GET /v1/key)
    and reads that one; RUNSTATE_SPACE_ID or --space still choose; another space says what to set."""
    env = {"RUNSTATE_BASE_URL": research_server.base_url, "RUNSTATE_API_KEY": "research-key-1", "RUNSTATE_SPACE_ID": "research"}
    listed = runstate("inspect", "runs", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["scopes"] == []
    env.pop("RUNSTATE_SPACE_ID")
    own = runstate("inspect", "runs", "--json", env=env)
    assert own.returncode == 0, own.stderr
    assert json.loads(own.stdout)["scopes"] == []
    elsewhere = runstate("inspect", "runs", "--space", "default", env=env)
    assert elsewhere.returncode == 1
    assert "the API key from RUNSTATE_API_KEY does not open it" in elsewhere.stderr
    assert "RUNSTATE_SPACE_ID" in elsewhere.stderr


def test_an_unreachable_server_is_named_with_where_its_url_came_from():
    """Nothing listening: the message names the URL and that it came from RUNSTATE_BASE_URL."""
    done = runstate("spaces", "list", env={"RUNSTATE_BASE_URL": "http://127.0.0.1:9", "RUNSTATE_ADMIN_KEY": ADMIN})
    assert done.returncode == 1
    assert "cannot reach the runstate server at http://127.0.0.1:9 (RUNSTATE_BASE_URL)" in done.stderr


@pytest.mark.parametrize("interval", ["nan", "inf", "0", "1e12"])
def test_top_refuses_an_interval_it_cannot_wait(interval):
    """A usage error (exit 2) before anything is read, where nan, inf or a huge interval ended in a traceback."""
    done = runstate("top", "--interval", interval, "--space", "research", env={"RUNSTATE_ADMIN_KEY": ADMIN})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("runstate top: --interval must be more than 0 and at most 3600 seconds, got ")


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--frames", "-1", "must be 0 or more, got -1"), ("--runs", "-1", "must be from 0 to 1000, got -1"),
    ("--events", "1001", "must be from 0 to 1000, got 1001"), ("--runs", "ten", "'ten' is not a whole number"),
])
def test_top_refuses_counts_out_of_their_range(flag, value, said):
    """--frames, --runs and --events are counts (runs and events at most what the server lists at
    once): out of range, a usage error naming it, where -1 was read as 0 (or as one frame)."""
    done = runstate("top", flag, value, "--space", "research", env={"RUNSTATE_ADMIN_KEY": ADMIN})
    assert done.returncode == 2, done.stderr
    assert f"argument {flag}: {said}" in done.stderr


@pytest.mark.parametrize("args", [("inspect", "runs", "--limit", "0"), ("runs", "list", "--limit", "5000"),
                                  ("dead-letters", "list", "research", "--limit", "-1"), ("inspect", "events", "--limit", "1001")])
def test_a_limit_out_of_its_range_is_a_usage_error(args):
    """--limit is 1-1000, as each help says: out of it, exit 2 before the server is asked (it answered 400, exit 1)."""
    done = runstate(*args, env={"RUNSTATE_ADMIN_KEY": ADMIN, "RUNSTATE_BASE_URL": "http://127.0.0.1:9"})
    assert done.returncode == 2, done.stderr
    assert "argument --limit: must be from 1 to 1000, got " in done.stderr
