"""What the server hands the durable store: the kernel's state and its record format.

`snapshots` knows nothing of the kernel (`snapshots/model.py` says what it needs); this is where
the two meet. The factory is a `functools.partial` of the class, which pickles, so a snapshot's
child process makes exactly the state the server makes, with the server's limits.
"""

from __future__ import annotations

import functools

from ..actors.layout import place_record
from ..actors.limits import Limits
from ..actors.records import FORMAT
from ..actors.state import KernelState
from ..snapshots.model import StateModel

__all__ = ["state_model"]


def state_model(limits: Limits | None = None) -> StateModel:
    """The kernel's `StateModel` with `limits` (the defaults when None)."""
    return StateModel(make_state=functools.partial(KernelState, limits or Limits()), records=FORMAT, place=place_record)
