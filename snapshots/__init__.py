"""Durability: the journal the kernel writes its records to, on disk or in memory.

`open_data_dir` opens a data directory (its manifest, and a `Store` per partition: state,
running journal, report; `datadir`); `open_store` recovers one partition's folder; `check`
verifies a directory offline. The WAL (`wal`), snapshots (`snapshot`, `compaction`) and recovery
(`recovery`, with its decision table) sit underneath. The WAL journal satisfies the kernel's
`Journal` protocol (`runstate.actors.journal`, where the in-memory journal lives too) structurally.
What this package needs from the state it keeps is said in `model` (`StateModel`): the caller
hands it in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import import_name

# Importing the package imports none of its modules: each name is imported when it is first read
# (`__getattr__`), so a leaf module (the limits, the errors, a command-line tool's helpers) loads
# without the rest. The checker reads the names from these imports, which never run.
if TYPE_CHECKING:
    from .check import CheckReport
    from .datadir import DataDir, DataDirError, open_data_dir
    from .disk import Disk, FaultyDisk
    from .equality import assert_same_state, contents
    from .model import RecordFormat, RecoverableState, StateModel
    from .recovery import RecoveryError, load
    from .snapshot import SnapshotError
    from .store import RecoveryReport, Store, StoreConfig, StoreLocked, open_store
    from .wal import FSYNC_POLICIES, WalJournal

# Each public name and the module that defines it. (`check` is the module `check.py`; its
# function is `check.check`: a package's name never stands for both a module and a function.)
_EXPORTS = {
    "CheckReport": ".check",
    "DataDir": ".datadir",
    "DataDirError": ".datadir",
    "open_data_dir": ".datadir",
    "Disk": ".disk",
    "FaultyDisk": ".disk",
    "assert_same_state": ".equality",
    "contents": ".equality",
    "RecordFormat": ".model",
    "RecoverableState": ".model",
    "StateModel": ".model",
    "RecoveryError": ".recovery",
    "load": ".recovery",
    "SnapshotError": ".snapshot",
    "RecoveryReport": ".store",
    "Store": ".store",
    "StoreConfig": ".store",
    "StoreLocked": ".store",
    "open_store": ".store",
    "FSYNC_POLICIES": ".wal",
    "WalJournal": ".wal",
}

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
    "contents",
    "load",
    "open_data_dir",
    "open_store",
]


def __getattr__(name: str) -> Any:
    """A public name or a module of the package, imported now (and kept, so this runs once a name)."""
    return import_name(__name__, globals(), _EXPORTS, name)


def __dir__() -> list[str]:
    """The public names too, before they are first read."""
    return sorted({*globals(), *__all__})
