"""A kernel in virtual time with the queue and task operations, for `autojump_clock` tests.

pytest-trio gives `trio.run` only a clock the test function itself asks for, so each test names
`autojump_clock` in its own arguments besides `queue_harness`.
"""

from __future__ import annotations

import pytest
import trio

from runstate.actors import Clock, IdSource, Kernel, KernelState

from ..ops import MailboxOps, MessageOps, ScopeOps, TaskOps
from runstate.actors.journal import MemoryJournal

from .queue_world import SPACE, T0, snapshot
from ..single import only


class QueueHarness:
    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.scopes = ScopeOps(kernel)
        self.mailboxes = MailboxOps(kernel)
        self.messages = MessageOps(kernel)
        self.tasks = TaskOps(kernel)
        self.t0 = trio.current_time()

    def elapsed(self) -> float:
        return round(trio.current_time() - self.t0, 6)

    @property
    def space(self):
        return only(self.kernel).state.space(SPACE)

    async def run_and_mailbox(self, **settings) -> tuple[str, str]:
        scope = await self.scopes.create(SPACE)
        mailbox = await self.mailboxes.create(SPACE, name=settings.pop("name", "research"), **settings)
        return scope["id"], mailbox["id"]

    async def recv(self, mailbox_id: str, scope_id: str, *, holder: str = "w1", lease_s: int = 30, wait_ms: int | None = None, idem=None):
        return await self.messages.receive(
            SPACE, mailbox_id, scope_id=scope_id, holder=holder, session="s-" + holder, lease_s=lease_s, wait_ms=wait_ms, idem=idem
        )

    async def settle(self) -> None:
        """Let every actor and the supervisor finish what is due now."""
        await trio.testing.wait_all_tasks_blocked()

    def assert_replay_matches(self) -> None:
        fresh = KernelState(only(self.kernel).state.limits)
        for record in only(self.kernel).journal.records:
            fresh.apply(record)
        now = self.kernel.clock.now_ms()
        assert snapshot(fresh.space(SPACE), now) == snapshot(self.space, now)


@pytest.fixture
async def queue_harness(nursery, autojump_clock):
    kernel = Kernel(
        state=KernelState(),
        journal=MemoryJournal(keep=True),
        clock=Clock(wall_anchor_ms=T0),
        ids=IdSource(seed=1),
    )
    await nursery.start(kernel.run)
    harness = QueueHarness(kernel)
    yield harness
    harness.assert_replay_matches()
