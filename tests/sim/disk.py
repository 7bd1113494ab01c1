"""A disk that can lose power: what a crash keeps is what was made durable, and nothing else.

The journal and the snapshots write real files (in a temporary folder) through a `Disk`, exactly
as the server does; `SimDisk` is that `Disk` with a memory of what a power cut would keep:

- a file's *content* is durable as of its last `fsync` (bytes written since are in the page cache);
- a *name* in a folder (a create, a rename, a delete) is durable as of the last `fsync_dir` of
  that folder.

`SimFs.power_cut()` rewrites the tracked folders to exactly that: every name that was durable,
with the content of its last fsync. Optionally (`tear`), a file whose unsynced bytes extend its
durable content keeps a random prefix of them, as a disk that wrote part of a batch's sectors
before the power went: recovery must then find and truncate a torn final record. `SimFs.kill()`
is a killed process instead: the operating system keeps everything written, names included.

Each server incarnation gets its own `SimDisk` view. A power cut or a kill closes the view's
files and marks it dead: the old incarnation's cleanup code (which runs while its tasks are
cancelled) can then change nothing on disk, as a dead machine could not.

`SimFs.tear_next_write` crashes *inside* the next WAL write: a random prefix of the batch reaches
the page cache, the power goes (with tearing), and the write raises `OSError` like a dying disk.
"""

from __future__ import annotations

import os
import random
from typing import Any, Callable

import trio

from runstate.snapshots.disk import Disk

__all__ = ["SimFs", "SimDisk", "IO_LATENCY_MAX_S"]

# The longest a simulated write, fsync or read of the store waits for the disk.
IO_LATENCY_MAX_S = 0.003


class SimFs:
    def __init__(self, folders: list[str], rng: random.Random) -> None:
        self.folders = [os.path.abspath(folder) for folder in folders]
        self.rng = rng
        self.latency = random.Random(rng.random())  # its own stream: drawing it changes no other draw
        self._inodes = 0
        self.live: dict[str, int] = {}  # path -> inode, as the operating system sees it now
        self.durable_names: dict[str, int] = {}  # path -> inode, as of each folder's last fsync
        self.content: dict[int, bytes] = {}  # inode -> content as of its last fsync
        self.tear_next_write = False
        # While set, every write, create and fsync of a file under this folder fails (one
        # partition's disk going bad while the others' work): `SimDisk._failing`.
        self.failing_under: str | None = None
        self.disk_faults = 0
        self.on_power_cut: Callable[[], None] | None = None
        self.current: SimDisk | None = None
        self.power_cuts = 0
        self.torn_files = 0
        self.kills = 0
        for folder in self.folders:
            os.makedirs(folder, exist_ok=True)

    async def run_blocking(self, function: Callable[..., Any], *args: Any) -> Any:
        """The store's blocking IO, run inline after a latency drawn for it (0 to 3 ms of virtual
        time), as a worker thread's IO lets the event loop run meanwhile: other turns go on while a
        batch waits for the disk, and a crash can come between a change's append and its write."""
        await trio.sleep(self.latency.uniform(0.0, IO_LATENCY_MAX_S))
        return function(*args)

    def disk(self) -> "SimDisk":
        """A fresh view for a new incarnation (the previous one must be dead)."""
        assert self.current is None or self.current.dead
        self.current = SimDisk(self)
        return self.current

    def new_inode(self) -> int:
        self._inodes += 1
        return self._inodes

    # -- crashes ------------------------------------------------------------------------------

    def kill(self) -> None:
        """A killed process: its files close, everything it wrote stays (the page cache survives)."""
        self.kills += 1
        if self.current is not None:
            self.current.die()

    def power_cut(self, *, tear: bool) -> None:
        """Rewrite every tracked folder to what was durable (plus torn prefixes when `tear`)."""
        self.power_cuts += 1
        unsynced = self._unsynced() if tear else {}
        if self.current is not None:
            self.current.die()
        for folder in self.folders:
            for name in os.listdir(folder):
                os.remove(os.path.join(folder, name))
        for path, inode in sorted(self.durable_names.items()):
            data = self.content.get(inode, b"")
            extra = unsynced.get(inode)
            if extra and self.rng.random() < 0.7:
                cut = self.rng.randint(0, len(extra))
                if cut:
                    self.torn_files += 1
                    data += extra[:cut]
            with open(path, "wb") as file:
                file.write(data)
            self.content[inode] = data  # what survived is on the platter now: durable
        self.live = dict(self.durable_names)

    def _unsynced(self) -> dict[int, bytes]:
        """For each live file, the bytes it holds past its durable content (appends not synced)."""
        unsynced: dict[int, bytes] = {}
        for path, inode in self.live.items():
            try:
                with open(path, "rb") as file:
                    data = file.read()
            except FileNotFoundError:
                continue
            durable = self.content.get(inode, b"")
            if len(data) > len(durable) and data.startswith(durable):
                unsynced[inode] = data[len(durable):]
        return unsynced


