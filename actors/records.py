"""The record format: every type of journal record and snapshot image, and the fields it carries.

A record is one JSON object with a `type`. Its field names are spelled one way everywhere: snake
case, units last (`scope_id`, `lease_ms`, `at_ms`). Values a caller gave us (a task's `input`, a
delivery's `outcome`, a message's `payload`, a claim's `observation`, a stored answer's `body`)
are kept exactly as they came: they are values, never renamed. Not to be confused with the wire:
the HTTP API speaks camelCase (`scopeId`), records do not.

`check_record` is run on every record before it is written (the journal's `append`, the
snapshot writer) and after it is read (recovery), so a record a table forgot a field of, or
spelled in a way nothing reads back, is refused where it is made and not found a restart later.
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

from .boot import KERNEL_BOOTED
from .capacity import CAPACITY_RECORDS
from .claims import CLAIM_ACQUIRED, CLAIM_EXPIRED, CLAIM_FORCE_RELEASED, CLAIM_IMAGE, CLAIM_RELEASED, CLAIM_RENEWED
from .coordination import COORDINATION_RECORDS
from .dead_letters import DEAD_LETTER_RECORDS
from .events import EVENT_RECORDS
from .idempotency import IDEM_STORED
from .keys import KEY_REGISTERED, KEY_REVOKED
from .mailboxes import MAILBOX_RECORDS
from .messages import (
    DELIVERY_COMPLETED, DELIVERY_DEAD, DELIVERY_LEASED, DELIVERY_RENEWED, DELIVERY_REQUEUED, MESSAGES_IMAGE,
    MESSAGE_DROPPED, MESSAGE_IMAGE, MESSAGE_SENT, MESSAGE_VISIBLE, WORKKEY_IMAGE,
)
from .once import ONCE_RECORDS
from .runs import RUN_RECORDS
from .scopes import SCOPE_CREATED, SCOPE_ENDED, SCOPE_IMAGE
from .tasks import TASK_CREATED, TASK_DETACHED, TASK_ENDED, TASK_IMAGE, TASK_JOINED, TASK_TOMBSTONED
from .usage import USAGE_IMAGE

__all__ = ["VERSION", "FIELDS", "RecordError", "Format", "FORMAT", "check_record", "upgrade"]

VERSION = 2


class RecordError(ValueError):
    """A record whose type is unknown, or whose fields are not the ones its type carries."""


def _spec(*required: str, optional: tuple[str, ...] = ()) -> tuple[frozenset[str], frozenset[str], bool]:
    names = frozenset(("type", *required))
    return names, names | frozenset(optional), not optional


def _declared(fields: tuple[str, ...]) -> tuple[frozenset[str], frozenset[str], bool]:
    """A type as a module declares it: its fields, an optional one marked with a trailing "?"."""
    return _spec(
        _SPACE, *(f for f in fields if not f.endswith("?")), optional=tuple(f[:-1] for f in fields if f.endswith("?"))
    )


# Every record of a space carries `space` (added where it is committed).
_SPACE = "space"

# The slots of a message, as `message.image` carries them (`messages.py` images them by name).
_MESSAGE_SLOTS = (
    "id", "mailbox_id", "scope_id", "seq", "payload", "payload_hash", "work_key", "deadline_ms",
    "task_id", "state", "attempts", "gen", "visible_ms", "token", "holder", "session", "lease_ms",
    "expires_ms", "created_ms", "finished_ms", "reason",
)

# Record type -> (required fields, allowed fields, whether they are the same). `type` is required everywhere.
FIELDS: dict[str, tuple[frozenset[str], frozenset[str], bool]] = {
    # The kernel as a whole (`boot.py`, `keys.py`, `idempotency.py`).
    KERNEL_BOOTED: _spec("epoch", "fsync", "generation_floor", "at_ms"),
    KEY_REGISTERED: _spec("id", "digest", "name", "spaces", "at_ms", optional=("role",)),
    KEY_REVOKED: _spec("id", "at_ms"),
    IDEM_STORED: _spec(_SPACE, "key", "fingerprint", "body", "at_ms"),
    # Scopes (`scopes.py`).
    SCOPE_CREATED: _spec(_SPACE, "id", "name", "parent_id", "deadline_ms", "child_limit", "at_ms"),
    SCOPE_ENDED: _spec(_SPACE, "id", "state", "at_ms", optional=("by",)),
    SCOPE_IMAGE: _spec(
        _SPACE, "id", "name", "parent_id", "deadline_ms", "child_limit", "state", "ended_ms", "at_ms"
    ),
    # Claims (`claims.py`).
    CLAIM_ACQUIRED: _spec(
        _SPACE, "scope_id", "key", "generation", "token", "holder", "session", "lease_ms", "expires_ms", "at_ms"
    ),
    CLAIM_RENEWED: _spec(_SPACE, "token", "lease_ms", "expires_ms", "at_ms", optional=("graced",)),
    CLAIM_RELEASED: _spec(_SPACE, "token", "key", "generation", "at_ms", optional=("observation",)),
    CLAIM_EXPIRED: _spec(_SPACE, "token", "key", "generation", "at_ms"),
    # An operator's release without the token (`claims.decide_force_release`).
    CLAIM_FORCE_RELEASED: _spec(_SPACE, "token", "key", "generation", "holder", "at_ms", optional=("reason", "by")),
    CLAIM_IMAGE: _spec(
        _SPACE, "scope_id", "key", "generation", "token", "holder", "session", "lease_ms", "expires_ms",
        "acquired_ms", "at_ms", optional=("expired", "graced"),
    ),
    # Mailboxes (`mailboxes.py`).
    **{kind: _declared(fields) for kind, fields in MAILBOX_RECORDS.items()},
    # Messages and deliveries (`messages.py`, `work.py`).
    MESSAGE_SENT: _spec(
        _SPACE, "id", "mailbox_id", "scope_id", "payload", "payload_hash", "work_key", "deadline_ms", "at_ms"
    ),
    MESSAGE_VISIBLE: _spec(_SPACE, "message_id", "gen", "at_ms"),
    MESSAGE_DROPPED: _spec(_SPACE, "message_id", "reason", "at_ms"),
    MESSAGES_IMAGE: _spec(_SPACE, "seq"),
    MESSAGE_IMAGE: _spec(_SPACE, *_MESSAGE_SLOTS, "at_ms", optional=("graced",)),
    WORKKEY_IMAGE: _spec(_SPACE, "mailbox_id", "scope_id", "work_key", "message_id", "payload_hash", "at_ms"),
    DELIVERY_LEASED: _spec(
        _SPACE, "message_id", "token", "attempt", "holder", "session", "lease_ms", "expires_ms", "at_ms"
    ),
    DELIVERY_RENEWED: _spec(_SPACE, "message_id", "token", "lease_ms", "expires_ms", "at_ms", optional=("graced",)),
    DELIVERY_REQUEUED: _spec(_SPACE, "message_id", "token", "cause", "visible_ms", "at_ms"),
    DELIVERY_COMPLETED: _spec(_SPACE, "message_id", "token", "at_ms", optional=("outcome",)),
    DELIVERY_DEAD: _spec(_SPACE, "message_id", "token", "cause", "reason", "at_ms"),
    # An operator's actions on dead letters (`dead_letters.py`).
    **{kind: _declared(fields) for kind, fields in DEAD_LETTER_RECORDS.items()},
    # Tasks (`tasks.py`).
    TASK_CREATED: _spec(
        _SPACE, "id", "task_key", "scope_id", "mailbox_id", "message_id", "input", "input_hash", "deadline_ms",
        "subscriber_id", "at_ms",
    ),
    TASK_JOINED: _spec(_SPACE, "task_id", "subscriber_id", "scope_id", "at_ms"),
    TASK_DETACHED: _spec(_SPACE, "task_id", "subscriber_id", "at_ms"),
    TASK_ENDED: _spec(_SPACE, "task_id", "state", "reason", "at_ms", optional=("by",)),
    TASK_TOMBSTONED: _spec(_SPACE, "task_id", "at_ms"),
    TASK_IMAGE: _spec(
        _SPACE, "id", "task_key", "scope_id", "mailbox_id", "message_id", "input_hash", "state", "attempt",
        "outcome", "reason", "deadline_ms", "subscribers", "created_ms", "updated_ms", "finished_ms",
        "tombstoned", "at_ms",
    ),
    # Once slots (`once.py`) and run names (`runs.py`).
    **{kind: _declared(fields) for kind, fields in ONCE_RECORDS.items()},
    # Pools, quotas, work limits, budgets, admission (`capacity.py`); barriers, timers, task groups
    # and the event log (`coordination.py`): each module declares its record types.
    **{kind: _declared(fields) for kind, fields in CAPACITY_RECORDS.items()},
    **{kind: _declared(fields) for kind, fields in COORDINATION_RECORDS.items()},
    **{kind: _declared(fields) for kind, fields in EVENT_RECORDS.items()},
    **{kind: _declared(fields) for kind, fields in RUN_RECORDS.items()},
    # Usage counters (`usage.py`): the counter names inside are data, not fields.
    USAGE_IMAGE: _spec(_SPACE, "operations", "free", "events", optional=("takeovers",)),
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
    spec = FIELDS.get(record.get("type"))  # type: ignore[arg-type]
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


def upgrade(record: dict, version: int) -> dict:
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
