"""The runstate kernel: pure state machines inside per-key trio actors, and the supervisor.

Layers, from the inside out: the tables (`scopes`, `claims`, `mailboxes`, `messages`, `tasks`,
`keys`, `idempotency`) decide and apply records and never do IO; the parts of a space that hold
the commands (`claiming`, `work`) and the space itself (`space`) and the whole state (`state`)
compose them. `commands` declares every operation as data, `fields` says how each field is read and
checked, `transitions` maps each command to its pure transition. The `kernel` runs commands in
actors, journals their records through the `journal` protocol and keeps their timers with the
`supervisor`; `reads` answers views without a turn.
"""

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
