"""The runstate kernel: pure state machines inside per-key trio actors, and the supervisor.

Layers, from the inside out: the state machines (`scopes`, `claims`, `mailboxes`, `messages`,
`tasks`, `keys`, `idempotency`, gathered per space in `space` and `work` and overall in `state`)
decide and apply records and never do IO; the `kernel` runs them in actors, journals their records
and keeps their timers with the `supervisor`; `ops` and `queue_ops` are what the HTTP shell calls.
"""

from .clock import Clock
from .errors import KernelError
from .ids import IdSource
from .kernel import EMPTY, Idem, Kernel
from .limits import Limits
from .ops import ClaimOps, KeyOps, ScopeOps
from .queue_ops import MailboxOps, MessageOps, TaskOps
from .outcome import Outcome, Timer
from .state import KernelState
from .timestamps import format_ms, parse_timestamp

__all__ = [
    "Clock",
    "ClaimOps",
    "EMPTY",
    "Idem",
    "IdSource",
    "Kernel",
    "KernelError",
    "KernelState",
    "KeyOps",
    "Limits",
    "MailboxOps",
    "MessageOps",
    "Outcome",
    "ScopeOps",
    "TaskOps",
    "Timer",
    "format_ms",
    "parse_timestamp",
]
