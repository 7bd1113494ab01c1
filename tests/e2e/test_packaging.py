"""`pip install .` gives the SDK alone; the server and its dependencies come with the `server` extra,
the `mcp` package with the `mcp` one."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def test_the_plain_install_is_the_sdk_alone(tmp_path):
    """Without extras: the SDK imports and works offline, typed (py.typed); no trio, hypercorn or
    mcp; `runstate` says how to get the server; `runstate mcp --help` answers, and `runstate mcp`
    says how to get the extra it needs."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(ROOT)],
        check=True,
        cwd=tmp_path,
    )
    probe = (
        "import importlib.util, runstate\n"
        "from runstate import AsyncRunstate, Runstate, LeaseLostError, WaitTimeoutError\n"
        "AsyncRunstate(api_key='k', space_id='default')\n"
        "print(*(importlib.util.find_spec(name) is None for name in ('trio', 'hypercorn', 'mcp')))\n"
        "import pathlib; assert (pathlib.Path(runstate.__file__).parent / 'py.typed').is_file()\n"
    )
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"]
    runstate = str(env_dir / "bin" / "runstate")
    command = subprocess.run([runstate, "serve"], capture_output=True, text=True, cwd=tmp_path)
    assert command.returncode == 2
    assert "pip install 'runstate[server]'" in command.stderr
    helped = subprocess.run([runstate, "mcp", "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert helped.returncode == 0 and "usage: runstate mcp" in helped.stdout and "--holder" in helped.stdout
    bare = subprocess.run([runstate, "mcp", "--run", "r"], capture_output=True, text=True, cwd=tmp_path)
    assert bare.returncode == 2 and "pip install 'runstate[mcp]'" in bare.stderr and "Traceback" not in bare.stderr
