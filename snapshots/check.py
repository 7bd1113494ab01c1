"""`runstate check`: verify a data directory offline and say what it holds.

Reads the directory exactly as a start would (`recovery.load`), partition by partition, but changes
nothing: a repair that a start would make (a torn or zero tail) is reported, not done. The
directory is bad (`ok` is False, the command exits non-zero) when a start would leave a partition
out, or refuse to start at all; the problem names the partition, the file and the offset. Safe to
run on the directory of a running server (it only reads), though the tail it sees may be a batch
still being written. It says which record format version the files hold: older files (a directory
from before partitions) are read, upgraded in memory, and reported as what a start would upgrade.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field

from .datadir import DataDirError, has_old_layout, partition_dir, read_manifest
from .model import StateModel
from .history import kept
from .recovery import RecoveryError, file_versions, list_segments, load, snapshot_dir, wal_dir
from .snapshot import list_snapshots

__all__ = ["CheckReport", "PartitionReport", "check"]


@dataclass(slots=True)
class PartitionReport:
    """What one journal (a partition's, or a whole directory's from before partitions) holds."""

    partition: int | None  # None: the one journal of a directory from before partitions
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
    counts: dict[str, int] = field(default_factory=dict)
    repairs: list[str] = field(default_factory=list)
    bad_snapshots: list[str] = field(default_factory=list)
    versions: dict[int, int] = field(default_factory=dict)  # record format version -> files holding it
    # The history its files keep (`history.kept`): the oldest point (LSN 0 and no time: the very
    # beginning), and what its snapshots and WAL take on disk.
    history_lsn: int = 0
    history_ms: int | None = None
    snapshot_bytes: int = 0
    disk_bytes: int = 0


@dataclass(slots=True)
class CheckReport:
    data_dir: str
    ok: bool = True
    problem: str | None = None
    problem_path: str | None = None
    problem_offset: int | None = None
    problem_partition: int | None = None
    # The totals over every partition, and the newest of their points in time.
    snapshots: int = 0
    snapshot_lsn: int = 0
    segments: int = 0
    wal_bytes: int = 0
    records: int = 0
    last_lsn: int = 0
    newest_ms: int = 0
    epoch: int = 0
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    repairs: list[str] = field(default_factory=list)
    bad_snapshots: list[str] = field(default_factory=list)
    version: int = 0  # the record format this server writes
    versions: dict[int, int] = field(default_factory=dict)  # record format version -> files holding it
    partition_count: int | None = None  # data partitions (None: a directory from before partitions)
    partitions: list[PartitionReport] = field(default_factory=list)
    # What the snapshots and WAL take on disk, all partitions together (the history kept included).
    snapshot_bytes: int = 0
    disk_bytes: int = 0

    def format(self) -> str:
        lines = [f"data directory {self.data_dir}: {'OK' if self.ok else 'BAD'}"]
        if self.problem:
            lines.append(f"  problem: {self.problem}")
        lines.append(f"  record format: {self._describe_versions()}")
        if self.partition_count is not None:
            lines.append(f"  partitions: {self.partition_count} and the system partition")
        lines.append(f"  snapshots: {self.snapshots} (newest usable at LSN {self.snapshot_lsn})")
        lines.append(f"  wal: {self.segments} segment(s), {self.wal_bytes} bytes, {self.records} record(s) after the snapshots")
        lines.append(f"  last LSN: {self.last_lsn}, boots: {self.epoch}")
        lines.append(f"  on disk: {_size(self.disk_bytes)} ({_size(self.snapshot_bytes)} of snapshots, the rest WAL)")
        lines.append(f"  history kept: {self._describe_history()}")
        if self.newest_ms:
            lines.append(f"  newest record: {_format_ms(self.newest_ms)}")
        for name, count in self.counts.items():
            lines.append(f"  {name.replace('_', ' ')}: {count}")
        for repair in self.repairs:
            lines.append(f"  a start would repair: {repair}")
        for bad in self.bad_snapshots:
            lines.append(f"  snapshot skipped: {bad}")
        if self.partition_count is not None and len(self.partitions) > 1:
            for part in self.partitions:
                state = "OK" if part.ok else f"BAD: {part.problem}"
                lines.append(
                    f"  partition {part.partition}: {state}; last LSN {part.last_lsn}, {part.segments} segment(s), "
                    f"{part.counts.get('spaces', 0)} space(s), {_size(part.disk_bytes)}"
                )
        lines.append(f"  checked in {self.seconds:.3f} s")
        return "\n".join(lines)

    def _describe_history(self) -> str:
        """From where each partition's files rebuild a past point (`runstate replay`)."""
        found = {(part.history_lsn, part.history_ms) for part in self.partitions if part.ok}
        if not found:
            return "none"
        if found == {(0, None)}:
            return "from the very beginning"
        oldest = [part.history_ms for part in self.partitions if part.ok and part.history_ms is not None]
        since = f"from {_format_ms(min(oldest))} on" if oldest else "from the very beginning"
        return since + ("" if len(self.partitions) == 1 else " (the partition that keeps the least)")

    def _describe_versions(self) -> str:
        if not self.versions:
            return f"version {self.version} (no files yet)"
        found = ", ".join(f"version {version} ({count} file(s))" for version, count in sorted(self.versions.items()))
        if self.partition_count is None:
            found += f"; a start upgrades the directory to partitions of version {self.version}"
        elif any(version < self.version for version in self.versions):
            found += f"; a start upgrades the directory to version {self.version}"
        return found


