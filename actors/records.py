"""The record format: every type of journal record and snapshot image, and the fields it carries.

A record is one JSON object with a `type`. Its field names are spelled one way everywhere: snake
case, units last (`scope_id`, `lease_ms`, `at_ms`). Values a caller gave us (a task's `input`, a
delivery's `outcome`, a message's `payload`, a claim's `observation`, a stored answer's `body`)
are kept exactly as they came: they are values, never renamed. Not to be confused with the wire:
the HTTP API speaks camelCase (`scopeId`), records do not.

Each record type is declared, with its fields, by the primitive that decides and applies it
(`Primitive.records`); this module gathers them. `check_record` is run on every record before it
is written (the journal's `append`, the snapshot writer) and after it is read (recovery), so a
record a table forgot a field of, or spelled in a way nothing reads back, is refused where it is
made and not found a restart later.
It checks names, not values: it runs on every change, and the tables that apply a record read
every field they need.

`VERSION` is the format's number, written in the header of every WAL segment and snapshot
(`snapshots/frame.py`). Version 0 is the format before it had a number, which spelled some fields
in camelCase (`scopeId` beside `lease_ms`); `upgrade` reads such a record as this version spells
it. Version 1 is the last format of a data directory without partitions: one journal for every
space and the keys. Version 2 is a partition's journal: each file names its partition in its
header, each space's stored answers are its own, and a lease says whether a restart has already
given it its grace (`graced`). A new version adds its own step here and bumps `VERSION`; the files
say which steps to run.

Pure: no IO.
"""

from __future__ import annotations

from typing import Any

from .primitives import TABLES
from .shapes import Record

__all__ = ["VERSION", "FIELDS", "RecordError", "Format", "FORMAT", "check_record", "upgrade"]

VERSION = 2


class RecordError(ValueError):
    """A record whose type is unknown, or whose fields are not the ones its type carries."""


# Every record of a space carries `space` (added where it is committed); the kernel's own (keys,
# boots) do not.
_SPACE = "space"


def _spec(fields: tuple[str, ...], of_space: bool) -> tuple[frozenset[str], frozenset[str], bool]:
    """A type as its primitive declares it: its fields, an optional one marked with a trailing "?"."""
    required = frozenset(("type", *((_SPACE,) if of_space else ()), *(f for f in fields if not f.endswith("?"))))
    optional = frozenset(f[:-1] for f in fields if f.endswith("?"))
    return required, required | optional, not optional


_KERNEL = frozenset(TABLES.kernel_apply)

# Record type -> (required fields, allowed fields, whether they are the same). `type` is required
# everywhere. Each primitive declares its record types and their fields (`Primitive.records`).
FIELDS: dict[str, tuple[frozenset[str], frozenset[str], bool]] = {
    kind: _spec(fields, kind not in _KERNEL) for kind, fields in TABLES.fields.items()
}


# The names of records already checked, in their order, and the types they were checked for.
# Every record of a type is made by one piece of code, so nearly all of them come in a handful of
# orders: a record whose order was seen with its type is checked by one lookup, without comparing
# its names one by one. Cleared whole when full (a bound, never reached by the format's records).
_SEEN: dict[tuple[str, ...], set[str]] = {}
SEEN_MAX = 4096


def check_record(record: Any) -> None:
    """Raise `RecordError` unless `record` is a known type carrying exactly its fields.

    On every record written and read: its names, in order, looked up among the orders already
    checked for its type; the first record of an order gets the full check (`_check_names`).
    """
    try:
        if record["type"] in _SEEN[tuple(record)]:
            return
    except (KeyError, TypeError):
        pass
    _check_names(record)


def _check_names(record: Any) -> None:
    """The full check, by the type's fields (`FIELDS`); an order that passes is remembered. A type
    with no optional field is held exactly by a record whose names equal its required ones;
    otherwise the names must lie between the required and the allowed."""
    try:
        kind = record["type"]
        required, allowed, exact = FIELDS[kind]
        names = record.keys()
        if names == required if exact else names <= allowed and names >= required:
            if len(_SEEN) >= SEEN_MAX:
                _SEEN.clear()
            _SEEN.setdefault(tuple(record), set()).add(kind)
            return
    except (KeyError, TypeError, AttributeError):
        pass
    _refuse(record)


def _refuse(record: Any) -> None:
    """The `RecordError` that says what is wrong with a record `check_record` did not accept."""
    if type(record) is not dict:
        raise RecordError(f"a record is a JSON object, not {type(record).__name__}")
    spec = FIELDS.get(record.get("type"))  # type: ignore[arg-type]  # a record read back may carry a type of any JSON kind: one not a string finds nothing
    if spec is None:
        raise RecordError(f"unknown record type {record.get('type')!r}")
    required, allowed, _ = spec
    names = record.keys()
    missing, unknown = sorted(required - names), sorted(names - allowed)
    raise RecordError(f"a {record['type']} record: missing {missing}, unknown {unknown}")


# Version 0 -> 1: field names that were camelCase, as they are spelled now. Only top-level names
# are renamed (a caller's values inside `payload`, `input`, `body`... stay as they are), and no
# version-0 record used any of these names for anything else.
_V0_NAMES = {
    "parentId": "parent_id",
    "childLimit": "child_limit",
    "scopeId": "scope_id",
    "backlogLimit": "backlog_limit",
    "maxAttempts": "max_attempts",
    "mailboxId": "mailbox_id",
    "messageId": "message_id",
    "payloadHash": "payload_hash",
    "workKey": "work_key",
    "taskId": "task_id",
    "taskKey": "task_key",
    "inputHash": "input_hash",
    "subscriberId": "subscriber_id",
}


def upgrade(record: Record, version: int) -> Record:
    """`record`, read from a file of format `version`, as this version spells it (then checked)."""
    if version == VERSION:
        return record
    if version == 0:
        record = {_V0_NAMES.get(name, name): value for name, value in record.items()}
        version = 1
    if version == 1:  # the records are spelled the same; where they go is the data directory's upgrade
        return record
    raise RecordError(f"record format {version} is not one this server reads (it reads 0 to {VERSION})")


class Format:
    """The format as the journal and the snapshots take it (`journal.RecordFormat`): its number,
    its check, its upgrade.

    A class (not the module) so that it pickles by name into a snapshot's child process.
    """

    __slots__ = ()
    version = VERSION
    # The functions themselves (no method frame in between: `check` runs on every record).
    check = staticmethod(check_record)
    upgrade = staticmethod(upgrade)


FORMAT = Format()
