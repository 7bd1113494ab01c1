"""The listings of runs, and of a run's claims, tasks, barriers, timers and task groups, read a page
at a time: `?limit=N&cursor=C`, the answer's `nextCursor` (null on the last page, `truncated` true
exactly when it is not).

Over HTTP in process, in virtual time. A reading that pages through more rows than one page while
rows are added and removed between its pages shows each row that lived through the whole reading
exactly once, in the listing's order, never a row twice; rows added behind the cursor (newer, in a
newest-first listing) are left to the next reading. A cursor this server did not give out is 400.
"""

from __future__ import annotations

import base64
from typing import Any, Awaitable, Callable

import pytest
import trio

from runstate.actors.limits import Limits
from runstate.server.settings import Settings

from .asgi_client import API_KEY, SPACE, AsgiClient, client, start_runtime  # noqa: F401 - the fixture


async def read_pages(
    client: AsgiClient, path: str, field: str, limit: int, between: Callable[[int], Awaitable[None]] | None = None,
) -> list[list[dict[str, Any]]]:
    """Every page of a listing, calling `between(n)` after the n-th page (from 1)."""
    pages: list[list[dict[str, Any]]] = []
    cursor = None
    while True:
        query = f"?limit={limit}" + ("" if cursor is None else f"&cursor={cursor}")
        answer = await client.get(path + query)
        assert answer.status == 200, answer
        pages.append(answer.json[field])
        cursor = answer.json["nextCursor"]
        assert answer.json["truncated"] is (cursor is not None)
        assert len(answer.json[field]) == limit if cursor is not None else len(answer.json[field]) <= limit
        if cursor is None:
            return pages
        if between is not None:
            await between(len(pages))


def newest_first(rows: list[dict[str, Any]]) -> bool:
    places = [(row["createdAt"], row["id"]) for row in rows]
    return places == sorted(places, reverse=True) and len(set(places)) == len(places)


@pytest.mark.trio
async def test_runs_page_through_with_runs_made_and_removed_between_pages(nursery, autojump_clock):
    """Eight runs (some made in the same millisecond), read three at a time: between the pages two
    newer runs are made, and runs on a page already read and on one not yet read are ended and
    removed by retention. Each run that lived through the reading is shown once, newest first;
    the removed one not yet reached is not shown; the new ones are left for the next reading."""
    limits = Limits().replace(ended_run_retention_s=60)
    client = AsgiClient(await start_runtime(nursery, Settings(api_key=API_KEY, space_id=SPACE, seed=7, limits=limits)))
    made: list[str] = []
    for n in range(8):
        made.append(await client.run())
        if n % 3 == 2:
            await trio.sleep(0.001)  # (the others share a millisecond: ordered by id among themselves)
    order = [row["id"] for row in (await client.get("/scopes?limit=100")).json["scopes"]]
    assert sorted(order) == sorted(made)
    seen_first, not_yet = order[0], order[-1]
    added: list[str] = []

    async def between(page: int) -> None:
        if page == 1:
            added.extend([await client.run(), await client.run()])
            for ended in (seen_first, not_yet):
                assert (await client.post(f"/scopes/{ended}/cancel")).status == 200
            await trio.sleep(121)  # retention removes both (at the sweep after their minute)
            assert (await client.get(f"/scopes/{not_yet}")).status == 404

    pages = await read_pages(client, "/scopes", "scopes", 3, between)
    shown = [row["id"] for page in pages for row in page]
    assert shown == [run for run in order if run != not_yet]
    assert newest_first([row for page in pages for row in page])
    again = [row for page in await read_pages(client, "/scopes", "scopes", 3) for row in page]
    assert sorted(row["id"] for row in again[:2]) == sorted(added) and newest_first(again)
    assert [row["id"] for row in again[2:]] == [run for run in order if run not in (seen_first, not_yet)]


@pytest.mark.trio
async def test_a_runs_tasks_page_through_with_tasks_submitted_between_pages(client: AsgiClient, autojump_clock):
    """Seven tasks of a run (some in one millisecond) and another run's, two a page: tasks submitted
    between the pages are newer than the cursor and left for the next reading; each of the seven is
    shown once, newest first."""
    run, other = await client.run(), await client.run()
    mailbox = await client.mailbox()

    async def submit(scope: str, key: str) -> str:
        answer = await client.post("/tasks", {"scopeId": scope, "mailboxId": mailbox, "taskKey": key})
        assert answer.status == 201, answer
        return answer.json["taskId"]

    made = []
    for n in range(7):
        made.append(await submit(run, f"t{n}"))
        if n % 2:
            await trio.sleep(0.001)
    await submit(other, "elsewhere")

    async def between(page: int) -> None:
        await submit(run, f"late{page}")

    pages = await read_pages(client, f"/scopes/{run}/tasks", "tasks", 2, between)
    rows = [row for page in pages for row in page]
    assert sorted(row["id"] for row in rows) == sorted(made) and newest_first(rows)
    assert len(await read_pages(client, f"/scopes/{run}/tasks", "tasks", 1000)) == 1


