"""The supervisor: one task that keeps every deadline and proposes expiries when they fall due.

Lease ends, delivery timeouts, scope deadlines, retry backoffs and retention all arrive here as
`Timer`s. The supervisor only *proposes*: at the due time it posts `(tag, marker)` to the actor,
which checks that the proposal still holds (the lease was not renewed, the token is still
current) and journals the expiry like any other change. A stale proposal does nothing, so nothing
has to be taken out of the heap when a lease is renewed or released.

The heap is lazy and holds about one entry per live timer: each (actor, tag) has a slot with its
current due time and the due time of its heap entry. Renewing to a later time only updates the slot;
when the early entry reaches the top, it is queued again at the slot's time. Only moving a timer
earlier pushes a second entry, and the older one is dropped when it reaches the top. (etcd's lessor
and trio's own deadline heap do the same.) Such entries are settled whenever the supervisor is awake,
before it sleeps again, so it sleeps until a due time that still holds (see `fire_due`).
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Any, Callable, Iterable

import trio

from .clock import Clock
from .outcome import ActorKey, Timer

__all__ = ["Supervisor"]

# Expiries handled before yielding to other tasks, so an expiry storm cannot stall requests.
FIRE_BATCH_MAX = 256
# Stale heap entries tolerated beyond one per live timer before the heap is rebuilt: with a few
# timers, rebuilding on every other renewal would cost more than the entries it drops.
HEAP_SLACK = 64


class _Slot:
    __slots__ = ("due_ms", "marker", "queued_ms")

    def __init__(self, due_ms: int, marker: Any) -> None:
        self.due_ms = due_ms
        self.marker = marker
        self.queued_ms: int | None = None


class Supervisor:
    def __init__(self, clock: Clock, fire: Callable[[ActorKey, Any, Any], None]) -> None:
        self._clock = clock
        self._fire = fire
        self._heap: list[tuple[int, int, tuple[ActorKey, Any]]] = []
        self._slots: dict[tuple[ActorKey, Any], _Slot] = {}
        self._seq = itertools.count()
        self._sleep: trio.CancelScope | None = None
        self.fired = 0

    def __len__(self) -> int:
        return len(self._slots)

    def arm(self, timer: Timer) -> None:
        """Fire `timer` at its due time instead of whatever that (actor, tag) had before."""
        name = (timer.actor, timer.tag)
        slot = self._slots.get(name)
        if slot is None:
            slot = self._slots[name] = _Slot(timer.due_ms, timer.marker)
        else:
            slot.due_ms = timer.due_ms
            slot.marker = timer.marker
        if slot.queued_ms is None or timer.due_ms < slot.queued_ms:
            self._push(name, slot, timer.due_ms)

    def arm_all(self, timers: Iterable[Timer]) -> int:
        """`arm` each of `timers` (a recovered state's), building the heap once; returns how many.

        A million leases after a recovery: one heapify instead of a million pushes.
        """
        slots, heap, seq = self._slots, self._heap, self._seq
        count = 0
        for timer in timers:
            name = (timer.actor, timer.tag)
            slot = slots.get(name)
            if slot is None:
                slot = slots[name] = _Slot(timer.due_ms, timer.marker)
            else:
                slot.due_ms = timer.due_ms
                slot.marker = timer.marker
            if slot.queued_ms is None or timer.due_ms < slot.queued_ms:
                slot.queued_ms = timer.due_ms
                heap.append((timer.due_ms, next(seq), name))
            count += 1
        heapq.heapify(heap)
        if len(heap) > 2 * len(slots) + HEAP_SLACK:
            self._rebuild()
        if self._sleep is not None:
            self._sleep.deadline = -math.inf  # look at the heap again
        return count

    def reset(self) -> None:
        """Forget every timer (the state they were armed for was replaced); arm the new ones next."""
        self._heap.clear()
        self._slots.clear()
        if self._sleep is not None:
            self._sleep.deadline = -math.inf  # wake up and look at the (new) heap

    def disarm(self, actor: ActorKey, tag: Any) -> None:
        self._slots.pop((actor, tag), None)

    def _push(self, name: tuple[ActorKey, Any], slot: _Slot, due_ms: int) -> None:
        slot.queued_ms = due_ms
        heapq.heappush(self._heap, (due_ms, next(self._seq), name))
        if len(self._heap) > 2 * len(self._slots) + HEAP_SLACK:
            self._rebuild()
        sleep = self._sleep
        if sleep is not None and self._heap[0][0] == due_ms:
            sleep.deadline = min(sleep.deadline, self._clock.deadline_for(due_ms))

    def _rebuild(self) -> None:
        """Drop stale entries: one entry per slot, at the time it is queued for."""
        self._heap = [
            (slot.queued_ms, next(self._seq), name)
            for name, slot in self._slots.items()
            if slot.queued_ms is not None
        ]
        heapq.heapify(self._heap)
        assert len(self._heap) <= len(self._slots), "a rebuilt heap holds at most one entry per timer"

    def fire_due(self, now_ms: int) -> int:
        """Propose every expiry due by `now_ms`; returns how many entries were handled.

        Entries at the top of the heap that cannot fire where they are queued are settled on the
        way, due or not: a disarmed or superseded one is dropped, one whose timer moved later is
        queued again at its new time. A renewed lease's old entry thus never wakes the supervisor
        on its own: with leases renewed well before their end, nearly every entry that reaches the
        top has moved, and one wake-up settles all those queued before the next real due time
        instead of one wake-up each. Nothing fires before it is due. At most FIRE_BATCH_MAX
        entries are handled per call, so a storm cannot stall requests.
        """
        heap, slots, seq = self._heap, self._slots, self._seq
        fired = handled = 0
        while heap and handled < FIRE_BATCH_MAX:
            due_ms, _, name = heap[0]
            slot = slots.get(name)
            if slot is None or slot.queued_ms != due_ms:
                heapq.heappop(heap)  # disarmed, or moved earlier and already queued again
            elif slot.due_ms > due_ms:  # moved later: queue it at its new time
                slot.queued_ms = slot.due_ms
                heapq.heapreplace(heap, (slot.due_ms, next(seq), name))
            elif due_ms <= now_ms:
                heapq.heappop(heap)
                del slots[name]
                fired += 1
                self._fire(name[0], name[1], slot.marker)
            else:
                break  # the top is a real due time still to come
            handled += 1
        self.fired += fired
        return handled

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            if self.fire_due(self._clock.now_ms()):
                await trio.lowlevel.checkpoint()
                continue
            deadline = self._clock.deadline_for(self._heap[0][0]) if self._heap else math.inf
            with trio.CancelScope(deadline=deadline) as self._sleep:
                await trio.sleep_forever()
            self._sleep = None
