"""The `runstate mcp` command: its help (and its place in `runstate --help` and the completion
scripts), its settings, the optional extra, the HTTP transport, signals.

`import runstate` never imports the `mcp` package; without it, `runstate mcp` says what to install.
A missing API key stops it at once, naming the variable. `--transport streamable-http` serves the
same tools on /mcp, and SIGTERM ends either transport after giving back what the session holds.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from runstate import AsyncRunstate

from ..ports import free_port
from .agents import RUNSTATE, agent, environment, eventually, parse, unique

pytestmark = pytest.mark.e2e


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)


def test_importing_runstate_does_not_import_the_mcp_package():
    """The extra is optional: the SDK and the package `runstate.mcp` itself import without it."""
    script = "import sys, runstate, runstate.mcp; assert 'mcp' not in sys.modules, sorted(m for m in sys.modules if 'mcp' in m)"
    done = _run(sys.executable, "-c", script)
    assert done.returncode == 0, done.stderr


def test_without_the_extra_the_command_says_what_to_install():
    script = "import sys; sys.modules['mcp'] = None; from runstate._cli import main; sys.exit(main(['mcp']))"
    done = _run(sys.executable, "-c", script)
    assert done.returncode == 2
    assert "pip install 'runstate[mcp]'" in done.stderr


def test_help_says_how_to_configure_it_and_a_missing_key_stops_it_naming_the_variable():
    helped = _run(RUNSTATE, "mcp", "--help")
    assert helped.returncode == 0
    for needed in ('"command": "runstate"', '"args": ["mcp", "--run"', '"env"', "RUNSTATE_API_KEY", "RUNSTATE_SPACE_ID",
                   "RUNSTATE_BASE_URL", "--holder", "--transport", "docs/mcp.md"):
        assert needed in helped.stdout, needed
    bare = {"PATH": os.environ.get("PATH", "")}
    missing = _run(RUNSTATE, "mcp", "--run", "r", env=bare)
    assert missing.returncode == 2 and "RUNSTATE_API_KEY" in missing.stderr and "Traceback" not in missing.stderr
    wrong = _run(RUNSTATE, "mcp", "--lease-seconds", "2", env=bare)
    assert wrong.returncode == 2 and "--lease-seconds must be from 5 to 600" in wrong.stderr
    # A run's name the server would refuse stops it at once, rather than every tool call answering
    # the model that its argument is invalid.
    long_run = _run(RUNSTATE, "mcp", "--run", "r" * 257, env=bare)
    assert long_run.returncode == 2 and "--run is longer than 256 characters" in long_run.stderr


def test_runstate_help_and_its_completion_list_mcp_with_its_options():
    """`runstate --help` lists mcp among the commands; the completion scripts complete it and its
    options, from the same parser (`runstate.server.cli` takes them from `runstate.mcp.parser()`)."""
    from ..e2e.test_completion import bash_complete, zsh_complete

    helped = _run(RUNSTATE, "--help")
    assert helped.returncode == 0
    assert any(line.split()[:1] == ["mcp"] and "LLM agent" in line for line in helped.stdout.splitlines()), helped.stdout
    assert bash_complete(["runstate", "mc"]) == ["mcp"]
    assert bash_complete(["runstate", "mcp", "--h"]) == ["--help", "--holder", "--host"]
    assert "--lease-seconds" in zsh_complete(["runstate", "mcp", "-"])
    through_server = _run(sys.executable, "-m", "runstate.server.cli", "mcp", "--help")
    assert through_server.returncode == 0 and "usage: runstate mcp" in through_server.stdout


def _exited(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] == "Z"
    except OSError:
        return True


@pytest.mark.anyio
async def test_the_streamable_http_transport_serves_the_same_tools_and_sigterm_gives_back(module_server):
    """One process over HTTP: a claim taken through it is released when it is stopped with SIGTERM."""
    run, port = unique("run"), free_port()
    holder = unique("http-agent")
    process = subprocess.Popen(
        [RUNSTATE, "mcp", "--run", run, "--holder", holder, "--transport", "streamable-http", "--port", str(port)],
        env={**environment(module_server), "PATH": os.environ.get("PATH", "")}, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )
    try:
        async def listening() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return True
            except OSError:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                return False

        await eventually(listening, 30)
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                assert {tool.name for tool in (await session.list_tools()).tools} == {
                    "claim", "release", "held", "submit", "take", "complete", "fail", "result", "status"}
                answer = await session.call_tool("claim", {"key": "file:a.py", "lease_seconds": 60})
                assert not answer.is_error and parse(answer.content[0].text)["generation"] == 1
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert await _claim_now(module_server, run, "file:a.py") == 2, "released at SIGTERM, not after its 60 s lease"


async def _claim_now(server, run: str, key: str) -> int:
    """Another agent's claim of `key`, without waiting: its generation."""
    async with AsyncRunstate(api_key=server.api_key, space_id=server.space_id, base_url=server.base_url) as rs:
        lease = await (await rs.scopes.ensure(run)).claim(key).acquire(lease_seconds=5)
        await lease.release()
        return int(lease.generation)


@pytest.mark.anyio
async def test_sigterm_on_a_stdio_session_gives_back_and_exits_with_stdin_still_open(module_server):
    """The client's stdin stays open: the process still ends within a second, its claim released."""
    run = unique("run")
    async with agent(module_server, run, unique("stopped")) as stopped:
        await stopped.ok("claim", key="file:b.py", lease_seconds=60)
        os.kill(stopped.pid, signal.SIGTERM)
        sent = time.monotonic()

        async def exited() -> bool:
            return _exited(stopped.pid)

        await eventually(exited, 10, pause_s=0.05)
        assert time.monotonic() - sent < 5
        assert f"session of {stopped.holder} ended" in stopped.stderr()
        assert await _claim_now(module_server, run, "file:b.py") == 2