@pytest.mark.trio
async def test_a_runs_claims_page_through_by_key_with_claims_taken_and_released_between_pages(client: AsgiClient, autojump_clock):
    """Claims are listed in the order of their keys: between pages a claim already shown and one
    not yet reached are released, a key before the cursor and one after it are taken. The reading
    shows the released key not yet reached not at all, the new key after the cursor once, and the
    one before it not at all (it is behind the reading); no key twice."""
    run = await client.run()
    tokens: dict[str, str] = {}

    async def take(key: str) -> None:
        body = {"key": key, "scopeId": run, "holder": "h", "holderSession": "s", "leaseSeconds": 60}
        answer = await client.post("/claims", body)
        assert answer.status == 200, answer
        tokens[key] = answer.json["token"]

    async def release(key: str) -> None:
        answer = await client.post(f"/claims/{key}/release", {"token": tokens[key]})
        assert answer.status == 200, answer

    for key in ("k5", "k1", "k7", "k3", "k2", "k6", "k4"):  # (taken out of the order of their keys)
        await take(key)

    async def between(page: int) -> None:
        if page == 1:  # k1, k2, k3 shown
            await release("k2")
            await release("k5")
            await take("k0")  # behind the cursor: for the next reading
            await take("k55")

    pages = await read_pages(client, f"/scopes/{run}/claims", "claims", 3, between)
    assert [[row["key"] for row in page] for page in pages] == [["k1", "k2", "k3"], ["k4", "k55", "k6"], ["k7"]]
    assert all("token" not in row for page in pages for row in page)
    again = [row["key"] for page in await read_pages(client, f"/scopes/{run}/claims", "claims", 2) for row in page]
    assert again == ["k0", "k1", "k3", "k4", "k55", "k6", "k7"]


@pytest.mark.trio
@pytest.mark.parametrize("what", ["barriers", "timers", "groups"])
async def test_a_runs_barriers_timers_and_groups_page_through_with_more_made_between_pages(
    client: AsgiClient, autojump_clock, what: str,
):
    """Five of a kind in a run (some in one millisecond), two a page, one more made between pages:
    each of the five shown once, newest first; the one made during the reading is for the next."""
    run = await client.run()
    mailbox = await client.mailbox()

    async def make() -> str:
        if what == "barriers":
            return (await client.post("/barriers", {"scopeId": run, "target": 2})).json["id"]
        if what == "timers":
            return (await client.post("/timers", {"scopeId": run, "afterSeconds": 600})).json["id"]
        body = {"mailboxId": mailbox, "condition": "ALL_TERMINAL", "parentScopeId": run}
        return (await client.post("/task-groups", body)).json["groupId"]

    made = []
    for n in range(5):
        made.append(await make())
        if n % 2:
            await trio.sleep(0.001)
    added = []

    async def between(page: int) -> None:
        added.append(await make())

    pages = await read_pages(client, f"/scopes/{run}/{what}", what, 2, between)
    rows = [row for page in pages for row in page]
    ident = "groupId" if what == "groups" else "id"
    assert sorted(row[ident] for row in rows) == sorted(made)
    places = [(row["createdAt"], row[ident]) for row in rows]
    assert places == sorted(places, reverse=True)
    assert len([row for page in await read_pages(client, f"/scopes/{run}/{what}", what, 2) for row in page]) == 5 + len(added)


@pytest.mark.trio
async def test_a_cursor_this_server_did_not_give_out_is_400(client: AsgiClient, autojump_clock):
    """A malformed cursor, or one of another listing's shape, is 400 VALIDATION_FAILED naming it;
    an empty one is the first page."""
    run = await client.run()
    await client.post("/claims", {"key": "k", "scopeId": run, "holder": "h", "holderSession": "s", "leaseSeconds": 60})
    claims_cursor = base64.urlsafe_b64encode(b'"k"').rstrip(b"=").decode()
    runs_cursor = base64.urlsafe_b64encode(b'[1,"sc_x"]').rstrip(b"=").decode()
    bad = ["nope!", "%7B", "AAAA", base64.urlsafe_b64encode(b"[1]").decode().rstrip("="), "x" * 5000]
    listings = {
        "/scopes": [*bad, claims_cursor], f"/scopes/{run}/tasks": [*bad, claims_cursor],
        f"/scopes/{run}/claims": [*bad, runs_cursor], f"/scopes/{run}/barriers": [*bad, claims_cursor],
        f"/scopes/{run}/timers": bad, f"/scopes/{run}/groups": bad,
    }
    for path, cursors in listings.items():
        for cursor in cursors:
            refused = await client.get(f"{path}?cursor={cursor}")
            assert (refused.status, refused.code) == (400, "VALIDATION_FAILED"), (path, cursor, refused)
            assert "is not a cursor of this listing" in refused.json["error"]["message"], (path, cursor)
        first = await client.get(f"{path}?cursor=")
        assert first.status == 200 and first.json["nextCursor"] is None, (path, first)
    shown = (await client.get(f"/scopes/{run}/claims?cursor={claims_cursor}")).json
    assert (shown["claims"], shown["nextCursor"]) == ([], None)  # past k: nothing
