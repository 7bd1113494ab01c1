"""Scripts of the official client `runstate-sdk==0.2.0`, run against a real server process.

Built on the shared fixtures of `tests/conftest.py`: `official_client` (the client installed into
an isolated folder) and `module_server` (`runstate serve --port 0`). `Clients.run(script)` runs a
script to its end under the base interpreter with `PYTHONPATH` set to the client, so our own
package cannot shadow it; `Clients.start(script)` runs one in the background (a worker) and
reads its lines as it prints them. A script reports by printing JSON lines; the last is its result.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..servers import ServerProcess, base_python

# Every script starts with this: the official client, a JSON reporter, and its arguments.
PRELUDE = """
import asyncio, json, os, signal, sys, time
import runstate
from runstate import AsyncRunstate
from runstate.errors import (
    ConflictError, LeaseLostError, NotFoundError, RunstateError, ScopeCancelledError, WaitTimeoutError,
)
assert runstate.__file__.startswith(os.environ["PYTHONPATH"]), runstate.__file__
ARGS = json.loads(os.environ.get("TEST_ARGS", "{}"))

def emit(**fields):
    print(json.dumps(fields), flush=True)
"""


class ClientError(AssertionError):
    pass


class Clients:
    """Runs official-client scripts against one server; `get`/`post` reach its space directly."""

    def __init__(self, sdk: Path, server: ServerProcess) -> None:
        self.sdk = sdk
        self.server = server
        self.http = httpx.Client(
            base_url=f"{server.base_url}/v1/spaces/{server.space_id}",
            headers={"authorization": f"Bearer {server.api_key}"},
            timeout=30,
        )

    def post(self, tail: str, body: Any = None) -> httpx.Response:
        return self.http.post(tail, json=body)

    def get(self, tail: str) -> httpx.Response:
        return self.http.get(tail)

    def env(self, args: dict[str, Any]) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(self.sdk),
            "PYTHONNOUSERSITE": "1",
            "PYTHONUNBUFFERED": "1",
            "RUNSTATE_BASE_URL": self.server.base_url,
            "RUNSTATE_API_KEY": self.server.api_key,
            "RUNSTATE_SPACE_ID": self.server.space_id,
            "TEST_ARGS": json.dumps(args),
        }

    def command(self, script: str) -> list[str]:
        return [base_python(), "-c", PRELUDE + textwrap.dedent(script)]

    def run(self, script: str, *, timeout_s: float = 60, **args: Any) -> dict:
        """Run a script to its end; its last JSON line is the result."""
        result = subprocess.run(self.command(script), env=self.env(args), capture_output=True, text=True, timeout=timeout_s)
        if result.returncode != 0:
            raise ClientError(f"client script failed ({result.returncode}):\n{result.stderr[-3000:]}\n{result.stdout[-2000:]}")
        return last_json(result.stdout)

    def start(self, script: str, **args: Any) -> "Background":
        """Start a script in the background (a worker): read its lines as it prints them."""
        process = subprocess.Popen(
            self.command(script), env=self.env(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        return Background(process)


class Background:
    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.lines: list[dict] = []
        self._stderr: list[str] = []
        self._lock = threading.Condition()
        self._eof = False
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            line = line.strip()
            if line.startswith("{"):
                with self._lock:
                    self.lines.append(json.loads(line))
                    self._lock.notify_all()
        with self._lock:
            self._eof = True
            self._lock.notify_all()

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._stderr.append(line)

    def wait_for(self, event: str, timeout_s: float = 30) -> dict:
        """The first line whose `event` field is `event`."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                for line in self.lines:
                    if line.get("event") == event:
                        return line
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._eof:
                    raise ClientError(f"no {event!r} line; got {self.lines}; stderr:\n{''.join(self._stderr)[-3000:]}")
                self._lock.wait(min(remaining, 0.1))

    def finish(self, timeout_s: float = 30) -> dict:
        """Wait for the script to end; its last line is the result."""
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise ClientError(f"the script did not end; lines {self.lines}; stderr:\n{''.join(self._stderr)[-3000:]}")
        with self._lock:
            self._lock.wait_for(lambda: self._eof, timeout=5)
        if self.process.returncode != 0:
            raise ClientError(f"script failed ({self.process.returncode}):\n{''.join(self._stderr)[-3000:]}")
        with self._lock:
            assert self.lines, "the script printed nothing"
            return self.lines[-1]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def last_json(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise ClientError(f"the script printed no JSON:\n{stdout[-2000:]}")
    return json.loads(lines[-1])


@pytest.fixture
def clients(official_client: Path, module_server: ServerProcess):
    clients = Clients(official_client, module_server)
    yield clients
    clients.http.close()
