"""Scopes (runs): a tree of lifetimes that everything else lives in.

A scope is created active, and ends once: cancelled, completed, or expired at its deadline. Its
*effective* state is the first ending found walking from it up to the root, so ending a scope ends
its whole subtree at once, without touching every descendant. What the end does to claims, queued
tasks and waiters in the subtree is decided by the space (`space.py`), which owns the cascade.

Pure: no IO, no clock reads; every method takes `now_ms`.
"""

from __future__ import annotations

from typing import Callable, Iterator

from .caps import full
from .errors import CONFLICT, NOT_FOUND, SCOPE_CANCELLED, VALIDATION_FAILED, KernelError, quote
from .limits import Limits
from .timestamps import format_ms

__all__ = ["Scope", "ScopeTree", "ACTIVE", "CANCELLED", "COMPLETED", "EXPIRED", "SCOPE_CREATED", "SCOPE_ENDED", "SCOPE_IMAGE"]

# The record types this module decides and applies (the journal's spelling of each).
SCOPE_CREATED = "scope.created"
SCOPE_ENDED = "scope.ended"
SCOPE_IMAGE = "scope.image"

ACTIVE = "ACTIVE"
CANCELLED = "CANCELLED"
COMPLETED = "COMPLETED"
EXPIRED = "EXPIRED"


class Scope:
    __slots__ = (
        "id",
        "name",
        "parent_id",
        "deadline_ms",
        "child_limit",
        "stored_state",
        "created_ms",
        "ended_ms",
        "children",
        "depth",
        "live",  # not ended, nor under an ended scope (what `space_scopes_max` counts)
    )

    def __init__(
        self,
        scope_id: str,
        name: str | None,
        parent_id: str | None,
        deadline_ms: int | None,
        child_limit: int | None,
        created_ms: int,
        depth: int,
    ) -> None:
        self.id = scope_id
        self.name = name
        self.parent_id = parent_id
        self.deadline_ms = deadline_ms
        self.child_limit = child_limit
        self.stored_state = ACTIVE
        self.created_ms = created_ms
        self.ended_ms: int | None = None
        self.children: list[str] = []
        self.depth = depth
        self.live = True


