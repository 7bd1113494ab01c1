"""The one dispatch table: which pure transition each command runs.

A transition is `(state, command, now_ms) -> Outcome`: it decides, applies its records through the
state's `apply`, and returns the reply, the records, the timers and the pokes. Each primitive
declares its commands with their transitions (`Primitive.commands`); the table is built from the
declarations at import (`primitives.py`), each entry one compiled function. The kernel looks the
command's type up here in every turn; nothing else reaches into the state. A command declared by no
primitive fails at import.
"""

from __future__ import annotations

from typing import Callable

from .primitive import On, Transition
from .primitives import TABLES, compiled

__all__ = ["TRANSITIONS", "Transition", "on"]

TRANSITIONS: dict[type, Transition] = TABLES.transitions


def on(attribute: str, method: Callable[..., object]) -> Transition:
    """The transition that calls `method(part, command, now_ms)` on the part at `attribute` of the
    command's space, as a declaration's `On` entry becomes one (for a test that swaps one in)."""
    entry: On = (attribute, method)
    return compiled(entry)
