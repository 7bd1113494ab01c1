"""TLS served by the server itself (`--certfile`/`--keyfile`), with a self-signed certificate this
test makes: the SDK and the command trust it through a CA bundle and nothing else does; plain
HTTP on the TLS port gets nowhere; a certificate without its key, or a wrong pair, stops the start."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

import runstate
from runstate.errors import UnavailableError

from ..servers import ServerProcess
from ..tools import require_tool

pytestmark = pytest.mark.e2e


def self_signed(folder, name: str = "server") -> tuple[str, str]:
    """A certificate for 127.0.0.1 and localhost, signed by its own key: (certfile, keyfile)."""
    openssl = require_tool("openssl", "openssl")
    cert, key = str(folder / f"{name}.pem"), str(folder / f"{name}.key")
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
         "-subj", "/CN=runstate test", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", key, "-out", cert],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    cert, key = self_signed(tmp_path_factory.mktemp("tls"))
    with ServerProcess("--certfile", cert, "--keyfile", key, ca_bundle=cert, env={"RUNSTATE_ADMIN_KEY": "tls-admin-key-0123456789"}) as server:
        yield server, cert


def test_the_server_speaks_https_and_the_sdk_trusts_it_through_a_ca_bundle(tls):
    server, cert = tls
    assert server.base_url.startswith("https://127.0.0.1:")
    with runstate.Runstate(api_key=server.api_key, space_id=server.space_id, base_url=server.base_url, ca_bundle=cert) as rs:
        run = rs.scopes.create(name="over-tls")
        lease = run.claim("k").acquire()
        lease.release()
        assert run.status()["storedState"] == "ACTIVE"


def test_the_ca_bundle_comes_from_the_environment_too(tls, monkeypatch):
    server, cert = tls
    monkeypatch.setenv("RUNSTATE_CA_BUNDLE", cert)
    with runstate.Runstate(api_key=server.api_key, space_id=server.space_id, base_url=server.base_url) as rs:
        assert rs.scopes.create().id.startswith("sc_")


def test_without_the_bundle_the_certificate_is_not_trusted(tls):
    server, _ = tls
    with runstate.Runstate(api_key=server.api_key, space_id=server.space_id, base_url=server.base_url, retries=0) as rs:
        with pytest.raises(UnavailableError) as caught:
            rs.scopes.create()
    assert "CERTIFICATE_VERIFY_FAILED" in repr(caught.value.__cause__) or "certificate" in str(caught.value).lower()


def test_plain_http_on_the_tls_port_gets_no_answer(tls):
    server, _ = tls
    plain = server.base_url.replace("https://", "http://")
    with pytest.raises(httpx.HTTPError):
        httpx.get(plain + "/healthz", timeout=5)
    # ... and the server goes on serving https.
    assert httpx.get(server.base_url + "/healthz", timeout=5, verify=server.verify()).status_code == 200


def test_the_command_trusts_the_bundle_given_in_the_environment(tls):
    server, cert = tls
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTATE_")}
    environ.update({"RUNSTATE_BASE_URL": server.base_url, "RUNSTATE_ADMIN_KEY": "tls-admin-key-0123456789"})
    command = [sys.executable, "-m", "runstate.server.cli", "spaces", "--json"]
    untrusted = subprocess.run(command, capture_output=True, text=True, env=environ, timeout=60)
    assert untrusted.returncode == 1 and "cannot reach" in untrusted.stderr
    trusted = subprocess.run(command, capture_output=True, text=True, env={**environ, "RUNSTATE_CA_BUNDLE": cert}, timeout=60)
    assert trusted.returncode == 0, trusted.stderr
    assert '"default"' in trusted.stdout


def test_a_certificate_without_its_key_or_a_wrong_pair_stops_the_start(tmp_path):
    cert, key = self_signed(tmp_path, "one")
    _, other_key = self_signed(tmp_path, "two")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTATE_")}
    for args, words in ((["--certfile", cert], "needs keyfile too"), (["--certfile", cert, "--keyfile", other_key], "do not load"),
                        (["--certfile", str(tmp_path / "missing.pem"), "--keyfile", key], "not found")):
        done = subprocess.run([sys.executable, "-m", "runstate.server.cli", "config", *args], capture_output=True, text=True,
                              env=environ, timeout=60)
        assert done.returncode == 2 and words in done.stderr, (args, done.stderr)


def test_a_missing_certificate_or_key_file_is_named_with_its_setting(tmp_path):
    """Which of the two files is missing, by its setting and where it came from (ssl itself names neither)."""
    cert, key = self_signed(tmp_path, "one")
    missing = str(tmp_path / "missing.pem")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTATE_")}
    for args, env, message in (
        (["--certfile", missing, "--keyfile", key], {}, f"setting certfile (from --certfile): {missing} not found"),
        (["--certfile", cert], {"RUNSTATE_KEYFILE": missing}, f"setting keyfile (from RUNSTATE_KEYFILE): {missing} not found"),
    ):
        done = subprocess.run([sys.executable, "-m", "runstate.server.cli", "serve", "--port", "0", *args], capture_output=True,
                              text=True, env={**environ, **env}, timeout=60)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip() == f"runstate serve: {message}"
