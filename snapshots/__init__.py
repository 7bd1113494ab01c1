"""Durability: the journal the kernel writes its records to, on disk or in memory.

`open_data_dir` opens a data directory (its manifest, and a `Store` per partition: state,
running journal, report; `datadir`); `open_store` recovers one partition's folder; `check`
verifies a directory offline. The WAL (`wal`), snapshots (`snapshot`, `compaction`) and recovery
(`recovery`, with its decision table) sit underneath. The WAL journal satisfies the kernel's
`Journal` protocol (`runstate.actors.journal`, where the in-memory journal lives too) structurally.
What this package needs from the state it keeps is said in `model` (`StateModel`): the caller
hands it in.
"""

from .check import CheckReport, check
from .datadir import DataDir, DataDirError, open_data_dir
from .disk import Disk, FaultyDisk
from .equality import assert_same_state, contents
from .model import RecordFormat, RecoverableState, StateModel
from .recovery import RecoveryError, load
from .snapshot import SnapshotError
from .store import RecoveryReport, Store, StoreConfig, StoreLocked, open_store
from .wal import FSYNC_POLICIES, WalJournal

__all__ = [
    "CheckReport",
    "DataDir",
    "DataDirError",
    "Disk",
    "FSYNC_POLICIES",
    "FaultyDisk",
    "RecordFormat",
    "RecoverableState",
    "RecoveryError",
    "RecoveryReport",
    "SnapshotError",
    "StateModel",
    "Store",
    "StoreConfig",
    "StoreLocked",
    "WalJournal",
    "assert_same_state",
    "check",
    "contents",
    "load",
    "open_data_dir",
    "open_store",
]
