"""Durability: the journal the kernel writes its records to, on disk or in memory.

`open_store` recovers a data directory and returns a `Store` (state, running journal, report);
`check` verifies one offline. The WAL (`wal`), snapshots (`snapshot`, `compaction`) and recovery
(`recovery`, with its decision table) sit underneath. The WAL journal satisfies the kernel's
`Journal` protocol (`runstate.actors.journal`, where the in-memory journal lives too) structurally.
What this package needs from the state it keeps is said in `model` (`StateModel`): the caller
hands it in.
"""

from .check import CheckReport, check
from .disk import Disk, FaultyDisk
from .equality import assert_same_state, contents
from .model import RecordFormat, RecoverableState, StateModel
from .recovery import RecoveryError, load
from .snapshot import SnapshotError
from .store import RecoveryReport, Store, StoreConfig, StoreLocked, open_store
from .wal import FSYNC_POLICIES, WalJournal

__all__ = [
    "CheckReport",
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
    "open_store",
]
