"""The official client `runstate-sdk==0.2.0` against a real server process.

- `official_sdk`: the client installed once with `pip install --target` into pytest's cache folder
  (never into the virtualenv: it also imports as `runstate`). Skips when it cannot be installed.
- `server_process`: `runstate serve --port 0` in a subprocess, with `RUNSTATE_API_KEY` and
  `RUNSTATE_SPACE_ID` set; the port comes from its `runstate: serving on ...` line.
- `Clients.run(script)`: a client script in its own interpreter, started with `-S` and
  `PYTHONPATH` set to the installed client, so it sees only the official package and the standard
  library (not our SDK, which an editable install would otherwise put first). A script reports
  by printing JSON lines; the last one is its result.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

SDK_REQUIREMENT = "runstate-sdk==0.2.0"
API_KEY = "rs_compat_key"
SPACE = "default"
SERVER_START_S = 30

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


@pytest.fixture(scope="session")
def official_sdk(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = getattr(request.config, "cache", None)
    folder = cache.mkdir("runstate-sdk-0.2.0") if cache is not None else tmp_path_factory.mktemp("runstate-sdk")
    marker = folder / ".installed"
    if not marker.exists():
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input",
             "--target", str(folder), "--upgrade", SDK_REQUIREMENT],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0:
            pytest.skip(f"cannot install {SDK_REQUIREMENT}: {result.stderr.strip()[-400:]}")
        marker.write_text(SDK_REQUIREMENT)
    return folder


class ServerProcess:
    def __init__(self, process: subprocess.Popen, base_url: str) -> None:
        self.process = process
        self.base_url = base_url
        self.log: list[str] = []
        self.http = httpx.Client(base_url=f"{base_url}/v1/spaces/{SPACE}", headers={"authorization": f"Bearer {API_KEY}"}, timeout=30)

    def drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.log.append(line.rstrip())

    def post(self, tail: str, body: Any = None) -> httpx.Response:
        return self.http.post(tail, json=body)

    def get(self, tail: str) -> httpx.Response:
        return self.http.get(tail)

    def stop(self) -> None:
        self.http.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_server(env_extra: dict[str, str] | None = None) -> ServerProcess:
    env = {**os.environ, "RUNSTATE_API_KEY": API_KEY, "RUNSTATE_SPACE_ID": SPACE, **(env_extra or {})}
    process = subprocess.Popen(
        [sys.executable, "-m", "runstate.server.cli", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + SERVER_START_S
    seen = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line.rstrip())
        match = re.search(r"runstate: serving on (http://\S+)", line)
        if match:
            server = ServerProcess(process, match.group(1))
            server.log.extend(seen)
            threading.Thread(target=server.drain, daemon=True).start()
            return server
    process.kill()
    raise RuntimeError("the server did not start:\n" + "\n".join(seen))


@pytest.fixture(scope="session")
def server_process() -> ServerProcess:
    server = start_server()
    yield server
    server.stop()


class ClientError(AssertionError):
    pass


class Clients:
    """Runs official-client scripts against one server."""

    def __init__(self, sdk: Path, server: ServerProcess) -> None:
        self.sdk = sdk
        self.server = server

    def env(self, args: dict[str, Any]) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(self.sdk),
            "PYTHONNOUSERSITE": "1",
            "PYTHONUNBUFFERED": "1",
            "RUNSTATE_BASE_URL": self.server.base_url,
            "RUNSTATE_API_KEY": API_KEY,
            "RUNSTATE_SPACE_ID": SPACE,
            "TEST_ARGS": json.dumps(args),
        }

    def command(self, script: str) -> list[str]:
        return [sys.executable, "-S", "-c", PRELUDE + textwrap.dedent(script)]

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
def clients(official_sdk: Path, server_process: ServerProcess) -> Clients:
    return Clients(official_sdk, server_process)
