"""Legs that need mailboxes and tasks (PROTOCOL.md 2.3-2.5): task lifecycle, wake-up, delivery takeover.

They run only against a server that has the queue routes; until then each is listed as n/a.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .client import Connection
from .report import NA, Row
from .targets import Target

if TYPE_CHECKING:
    from .run import Bench


async def has_queues(target: Target) -> bool:
    """Whether the server routes `/mailboxes` (a 404 with "no such route" means it does not)."""
    conn = await Connection(target.base_url, target.api_key).open()
    try:
        status, body = await conn.get(f"/v1/spaces/{target.space}/mailboxes")
    finally:
        await conn.close()
    return not (status == 404 and "no such route" in str(body))


def run(bench: "Bench") -> list[Row]:
    _, server, _ = bench.claim_targets[0]
    if not asyncio.run(has_queues(server)):
        reason = "n/a: no mailbox or task routes on this branch yet"
        return [
            Row("Task lifecycle over HTTP (submit, recv, complete, result)", reason, verdict=NA),
            Row("Wake-up: send to a waiting long-poll recv", reason, verdict=NA),
            Row("Takeover of a delivery after lease expiry", reason, verdict=NA),
        ]
    raise NotImplementedError("queue legs")
