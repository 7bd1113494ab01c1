"""How a partition's store keeps its journal and snapshots (`StoreConfig`) and the fsync policies:
a leaf module, so that reading the server's settings loads no part of the store."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FSYNC_POLICIES", "StoreConfig"]

FSYNC_POLICIES = ("always", "batch", "off")


@dataclass(frozen=True, slots=True)
class StoreConfig:
    fsync: str = "always"
    # `batch`: a background fsync begins at most this many milliseconds after the previous one began.
    batch_interval_ms: float = 20.0
    segment_bytes_max: int = 64 * 1024 * 1024
    snapshot_every_records: int = 1_000_000
    snapshot_every_s: float = 3600.0
    # A snapshot once the log holds this many bytes of records past the last one (None: no such
    # trigger). A cluster's node sets it for its copies: what the log in etcd keeps is what lies
    # above the oldest snapshot of the partition a node has, so this bounds etcd's share of it.
    snapshot_every_bytes: int | None = None
    # How often the snapshot task looks whether one is due.
    snapshot_poll_s: float = 1.0
    snapshots_kept: int = 2
    # Build snapshots in a child process (see compaction.py); else in a worker thread.
    snapshot_process: bool = True
    fsync_slow_ms: float = 100.0
    # After a failed write: how often to try the disk again.
    probe_interval_s: float = 1.0
    # History (`history.py`): how long before the newest snapshot's time the snapshots and WAL
    # segments a past point needs are kept (0: none beyond what recovery needs), and a snapshot
    # (a checkpoint) once the WAL holds this many records past the last one, or as many as the
    # last snapshot's entries if that is more, while history is kept: a point then replays at
    # most that many records on top of its snapshot.
    history_retention_s: float = 0.0
    history_checkpoint_every_records: int = 50_000