def _size(count: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} bytes"


def _format_ms(wall_ms: int) -> str:
    """`YYYY-MM-DDTHH:MM:SS.mmmZ`, as the wire spells times."""
    seconds, millis = divmod(wall_ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def _check_journal(folder: str, model: StateModel, partition: int | None) -> PartitionReport:
    part = PartitionReport(partition)
    try:
        return _read_journal(part, folder, model, partition)
    except OSError as error:  # a file this user may not read (another owner, its mode), a failing disk
        part.ok = False
        part.problem = f"{error.filename}: cannot read it: {error.strerror}" if error.filename else f"cannot read it: {error}"
        part.problem_path = error.filename
        return part


def _read_journal(part: PartitionReport, folder: str, model: StateModel, partition: int | None) -> PartitionReport:
    part.snapshots = len(list_snapshots(snapshot_dir(folder)))
    part.versions = dict(Counter(file_versions(folder).values()))
    history = kept(folder)
    part.history_lsn, part.history_ms = history.oldest_lsn, history.oldest_ms
    part.snapshot_bytes, part.disk_bytes = history.snapshot_bytes, history.disk_bytes
    try:
        loaded = load(folder, model, repair=False, partition=partition)
    except RecoveryError as error:
        part.ok = False
        part.problem = str(error)
        part.problem_path = error.path
        part.problem_offset = error.offset
        found = list_segments(wal_dir(folder))  # (all of them, as a good partition's are counted)
        part.segments = len(found)
        part.wal_bytes = sum(os.path.getsize(path) for _, path in found)
        return part
    part.snapshot_lsn = loaded.snapshot_lsn
    part.segments = loaded.segments
    part.wal_bytes = loaded.wal_bytes
    part.records = loaded.records
    part.last_lsn = loaded.last_lsn
    part.newest_ms = loaded.newest_ms
    part.epoch = loaded.state.boot.epoch
    part.counts = loaded.state.counts()
    part.repairs = [repair.describe() for repair in loaded.repairs]
    part.bad_snapshots = loaded.bad_snapshots
    return part


def check(data_dir: str, model: StateModel) -> CheckReport:
    """Verify `data_dir` without changing it, reading it into `model`'s state. Blocking."""
    started = time.perf_counter()
    report = CheckReport(data_dir, version=model.records.version)
    if not os.path.isdir(data_dir):
        report.ok = False
        report.problem = f"{data_dir} is not a directory"
        return report
    try:
        manifest = read_manifest(data_dir)
    except DataDirError as error:
        report.ok = False
        report.problem = str(error)
        return report
    if manifest is None:
        if has_old_layout(data_dir):
            report.partitions = [_check_journal(data_dir, model, None)]
    else:
        report.partition_count = manifest.partitions
        report.partitions = [_check_journal(partition_dir(data_dir, number), model, number) for number in manifest.numbers()]
    for part in report.partitions:
        _add(report, part)
    report.seconds = time.perf_counter() - started
    return report


def _add(report: CheckReport, part: PartitionReport) -> None:
    if not part.ok and report.ok:
        report.ok = False
        where = "" if part.partition is None else f"partition {part.partition}: "
        report.problem = where + (part.problem or "")
        report.problem_path, report.problem_offset, report.problem_partition = part.problem_path, part.problem_offset, part.partition
    report.snapshots += part.snapshots
    report.snapshot_bytes += part.snapshot_bytes
    report.disk_bytes += part.disk_bytes
    report.segments += part.segments
    report.wal_bytes += part.wal_bytes
    report.records += part.records
    report.snapshot_lsn = max(report.snapshot_lsn, part.snapshot_lsn)
    report.last_lsn = max(report.last_lsn, part.last_lsn)
    report.newest_ms = max(report.newest_ms, part.newest_ms)
    report.epoch = max(report.epoch, part.epoch)
    for name, count in part.counts.items():
        report.counts[name] = report.counts.get(name, 0) + count
    report.repairs.extend(part.repairs if part.partition is None else (f"partition {part.partition}: {r}" for r in part.repairs))
    report.bad_snapshots.extend(part.bad_snapshots)
    for version, count in part.versions.items():
        report.versions[version] = report.versions.get(version, 0) + count