class SimDisk(Disk):
    """One incarnation's view of a `SimFs`: a `Disk` whose fsyncs decide what survives."""

    def __init__(self, fs: SimFs) -> None:
        super().__init__(fsync_slow_ms=1e9)
        self.fs = fs
        self.dead = False
        self._fds: dict[int, int] = {}  # open fd -> inode
        self._paths: dict[int, str] = {}  # open fd -> the path it was opened by (files here are
        # renamed only once closed)

    def die(self) -> None:
        self.dead = True
        for fd in list(self._fds):
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()
        self._paths.clear()

    def _alive(self) -> None:
        if self.dead:
            raise OSError(5, "the machine is down")

    def _failing(self, path: str | None) -> None:
        under = self.fs.failing_under
        if under is not None and path is not None and os.path.abspath(path).startswith(under + os.sep):
            self.fs.disk_faults += 1
            raise OSError(5, f"injected disk failure under {under}")

    def _tracked(self, path: str) -> bool:
        return os.path.dirname(os.path.abspath(path)) in self.fs.folders

    # -- Disk ---------------------------------------------------------------------------------

    def create(self, path: str) -> int:
        self._alive()
        self._failing(path)
        fd = super().create(path)
        path = os.path.abspath(path)
        inode = self.fs.new_inode()
        if self._tracked(path):
            self.fs.live[path] = inode
        self._fds[fd] = inode
        self._paths[fd] = path
        return fd

    def open_write(self, path: str) -> int:
        self._alive()
        fd = super().open_write(path)
        path = os.path.abspath(path)
        self._fds[fd] = self.fs.live.get(path, 0)
        self._paths[fd] = path
        return fd

    def write(self, fd: int, data: bytes | memoryview) -> None:
        self._alive()
        self._failing(self._paths.get(fd))
        if self.fs.tear_next_write and fd in self._fds:
            self.fs.tear_next_write = False
            cut = self.fs.rng.randint(0, len(data))
            if cut:
                super().write(fd, bytes(data[:cut]))
            self._crash_here()
        super().write(fd, data)

    def fsync(self, fd: int, what: str = "") -> None:
        self._alive()
        self._failing(self._paths.get(fd))
        inode = self._fds.get(fd)
        if inode:
            with open(self._paths[fd], "rb") as file:
                self.fs.content[inode] = file.read()
        self.fsyncs += 1

    def fsync_dir(self, path: str) -> None:
        self._alive()
        folder = os.path.abspath(path)
        names = {p: i for p, i in self.fs.durable_names.items() if os.path.dirname(p) != folder}
        names.update({p: i for p, i in self.fs.live.items() if os.path.dirname(p) == folder})
        self.fs.durable_names = names
        self.fsyncs += 1

    def truncate(self, fd: int, size: int) -> None:
        self._alive()
        self._failing(self._paths.get(fd))
        super().truncate(fd, size)

    def close(self, fd: int) -> None:
        if fd in self._fds:  # a dead view's files were closed at the crash (the fd may be reused)
            del self._fds[fd]
            del self._paths[fd]
            os.close(fd)

    def replace(self, source: str, target: str) -> None:
        self._alive()
        super().replace(source, target)
        source, target = os.path.abspath(source), os.path.abspath(target)
        inode = self.fs.live.pop(source, None)
        if inode is not None and self._tracked(target):
            self.fs.live[target] = inode

    def remove(self, path: str) -> None:
        self._alive()
        super().remove(path)
        self.fs.live.pop(os.path.abspath(path), None)

    def _crash_here(self) -> None:
        """The power goes in the middle of this write: tear, cut, tell the simulation, fail."""
        self.fs.power_cut(tear=True)
        if self.fs.on_power_cut is not None:
            self.fs.on_power_cut()
        raise OSError(5, "power lost during a write")
