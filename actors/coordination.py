"""The coordination part of a space: what barriers, timers and task groups share.

`CoordinationCommands` is one part of a `SpaceState`: the tables of the coordination primitives
(each made by its own: `barriers.py`, `timers.py`, `groups.py`), the scope tree, the mailboxes and
tasks (a group's members are tasks of its queue), the queue part, and the space's `commit`. Each
primitive declares its commands, records, timers and events in its own module; this part only
holds what they share.

Where each runs (the actor that serializes it):
    barriers    ("barrier", space, barrier_id)     create, arrive
                ("barrier-name", space, scope, name)  get or create by name
    timers      ("timers", space, scope_id)        create (by name too), poll (and its long poll), ack, cancel,
                                                   and the timers' own firing and expiry
    groups      the group's queue actor            submit, join-task, accept, reject, close, seal,
                ("queue", space, mailbox, gate)    and the deadline; created in its parent's scope
                                                   actor, like any child scope

What follows from other records is applied with them (each primitive's `after`, live and in
replay): a scope's end cancels the open barriers, armed or fired timers and unfinished groups of
its subtree; a member task's end, a verdict or a seal may finalize its group. Those changes come
back as the list of what changed, for the event log.

Pure: no IO, no clock reads, no awaits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, cast

from .events import Change
from .limits import Limits
from .mailboxes import MailboxTable
from .messages import MessageTable
from .outcome import Outcome, Space
from .scopes import ScopeTree
from .tasks import TaskTable
from .shapes import Record, View

if TYPE_CHECKING:  # the tables the coordination primitives make on this part: named for the checker only
    from .barriers import BarrierTable
    from .groups import GroupTable
    from .timers import TimerTable
    from .work import WorkCommands

__all__ = ["CoordinationCommands", "Change", "make"]

Commit = Callable[..., Outcome]


class CoordinationCommands:
    __slots__ = ("id", "limits", "scopes", "mailboxes", "messages", "tasks", "work", "barriers", "timers", "groups", "_commit")
    # The space's own tables and its work part, compared there (`snapshots.equality`).
    _DERIVED = ("scopes", "mailboxes", "messages", "tasks", "work")

    def __init__(
        self,
        space_id: str,
        limits: Limits,
        scopes: ScopeTree,
        mailboxes: MailboxTable,
        messages: MessageTable,
        tasks: TaskTable,
        work: WorkCommands,
        commit: Commit,
    ) -> None:
        self.id = space_id
        self.limits = limits
        self.scopes = scopes
        self.mailboxes = mailboxes
        self.messages = messages
        self.tasks = tasks
        self.work = work
        # The tables, each made by its primitive (in the order the space makes them): None until then.
        self.barriers: BarrierTable = cast("BarrierTable", None)
        self.timers: TimerTable = cast("TimerTable", None)
        self.groups: GroupTable = cast("GroupTable", None)
        self._commit = commit

    def commit(self, outcome: Outcome, *records: Record) -> Outcome:
        return self._commit(outcome, *records)


def make(space: Space) -> CoordinationCommands:
    """The coordination part of a new space (the first coordination primitive makes it, `barriers.py`)."""
    part = space.coordination = CoordinationCommands(
        space.id, space.limits, space.scopes, space.mailboxes, space.messages, space.tasks, space.work, space.commit
    )
    return part
