"""A 201 says where what it made is read: `Location`, the path of its GET (RFC 9110 15.3.2).

Over HTTP in process, in virtual time: each creation that has a read of its own answers its path,
a GET of which answers what was made; a retry with the Idempotency-Key replays it too, and an
answer that made nothing (200: the key's existing task) has none.
"""

from __future__ import annotations

import pytest

from runstate.server.openapi import openapi

from .asgi_client import AsgiClient, client  # noqa: F401 - the fixture

@pytest.mark.trio
async def test_each_creation_answers_the_path_that_reads_what_it_made(client: AsgiClient, autojump_clock):
    run = await client.run()
    mailbox = await client.mailbox()
    group = (await client.post("/task-groups", {"mailboxId": mailbox, "condition": "ALL_TERMINAL"})).json["groupId"]
    made = {
        "/scopes": ({}, "id"),
        "/mailboxes": ({"name": "second"}, "id"),
        "/tasks": ({"scopeId": run, "mailboxId": mailbox, "taskKey": "t"}, "taskId"),
        "/barriers": ({"scopeId": run, "target": 2}, "id"),
        "/timers": ({"scopeId": run, "afterSeconds": 60}, "id"),
        "/task-groups": ({"mailboxId": mailbox, "condition": "ALL_TERMINAL"}, "groupId"),
        f"/task-groups/{group}/tasks": ({"taskKey": "member"}, "taskId"),
        "/permits": ({"name": "gpus", "units": 4}, "id"),
        "/budgets": ({"name": "spend", "currency": "USD", "scale": 2, "limitMinor": "1000"}, "id"),
    }
    for path, (body, field) in made.items():
        created = await client.post(path, body, idempotency_key=f"make {path}")
        assert created.status == 201, (path, created)
        location = created.headers["location"]
        assert location.startswith("/v1/spaces/default/") and location.endswith("/" + created.json[field]), path
        read = await client.get(location)
        assert read.status == 200 and created.json[field] in (read.json.get("id"), read.json.get("groupId")), path
        replayed = await client.post(path, body, idempotency_key=f"make {path}")
        assert (replayed.status, replayed.headers["location"]) == (201, location), path
    again = await client.post("/tasks", made["/tasks"][0])
    assert again.status == 200 and "location" not in again.headers  # the key's task: nothing made


def test_the_document_declares_location_on_those_201s():
    """Each 201 whose route says where its answer is read declares the Location header; the
    others (a message, a key, a reservation...) have no read of their own by id here."""
    declared = sorted(path for path, item in openapi()["paths"].items() for operation in item.values()
                      if "Location" in operation["responses"].get("201", {}).get("headers", {}))
    assert declared == sorted(f"/v1/spaces/{{space}}{path}" for path in (
        "/scopes", "/mailboxes", "/tasks", "/barriers", "/timers", "/task-groups", "/task-groups/{group_id}/tasks",
        "/permits", "/budgets"))
