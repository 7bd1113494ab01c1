"""Stored Idempotency-Key answers over HTTP, in process and in virtual time: each space keeps its
own, so however many keyed requests one space sends, another space's retry still gets its first
answer (and a retried send makes no second message)."""

from __future__ import annotations

import pytest

from runstate.actors import Limits
from runstate.server.settings import Settings

from ..ops import KeyOps
from .asgi_client import API_KEY, SPACE, AsgiClient, start_runtime

pytestmark = pytest.mark.trio


async def test_one_space_cannot_evict_another_spaces_stored_answers(nursery, autojump_clock):
    limits = Limits().replace(idempotency_keys_max=5)
    runtime = await start_runtime(nursery, Settings(api_key=API_KEY, space_id=SPACE, seed=7, limits=limits))
    await KeyOps(runtime.kernel).register("rs_noisy_key", frozenset({"s1"}))
    victim, noisy = AsgiClient(runtime), AsgiClient(runtime, api_key="rs_noisy_key", space="s1")
    run, mailbox = await victim.run(), await victim.mailbox()
    send = {"scopeId": run, "payload": {"n": 1}}
    first = await victim.post(f"/mailboxes/{mailbox}/messages", send, idempotency_key="victim-send-0001")
    assert first.status in (200, 201), first

    for n in range(3 * limits.idempotency_keys_max):  # many more keyed answers than the table keeps
        assert (await noisy.post("/scopes", {"name": f"r{n}"})).status == 201

    again = await victim.post(f"/mailboxes/{mailbox}/messages", send, idempotency_key="victim-send-0001")
    assert again.status == first.status and again.json == first.json
    assert (await victim.get(f"/mailboxes/{mailbox}")).json["backlog"] == 1, "the retry made a second message"
