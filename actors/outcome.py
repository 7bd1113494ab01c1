"""What a turn produces: the reply, the journal records, the timers to arm, the actors to poke.

A state machine method takes a command and `now_ms`, applies the records it decided on through its
own `apply`, and returns an `Outcome`. The kernel carries the rest out: it journals the records,
arms the timers with the supervisor, pokes the named actors so their waiters look again, and sends
the reply once the records are durable. Replay calls only `apply`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

# An actor is named by a tuple (`actor_keys.py`).
from .actor_keys import ActorKey
from .shapes import Record

__all__ = ["Outcome", "Timer", "TimerTag", "TimerIdent", "TimerMarker", "ActorKey", "Space", "State"]

# A space's state (`space.SpaceState`) as the modules it is made of name it: `space.py` imports
# them, so they do not import it back at run time (no import goes up a layer); the type checker
# alone reads the class itself. The kernel's state (`state.KernelState`), which a command reads to
# find its actor, likewise.
if TYPE_CHECKING:
    from .space import SpaceState as Space
    from .state import KernelState as State
else:
    Space = State = Any  # read by the checker only

# A timer's tag: its kind (`primitive.timer_kind`), then what it is about (an id, a due time, a
# scope and a key); its marker: what makes it stale (a token, a generation, a due time) or None.
TimerIdent = str | int | tuple[str, str] | None
TimerTag = tuple[str, TimerIdent]
TimerMarker = str | int | None


class Timer(NamedTuple):
    """Ask the supervisor to send `("expire", tag, marker)` to `actor` at `due_ms` (wall ms).

    `marker` is what the actor checks on arrival (a token, a delivery attempt) so a timer made
    stale by a later renewal or release does nothing.
    """

    due_ms: int
    actor: ActorKey
    tag: TimerTag
    marker: TimerMarker


@dataclass(slots=True)
class Outcome:
    reply: Any = None
    records: list[Record] = field(default_factory=list)
    timers: list[Timer] = field(default_factory=list)
    # Actors whose parked callers should re-run their commands (state they wait on changed).
    pokes: list[ActorKey] = field(default_factory=list)
    # True when the command found nothing to do now and its caller may park until a poke.
    empty: bool = False
