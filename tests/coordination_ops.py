"""Barriers, timers, task groups and events as keyword functions, for tests that drive a kernel in
process (the same way as `tests/ops.py`)."""

from __future__ import annotations

from typing import Any

from runstate.actors import commands as c
from runstate.actors import coordination_reads as reads
from runstate.server import wire

from .ops import _Ops

__all__ = ["BarrierOps", "TimerOps", "GroupOps", "EventOps"]


class BarrierOps(_Ops):
    async def create(self, space: str, *, scope_id, target, idem=None) -> dict:
        return await self._submit(c.CreateBarrier, idem, space=space, scope_id=scope_id, target=target)

    async def ensure(self, space: str, name: str, *, scope_id, target, idem=None) -> dict:
        return await self._submit(c.EnsureBarrier, idem, space=space, name=name, scope_id=scope_id, target=target)

    async def arrive(self, space: str, barrier_id: str, *, key, idem=None) -> dict:
        return await self._submit(c.ArriveBarrier, idem, space=space, barrier_id=barrier_id, arrival_key=key)

    def view(self, space: str, barrier_id: str) -> dict:
        return wire.encode(reads.barrier(self._kernel, space, barrier_id))


class TimerOps(_Ops):
    async def create(self, space: str, *, scope_id, after_s=None, at_ms=None, idem=None) -> dict:
        return await self._submit(c.CreateTimer, idem, space=space, scope_id=scope_id, after_s=after_s, at_ms=at_ms)

    async def ensure(self, space: str, name: str, *, scope_id, after_s=None, at_ms=None, idem=None) -> dict:
        return await self._submit(
            c.EnsureTimer, idem, space=space, name=name, scope_id=scope_id, after_s=after_s, at_ms=at_ms
        )

    async def poll(self, space: str, *, scope_id, timer_id=None, wait_ms=None) -> Any:
        return await self._submit(c.PollTimers, space=space, scope_id=scope_id, timer_id=timer_id, wait_ms=wait_ms)

    async def ack(self, space: str, timer_id: str, *, token, idem=None) -> dict:
        return await self._submit(c.AckTimer, idem, space=space, timer_id=timer_id, token=token)

    async def cancel(self, space: str, timer_id: str, *, idem=None) -> dict:
        return await self._submit(c.CancelTimer, idem, space=space, timer_id=timer_id)

    def view(self, space: str, timer_id: str) -> dict:
        return wire.encode(reads.timer(self._kernel, space, timer_id))


class GroupOps(_Ops):
    async def create(self, space: str, *, mailbox_id, condition, threshold=None, expected_members=None,
                     deadline_ms=None, parent_scope_id=None, idem=None) -> dict:
        return await self._submit(
            c.CreateGroup, idem, space=space, mailbox_id=mailbox_id, condition=condition, threshold=threshold,
            expected_members=expected_members, deadline_ms=deadline_ms, parent_scope_id=parent_scope_id,
        )

    async def submit(self, space: str, group_id: str, *, key, task_input=None, deadline_ms=None, idem=None) -> dict:
        return await self._submit(
            c.SubmitGroupTask, idem, space=space, group_id=group_id, key=key, task_input=task_input, deadline_ms=deadline_ms
        )

    async def join(self, space: str, group_id: str, *, task_id, idem=None) -> dict:
        return await self._submit(c.JoinGroupTask, idem, space=space, group_id=group_id, task_id=task_id)

    async def accept(self, space: str, group_id: str, task_id: str) -> dict:
        return await self._submit(c.AcceptGroupTask, space=space, group_id=group_id, task_id=task_id)

    async def reject(self, space: str, group_id: str, task_id: str) -> dict:
        return await self._submit(c.RejectGroupTask, space=space, group_id=group_id, task_id=task_id)

    async def close(self, space: str, group_id: str) -> dict:
        return await self._submit(c.CloseGroup, space=space, group_id=group_id)

    async def seal(self, space: str, group_id: str) -> dict:
        return await self._submit(c.SealGroup, space=space, group_id=group_id)

    def view(self, space: str, group_id: str) -> dict:
        return wire.encode(reads.group(self._kernel, space, group_id))


class EventOps(_Ops):
    def page(self, space: str, *, after=None, limit=100, types=None, aggregate=None, scope_id=None) -> dict:
        return wire.encode(reads.events_page(self._kernel, space, after, limit, types, aggregate, scope_id))

    async def watch(self, space: str, *, after=None, limit=100, types=None, aggregate=None, scope_id=None, wait_ms=None) -> Any:
        command = c.WatchEvents(
            space=space, after=after, limit=limit, types=types, aggregate=aggregate, scope_id=scope_id, wait_ms=wait_ms
        )
        return wire.encode(await self._kernel.submit(command, wait_ms=wait_ms))