class ScopeTree:
    """The scopes of one space, and how many of them are live (counted as records are applied)."""

    # `check_entities`: the space's cap on the entities it keeps (`caps.py`), not state.
    _DERIVED = ("check_entities",)
    __slots__ = ("_scopes", "_limits", "live", "check_entities")

    def __init__(self, limits: Limits) -> None:
        self._scopes: dict[str, Scope] = {}
        self._limits = limits
        self.live = 0
        self.check_entities: Callable[[int], None] = lambda adding: None

    def __len__(self) -> int:
        return len(self._scopes)

    def __contains__(self, scope_id: str) -> bool:
        return scope_id in self._scopes

    def get(self, scope_id: str) -> Scope:
        scope = self._scopes.get(scope_id)
        if scope is None:
            raise KernelError(NOT_FOUND, f"scope {quote(scope_id)} not found")
        return scope

    def all(self) -> Iterator[Scope]:
        return iter(self._scopes.values())

    # -- reading --------------------------------------------------------------------------------

    def effective(self, scope: Scope, now_ms: int) -> str:
        """ACTIVE only if this scope and every ancestor is active and before its deadline."""
        node: Scope | None = scope
        while node is not None:
            if node.stored_state != ACTIVE:
                return node.stored_state
            if node.deadline_ms is not None and now_ms >= node.deadline_ms:
                return EXPIRED
            node = self._scopes.get(node.parent_id) if node.parent_id else None
        return ACTIVE

    def require_active(self, scope_id: str, now_ms: int) -> Scope:
        """The scope, or NOT_FOUND / SCOPE_CANCELLED (the code that stops a worker cleanly)."""
        scope = self.get(scope_id)
        state = self.effective(scope, now_ms)
        if state != ACTIVE:
            raise KernelError(SCOPE_CANCELLED, f"scope {scope_id} is {state.lower()}")
        return scope

    def subtree(self, scope_id: str) -> list[str]:
        """The scope and all its descendants, parents before children."""
        order = [scope_id]
        for current in order:  # grows while iterating: a breadth-first walk
            order.extend(self._scopes[current].children)
        return order

    def view(self, scope: Scope, now_ms: int) -> dict:
        return {
            "id": scope.id,
            "name": scope.name,
            "parentId": scope.parent_id,
            "deadline": None if scope.deadline_ms is None else format_ms(scope.deadline_ms),
            "childLimit": scope.child_limit,
            "children": len(scope.children),
            "storedState": scope.stored_state,
            "effective": self.effective(scope, now_ms),
            "createdAt": format_ms(scope.created_ms),
            "endedAt": None if scope.ended_ms is None else format_ms(scope.ended_ms),
        }

    # -- deciding -------------------------------------------------------------------------------

    def decide_create(
        self,
        scope_id: str,
        name: str | None,
        parent_id: str | None,
        deadline_ms: int | None,
        child_limit: int | None,
        now_ms: int,
    ) -> dict:
        """The `scope.created` record for a new scope, or a refusal."""
        depth = 0
        if parent_id is not None:
            parent = self.require_active(parent_id, now_ms)
            if parent.child_limit is not None and len(parent.children) >= parent.child_limit:
                raise KernelError(
                    CONFLICT,
                    f"scope {parent_id} already has {len(parent.children)} children, "
                    f"its childLimit is {parent.child_limit}",
                )
            depth = parent.depth + 1
            if depth > self._limits.scope_depth_max:
                raise KernelError(
                    VALIDATION_FAILED,
                    f"scopes nest at most {self._limits.scope_depth_max} deep",
                )
        if self.live >= self._limits.space_scopes_max:
            raise full(f"space holds {self.live} live scopes", "space_scopes_max")
        self.check_entities(1)
        if scope_id in self._scopes:  # an id source collision: the caller draws another id
            raise KernelError(CONFLICT, f"scope id {scope_id} is taken")
        return {
            "type": SCOPE_CREATED,
            "id": scope_id,
            "name": name,
            "parent_id": parent_id,
            "deadline_ms": deadline_ms,
            "child_limit": child_limit,
            "at_ms": now_ms,
        }

    def decide_end(self, scope_id: str, state: str, now_ms: int) -> dict | None:
        """The `scope.ended` record that moves an active scope to `state`, or None if it is a repeat.

        Ending a scope the same way twice is harmless; ending it another way than it already ended
        is a CONFLICT (completing a cancelled scope says something false about it).
        """
        scope = self.get(scope_id)
        if scope.stored_state == state:
            return None
        if scope.stored_state != ACTIVE:
            raise KernelError(
                CONFLICT, f"scope {scope_id} is already {scope.stored_state.lower()}"
            )
        return {"type": SCOPE_ENDED, "id": scope_id, "state": state, "at_ms": now_ms}

    # -- images ---------------------------------------------------------------------------------

    def image(self) -> Iterator[dict]:
        """Records that rebuild this tree exactly through `apply_image`.

        Scopes come in creation order, so every parent comes before its children and each
        parent's list of children is rebuilt in the same order.
        """
        for scope in self._scopes.values():
            yield {
                "type": SCOPE_IMAGE,
                "id": scope.id,
                "name": scope.name,
                "parent_id": scope.parent_id,
                "deadline_ms": scope.deadline_ms,
                "child_limit": scope.child_limit,
                "state": scope.stored_state,
                "ended_ms": scope.ended_ms,
                "at_ms": scope.created_ms,
            }

    def apply_image(self, record: dict) -> Scope:
        scope = self.apply_created(record)
        scope.stored_state = record["state"]
        scope.ended_ms = record["ended_ms"]
        if scope.stored_state != ACTIVE and scope.live:
            scope.live = False
            self.live -= 1
        return scope

    # -- applying -------------------------------------------------------------------------------

    def apply_created(self, record: dict) -> Scope:
        parent_id = record["parent_id"]
        depth = 0
        if parent_id is not None:
            parent = self._scopes[parent_id]
            parent.children.append(record["id"])
            depth = parent.depth + 1
        scope = Scope(
            record["id"],
            record["name"],
            parent_id,
            record["deadline_ms"],
            record["child_limit"],
            record["at_ms"],
            depth,
        )
        # Live unless its parent has ended (only an image brings a child after its parent's end).
        scope.live = parent_id is None or self._scopes[parent_id].live
        self.live += scope.live
        self._scopes[scope.id] = scope
        return scope

    def apply_ended(self, record: dict) -> list[str]:
        """Record the end; returns the subtree it ends (parents first), none of which is live now."""
        scope = self._scopes[record["id"]]
        scope.stored_state = record["state"]
        scope.ended_ms = record["at_ms"]
        subtree = self.subtree(scope.id)
        scopes = self._scopes
        for scope_id in subtree:
            node = scopes[scope_id]
            if node.live:
                node.live = False
                self.live -= 1
        return subtree
