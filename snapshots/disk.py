"""The file operations the journal and the snapshots use, in one replaceable object.

Everything that touches the disk for writing goes through a `Disk`, so a test can hand the journal
one that fails on demand (`FaultyDisk`) and watch what the kernel does with an error from `write`
or `fsync`. The methods are blocking: callers run them in a worker thread, never on the event loop.

Slow fsyncs are logged (etcd does the same): a disk that takes a second to sync is the usual reason
for slow answers under `--fsync always`, and the log line says so.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time

__all__ = ["Disk", "FaultyDisk", "FILE_MODE", "DIR_MODE", "make_private"]

log = logging.getLogger("runstate.snapshots")

# WAL segments and snapshots hold live fencing tokens and every payload: readable by the server's
# user only, whatever the umask (which can only take bits away, so the mode is set, not asked for).
FILE_MODE = 0o600
DIR_MODE = 0o700


def make_private(folder: str) -> None:
    """Create `folder` (and its parents) if needed; make it and the files directly in it private.

    Tightens a data directory made by an earlier version (0755 folders, 0644 files) as well.
    """
    os.makedirs(folder, mode=DIR_MODE, exist_ok=True)
    os.chmod(folder, DIR_MODE)
    for entry in os.scandir(folder):
        if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mode & 0o777 != FILE_MODE:
            os.chmod(entry.path, FILE_MODE)


class Disk:
    def __init__(self, fsync_slow_ms: float = 100.0) -> None:
        self.fsync_slow_ms = fsync_slow_ms
        self.fsyncs = 0

    def create(self, path: str) -> int:
        """A new file open for writing, readable by its owner only; it must not exist yet."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_write(self, path: str) -> int:
        return os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))

    def copy(self, source: str, target: str) -> None:
        """Copy `source` to `target` (replacing it), readable by its owner only like the journal
        it copies: it holds the same fencing tokens and payloads. A copy that fails (a full disk)
        leaves no `target`: part of a copy would pass for the whole file."""
        if os.path.exists(target):
            self.remove(target)
        with open(source, "rb") as original:
            fd = self.create(target)
            try:
                while chunk := original.read(1 << 20):
                    self.write(fd, chunk)
            except BaseException:
                self.close(fd)
                with contextlib.suppress(OSError):  # (the copy's error is the one to tell)
                    self.remove(target)
                raise
            self.close(fd)

    def write(self, fd: int, data: bytes | memoryview) -> None:
        """Write all of `data` (a short write is continued, not returned)."""
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def fsync(self, fd: int, what: str = "") -> None:
        started = time.perf_counter()
        os.fsync(fd)
        self.fsyncs += 1
        took_ms = (time.perf_counter() - started) * 1000
        if took_ms > self.fsync_slow_ms:
            log.warning("fsync%s took %.1f ms (slow disk: answers wait for it)", f" of {what}" if what else "", took_ms)

    def fsync_dir(self, path: str) -> None:
        """Make a create, rename or delete inside directory `path` durable."""
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            self.fsync(fd, path)
        finally:
            os.close(fd)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def close(self, fd: int) -> None:
        os.close(fd)

    def replace(self, source: str, target: str) -> None:
        os.replace(source, target)

    def remove(self, path: str) -> None:
        os.remove(path)


class FaultyDisk(Disk):
    """A `Disk` that raises `OSError` from `write` or `fsync` while told to (tests only).

    `full` is a full disk rather than a failing one: a file is still created (an empty file takes
    no block), and every write to it fails with ENOSPC before a byte goes down.

    With `only_under`, only files under that folder fail (one partition's, say): the disk of one
    journal breaks while the others' go on working."""

    def __init__(self, fsync_slow_ms: float = 100.0, *, only_under: str | None = None) -> None:
        super().__init__(fsync_slow_ms)
        self.fail_write = False
        self.fail_fsync = False
        self.full = False
        self.failures = 0
        self._only_under = None if only_under is None else os.path.abspath(only_under) + os.sep
        self._paths: dict[int, str] = {}

    def _fault(self, what: str, code: int = errno.EIO) -> None:
        self.failures += 1
        raise OSError(code, f"injected {what} failure")

    def _affects(self, path: str | None) -> bool:
        return self._only_under is None or (path is not None and os.path.abspath(path).startswith(self._only_under))

    def write(self, fd: int, data: bytes | memoryview) -> None:
        if self.full and self._affects(self._paths.get(fd)):
            self._fault("write (no space left on device)", errno.ENOSPC)
        if self.fail_write and self._affects(self._paths.get(fd)):
            # Like a real failing disk, part of the data may have gone down before the error.
            os.write(fd, bytes(data[: len(data) // 2]))
            self._fault("write")
        super().write(fd, data)

    def fsync(self, fd: int, what: str = "") -> None:
        if self.fail_fsync and self._affects(self._paths.get(fd, what)):
            self._fault("fsync")
        super().fsync(fd, what)

    def truncate(self, fd: int, size: int) -> None:
        if self.fail_write and self._affects(self._paths.get(fd)):
            self._fault("truncate")
        super().truncate(fd, size)

    def create(self, path: str) -> int:
        if self.fail_write and self._affects(path):
            self._fault("create")
        fd = super().create(path)
        self._paths[fd] = path
        return fd

    def open_write(self, path: str) -> int:
        fd = super().open_write(path)
        self._paths[fd] = path
        return fd

    def close(self, fd: int) -> None:
        self._paths.pop(fd, None)
        super().close(fd)
