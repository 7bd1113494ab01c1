"""The plain values the kernel passes around, named once: a journal record and a view.

A leaf module: it imports nothing of the kernel, so every part (a primitive's decisions and
appliers, the journal, the snapshots, the shell) can name them without importing anything else.

A `Record` is one JSON object as the journal keeps it: a `type` and the fields that type declares
(`records.py`), snake case. The values of its fields are JSON whose type depends on the record's
type and the field's name, and a record is read back from disk, so a field's value type is known
only at run time: `check_record` checks the names on every write and read, and each applier reads
the fields it needs as the types it needs. Hence `Any` for a field's value, and not a union that
every applier would narrow again. Not to be confused with a view.

A `View` is the camelCase JSON object a read or a reply carries to the shell, which encodes it
as it is (`scopeId`, `expiresAt`); its values are JSON too, by field. A primitive that declares
typed views answers with those instead (`claims.ClaimView`): named tuples (or frozen dataclasses
where a view is not on a hot path) with snake-case fields and times as integer milliseconds, each field's meaning in its type (`EpochMs` for an
instant, `DurationMs` for a length of time); the shell's wire declaration (`server/wire/`)
names their fields on the wire and turns their times into timestamps. `plain` is the kernel's
own JSON form of either, for what the kernel keeps without a shell to ask.

Pure: no IO.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

__all__ = [
    "Record", "View", "EpochMs", "DurationMs", "Json", "JsonObject", "MinorUnits", "INSTANT", "DURATION", "JSON", "JSON_OBJECT", "MINOR",
    "plain",
]

Record = dict[str, Any]
View = dict[str, Any]

# A request's JSON object as the shell parsed it: each field is read by the kind its command
# declares (`fields.py`), which is where its type is known.
Body = dict[str, Any]


class _Meaning:
    """What a typed view's field means where its type alone does not say: an integer of
    milliseconds that is an instant or a length of time, or a user's JSON value. Read by the
    shell (through the type's `Annotated` metadata) to choose its wire form; nothing at run time."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


INSTANT = _Meaning("INSTANT")
DURATION = _Meaning("DURATION")

# A wall-clock instant, milliseconds since the Unix epoch (UTC), as every record keeps its times.
EpochMs = Annotated[int, INSTANT]
# A length of time in milliseconds (a lease's length). Not to be confused with an instant.
DurationMs = Annotated[int, DURATION]

JSON = _Meaning("JSON")
# Any JSON value a user gave (a payload, an outcome, metadata): the shell writes it as it is.
Json = Annotated[Any, JSON]

JSON_OBJECT = _Meaning("JSON_OBJECT")
# A JSON object the kernel made, for the shell to pass on as it is (a refusal's details): a dict,
# or a typed view (the shell writes it by its shape). Not a user's value: it is always an object.
JsonObject = Annotated[Any, JSON_OBJECT]

MINOR = _Meaning("MINOR")
# An amount of money in a currency's minor units (cents), never negative. Amounts have no bound
# a JSON number keeps exactly, so the shell writes them as decimal strings, as requests carry them.
MinorUnits = Annotated[int, MINOR]


def plain(value: Any) -> Any:
    """`value` as JSON the kernel can keep on its own: each typed view in it (at the top, or in its
    dicts, lists and views) as an object of its fields (snake case, times in milliseconds),
    anything else as it is. The shell gives the kernel its
    wire form instead (`Kernel(keep_reply=...)`), so that a retry answers what the first try did."""
    if isinstance(value, tuple) and hasattr(value, "_asdict"):  # a named tuple
        return {key: plain(item) for key, item in value._asdict().items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if type(value) is dict:
        return {key: plain(item) for key, item in value.items()}
    if type(value) in (list, tuple):
        return [plain(item) for item in value]
    return value
