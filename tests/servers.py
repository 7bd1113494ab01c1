"""Real server processes and the official client, for end-to-end and compatibility tests.

`ServerProcess` runs `runstate serve --port 0` as a subprocess on 127.0.0.1 and learns its port
from the line it prints. `official_client_dir()` installs the official `runstate-sdk==0.2.0` into
an isolated folder (never into our venv: it imports as `runstate` too), and `run_official()` runs a
script with it under the base interpreter, so our own package cannot shadow it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

OFFICIAL_SDK = "runstate-sdk==0.2.0"
OFFICIAL_SDK_030 = "runstate-sdk==0.3.0"
SERVING = re.compile(r"runstate: serving on (https?://\S+)")
START_TIMEOUT_S = 30


class ServerProcess:
    """`runstate serve` in a subprocess; use as a context manager or call start()/stop()."""

    def __init__(
        self, *args: str, api_key: str = "e2e-key", space_id: str = "default", env: dict[str, str] | None = None,
        ca_bundle: str | None = None,
    ) -> None:
        self.args = list(args)
        # 0: any free port. `restart()` sets it to the one in use, so clients keep their URL.
        self.port = 0
        # An https server's certificate is checked against this PEM file (a self-signed one).
        self.ca_bundle = ca_bundle
        self.api_key = api_key
        self.space_id = space_id
        self.extra_env = env or {}
        self.base_url = ""
        self.lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        # How long the last start took, until /healthz said 200 (a loaded machine's starts are slow:
        # tests that outlast a restart within a lease size the lease by it).
        self.started_in_s = 0.0
        # Where it listens, and what runs it (`["ip", "netns", "exec", NS]`: inside a network namespace).
        self.host = "127.0.0.1"
        self.prefix: list[str] = []

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"RUNSTATE_SERVER_API_KEY": self.api_key, "RUNSTATE_SERVER_SPACE_ID": self.space_id, "PYTHONUNBUFFERED": "1"})
        env.update(self.extra_env)
        return env

    def start(self) -> "ServerProcess":
        command = [*self.prefix, sys.executable, "-m", "runstate.server.cli", "serve", "--host", self.host, "--port", str(self.port), *self.args]
        self.lines = []
        self.base_url = ""  # (told again by this start)
        began = time.monotonic()
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env())
        found = threading.Event()

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
                match = SERVING.search(line)
                if match and not found.is_set():
                    self.base_url = match.group(1)
                    found.set()
            found.set()  # it exited: said at once, not after the whole start timeout

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        if not found.wait(START_TIMEOUT_S) or not self.base_url:
            self.kill()
            raise RuntimeError("server did not start:\n" + "\n".join(self.lines))
        self.wait_healthy()
        self.started_in_s = time.monotonic() - began
        return self

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.base_url + "/healthz", timeout=2, verify=self.verify()).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("server not healthy:\n" + "\n".join(self.lines))

    def verify(self) -> Any:
        import ssl

        return True if self.ca_bundle is None else ssl.create_default_context(cafile=self.ca_bundle)

    def client(self, api_key: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url, headers={"authorization": f"Bearer {api_key or self.api_key}"}, timeout=10, verify=self.verify()
        )

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._reader is not None:
            self._reader.join(5)
        return self.proc.returncode

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self) -> "ServerProcess":
        """Start again (after `kill()` or `stop()`) on the same port, with the same arguments: a
        server that keeps `--data-dir` comes back with its state, where its clients expect it."""
        self.port = int(self.base_url.rsplit(":", 1)[1])
        return self.start()

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def base_python() -> str:
    """The interpreter our venv was made from: it has no `runstate` of ours installed."""
    return getattr(sys, "_base_executable", None) or sys.executable


def official_client_dir(cache_dir: Path, requirement: str = OFFICIAL_SDK) -> Path:
    """A folder holding an official client (`runstate-sdk==X`) and its dependencies, installed once."""
    target = cache_dir / requirement.replace("==", "-")
    done = target / ".installed"
    # Test processes running side by side (pytest -n) install it once: the others wait on the lock.
    with open(cache_dir / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target", str(target), requirement],
                check=True,
            )
            done.write_text(requirement)
    return target


def run_official(client_dir: Path, server: ServerProcess, script: str, *, timeout_s: float = 120, env: dict[str, str] | None = None) -> Any:
    """Run `script` with the official client against `server`; it prints one JSON document last."""
    preamble = (
        "import runstate, os\n"
        f"assert runstate.__file__.startswith({str(client_dir)!r}), runstate.__file__\n"
    )
    full_env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(client_dir),
        "RUNSTATE_API_KEY": server.api_key,
        "RUNSTATE_SPACE_ID": server.space_id,
        "RUNSTATE_BASE_URL": server.base_url,
        **(env or {}),
    }
    done = subprocess.run([base_python(), "-c", preamble + script], capture_output=True, text=True, env=full_env, timeout=timeout_s)
    if done.returncode != 0:
        raise AssertionError(f"official client script failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])
