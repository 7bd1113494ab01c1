"""`runstate check`: verify a data directory offline and say what it holds.

Reads the directory exactly as a start would (`recovery.load`), but changes nothing: a repair that a
start would make (a torn or zero tail) is reported, not done. The directory is bad (`ok` is False,
the command exits non-zero) when a start would refuse it; the problem names the file and offset.
Safe to run on the directory of a running server (it only reads), though the tail it sees may be a
batch still being written. It says which record format version the files hold: older files are
read (upgraded in memory) and reported as what a start would upgrade.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field

from .model import StateModel
from .recovery import RecoveryError, file_versions, list_segments, load, snapshot_dir, wal_dir
from .snapshot import list_snapshots

__all__ = ["CheckReport", "check"]


@dataclass(slots=True)
class CheckReport:
    data_dir: str
    ok: bool = True
    problem: str | None = None
    problem_path: str | None = None
    problem_offset: int | None = None
    snapshots: int = 0
    snapshot_lsn: int = 0
    segments: int = 0
    wal_bytes: int = 0
    records: int = 0  # WAL records after the snapshot
    last_lsn: int = 0
    newest_ms: int = 0
    epoch: int = 0
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    repairs: list[str] = field(default_factory=list)
    bad_snapshots: list[str] = field(default_factory=list)
    version: int = 0  # the record format this server writes
    versions: dict[int, int] = field(default_factory=dict)  # record format version -> files holding it

    def format(self) -> str:
        lines = [f"data directory {self.data_dir}: {'OK' if self.ok else 'BAD'}"]
        if self.problem:
            lines.append(f"  problem: {self.problem}")
        lines.append(f"  record format: {self._describe_versions()}")
        lines.append(f"  snapshots: {self.snapshots} (newest usable at LSN {self.snapshot_lsn})")
        lines.append(f"  wal: {self.segments} segment(s), {self.wal_bytes} bytes, {self.records} record(s) after the snapshot")
        lines.append(f"  last LSN: {self.last_lsn}, boots: {self.epoch}")
        if self.newest_ms:
            lines.append(f"  newest record: {_format_ms(self.newest_ms)}")
        for name, count in self.counts.items():
            lines.append(f"  {name.replace('_', ' ')}: {count}")
        for repair in self.repairs:
            lines.append(f"  a start would repair: {repair}")
        for bad in self.bad_snapshots:
            lines.append(f"  snapshot skipped: {bad}")
        lines.append(f"  checked in {self.seconds:.3f} s")
        return "\n".join(lines)

    def _describe_versions(self) -> str:
        if not self.versions:
            return f"version {self.version} (no files yet)"
        found = ", ".join(f"version {version} ({count} file(s))" for version, count in sorted(self.versions.items()))
        if any(version < self.version for version in self.versions):
            found += f"; a start upgrades the directory to version {self.version}"
        return found


def _format_ms(wall_ms: int) -> str:
    """`YYYY-MM-DDTHH:MM:SS.mmmZ`, as the wire spells times."""
    seconds, millis = divmod(wall_ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def check(data_dir: str, model: StateModel) -> CheckReport:
    """Verify `data_dir` without changing it, reading it into `model`'s state. Blocking."""
    started = time.perf_counter()
    report = CheckReport(data_dir, version=model.records.version)
    if not os.path.isdir(data_dir):
        report.ok = False
        report.problem = f"{data_dir} is not a directory"
        return report
    report.snapshots = len(list_snapshots(snapshot_dir(data_dir)))
    report.versions = dict(Counter(file_versions(data_dir).values()))
    try:
        loaded = load(data_dir, model, repair=False)
    except RecoveryError as error:
        report.ok = False
        report.problem = str(error)
        report.problem_path = error.path
        report.problem_offset = error.offset
        report.segments = len(list_segments(wal_dir(data_dir)))
    else:
        report.snapshot_lsn = loaded.snapshot_lsn
        report.segments = loaded.segments
        report.wal_bytes = loaded.wal_bytes
        report.records = loaded.records
        report.last_lsn = loaded.last_lsn
        report.newest_ms = loaded.newest_ms
        report.epoch = loaded.state.boot.epoch
        report.counts = loaded.state.counts()
        report.repairs = [repair.describe() for repair in loaded.repairs]
        report.bad_snapshots = loaded.bad_snapshots
    report.seconds = time.perf_counter() - started
    return report
