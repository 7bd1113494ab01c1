"""A new user's first steps, as the docs write them: `make serve` keeps request lines out of the
terminal unless asked (`runstate serve` itself logs every request, the right default where a log
collector reads standard error), and the docs say so."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _serve_command(**env: str) -> str:
    """The `runstate serve` line `make serve` would run (a dry run: nothing is started)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    environ = {k: v for k, v in os.environ.items() if k != "RUNSTATE_LOG_REQUESTS" and not k.startswith("MAKE")}
    variables = [f"{k}={v}" for k, v in env.items() if k == "LOG_REQUESTS"]
    environ.update({k: v for k, v in env.items() if k != "LOG_REQUESTS"})
    done = subprocess.run(["make", "-n", "serve", *variables], cwd=ROOT, env=environ, capture_output=True, text=True, check=True)
    return next(line for line in done.stdout.splitlines() if "runstate serve" in line)


def test_make_serve_leaves_request_lines_out_unless_asked():
    assert "--log-requests off" in _serve_command()
    assert "--log-requests errors" in _serve_command(LOG_REQUESTS="errors")
    assert "--log-requests all" in _serve_command(RUNSTATE_LOG_REQUESTS="all")


def test_runstate_serve_logs_every_request_by_default_and_the_docs_say_both():
    from runstate.server.config import SETTINGS

    setting = next(s for s in SETTINGS if s.name == "log_requests")
    assert setting.default == "all"
    configuration = (ROOT / "docs" / "configuration.md").read_text()
    assert "`make serve`" in configuration and "--log-requests off" in configuration
