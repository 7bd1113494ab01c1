"""The wire shapes of scopes and runs (`actors/scopes.py`'s and `actors/runs.py`'s views)."""

from __future__ import annotations

from typing import Any

from ...actors.caps import CapView
from ...actors.runs import PendingRemovalView, SpaceCapsView
from ...actors.scopes import ScopesView, ScopeView
from .shape import Shape, component

__all__ = ["SCOPE", "SCOPES", "PENDING_REMOVAL", "CAP", "SPACE_CAPS", "COMPONENTS"]

# A scope (a run at the root). Its deadline is `deadline`, as the request that sets it names it
# (and the official clients read it).
SCOPE = Shape(ScopeView, rename={"deadline_ms": "deadline"})
# What retention will remove, in a space's caps (described there, `routes/inspect.py`): the
# retention in whole seconds, as it is set.
PENDING_REMOVAL = Shape(PendingRemovalView, seconds={"ended_run_retention_ms": "endedRunRetentionSeconds"})

# The runs of a space, newest first (`/scopes`).
SCOPES = Shape(ScopesView)
# How full a space is (`/caps`): each cap, then what retention will remove.
CAP = Shape(CapView)
SPACE_CAPS = Shape(SpaceCapsView)


def _space_caps() -> dict[str, Any]:
    schema = component(SPACE_CAPS)
    schema["properties"]["pendingRemoval"] = {
        **schema["properties"]["pendingRemoval"],
        "description": "The ended runs still kept and what they hold, removed ended_run_retention_s after each run's end "
                       "(all 0 when that is 0: ended runs are kept for good); overdueRuns are past it and kept because a "
                       "task group not yet finalized still counts on one of their tasks.",
    }
    return schema


# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {
    "Scope": component(SCOPE),
    "Scopes": component(SCOPES),
    "SpaceCaps": _space_caps(),
}
