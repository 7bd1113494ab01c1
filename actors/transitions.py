"""The one dispatch table: which pure transition each command runs.

A transition is `(state, command, now_ms) -> Outcome`: it decides, applies its records through the
state's `apply`, and returns the reply, the records, the timers and the pokes. The kernel looks the
command's type up here in every turn; nothing else reaches into the state. A command missing here
is a bug that the test of this table catches before any request does.
"""

from __future__ import annotations

from typing import Any, Callable

from . import commands as c
from .claiming import ClaimCommands
from .coordination import CoordinationCommands
from .events import watch
from .outcome import Outcome
from .work import WorkCommands

__all__ = ["TRANSITIONS", "Transition"]

Transition = Callable[[Any, Any, int], Outcome]


def _claims(method: Callable[..., Outcome]) -> Transition:
    """A transition of the claims part of the command's space."""
    return lambda state, command, now_ms: method(state.space(command.space).claiming, command, now_ms)


def _work(method: Callable[..., Outcome]) -> Transition:
    """A transition of the mailboxes, messages and tasks part of the command's space."""
    return lambda state, command, now_ms: method(state.space(command.space).work, command, now_ms)


# -- coordination --
def _coordination(method: Callable[..., Outcome]) -> Transition:
    """A transition of the barriers, timers and task groups part of the command's space."""
    return lambda state, command, now_ms: method(state.space(command.space).coordination, command, now_ms)


def _end_scope(state: Any, command: c.EndScope, now_ms: int) -> Outcome:
    return state.space(command.space).end_scope(command, now_ms)


TRANSITIONS: dict[type, Transition] = {
    c.RegisterKey: lambda state, command, now_ms: state.register_key(command, now_ms),
    c.RevokeKey: lambda state, command, now_ms: state.revoke_key(command, now_ms),
    c.CreateScope: lambda state, command, now_ms: state.space(command.space).create_scope(command, now_ms),
    c.CancelScope: _end_scope,
    c.CompleteScope: _end_scope,
    c.AcquireClaim: _claims(ClaimCommands.acquire),
    c.RenewClaim: _claims(ClaimCommands.renew),
    c.ReleaseClaim: _claims(ClaimCommands.release),
    c.CreateMailbox: _work(WorkCommands.create_mailbox),
    c.SendMessage: _work(WorkCommands.send_message),
    c.Receive: _work(WorkCommands.receive),
    c.CompleteDelivery: _work(WorkCommands.complete_delivery),
    c.NackDelivery: _work(WorkCommands.nack_delivery),
    c.RenewDelivery: _work(WorkCommands.renew_delivery),
    c.SubmitTask: _work(WorkCommands.submit_task),
    c.CancelTask: _work(WorkCommands.cancel_task),
    c.JoinTask: _work(WorkCommands.join_task),
    c.DetachTask: _work(WorkCommands.detach_task),
    # -- coordination --
    c.CreateBarrier: _coordination(CoordinationCommands.create_barrier),
    c.ArriveBarrier: _coordination(CoordinationCommands.arrive),
    c.CreateTimer: _coordination(CoordinationCommands.create_timer),
    c.PollTimers: _coordination(CoordinationCommands.poll_timers),
    c.AckTimer: _coordination(CoordinationCommands.ack_timer),
    c.CancelTimer: _coordination(CoordinationCommands.cancel_timer),
    c.CreateGroup: _coordination(CoordinationCommands.create_group),
    c.SubmitGroupTask: _coordination(CoordinationCommands.submit_member),
    c.JoinGroupTask: _coordination(CoordinationCommands.join_member),
    c.AcceptGroupTask: _coordination(CoordinationCommands.verdict),
    c.RejectGroupTask: _coordination(CoordinationCommands.verdict),
    c.CloseGroup: _coordination(CoordinationCommands.seal),
    c.SealGroup: _coordination(CoordinationCommands.seal),
    c.WatchEvents: lambda state, command, now_ms: watch(state.space(command.space), command, now_ms),
    # -- end coordination --
    c.FireTimer: lambda state, command, now_ms: state.space(command.on[1]).fire(command.tag, command.marker, now_ms),
}
