"""A task's requirements as a request states them: pools, quotas and budgets by name, read and checked.

What admission takes with a task (`admission.py`) is named in its `requirements`; a mailbox may
state default ones (`mailboxes.py`). This module only reads and checks that value, by its shape
and bounds: whether the names exist, and whether a pool or a budget could ever give what is asked,
is decided against the space when the task is submitted (`admission.requirements_record`). A leaf
module, so that a command can check its requirements when it is parsed.

Pure: no IO.
"""

from __future__ import annotations

from typing import Any

from .errors import VALIDATION_FAILED, KernelError, quote
from .fields import read_minor

__all__ = ["parse_requirements", "refuse", "POOLS_MAX", "QUOTAS_MAX", "BUDGETS_MAX"]

POOLS_MAX, QUOTAS_MAX, BUDGETS_MAX = 4, 4, 2


def refuse(message: str) -> KernelError:
    return KernelError(VALIDATION_FAILED, message)


def _entries(value: dict, kind: str, most: int, amount_field: str) -> list[list]:
    items = value.get(kind)
    if items is None:
        return []
    if not isinstance(items, list) or len(items) > most:
        raise refuse(f"requirements.{kind} must be a list of at most {most} items")
    entries, names = [], set()
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not 1 <= len(item["name"]) <= 256:
            raise refuse(f"each of requirements.{kind} must be an object with a name (1-256 characters), got {quote(item)}")
        if item["name"] in names:
            raise refuse(f"requirements.{kind} names {item['name']!r} twice")
        names.add(item["name"])
        if amount_field == "units":
            units = item.get("units", 1)
            if not isinstance(units, int) or isinstance(units, bool) or units < 1:
                raise refuse(f"requirements.{kind}[{item['name']!r}].units must be an integer of at least 1")
            entries.append([item["name"], units])
        else:
            amount = read_minor(f"requirements.{kind}[{item['name']!r}].{amount_field}", item.get(amount_field))
            if amount == 0:
                raise refuse(f"requirements.{kind}[{item['name']!r}].{amount_field} must be more than 0")
            entries.append([item["name"], amount])
    return entries


def parse_requirements(value: Any) -> dict | None:
    """`{pools?: [{name, units}] (<=4), quotas?: [{name, units}] (<=4), budgets?: [{name, reserveMinor}] (<=2)}`
    as `{"pools": [[name, units]], "quotas": [[name, units]], "budgets": [[name, amount]]}`, or None
    when it names nothing."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise refuse("requirements must be an object with pools, quotas and budgets")
    unknown = set(value) - {"pools", "quotas", "budgets"}
    if unknown:
        raise refuse(f"requirements may name pools, quotas and budgets, not {', '.join(sorted(unknown))}")
    parsed = {
        "pools": _entries(value, "pools", POOLS_MAX, "units"),
        "quotas": _entries(value, "quotas", QUOTAS_MAX, "units"),
        "budgets": _entries(value, "budgets", BUDGETS_MAX, "reserveMinor"),
    }
    return parsed if any(parsed.values()) else None
