"""Ports for processes that must be told theirs before they start.

An etcd member and a node of a cluster advertise their URL, so they cannot listen on port 0 and
say afterwards where they are (a `runstate serve` alone can: `servers.ServerProcess` reads the
port from the line it prints). A port found free by binding port 0 and closing it comes from the
system's ephemeral range, where every outgoing connection and every listener on port 0 of every
process also takes its port: with two pytest workers starting servers and opening connections,
one of them can take it before the process it was meant for binds it.

`free_port()` hands out ports from below that range instead, where the system gives nothing on its
own, each pytest worker from its own share (`PYTEST_XDIST_WORKER`), one after the other from a
place drawn at random (another run beside this one starts elsewhere), never the same twice in a
process, and only ports nothing holds at the moment (a bind is tried).
"""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Iterator

# Ports a system etcd may hold: never ours.
RESERVED_PORTS = frozenset({2379, 2380})
# The lowest port handed out; the share of each worker ends below the ephemeral range.
LOWEST = 10_000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as text:
            return int(text.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def _share() -> range | None:
    """This process's ports: its worker's part of [LOWEST, the ephemeral range), or None when the
    ephemeral range leaves no room below it."""
    top = _ephemeral_low()
    if top - LOWEST < 1_000:
        return None
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    index = int(worker) % count if worker.isdigit() else 0
    size = (top - LOWEST) // count
    start = LOWEST + size * index
    return range(start, start + size)


def _candidates() -> Iterator[int]:
    share = _share()
    if share is None:
        while True:
            yield _bound_by_the_system()
    first = random.randrange(len(share))
    for step in range(len(share)):
        yield share[(first + step) % len(share)]
    while True:  # the share used up (tens of thousands of processes started): the system's choice
        yield _bound_by_the_system()


def _bound_by_the_system() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _free_now(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


_ports = _candidates()


def free_port() -> int:
    """A port nothing listens on now and that this process has not handed out before."""
    for port in _ports:
        if port not in RESERVED_PORTS and _free_now(port):
            return port
    raise AssertionError("unreachable: the candidates never end")
