"""`runstate serve` and `runstate config` as subprocesses: wrong settings exit 2, sources are reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "runstate.toml"
    path.write_text(text)
    return str(path)


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTATE_")}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "runstate.server.cli", *args], capture_output=True, text=True, env=environ, timeout=30)


def test_serve_exits_2_naming_the_wrong_setting():
    """A real `runstate serve` with a wrong setting stops before serving, with exit status 2."""
    done = run("serve", "--port", "0", env={"RUNSTATE_LEASE_S_MAX": "ten"})
    assert done.returncode == 2
    assert "runstate serve: setting lease_s_max (from RUNSTATE_LEASE_S_MAX): expected an integer, got 'ten'" in done.stderr
    assert "serving on" not in done.stdout
    unknown = run("serve", "--port", "0", env={"RUNSTATE_PROT": "1"})
    assert unknown.returncode == 2 and "RUNSTATE_PROT (did you mean RUNSTATE_PORT?)" in unknown.stderr


def test_runstate_config_shows_each_value_and_where_it_came_from(tmp_path):
    """`runstate config --json` applies the same precedence as serve and reports the sources."""
    path = write(tmp_path, "port = 7001\n[limits]\nlease_s_max = 100\n")
    done = run("config", "--json", "--port", "7003", env={"RUNSTATE_CONFIG": path, "RUNSTATE_LEASE_S_MAX": "200", "RUNSTATE_ADMIN_KEY": "a" * 20})
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)["settings"]}
    assert rows["port"] == {"name": "port", "value": 7003, "source": "--port"}
    assert rows["limits.lease_s_max"] == {"name": "limits.lease_s_max", "value": 200, "source": "RUNSTATE_LEASE_S_MAX"}
    assert rows["admin_key"]["value"] == "(set)"  # never the secret itself
    assert "a" * 20 not in done.stdout
    table = run("config", "--lease-s-max", "300")
    assert table.returncode == 0 and "limits.lease_s_max" in table.stdout and "--lease-s-max" in table.stdout


def test_serve_refuses_a_duration_that_is_not_a_finite_number():
    """nan passes every range check and inf is no duration: `serve` says so (exit 2), not a traceback once serving."""
    done = run("serve", "--port", "0", "--read-timeout-s", "nan")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "runstate serve: setting read_timeout_s (from --read-timeout-s): must be a finite number, got nan"
    assert "serving on" not in done.stdout


def test_a_config_file_that_is_not_utf8_is_named_not_a_traceback(tmp_path):
    """TOML is UTF-8: a file saved in another encoding is refused like any other invalid TOML, exit 2."""
    path = tmp_path / "runstate.toml"
    path.write_bytes('log_format = "text" # café\n'.encode("latin-1"))
    done = run("config", "--config", str(path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"runstate config: config file {path}: not valid TOML (not UTF-8 at byte offset 25)"


def test_a_data_directory_that_is_a_file_is_named_as_such(tmp_path):
    """A file given as the data directory: exit 2 saying it is not a directory, where the start said 'File exists'."""
    path = tmp_path / "data"
    path.write_text("")
    done = run("serve", "--port", "0", env={"RUNSTATE_DATA_DIR": str(path)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"runstate serve: setting data_dir (from RUNSTATE_DATA_DIR): {path} is not a directory"


@pytest.mark.parametrize("source", ["flag", "file"])
def test_an_empty_data_directory_is_refused_not_taken_for_memory(tmp_path, source):
    """An empty data directory given (`--data-dir "$DATA"` with DATA unset, say) is refused, exit 2: it
    started a server keeping everything in memory, lost at its next restart. (An empty environment
    variable counts as unset, as every setting's does.)"""
    config = tmp_path / "runstate.toml"
    config.write_text('data_dir = ""\n')
    args, env, named = {
        "flag": (("--data-dir", " "), {}, "--data-dir"),
        "file": (("--config", str(config)), {}, str(config)),
    }[source]
    done = run("serve", "--port", "0", *args, env=env)
    assert done.returncode == 2, done.stderr
    assert "setting data_dir" in done.stderr and named in done.stderr, done.stderr
    assert "must not be empty (leave it unset to keep the state in memory only)" in done.stderr
    assert "serving on" not in done.stdout
