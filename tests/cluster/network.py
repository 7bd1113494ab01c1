"""A small network of our own for the fault tests: a bridge on this host, and one network namespace
per node, so that one node can be cut off from everything (etcd, the other nodes, its clients)
and joined again, as a switch port that fails would do it.

    with Network.make(3) as net:       # needs root and `ip`/`bridge` (iproute2)
        net.host                       # the bridge's address: etcd listens there
        net.address(1)                 # node 1's address inside its namespace
        net.prefix(1)                  # ["ip", "netns", "exec", NAME]: run a command inside it
        net.cut(1); net.heal(1)

Cutting sets the node's bridge port to `disabled`: every frame to and from it is dropped in
silence (nothing is refused, connections simply hear nothing), which is what a partition looks
like to both sides. `heal` sets it forwarding again. Everything made here is deleted on close,
and names carry a random tag so that runs side by side never meet.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess

__all__ = ["Network", "network_available"]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def network_available() -> str | None:
    """Why namespaces cannot be made here (not root, no iproute2), or None when they can."""
    if os.geteuid() != 0:
        return "cutting a node off the network needs root (network namespaces)"
    if not (shutil.which("ip") and shutil.which("bridge")):
        return "cutting a node off the network needs iproute2 (`apt-get install -y iproute2`)"
    probe = f"rsprobe{secrets.token_hex(2)}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"network namespaces cannot be made here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _free_subnet() -> int:
    """A third octet of 10.231.X.0/24 that no interface of this host uses."""
    used = _ip("-4", "-o", "addr", "show").stdout
    for _ in range(64):
        third = secrets.randbelow(250) + 1
        if f"10.231.{third}." not in used:
            return third
    raise RuntimeError("no free 10.231.X.0/24 subnet for the test network")


class Network:
    def __init__(self, size: int) -> None:
        self.size = size
        self.tag = secrets.token_hex(2)
        self.third = _free_subnet()
        self.bridge = f"rs{self.tag}b"
        self.host = f"10.231.{self.third}.1"
        self.made: list[tuple[str, str]] = []  # what to delete, newest last
        self.cuts = 0

    @classmethod
    def make(cls, size: int) -> "Network":
        net = cls(size)
        try:
            net._build()
        except BaseException:
            net.close()
            raise
        return net

    def namespace(self, index: int) -> str:
        return f"rs{self.tag}n{index}"

    def port(self, index: int) -> str:
        return f"rs{self.tag}{index}h"

    def address(self, index: int) -> str:
        return f"10.231.{self.third}.{10 + index}"

    def prefix(self, index: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(index)]

    def _build(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self.made.append(("link", self.bridge))
        _ip("addr", "add", f"{self.host}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for index in range(self.size):
            namespace, outside, inside = self.namespace(index), self.port(index), f"rs{self.tag}{index}n"
            _ip("netns", "add", namespace)
            self.made.append(("netns", namespace))
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            self.made.append(("link", outside))
            _ip("link", "set", inside, "netns", namespace)
            _ip("link", "set", outside, "master", self.bridge)
            _ip("link", "set", outside, "up")
            _ip("-n", namespace, "addr", "add", f"{self.address(index)}/24", "dev", inside)
            _ip("-n", namespace, "link", "set", inside, "up")
            _ip("-n", namespace, "link", "set", "lo", "up")

    def cut(self, index: int) -> None:
        """Drop every frame to and from node `index` (both ways, in silence)."""
        subprocess.run(["bridge", "link", "set", "dev", self.port(index), "state", "0"], check=True)
        self.cuts += 1

    def heal(self, index: int) -> None:
        subprocess.run(["bridge", "link", "set", "dev", self.port(index), "state", "3"], check=True)

    def close(self) -> None:
        for kind, name in reversed(self.made):
            if kind == "netns":
                _ip("netns", "del", name, check=False)
            else:
                _ip("link", "del", name, check=False)
        self.made = []

    def __enter__(self) -> "Network":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
