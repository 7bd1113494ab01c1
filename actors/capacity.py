"""The capacity part of a space: what pools, quotas, budgets, work limits and admission share.

`CapacityCommands` is one part of a `SpaceState`: the tables of the capacity primitives (each made
by its own primitive: pools `pool_commands.py`, quotas `quotas.py`, budgets `budgets.py`, work
limits `work_limits.py`), the tasks' requirements admission takes (`admission.py`), the queues with
an admission parked on them, the scope tree (to refuse work in an ended scope) and the space's
`commit`. Every command on a pool, an allowance, a work limit or a budget runs on the space's one
capacity actor `("capacity", space)`, so a name is created once and each decision sees every
earlier one (see docs/design-capacity.md for why one actor, and its trade-off): the commands
derive from `CapacityCommand`, which names it.

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, cast

from .actor_keys import ActorKey, capacity_actor
from .limits import Limits
from .outcome import Outcome, Space, State
from .primitive import Command, command
from .scopes import ScopeTree
from .shapes import Record

if TYPE_CHECKING:  # the tables the capacity primitives make on this part: named for the checker only
    from .budgets import BudgetTable
    from .pools import PoolTable
    from .quotas import AllowanceTable
    from .work_limits import WorkLimitTable

__all__ = ["CapacityCommands", "CapacityCommand"]

Commit = Callable[..., Outcome]


@command(base=True)
class CapacityCommand(Command):
    """A command of the capacity part: it runs on the space's one capacity actor."""

    def actor(self, state: State) -> ActorKey:
        return capacity_actor(self.space)  # type: ignore[attr-defined]  # each capacity command declares `space` (a path field), which this base leaves to them


class CapacityCommands:
    __slots__ = (
        "_space_id", "limits", "scopes", "pools", "allowances", "work_limits", "budgets", "_commit", "requirements", "wakeups",
        "subtree_wakeups", "check_entities",
    )
    # Queues with an admission parked on them: not state (parked calls do not outlive a process).
    # `subtree_wakeups`: those admitting from descendant scopes too, which a new task of any queue
    # may concern. (`scopes` is the space's own tree, compared there.)
    _DERIVED = ("wakeups", "subtree_wakeups", "scopes", "check_entities")

    def __init__(self, space_id: str, limits: Limits, scopes: ScopeTree, commit: Commit) -> None:
        self._space_id = space_id
        self.limits = limits
        self.scopes = scopes
        # The tables, each made by its primitive (in the order the space makes them): None until then.
        self.pools: PoolTable = cast("PoolTable", None)
        self.allowances: AllowanceTable = cast("AllowanceTable", None)
        self.budgets: BudgetTable = cast("BudgetTable", None)
        self.work_limits: WorkLimitTable = cast("WorkLimitTable", None)
        self._commit = commit
        # The space's cap on the entities it keeps (`caps.py`): a waiter is one more.
        self.check_entities: Callable[[int], None] = lambda adding: None
        # Task id -> what admission must take for it (`admission.py`), kept with the task.
        self.requirements: dict[str, Record] = {}
        self.wakeups: set[ActorKey] = set()
        self.subtree_wakeups: set[ActorKey] = set()

    @property
    def actor(self) -> ActorKey:
        """The capacity actor of this space (where its timers fire)."""
        return capacity_actor(self._space_id)

    def commit(self, outcome: Outcome, *records: Record) -> Outcome:
        return self._commit(outcome, *records)

    def needs_admission(self, task_id: str) -> bool:
        return task_id in self.requirements

    def take_wakeups(self) -> list[ActorKey]:
        """The queues of parked admissions, once: each looks again and parks again if need be."""
        woken = list(self.wakeups | self.subtree_wakeups)
        self.wakeups.clear()
        self.subtree_wakeups.clear()
        return woken

    def take_subtree_wakeups(self) -> list[ActorKey]:
        """The queues of parked admissions that include descendants, once (a task was created)."""
        woken = list(self.subtree_wakeups)
        self.subtree_wakeups.clear()
        return woken


def make(space: Space) -> CapacityCommands:
    """The capacity part of a new space (the first capacity primitive makes it, `pool_commands.py`)."""
    part = space.capacity = CapacityCommands(space.id, space.limits, space.scopes, space.commit)
    part.check_entities = space.check_entities
    return part
