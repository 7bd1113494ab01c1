"""A request the server applies even when its connection is cut, let finish past a cancellation.

An acquire of a claim or of pool units, a receive or an admission that finds work, a quota
waiter's creation: the server answers at once, and it applies the request whether or not the
client is still there to read the answer. Cut by the caller's cancellation (`move_on_after`, a task
group cancelled, a stopped `consume()`), the request was applied all the same and the client never
learned of it: the key or the units stayed held, renewed by no one, until the lease ran out, and a
message stayed leased to no one, an attempt spent.

`let_finish(send, undo)` runs such a request shielded from the caller's cancellation, for at most
`ABORT_GRACE_S` after it comes (a server that hangs does not hold the caller longer); when the
caller was cancelled meanwhile, `undo(answer)` gives back what the request got (shielded and
bounded too), and the cancellation goes on. A wait the server holds (a long poll) is never sent
through it: the server drops a held wait whose connection closed, so cutting it is safe, and a
cancellation stays prompt.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, TypeVar

import anyio
import anyio.lowlevel

__all__ = ["ABORT_GRACE_S", "let_finish"]

T = TypeVar("T")

ABORT_GRACE_S = 2.0
"""How long a request the server answers at once is still awaited after the caller was cancelled:
an answer comes well within it, and a server that hangs does not hold the caller longer. The same
bound holds the give-back that follows."""


async def let_finish(
    send: Callable[[], Awaitable[T]],
    undo: Callable[[T], Awaitable[Any]] | None = None,
    *,
    grace_s: float = ABORT_GRACE_S,
) -> T:
    """`await send()`, not cut by a cancellation of the caller unless it takes `grace_s` longer.

    Without a cancellation this is `await send()`: its answer is returned, its error raised. A
    caller cancelled while it runs waits for the answer (up to `grace_s` more), then `undo(answer)`
    runs (shielded, bounded by `grace_s`, its errors swallowed: what it fails to give back runs out
    with its lease) and the cancellation is raised. A request cut at the end of the grace is
    dropped as it stands."""
    outcome: list[tuple[bool, Any]] = []
    finished = anyio.Event()
    shielded = anyio.CancelScope(shield=True)

    async def run() -> None:
        with shielded:
            try:
                outcome.append((True, await send()))
            except Exception as err:  # handed to the caller below
                outcome.append((False, err))
        finished.set()

    cancellation: BaseException | None = None
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            try:
                await finished.wait()
            except anyio.get_cancelled_exc_class() as err:
                # The caller is cancelled: the request goes on, for the grace at most.
                cancellation = err
                shielded.deadline = anyio.current_time() + grace_s
                with anyio.CancelScope(shield=True):
                    await finished.wait()
        if cancellation is None:
            await anyio.lowlevel.checkpoint_if_cancelled()
    except anyio.get_cancelled_exc_class() as err:
        cancellation = err  # at the group's exit, or just after: the request was done
    if cancellation is not None:
        if outcome and outcome[0][0] and undo is not None:
            with anyio.move_on_after(grace_s, shield=True):
                try:
                    await undo(outcome[0][1])
                except Exception:
                    pass  # not given back: it runs out with its lease
        raise cancellation
    ok, value = outcome[0]
    if not ok:
        raise value
    result: T = value
    return result
