"""Comparing two states by their contents: how tests prove that replay and images are exact.

`contents(state)` walks the objects of a state (through `__slots__` and `__dict__`, dicts, lists and
sets) into plain data that `==` compares: a new table is covered with no change here. What is left
out, and why:

- `limits`: settings, not state;
- `lsn` (of a stored idempotent answer): where the answer sits in the journal, which a replay
  rightly does not know (it is durable there by definition);
- `boot` below the top level: the spaces share the state's one `BootInfo`, compared once;
- a value in a dict whose `is_empty()` says so: a space is made on first use, reads included, so
  a live state has empty spaces a replay does not;
- the attributes a class lists in `_DERIVED`: indexes rebuilt from the rest of its state, whose
  layout depends on the path taken (a queue's lazy heaps keep stale entries that a replay never
  had); the state they index is compared.

Ordered dicts and deques are compared in order (the idempotency table evicts oldest first, so do
the message table's retention and work-key queues); plain dicts as mappings, since their order is
not state.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any

__all__ = ["contents", "assert_same_state", "first_difference"]

_SKIPPED = frozenset({"limits", "_limits", "lsn"})
_SHARED = frozenset({"boot"})


def _attributes(obj: Any) -> list[str]:
    names: list[str] = []
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        if isinstance(slots, str):
            slots = (slots,)
        names.extend(slots)
    names.extend(getattr(obj, "__dict__", {}).keys())
    return names


def contents(obj: Any, _top: bool = True) -> Any:
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        return obj
    if isinstance(obj, OrderedDict):
        return [(key, contents(value, False)) for key, value in obj.items()]
    if isinstance(obj, dict):
        return {
            key: contents(value, False)
            for key, value in obj.items()
            if not (hasattr(value, "is_empty") and value.is_empty())
        }
    if isinstance(obj, (list, tuple, deque)):
        return [contents(value, False) for value in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted((contents(value, False) for value in obj), key=repr)
    dumped: dict[str, Any] = {"__class__": type(obj).__name__}
    derived = getattr(type(obj), "_DERIVED", ())
    for name in _attributes(obj):
        if name in _SKIPPED or name in derived or (name in _SHARED and not _top) or name.startswith("__"):
            continue
        if hasattr(obj, name):
            dumped[name] = contents(getattr(obj, name), False)
    return dumped


def first_difference(a: Any, b: Any, path: str = "state") -> str | None:
    """Where two `contents()` first differ, as a path and both values; None when equal."""
    if type(a) is not type(b):
        return f"{path}: {a!r} != {b!r}"
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b), key=repr):
            if key not in a or key not in b:
                return f"{path}[{key!r}]: only in {'the first' if key in a else 'the second'}"
            found = first_difference(a[key], b[key], f"{path}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(a, list):
        for index, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{index}]")
            if found:
                return found
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)} items"
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


def assert_same_state(a: Any, b: Any) -> None:
    difference = first_difference(contents(a), contents(b))
    if difference is not None:
        raise AssertionError(f"states differ at {difference}")
