"""A batch's answer is bounded: in deliveries (`batch_deliveries_max`) and in bytes (`batch_answer_bytes_max`).

A batch of receives asks the server for stored payloads its request did not carry: 1,000
`recv-many` operations in a 100 KB request asked for a 10 MB answer, made in one piece. The
receives of one batch now lease at most `batch_deliveries_max` deliveries together, each counted
at its largest against `batch_answer_bytes_max`; a receive past a bound is refused alone, before
anything runs, naming the setting, and leases nothing. In process, in virtual time.
"""

from __future__ import annotations

import orjson
import pytest

from runstate.server.settings import Settings

from .asgi_client import API_KEY, SPACE, AsgiClient, start_runtime

pytestmark = pytest.mark.trio


async def _queue(client: AsgiClient, messages: int) -> tuple[str, str]:
    run, mailbox = await client.run(), await client.mailbox()
    for n in range(messages):
        assert (await client.post(f"/mailboxes/{mailbox}/messages", {"scopeId": run, "payload": {"n": n}})).status == 201
    return run, mailbox


def _receive_many(run: str, mailbox: str, count: int) -> dict:
    body = {"scopeId": run, "holder": "w", "holderSession": "s", "maxMessages": count}
    return {"method": "POST", "path": f"/mailboxes/{mailbox}/recv-many", "body": body}


async def test_a_thousand_receives_of_many_lease_at_most_batch_deliveries_max(nursery, autojump_clock):
    """The default bound is one full receive of many (100 deliveries): the operations that would
    pass it are refused alone, naming batch_deliveries_max, and leave their messages queued."""
    runtime = await start_runtime(nursery)
    client = AsgiClient(runtime)
    run, mailbox = await _queue(client, 150)
    request = {"operations": [_receive_many(run, mailbox, 10) for _ in range(1000)]}
    answer = await client.post("/batch", request)
    sent = len(orjson.dumps(request))
    assert answer.status == 200 and len(answer.raw) < 2 * sent, (len(answer.raw), sent)  # the size of the question, not 50 times it
    results = answer.json["results"]
    leased = [r for r in results if r["status"] == 200]
    refused = [r for r in results if r["status"] == 400]
    assert len(leased) == 10 and sum(len(r["body"]["deliveries"]) for r in leased) == 100
    assert len(refused) == 990 and results[10]["error"]["code"] == "VALIDATION_FAILED"
    assert "operations[10]: a batch's receives lease at most 100 deliveries together (batch_deliveries_max)" in results[10]["error"]["message"]
    rest = await client.post(f"/mailboxes/{mailbox}/recv-many", _receive_many(run, mailbox, 100)["body"])
    assert len(rest.json["deliveries"]) == 50  # nothing leased for the refused ones


async def test_receives_past_the_bytes_bound_are_refused_naming_it(nursery, autojump_clock):
    """With batch_answer_bytes_max at 1 MiB, deliveries counted at their largest (64 KiB of payload
    and their fields) fit 15 to a batch: a receive of 10 passes, the next of 10 is refused, a
    single receive after it still fits."""
    settings = Settings(api_key=API_KEY, space_id=SPACE, seed=7, batch_answer_bytes_max=1024 * 1024)
    runtime = await start_runtime(nursery, settings)
    client = AsgiClient(runtime)
    run, mailbox = await _queue(client, 30)
    recv = {"method": "POST", "path": f"/mailboxes/{mailbox}/recv", "body": {"scopeId": run, "holder": "w", "holderSession": "s"}}
    results = (await client.post("/batch", {"operations": [
        _receive_many(run, mailbox, 10), _receive_many(run, mailbox, 10), recv,
    ]})).json["results"]
    assert [r["status"] for r in results] == [200, 400, 200]
    assert len(results[0]["body"]["deliveries"]) == 10 and results[2]["body"]["message"]["payload"] == {"n": 10}
    message = results[1]["error"]["message"]
    assert "at most 1048576 bytes of deliveries (batch_answer_bytes_max)" in message and "operations[1]" in message


async def test_other_operations_are_not_counted(nursery, autojump_clock):
    """Sends, claims and their kind are not bounded by the answer's deliveries: 300 sends pass."""
    runtime = await start_runtime(nursery, Settings(api_key=API_KEY, space_id=SPACE, seed=7, batch_deliveries_max=1))
    client = AsgiClient(runtime)
    run, mailbox = await _queue(client, 0)
    send = {"method": "POST", "path": f"/mailboxes/{mailbox}/messages", "body": {"scopeId": run, "payload": {"n": 1}}}
    results = (await client.post("/batch", {"operations": [send] * 300})).json["results"]
    assert {r["status"] for r in results} == {201}
