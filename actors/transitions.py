"""The one dispatch table: which pure transition each command runs.

A transition is `(state, command, now_ms) -> Outcome`: it decides, applies its records through the
state's `apply`, and returns the reply, the records, the timers and the pokes. The kernel looks the
command's type up here in every turn; nothing else reaches into the state. A command missing here
is a bug that the test of this table catches before any request does.
"""

from __future__ import annotations

from typing import Any, Callable

from . import commands as c
from . import admission  # -- capacity --
from .capacity import CapacityCommands  # -- capacity --
from .claiming import ClaimCommands
from .once import OnceCommands
from .coordination import CoordinationCommands
from .events import watch
from .outcome import Outcome
from .runs import RunCommands
from .work import WorkCommands

__all__ = ["TRANSITIONS", "Transition"]

Transition = Callable[[Any, Any, int], Outcome]


def _claims(method: Callable[..., Outcome]) -> Transition:
    """A transition of the claims part of the command's space."""
    return lambda state, command, now_ms: method(state.space(command.space).claiming, command, now_ms)


def _work(method: Callable[..., Outcome]) -> Transition:
    """A transition of the mailboxes, messages and tasks part of the command's space."""
    return lambda state, command, now_ms: method(state.space(command.space).work, command, now_ms)


def _once(method: Callable[..., Outcome]) -> Transition:
    return lambda state, command, now_ms: method(state.space(command.space).onces, command, now_ms)
# -- capacity --
def _capacity(method: Callable[..., Outcome]) -> Transition:
    """A transition of the pools, quotas, work limits and budgets part of the command's space."""
    return lambda state, command, now_ms: method(state.space(command.space).capacity, command, now_ms)


def _submit_task(state: Any, command: c.SubmitTask, now_ms: int) -> Outcome:
    """A submit, held to its work limit: a task it creates is counted on the limit in the same
    turn, in the same batch of records, so no crash can count it without creating it or the reverse."""
    space = state.space(command.space)
    if (command.work_limit is None and command.requirements is None) or space.tasks.by_key(command.scope_id, command.key) is not None:
        return space.work.submit_task(command, now_ms)
    limit = None if command.work_limit is None else space.capacity.check_work_limit(command.work_limit)
    needs = admission.requirements_record(space, command, now_ms)
    outcome = space.work.submit_task(command, now_ms)
    if outcome.reply["created"]:
        if needs is not None:
            space._commit(outcome, needs)
        if limit is not None:
            space.capacity.count_task(outcome, limit, command.task_id, now_ms)
    return outcome
# -- capacity (end) --
# -- coordination --
def _coordination(method: Callable[..., Outcome]) -> Transition:
    """A transition of the barriers, timers and task groups part of the command's space."""
    return lambda state, command, now_ms: method(state.space(command.space).coordination, command, now_ms)


def _ensure_mailbox(state: Any, command: c.EnsureMailbox, now_ms: int) -> Outcome:
    """A put by name; its default requirements resolved to ids first, as a task's are."""
    space = state.space(command.space)
    needs = admission.requirements_record(space, command, now_ms)
    resolved = None if needs is None else {kind: needs[kind] for kind in ("pools", "quotas", "budgets")}
    return space.work.ensure_mailbox(command, now_ms, resolved)


