"""The runstate kernel: pure state machines inside per-key trio actors, and the supervisor.

Layers, from the inside out: the tables (`scopes`, `claims`, `mailboxes`, `messages`, `tasks`,
`keys`, `idempotency`) decide and apply records and never do IO; the parts of a space that hold
the commands (`claiming`, `work`) and the space itself (`space`) and the whole state (`state`)
compose them. `commands` declares every operation as data, `fields` says how each field is read and
checked, `transitions` maps each command to its pure transition. The `kernel` runs commands in
actors, journals their records through the `journal` protocol and keeps their timers with the
`supervisor`; `reads` answers views without a turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import import_name

# Importing the package imports none of its modules: each name is imported when it is first read
# (`__getattr__`), so a leaf module (the limits, the errors, a command-line tool's helpers) loads
# without the rest. The checker reads the names from these imports, which never run.
if TYPE_CHECKING:
    from . import commands
    from .clock import Clock
    from .errors import KernelError
    from .ids import IdSource
    from .journal import Journal, MemoryJournal
    from .kernel import EMPTY, Idem, Kernel
    from .limits import Limits
    from .outcome import Outcome, Timer
    from .state import KernelState
    from .timestamps import format_ms, parse_timestamp

# Each public name and the module that defines it.
_EXPORTS = {
    "Clock": ".clock",
    "KernelError": ".errors",
    "IdSource": ".ids",
    "Journal": ".journal",
    "MemoryJournal": ".journal",
    "EMPTY": ".kernel",
    "Idem": ".kernel",
    "Kernel": ".kernel",
    "Limits": ".limits",
    "Outcome": ".outcome",
    "Timer": ".outcome",
    "KernelState": ".state",
    "format_ms": ".timestamps",
    "parse_timestamp": ".timestamps",
}

__all__ = [
    "Clock",
    "EMPTY",
    "Idem",
    "IdSource",
    "Journal",
    "Kernel",
    "KernelError",
    "KernelState",
    "Limits",
    "MemoryJournal",
    "Outcome",
    "Timer",
    "commands",
    "format_ms",
    "parse_timestamp",
]


def __getattr__(name: str) -> Any:
    """A public name or a module of the package, imported now (and kept, so this runs once a name)."""
    return import_name(__name__, globals(), _EXPORTS, name)


def __dir__() -> list[str]:
    """The public names too, before they are first read."""
    return sorted({*globals(), *__all__})
