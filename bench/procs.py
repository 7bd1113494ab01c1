"""Processes the bench starts: servers, redis-server, load generators, profilers.

Every process goes through `Processes`, which stops all of them on the way out, whatever happens
(an exception, Ctrl-C, SIGTERM), and each child is asked by the kernel to die with the bench
(PR_SET_PDEATHSIG) if the bench itself is killed. Everything listens on 127.0.0.1 only.

On a machine with two cores or more, servers run on the last core and the load generators (the
bench process itself, wrk) on the first, so a load generator never competes with the server it
measures. `CPU_SERVER` and `CPU_LOAD` say which.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
START_TIMEOUT_S = 30

_CPUS = sorted(os.sched_getaffinity(0))
CPU_LOAD = _CPUS[0]
CPU_SERVER = _CPUS[-1]
PINNED = len(_CPUS) >= 2

_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def pin_self(cpu: int = CPU_LOAD) -> None:
    """Run this process (and the threads it starts from now on) on one core."""
    if PINNED:
        os.sched_setaffinity(0, {cpu})


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def rss_bytes(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A child process with its output collected line by line."""

    def __init__(self, name: str, popen: subprocess.Popen[str]) -> None:
        self.name = name
        self.popen = popen
        self.lines: list[str] = []
        self._found: dict[str, str] = {}
        self._event = threading.Event()
        self._pattern: re.Pattern[str] | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            line = line.rstrip("\n")
            if len(self.lines) < 2000:
                self.lines.append(line)
            if self._pattern is not None and not self._event.is_set():
                match = self._pattern.search(line)
                if match:
                    self._found["match"] = match.group(1)
                    self._event.set()

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """The first group of the first output line that matched the `pattern` given at start."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._event.wait(0.05):
                return self._found["match"]
            if self.popen.poll() is not None:
                time.sleep(0.1)  # let the reader catch the last lines
                break
        tail = "\n".join(self.lines[-30:])
        raise RuntimeError(f"{self.name} did not print {self._pattern!r} (exit {self.popen.poll()}):\n{tail}")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def send(self, line: str) -> None:
        """One line to the process's stdin (started with `stdin=True`)."""
        assert self.popen.stdin is not None, f"{self.name} was started without stdin"
        self.popen.stdin.write(line + "\n")
        self.popen.stdin.flush()

    def stop(self, timeout_s: float = 10) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self._reader.join(2)


class Processes:
    """Starts children and guarantees they are stopped: use as a context manager."""

    def __init__(self) -> None:
        self.procs: list[Proc] = []
        self._old_handlers: dict[int, Any] = {}

    def __enter__(self) -> "Processes":
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_all()
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)

    @staticmethod
    def _on_signal(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    def start(
        self,
        name: str,
        command: Sequence[str],
        *,
        cpu: int | None = None,
        env: dict[str, str] | None = None,
        pattern: str | None = None,
        cwd: Path | None = None,
        stdin: bool = False,
    ) -> Proc:
        """Start `command`; with `stdin`, `Proc.send()` writes lines to it (else it reads nothing)."""
        full_env = dict(os.environ)
        full_env["PYTHONUNBUFFERED"] = "1"
        full_env.update(env or {})
        popen = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            text=True,
            env=full_env,
            cwd=str(cwd or ROOT),
            preexec_fn=_die_with_parent,
        )
        proc = Proc(name, popen)
        proc._pattern = re.compile(pattern) if pattern else None
        self.procs.append(proc)
        if cpu is not None and PINNED:
            try:
                os.sched_setaffinity(popen.pid, {cpu})
            except OSError:
                pass
        proc._reader.start()
        return proc

    def stop(self, proc: Proc) -> None:
        proc.stop()
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        while self.procs:
            self.procs.pop().stop()


def python() -> str:
    return sys.executable


def find_tool(name: str, package: str) -> str | None:
    """The path of `name`, installing the Debian `package` when we are root and it is missing."""
    path = shutil.which(name)
    if path:
        return path
    if os.environ.get("BENCH_NO_INSTALL") or os.geteuid() != 0 or not shutil.which("apt-get"):
        return None
    print(f"bench: {name} not found; installing the Debian package {package} ...", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (["apt-get", "install", "-y", "-q", package], ["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", package]):
        try:
            subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, check=False)
        except subprocess.TimeoutExpired:
            return None
        path = shutil.which(name)
        if path:
            return path
    return None


def missing_tool_message(name: str, package: str) -> str:
    return f"{name} not found: install it with `sudo apt-get install -y {package}` (Debian/Ubuntu) and run again"