def _submit_group_task(state: Any, command: c.SubmitGroupTask, now_ms: int) -> Outcome:
    """A group member is submitted as any task is, its requirements included."""
    part = state.space(command.space).coordination
    return part.submit_member(command, now_ms, lambda task, at_ms: _submit_task(state, task, at_ms))


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
    c.ForceReleaseClaim: _claims(ClaimCommands.force_release),
    c.CreateMailbox: _work(WorkCommands.create_mailbox),
    c.SendMessage: _work(WorkCommands.send_message),
    c.Receive: _work(WorkCommands.receive),
    c.ReceiveMany: _work(WorkCommands.receive_many),
    c.CompleteDelivery: _work(WorkCommands.complete_delivery),
    c.NackDelivery: _work(WorkCommands.nack_delivery),
    c.RenewDelivery: _work(WorkCommands.renew_delivery),
    c.RequeueDeadLetters: _work(WorkCommands.requeue_dead_letters),
    c.DeleteDeadLetters: _work(WorkCommands.delete_dead_letters),
    c.PurgeMailbox: _work(WorkCommands.purge_mailbox),
    c.SubmitTask: _submit_task,  # -- capacity --: held to its work limit
    c.CancelTask: _work(WorkCommands.cancel_task),
    c.JoinTask: _work(WorkCommands.join_task),
    c.DetachTask: _work(WorkCommands.detach_task),
    c.EnsureRun: lambda state, command, now_ms: RunCommands.ensure(state.space(command.space).runs, command, now_ms),
    c.EnsureMailbox: _ensure_mailbox,
    c.WaitTask: _work(WorkCommands.wait_task),
    c.AcquireOnce: _once(OnceCommands.acquire),
    c.WaitOnce: _once(OnceCommands.wait),
    c.RenewOnce: _once(OnceCommands.renew),
    c.CompleteOnce: _once(OnceCommands.complete),
    c.FailOnce: _once(OnceCommands.fail),
    # -- capacity --
    c.CreatePool: _capacity(CapacityCommands.create_pool),
    c.AcquireGrant: _capacity(CapacityCommands.acquire_grant),
    c.RenewGrant: _capacity(CapacityCommands.renew_grant),
    c.ReleaseGrant: _capacity(CapacityCommands.release_grant),
    c.CreateAllowance: _capacity(CapacityCommands.create_allowance),
    c.Consume: _capacity(CapacityCommands.consume),
    c.WaitAllowance: _capacity(CapacityCommands.wait),
    c.CancelWaiter: _capacity(CapacityCommands.cancel_waiter),
    c.Cooldown: _capacity(CapacityCommands.cooldown),
    c.CreateWorkLimit: _capacity(CapacityCommands.create_work_limit),
    c.CreateBudget: _capacity(CapacityCommands.create_budget),
    c.Reserve: _capacity(CapacityCommands.reserve),
    c.Settle: _capacity(CapacityCommands.settle),
    c.Void: _capacity(CapacityCommands.void),
    c.Admit: lambda state, command, now_ms: admission.admit(state.space(command.space), command, now_ms),
    c.EnsurePool: _capacity(CapacityCommands.ensure_pool),
    c.EnsureAllowance: _capacity(CapacityCommands.ensure_allowance),
    c.EnsureBudget: _capacity(CapacityCommands.ensure_budget),
    c.WaitPool: _capacity(CapacityCommands.wait_pool),
    c.CancelPoolWaiter: _capacity(CapacityCommands.cancel_pool_waiter),
    # -- capacity (end) --
    # -- coordination --
    c.CreateBarrier: _coordination(CoordinationCommands.create_barrier),
    c.EnsureBarrier: _coordination(CoordinationCommands.ensure_barrier),
    c.ArriveBarrier: _coordination(CoordinationCommands.arrive),
    c.CreateTimer: _coordination(CoordinationCommands.create_timer),
    c.EnsureTimer: _coordination(CoordinationCommands.ensure_timer),
    c.PollTimers: _coordination(CoordinationCommands.poll_timers),
    c.AckTimer: _coordination(CoordinationCommands.ack_timer),
    c.CancelTimer: _coordination(CoordinationCommands.cancel_timer),
    c.CreateGroup: _coordination(CoordinationCommands.create_group),
    c.SubmitGroupTask: _submit_group_task,
    c.JoinGroupTask: _coordination(CoordinationCommands.join_member),
    c.AcceptGroupTask: _coordination(CoordinationCommands.verdict),
    c.RejectGroupTask: _coordination(CoordinationCommands.verdict),
    c.CloseGroup: _coordination(CoordinationCommands.seal),
    c.SealGroup: _coordination(CoordinationCommands.seal),
    c.WatchEvents: lambda state, command, now_ms: watch(state.space(command.space), command, now_ms),
    # -- end coordination --
    c.FireTimer: lambda state, command, now_ms: state.space(command.on[1]).fire(command.tag, command.marker, now_ms),
}
