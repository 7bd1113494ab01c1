"""A task's requirements: pools, quotas and budgets by name, read and checked, then resolved to ids.

What admission takes with a task (`admission.py`) is named in its `requirements`; a mailbox may
state default ones (`mailboxes.py`). `parse_requirements` reads and checks that value by its shape
and bounds, when a command is parsed; `requirements_record` resolves it against the space when the
task is submitted (whether the names exist, and whether a pool or a budget could ever give what is
asked), as the `task.requirements` record admission reads. Below the primitives that use it
(tasks, mailboxes, admission), so none of them imports another for it.

Pure: no IO.
"""

from __future__ import annotations

from typing import Any

from .errors import VALIDATION_FAILED, KernelError, quote
from .fields import read_minor
from .outcome import Space
from .primitive import record_type
from .shapes import Body, Record

__all__ = ["parse_requirements", "requirements_record", "refuse", "POOLS_MAX", "QUOTAS_MAX", "BUDGETS_MAX", "TASK_REQUIREMENTS", "REQUIREMENTS"]

# The record type of a task's requirements resolved to ids (applied by admission, `admission.py`).
TASK_REQUIREMENTS = record_type("task.requirements")

POOLS_MAX, QUOTAS_MAX, BUDGETS_MAX = 4, 4, 2
# What a `requirements` object holds, as the API reference says it.
REQUIREMENTS = (
    f"pools (name, units: 1 unless given; at most {POOLS_MAX}), quotas (name, units: 1 unless given; at most {QUOTAS_MAX}), "
    f"budgets (name, reserveMinor; at most {BUDGETS_MAX}); no other field"
)


def refuse(message: str) -> KernelError:
    return KernelError(VALIDATION_FAILED, message)


def _entries(value: Body, kind: str, most: int, amount_field: str) -> list[list[str | int]]:
    items = value.get(kind)
    if items is None:
        return []
    if not isinstance(items, list) or len(items) > most:
        raise refuse(f"requirements.{kind} must be a list of at most {most} items")
    entries, names = [], set()
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not 1 <= len(item["name"]) <= 256:
            raise refuse(f"each of requirements.{kind} must be an object with a name (1-256 characters), got {quote(item)}")
        unknown = set(item) - {"name", amount_field}
        if unknown:
            raise refuse(
                f"requirements.{kind}[{item['name']!r}] takes name and {amount_field}, not {', '.join(map(repr, sorted(unknown)))}"
            )
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


def parse_requirements(value: Any) -> Record | None:
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


def requirements_record(space: Space, command: Any, now_ms: int) -> Record | None:
    """The requirements of a new task, resolved to ids (NOT_FOUND for a name that does not exist;
    400 for more than a pool or a window could ever give, since the task could never start)."""
    parsed = parse_requirements(command.requirements)
    if parsed is None:
        return None
    part = space.capacity
    pools = []
    for name, units in parsed["pools"]:
        pool = part.pools.find(name)
        if units > pool.units_total:
            raise refuse(f"requirements.pools[{name!r}] asks {units} units of a {pool.units_total}-unit pool")
        pools.append([pool.id, units])
    quotas = []
    for name, units in parsed["quotas"]:
        allowance = part.allowances.find(name)
        part.allowances.check_units(allowance, units)
        quotas.append([allowance.id, units])
    budgets = []
    for name, amount in parsed["budgets"]:
        budget = part.budgets.find(name)
        if amount > budget.limit:
            raise refuse(f"requirements.budgets[{name!r}] asks {amount}, more than the budget's limit {budget.limit}")
        budgets.append([budget.id, str(amount)])
    return {"type": TASK_REQUIREMENTS, "task_id": command.task_id, "pools": pools, "quotas": quotas, "budgets": budgets, "at_ms": now_ms}
