"""A long poll waits its whole length with a wall clock that follows the host: the wait is a
duration on trio's clock, not a wall deadline re-checked every few seconds, in virtual time."""

import pytest
import trio

from runstate.actors import EMPTY, Clock, IdSource, Kernel, KernelState
from runstate.actors.clock import WALL_RECHECK_S
from runstate.actors.commands import AcquireClaim

from ..ops import ClaimOps, MailboxOps, MessageOps, ScopeOps

pytestmark = pytest.mark.trio

T0 = 1_800_000_000_000


async def test_a_receive_and_a_claim_wait_last_their_whole_wait_with_a_host_wall_clock(nursery, autojump_clock):
    start = trio.current_time()
    clock = Clock(wall_source=lambda: T0 + (trio.current_time() - start) * 1000)  # not virtual: re-checked
    kernel = Kernel(state=KernelState(), clock=clock, ids=IdSource(seed=3))
    await nursery.start(kernel.run)
    scope_id = (await ScopeOps(kernel).create("s"))["id"]
    mailbox_id = (await MailboxOps(kernel).create("s", name="q"))["id"]
    wait_s = 4 * WALL_RECHECK_S
    before = trio.current_time()
    answer = await MessageOps(kernel).receive(
        "s", mailbox_id, scope_id=scope_id, holder="h", session="x", lease_s=30, wait_ms=int(wait_s * 1000)
    )
    assert answer is EMPTY and trio.current_time() - before == pytest.approx(wait_s)
    claims = ClaimOps(kernel)
    await claims.acquire("s", scope_id=scope_id, key="k", holder="a", session="a", lease_s=600)
    before = trio.current_time()
    waited = await claims._submit(  # noqa: SLF001 - the waiting acquire, as the route submits it
        AcquireClaim, space="s", scope_id=scope_id, key="k", holder="b", session="b", lease_s=30, wait_ms=int(wait_s * 1000)
    )
    assert waited is EMPTY and trio.current_time() - before == pytest.approx(wait_s)
