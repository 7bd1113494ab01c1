"""Writes refused for a stale token, as the HTTP shell saw them: what the lease swimlanes mark.

A refused renew, release or completion changes nothing, so it makes no record and no event: the
journal is for what happened, and a fenced write is what did not. It is still what an operator
most wants to see after a takeover (a paused worker came back and was turned away), so the shell
reports each `STALE_CLAIM` it answers here (`serve_http`), and the console draws it on the key's
lane. This is an observation, never a source of authority: it is kept in memory, per space, the
newest `FENCED_KEPT_MAX` of them, by the node that answered, and lost at a restart.

Not to be confused with the event log, which is durable and the same on every reader.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Callable, NamedTuple

__all__ = ["Fenced", "FencedWrites", "FENCED_KEPT_MAX", "FENCED_SPACES_MAX"]

# Refusals kept per space, and spaces kept (the least recently fenced space is forgotten first).
FENCED_KEPT_MAX = 1000
FENCED_SPACES_MAX = 1000

# The resource of a fenced route (its fourth path segment) and the path parameter naming it.
_KINDS = {"claims": ("claim", "key"), "messages": ("delivery", "message_id"), "grants": ("grant", "grant_id"),
          "once": ("once", "key"), "timers": ("timer", "timer_id")}


class Fenced(NamedTuple):
    """One refused write: what it named (a claim key, a message id...), how, why, and when."""

    kind: str  # claim, delivery, grant, once, timer
    ident: str  # the claim key, message id, grant id...
    operation: str  # renew, release, complete, nack...
    message: str  # the refusal's message (not the current token, or the lease had ended)
    at_ms: int


class FencedWrites:
    __slots__ = ("_spaces", "listener")

    def __init__(self) -> None:
        self._spaces: OrderedDict[str, deque[Fenced]] = OrderedDict()
        # Told of each refusal as it is kept (the console's live stream), if set.
        self.listener: Callable[[str, Fenced], None] | None = None

    def saw(self, pattern: tuple[str, ...], params: dict[str, str], message: str, at_ms: int) -> None:
        """Keep the refusal of a request to the route `pattern` with these path parameters."""
        space = params.get("space")
        if space is None or len(pattern) < 5:
            return
        kind, param = _KINDS.get(pattern[3], (pattern[3], ""))
        fenced = Fenced(kind, params.get(param, ""), pattern[-1], message, at_ms)
        kept = self._spaces.get(space)
        if kept is None:
            if len(self._spaces) >= FENCED_SPACES_MAX:
                self._spaces.popitem(last=False)
            kept = self._spaces[space] = deque(maxlen=FENCED_KEPT_MAX)
        else:
            self._spaces.move_to_end(space)
        kept.append(fenced)
        if self.listener is not None:
            self.listener(space, fenced)

    def in_space(self, space: str, kind: str | None = None, since_ms: int = 0) -> list[Fenced]:
        """The refusals kept for `space`, oldest first; of one kind and from a time on, if asked."""
        return [f for f in self._spaces.get(space, ()) if (kind is None or f.kind == kind) and f.at_ms >= since_ms]
