"""Every command, by name: the catalogue the shell and the tests reach commands through (`c.AcquireClaim`).

No command is written here. Each is declared with its primitive (`claiming.py` declares the claims'
commands, `task_commands.py` the tasks', ...: a frozen dataclass whose fields say where each value
comes from and which limits it keeps, `primitive.py`), and this module gathers them from the
declarations, so a new command is in the catalogue as soon as its primitive declares it.

Adding an operation: declare its command and transition with its primitive, and its route in
`server/routes/`; the OpenAPI document and the API reference follow from those declarations.
"""

from __future__ import annotations

from typing import Any

from .actor_keys import (
    KEYS_ACTOR, barrier_actor, barrier_name_actor, capacity_actor, claim_actor, events_actor, mailbox_ops_actor,
    mailboxes_actor, once_actor, queue_actor, run_actor, scope_actor, timers_actor,
)
from .primitive import BASES_MADE, Command, FireTimer
from .primitives import commands_of

# The commands the primitives declare, and the bases some of them derive from.
_COMMANDS = {**commands_of(), **{base.__name__: base for base in BASES_MADE}}
assert FireTimer in _COMMANDS.values()
globals().update(_COMMANDS)

__all__ = [
    "Command", *sorted(_COMMANDS), "KEYS_ACTOR", "claim_actor", "scope_actor", "queue_actor", "mailboxes_actor",
    "mailbox_ops_actor", "once_actor", "run_actor", "capacity_actor", "barrier_actor", "barrier_name_actor",
    "timers_actor", "events_actor",
]


def __getattr__(name: str) -> Any:
    raise AttributeError(f"no command {name!r}: each is declared with its primitive (`primitives.PRIMITIVES`)")
