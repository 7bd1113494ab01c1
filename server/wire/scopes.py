"""The wire shapes of scopes and runs (`actors/scopes.py`'s and `actors/runs.py`'s views)."""

from __future__ import annotations

from typing import Any

from ...actors.runs import PendingRemovalView
from ...actors.scopes import ScopeView
from .shape import Shape, component

__all__ = ["SCOPE", "PENDING_REMOVAL", "COMPONENTS"]

# A scope (a run at the root). Its deadline is `deadline`, as the request that sets it names it
# (and the official clients read it).
SCOPE = Shape(ScopeView, rename={"deadline_ms": "deadline"})
# What retention will remove, in a space's caps (described there, `routes/inspect.py`): the
# retention in whole seconds, as it is set.
PENDING_REMOVAL = Shape(PendingRemovalView, seconds={"ended_run_retention_ms": "endedRunRetentionSeconds"})

# The OpenAPI components these shapes make, by name.
COMPONENTS: dict[str, dict[str, Any]] = {
    "Scope": component(SCOPE),
}
