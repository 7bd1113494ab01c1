"""A server on a data directory in virtual time, and a reader that records what it saw when."""

from __future__ import annotations

import dataclasses
from typing import Any

import trio
import trio.testing

from runstate.actors import Clock
from runstate.server.runtime import Runtime
from runstate.server.settings import Settings
from runstate.snapshots.wal import inline
from tests.server.asgi_client import API_KEY, SPACE, T0, AsgiClient

__all__ = ["InlineRuntime", "start", "without_as_of", "Seen"]


class InlineRuntime(Runtime):
    """The server with its journal's blocking IO run inline: in virtual time, nothing runs in a
    thread behind the mock clock's back (snapshots and history rebuilds included)."""

    store_changes: dict[str, Any] = {}

    def _store_options(self) -> dict:
        options = super()._store_options()
        return {**options, "config": dataclasses.replace(options["config"], **self.store_changes), "run_blocking": inline}


async def start(nursery: trio.Nursery, data_dir: str, *, store: dict[str, Any] | None = None, **settings: Any) -> Runtime:
    """A server on `data_dir` (`store`: changes to its StoreConfig, such as smaller segments)."""
    options = {"api_key": API_KEY, "space_id": SPACE, "seed": 5, "data_dir": data_dir, "fsync": "always", **settings}
    runtime = InlineRuntime(Settings(**options), clock=Clock(wall_anchor_ms=T0))
    runtime.store_changes = store or {}
    await nursery.start(runtime.run)
    while not runtime.ready:
        assert runtime.fatal is None, runtime.fatal
        await trio.testing.wait_all_tasks_blocked()
    return runtime


def without_as_of(body: dict) -> dict:
    return {name: value for name, value in body.items() if name != "asOf"}


class Seen:
    """What a live reader saw of each view, and when (the server's clock at the read)."""

    def __init__(self, client: AsgiClient, runtime: Runtime, views: list[str]) -> None:
        self.client = client
        self.runtime = runtime
        self.views = views
        self.moments: list[tuple[int, int, dict[str, Any]]] = []

    async def look(self) -> int:
        """Read every view now; returns the time of the reading. Records the time, the LSN the
        space's partition had reached, and every answer."""
        kernel = self.runtime.kernel
        now_ms = kernel.clock.now_ms()
        journal = kernel.partition_of(self.client.space).journal
        lsn = journal.durable_lsn
        answers = {}
        for view in self.views:
            response = await self.client.get(view)
            answers[view] = (response.status, response.json)
        assert kernel.clock.now_ms() == now_ms and journal.durable_lsn == lsn, "reads take no time and change nothing"
        self.moments.append((now_ms, lsn, answers))
        return now_ms
