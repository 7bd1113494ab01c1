"""`runstate serve` as a real process on 127.0.0.1 and a random port."""

from __future__ import annotations

import re
import subprocess
import sys

import httpx
import pytest

from ..servers import ServerProcess

pytestmark = pytest.mark.e2e


def test_serves_health_and_a_claim_cycle_over_real_http(server):
    """Health is 200 without a key; a claim whose key has a slash and a space is acquired, renewed, released."""
    assert server.base_url.startswith("http://127.0.0.1:")
    assert httpx.get(server.base_url + "/healthz").json() == {"status": "ok"}
    with server.client() as http:
        run = http.post("/v1/spaces/default/scopes", json={"name": "e2e"}).json()
        lease = http.post(
            "/v1/spaces/default/claims",
            json={"key": "file/a b%", "scopeId": run["id"], "holder": "h", "holderSession": "s", "leaseSeconds": 30},
        ).json()
        assert lease["generation"] == 1 and lease["key"] == "file/a b%"
        encoded = "file%2Fa%20b%25"
        renewed = http.post(f"/v1/spaces/default/claims/{encoded}/renew", json={"token": lease["token"], "leaseSeconds": 60})
        assert renewed.status_code == 200 and renewed.json()["leaseSeconds"] == 60
        released = http.post(f"/v1/spaces/default/claims/{encoded}/release", json={"token": lease["token"]})
        assert released.status_code == 200
        stale = http.post(f"/v1/spaces/default/claims/{encoded}/renew", json={"token": lease["token"]})
        assert stale.status_code == 409 and stale.json()["error"]["code"] == "STALE_CLAIM"
        assert stale.headers["content-type"] == "application/json"


def test_without_a_configured_key_one_is_made_and_printed_once():
    """With no RUNSTATE_SERVER_API_KEY the server prints a new key once; that key works, others do not."""
    process = ServerProcess(env={"RUNSTATE_SERVER_API_KEY": ""}).start()
    try:
        output = "\n".join(process.lines)
        keys = re.findall(r"RUNSTATE_API_KEY=(rs_[A-Za-z0-9_-]+)", output)
        assert len(keys) == 1
        assert "RUNSTATE_SPACE_ID=default" in output
        with process.client(api_key=keys[0]) as http:
            assert http.post("/v1/spaces/default/scopes", json={}).status_code == 201
        with process.client(api_key="e2e-key") as http:
            assert http.post("/v1/spaces/default/scopes", json={}).status_code == 401
    finally:
        process.stop()


def test_serving_on_and_the_exports_come_last_after_ready_set_apart(tmp_path):
    """`serving on` came before the recovery and the `ready` line, and the lines to export sat
    between JSON log lines: now both come after `ready`, in a block of their own."""
    process = ServerProcess("--data-dir", str(tmp_path / "data"), env={"RUNSTATE_SERVER_API_KEY": ""}).start()
    try:
        lines = process.lines
        ready = next(i for i, line in enumerate(lines) if '"event":"ready"' in line)
        recovery = next(i for i, line in enumerate(lines) if '"event":"recovery"' in line)
        serving = next(i for i, line in enumerate(lines) if line.startswith("runstate: serving on "))
        export = next(i for i, line in enumerate(lines) if line.strip().startswith("export RUNSTATE_API_KEY="))
        assert recovery < ready < serving < export
        assert lines[serving - 1] == "" and lines[export - 1] == "" and lines[export + 1] == ""
        assert f"RUNSTATE_BASE_URL={process.base_url}" in lines[export]  # the real port, not 0
        block = lines[serving:export + 1]
        assert not any(line.startswith("{") for line in block)  # no log line inside it
    finally:
        process.stop()


def test_many_requests_on_one_keep_alive_connection(server):
    """One connection carries hundreds of requests, errors included, and stays usable."""
    with server.client() as http:
        run = http.post("/v1/spaces/default/scopes", json={}).json()
        for n in range(200):
            body = {"key": f"k{n % 7}", "scopeId": run["id"], "holder": "h", "holderSession": "s"}
            answer = http.post("/v1/spaces/default/claims", json=body)
            if answer.status_code == 200:
                http.post(f"/v1/spaces/default/claims/k{n % 7}/release", json={"token": answer.json()["token"]})
            assert answer.status_code in (200, 409)
            assert http.post("/v1/spaces/default/claims", content=b"{broken").status_code == 400
        assert httpx.get(server.base_url + "/healthz").status_code == 200


def test_the_command_explains_itself():
    """`runstate serve --help` shows the options and examples."""
    done = subprocess.run([sys.executable, "-m", "runstate.server.cli", "serve", "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    for text in ("--host", "--port", "--data-dir", "--fsync", "examples:"):
        assert text in done.stdout


def test_a_key_made_once_ready_is_said_when_it_is_made(capsys):
    """A node of a cluster is ready before it leads the keys' partition, where it makes the key:
    the key's lines come when it is made, after `serving on`, not never."""
    from runstate.server.cli import _Announcements

    said = _Announcements()
    said.ready(["http://127.0.0.1:8080"])
    assert "serving on http://127.0.0.1:8080" in capsys.readouterr().out
    said.new_key("rs_made_later", "default")
    later = capsys.readouterr().out
    assert "export RUNSTATE_API_KEY=rs_made_later RUNSTATE_SPACE_ID=default RUNSTATE_BASE_URL=http://127.0.0.1:8080" in later
    assert "serving on" not in later
