"""What a turn produces: the reply, the journal records, the timers to arm, the actors to poke.

A state machine method takes a command and `now_ms`, applies the records it decided on through its
own `apply`, and returns an `Outcome`. The kernel carries the rest out: it journals the records,
arms the timers with the supervisor, pokes the named actors so their waiters look again, and sends
the reply once the records are durable. Replay calls only `apply`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["Outcome", "Timer", "ActorKey", "Space"]

# An actor is named by a tuple (`actor_keys.py`).
ActorKey = tuple

# A space's state (`space.SpaceState`) as the modules it is made of name it: `space.py` imports
# them, so they do not import it back (no import goes up a layer, not even for types).
Space = Any


class Timer(NamedTuple):
    """Ask the supervisor to send `("expire", tag, marker)` to `actor` at `due_ms` (wall ms).

    `marker` is what the actor checks on arrival (a token, a delivery attempt) so a timer made
    stale by a later renewal or release does nothing.
    """

    due_ms: int
    actor: ActorKey
    tag: Any
    marker: Any


@dataclass(slots=True)
class Outcome:
    reply: Any = None
    records: list[dict] = field(default_factory=list)
    timers: list[Timer] = field(default_factory=list)
    # Actors whose parked callers should re-run their commands (state they wait on changed).
    pokes: list[ActorKey] = field(default_factory=list)
    # True when the command found nothing to do now and its caller may park until a poke.
    empty: bool = False
