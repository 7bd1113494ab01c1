"""Agents for the `runstate mcp` tests: each is a real `runstate mcp` process over stdio, driven by
the `mcp` package's own client, as an LLM agent's MCP client drives it.

`agent(server, run, holder)` starts one (a 5 s lease by default, the shortest the API allows, so
takeovers come quickly) and gives an `Agent`: `call(tool, **arguments)` answers `(body, is_error)`
with the body parsed from the answer's JSON text (a refusal of the `mcp` package itself, which is
plain text, comes back as `{"error": text}`), and `kill()` sends the process SIGKILL, as a crash
would. Its stderr is kept in a file and shown when a test fails.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from ..servers import ServerProcess

# The console script, as an MCP client's configuration names it.
RUNSTATE = str(Path(sys.executable).parent / "runstate")
LEASE_SECONDS = 5


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def environment(server: ServerProcess) -> dict[str, str]:
    """What an MCP client's configuration gives the server: the SDK's variables, nothing else."""
    return {"RUNSTATE_BASE_URL": server.base_url, "RUNSTATE_API_KEY": server.api_key, "RUNSTATE_SPACE_ID": server.space_id}


def pid_of(holder: str) -> int:
    """The process of `runstate mcp ... --holder HOLDER` (holders are unique per test)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mcp" in argv and holder.encode() in argv:
            return int(entry.name)
    raise LookupError(f"no runstate mcp process for holder {holder}")


def parse(text: str) -> dict[str, Any]:
    try:
        body = json.loads(text)
    except ValueError:
        return {"error": text}
    assert isinstance(body, dict), text
    return body


class Agent:
    def __init__(self, session: ClientSession, holder: str, errlog: Any) -> None:
        self.session = session
        self.holder = holder
        self.errlog = errlog
        self.pid = pid_of(holder)

    async def call(self, tool: str, **arguments: Any) -> tuple[dict[str, Any], bool]:
        result = await self.session.call_tool(tool, arguments)
        assert len(result.content) == 1, result
        return parse(result.content[0].text), bool(result.is_error)

    async def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """The answer of a call that must succeed."""
        body, error = await self.call(tool, **arguments)
        assert not error, body
        return body

    def kill(self) -> float:
        """SIGKILL, as a crash: nothing is given back. Returns when it was sent (monotonic)."""
        os.kill(self.pid, signal.SIGKILL)
        return time.monotonic()

    def stderr(self) -> str:
        self.errlog.seek(0)
        return str(self.errlog.read())


@asynccontextmanager
async def agent(server: ServerProcess, run: str, holder: str, *args: str) -> AsyncIterator[Agent]:
    params = StdioServerParameters(
        command=RUNSTATE, args=["mcp", "--run", run, "--holder", holder, "--lease-seconds", str(LEASE_SECONDS), *args],
        env=environment(server),
    )
    with tempfile.TemporaryFile("w+") as errlog:
        try:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    yield Agent(session, holder, errlog)
        except BaseException:
            errlog.seek(0)
            print(f"--- stderr of runstate mcp ({holder}):\n{errlog.read()}", file=sys.stderr)
            raise


@asynccontextmanager
async def agents(server: ServerProcess, run: str, *holders: str) -> AsyncIterator[list[Agent]]:
    """Several agents in one run, started side by side (each process takes seconds to import)."""
    ready: dict[str, Agent] = {}
    all_ready, done = anyio.Event(), anyio.Event()

    async def one(holder: str) -> None:
        async with agent(server, run, holder) as started:
            ready[holder] = started
            if len(ready) == len(holders):
                all_ready.set()
            await done.wait()

    async with anyio.create_task_group() as group:
        for holder in holders:
            group.start_soon(one, holder)
        await all_ready.wait()
        try:
            yield [ready[holder] for holder in holders]
        finally:
            done.set()


async def eventually(check: Callable[[], Awaitable[Any]], timeout_s: float, pause_s: float = 0.2) -> Any:
    """Poll `check` (a real process's state) until it returns something true, within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout_s} s: last {value!r}")
        await anyio.sleep(pause_s)
