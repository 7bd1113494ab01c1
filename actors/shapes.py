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
as it is (`scopeId`, `expiresAt`); its values are JSON too, by field.

Pure: no IO.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Record", "View"]

Record = dict[str, Any]
View = dict[str, Any]

# A request's JSON object as the shell parsed it: each field is read by the kind its command
# declares (`fields.py`), which is where its type is known.
Body = dict[str, Any]
