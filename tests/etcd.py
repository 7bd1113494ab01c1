"""Real etcd clusters for tests: 1 or 3 members on free ports of 127.0.0.1, in a temporary folder.

Debian's `etcd-server` (3.4.23, `/usr/bin/etcd`) is what runs: `make test` installs it when it is
missing and the run is root. Without it a test that needs etcd is skipped with the command that
installs it, except in CI (`CI=true`), where its absence fails the test. Ports 2379/2380 are never
used (the Debian package may run a system etcd there).

Every member runs with `--pre-vote` (off by default in 3.4) and `--heartbeat-interval 50
--election-timeout 500`, with which a 1 s lease is granted as 1 s (under the default timing it
becomes 2 s) and a lost leader is replaced within about a second.

`EtcdMember` can be killed (SIGKILL), stopped (SIGSTOP), continued (SIGCONT) and restarted on its
data directory; `EtcdCluster.leader()` asks each member which one leads Raft. Use as a context
manager: every process it started is killed on the way out, and its folder removed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from .ports import free_port

ETCD_PATHS = ("/usr/bin/etcd",)
INSTALL = "apt-get install -y --no-install-recommends etcd-server etcd-client"
START_TIMEOUT_S = 20
START_ATTEMPTS = 3
# How long a member sent SIGSTOP may take to stop every thread (milliseconds, even under load).
STOP_TIMEOUT_S = 10
TIMING = ["--heartbeat-interval", "50", "--election-timeout", "500"]


def etcd_binary() -> str:
    """The etcd server to run; skips the test (fails it in CI) when there is none."""
    for path in (*ETCD_PATHS, shutil.which("etcd")):
        if path and os.access(path, os.X_OK):
            return path
    message = f"etcd is not installed: run `{INSTALL}` (as root; `make test` does it for you)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def all_threads_stopped(pid: int) -> bool:
    """Whether every thread of the process is stopped (state T in /proc/<pid>/task/*/stat)."""
    states = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as stat:
                states.append(stat.read().rpartition(")")[2].split()[0])
        except OSError:  # (a thread that ended meanwhile)
            continue
    return bool(states) and all(state == "T" for state in states)


class EtcdMember:
    """One etcd process of a cluster."""

    def __init__(self, binary: str, name: str, root: Path, host: str = "127.0.0.1") -> None:
        self.binary = binary
        self.name = name
        self.host = host
        self.data_dir = root / name
        self.client_url = f"http://{host}:{free_port()}"
        self.peer_url = f"http://{host}:{free_port()}"
        self.log_path = root / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped = False

    def command(self, initial_cluster: str, state: str) -> list[str]:
        return [
            self.binary,
            "--name", self.name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.client_url,
            "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", self.peer_url,
            "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", initial_cluster,
            "--initial-cluster-state", state,
            "--initial-cluster-token", "runstate-tests",
            "--pre-vote",
            *TIMING,
            "--log-level", "warn",
        ]

    def start(self, initial_cluster: str, state: str = "new") -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(initial_cluster, state), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        self.stopped = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash: the data directory stays for a restart."""
        if self.proc is not None and self.proc.poll() is None:
            if self.stopped:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)
        self.stopped = False

    def stop(self) -> None:
        """SIGSTOP: the process holds its sockets and answers nothing until `cont()`. Returns once
        every thread of it is stopped: kill() returns before they are (the kernel stops each
        thread when it next runs), and on a busy machine etcd answered a request sent 1 ms after
        it, up to ~30 ms later."""
        assert self.proc is not None and self.proc.poll() is None, f"{self.name} is not running"
        self.proc.send_signal(signal.SIGSTOP)
        self.stopped = True
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while not all_threads_stopped(self.proc.pid):
            assert time.monotonic() < deadline, f"{self.name} was sent SIGSTOP and is not stopped after {STOP_TIMEOUT_S} s"
            time.sleep(0.001)

    def cont(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, f"{self.name} is not running"
        self.proc.send_signal(signal.SIGCONT)
        self.stopped = False

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def status(self, timeout_s: float = 1.0) -> dict | None:
        """This member's own status document, or None when it does not answer."""
        try:
            response = httpx.post(self.client_url + "/v3/maintenance/status", content=b"{}", timeout=timeout_s)
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None


class EtcdCluster:
    """`size` members started together as a new cluster; `endpoints` are their client URLs.

    `host` is the address the members listen on (127.0.0.1; the fault tests give the address of
    a bridge that nodes in network namespaces reach)."""

    def __init__(self, size: int = 1, *, root: Path | None = None, host: str = "127.0.0.1") -> None:
        if size < 1:
            raise ValueError("a cluster has at least one member")
        binary = etcd_binary()
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="etcd-")) if root is None else root
        self.members = [EtcdMember(binary, f"m{i}", self.root, host) for i in range(size)]
        self.initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    @property
    def endpoints(self) -> list[str]:
        return [m.client_url for m in self.members]

    def start(self) -> EtcdCluster:
        # A free port is only free until someone else binds it: if a member lost that race, start
        # the whole cluster again on new ports.
        for attempt in range(START_ATTEMPTS):
            for member in self.members:
                member.start(self.initial_cluster)
            try:
                self.wait_healthy()
                return self
            except RuntimeError:
                if attempt + 1 == START_ATTEMPTS or not any("address already in use" in m.log_tail() for m in self.members):
                    raise
            for member in self.members:
                member.kill()
                shutil.rmtree(member.data_dir, ignore_errors=True)
                member.client_url = f"http://{member.host}:{free_port()}"
                member.peer_url = f"http://{member.host}:{free_port()}"
            self.initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        raise AssertionError("unreachable")

    def restart(self, member: EtcdMember) -> None:
        """Start a killed member again on its data directory and wait until the cluster is whole."""
        member.kill()
        member.start(self.initial_cluster, state="existing")
        self.wait_healthy()

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> EtcdMember:
        """Wait until every running member answers and agrees on one leader; returns the leader."""
        deadline = time.monotonic() + timeout_s
        while True:
            leader = self.leader()
            running = [m for m in self.members if m.alive and not m.stopped]
            if leader is not None and all(self._follows(m, leader) for m in running):
                return leader
            for member in self.members:
                if member.proc is not None and member.proc.poll() is not None and member.proc.returncode not in (None, -9):
                    raise RuntimeError(f"etcd member {member.name} exited with {member.proc.returncode}:\n{member.log_tail()}")
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {m.name}\n{m.log_tail()}" for m in self.members)
                raise RuntimeError(f"the etcd cluster did not become healthy in {timeout_s} s:\n{tails}")
            time.sleep(0.05)

    def leader(self) -> EtcdMember | None:
        """The member that leads Raft, as the running members see it (None while they disagree or
        have no leader)."""
        seen: set[int] = set()
        ids: dict[int, EtcdMember] = {}
        for member in self.members:
            if not member.alive or member.stopped:
                continue
            status = member.status()
            if status is None:
                return None
            ids[int(status["header"]["member_id"])] = member
            seen.add(int(status.get("leader", 0)))
        if len(seen) != 1:
            return None
        (leader_id,) = seen
        return ids.get(leader_id)

    def _follows(self, member: EtcdMember, leader: EtcdMember) -> bool:
        status = member.status()
        leader_status = leader.status()
        return status is not None and leader_status is not None and status.get("leader") == leader_status["header"]["member_id"]

    def close(self) -> None:
        for member in self.members:
            member.kill()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> EtcdCluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()
