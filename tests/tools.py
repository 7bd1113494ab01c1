"""Command-line tools a test needs (a shell, promtool): found, or installed from Debian when the
tests run as root, as `make test` on a fresh machine does; otherwise the test is skipped, except
in CI (`CI=true`), where a missing tool fails it."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

__all__ = ["require_tool"]

INSTALL_TIMEOUT_S = 600


def _install(package: str) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (["apt-get", "install", "-y", "-q", "--no-install-recommends", package], ["apt-get", "update", "-q"],
                    ["apt-get", "install", "-y", "-q", "--no-install-recommends", package]):
        try:
            subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=INSTALL_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return
        if command[1] == "install" and shutil.which(package):
            return


def require_tool(name: str, package: str) -> str:
    """The path of `name`: found, or installed from the Debian `package` when running as root."""
    path = shutil.which(name)
    if path is None and os.geteuid() == 0 and shutil.which("apt-get"):
        _install(package)
        path = shutil.which(name)
    if path is None:
        message = f"{name} not found: install it with `sudo apt-get install -y {package}`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
