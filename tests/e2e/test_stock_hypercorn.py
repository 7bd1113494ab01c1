"""The server's ASGI application under stock hypercorn: the official 0.2.0 client's claims subset passes.

`runstate serve` serves the application on connections of its own; the application itself stays a
plain ASGI application that any ASGI server can serve (`hypercorn --worker-class trio
runstate.server.asgi:app`, configured from the environment as `runstate serve` is). This runs the
official client's scopes-and-claims script (`tests/compat/test_official_claims.py`) against it and
holds the outcome to the same checks.
"""

from __future__ import annotations

import inspect
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import orjson
import pytest

from ..compat import test_official_claims as claims
from ..servers import run_official

pytestmark = [pytest.mark.e2e, pytest.mark.compat]

KEY = "stock-hypercorn-key"
# What hypercorn logs once it listens: the port it bound (`--bind 127.0.0.1:0`) is learnt from it.
RUNNING = re.compile(r"Running on (http://\S+)")


class HypercornProcess:
    """`hypercorn runstate.server.asgi:app` on a free port of 127.0.0.1 (what `run_official` needs of a server),
    the one it bound and logged: a port chosen here could be taken by another process before it binds."""

    def __init__(self) -> None:
        self.api_key = KEY
        self.space_id = "default"
        self.base_url = ""  # told by hypercorn's log (`_read`)
        env = {"RUNSTATE_SERVER_API_KEY": KEY, "RUNSTATE_SERVER_SPACE_ID": "default", "PYTHONUNBUFFERED": "1",
               "PATH": "", "RUNSTATE_LOG_LEVEL": "info"}
        command = [sys.executable, "-m", "hypercorn", "--worker-class", "trio", "--bind", "127.0.0.1:0",
                   "runstate.server.asgi:app"]
        self.lines: list[str] = []
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            match = RUNNING.search(line)
            if match and not self.base_url:
                self.base_url = match.group(1)

    def wait_healthy(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if self.base_url and httpx.get(self.base_url + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError("hypercorn did not serve the app:\n" + "\n".join(self.lines))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        return self.proc.returncode


@pytest.fixture(scope="module")
def hypercorn_server():
    server = HypercornProcess()
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


def test_the_official_clients_claims_subset_passes_under_stock_hypercorn(official_client: Path, hypercorn_server: HypercornProcess):
    outcome = run_official(official_client, hypercorn_server, claims.SCRIPT)  # type: ignore[arg-type]
    checks = [function for name, function in inspect.getmembers(claims, inspect.isfunction)
              if name.startswith("test_") and list(inspect.signature(function).parameters) == ["outcome"]]
    assert len(checks) >= 8
    for check in checks:
        check(outcome)
    assert not [line for line in hypercorn_server.lines if "Traceback" in line], hypercorn_server.lines


def test_a_long_poll_under_stock_hypercorn_is_withdrawn_when_its_client_goes(hypercorn_server: HypercornProcess):
    """Without our connection's hang-up watcher, the application reads `http.disconnect` itself:
    a receive whose client leaves is withdrawn, and the message goes to the next receive."""
    with httpx.Client(base_url=hypercorn_server.base_url, headers={"authorization": f"Bearer {KEY}"}, timeout=10) as http:
        run = http.post("/v1/spaces/default/scopes", json={}).json()["id"]
        box = http.post("/v1/spaces/default/mailboxes", json={"name": "left"}).json()["id"]
        body = {"scopeId": run, "holder": "gone", "holderSession": "s", "waitMs": 20_000}
        with pytest.raises(httpx.ReadTimeout):
            http.post(f"/v1/spaces/default/mailboxes/{box}/recv", json=body, timeout=1)
        deadline = time.monotonic() + 5
        while http.get("/v1/spaces/default/ops/waits").json()["waits"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert http.get("/v1/spaces/default/ops/waits").json()["waits"] == []
        assert http.post(f"/v1/spaces/default/mailboxes/{box}/messages", json={"scopeId": run, "payload": {"n": 1}}).status_code == 201
        got = http.post(f"/v1/spaces/default/mailboxes/{box}/recv", json={**body, "holder": "here", "waitMs": 0})
        assert got.status_code == 200 and got.json()["message"]["payload"] == {"n": 1}


def test_the_servers_own_lines_are_logged_under_stock_hypercorn(hypercorn_server: HypercornProcess):
    """The ready line, in the format the settings ask for (JSON here), beside hypercorn's own lines
    once each; without a handler of ours Python dropped everything below a warning."""
    events = [orjson.loads(line).get("event") for line in hypercorn_server.lines if line.startswith("{")]
    assert "ready" in events, hypercorn_server.lines
    assert sum(1 for line in hypercorn_server.lines if RUNNING.search(line)) == 1, hypercorn_server.lines
