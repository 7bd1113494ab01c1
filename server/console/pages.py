"""The console's pages: sign-in, the space's pages, the live stream and the static files.

Each handler reads its filters from the URL (so every view is a link that can be shared), asks
`views` for the data and renders a template. Filters are checked like any input: a bad one is a
400 page that says which and why.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import trio

from ...actors.errors import NOT_FOUND, VALIDATION_FAILED, KernelError
from ...actors.events import EVENT_TYPES
from ...actors.timestamps import format_ms, parse_timestamp
from . import plots
from .. import wire
from ..history_views import Diff
from .charts import INTERVAL_S
from .render import STATIC, render
from .sessions import clear_cookie, set_cookie
from .site import PREFIX, Answer, Console, Visit, page, redirect, refuse
from .stream import serve_stream
from . import views

# The states a filter may name.
RUN_STATES = ("ACTIVE", "CANCELLED", "COMPLETED", "EXPIRED")
TASK_STATES = ("QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED")
DELIVERY_STATES = ("QUEUED", "DELAYED", "LEASED")
# The windows of the swimlanes and of a worker's blast radius, by their names in the URL.
WINDOWS = {"5m": 300, "15m": 900, "1h": 3600, "6h": 6 * 3600, "24h": 86_400}
KEY_CHARS_MAX = 512
# The events a page of changes lists (the counts cover them all).
CHANGES_SHOWN_MAX = 200


# -- signing in and out --------------------------------------------------------------------------


@page("GET", "/")
async def home(console: Console, visit: Visit) -> Answer:
    spaces = console.spaces_of(visit.signed)
    if len(spaces) == 1 or (spaces and not visit.signed.admin):
        return redirect(f"{PREFIX}/s/{spaces[0]}/runs")
    return redirect(f"{PREFIX}/spaces")


@page("GET", "/login", public=True)
async def login_form(console: Console, visit: Visit) -> Answer:
    return Answer(200, _login(console, visit, None))


def _login(console: Console, visit: Visit, message: str | None) -> str:
    next_path = _next_path(visit.text("next"))
    return render("login.html", console.context(visit, message=message, next=next_path))


def _next_path(text: str | None) -> str:
    """Where to go after signing in: a console path of this server only (never another site), in
    printable ASCII (what a Location header carries: a request's path comes percent-encoded)."""
    if text and text.isascii() and text.isprintable() and text.startswith(PREFIX + "/") and not text.startswith("//") and "\\" not in text and "://" not in text:
        return text
    return PREFIX


@page("POST", "/login", public=True)
async def login(console: Console, visit: Visit) -> Answer:
    runtime = console.runtime
    secret = (visit.form.get("key") or [""])[-1].strip()
    if not secret:
        return Answer(400, _login(console, visit, "Enter an API key (or the admin key) to sign in."))
    if len(secret) > KEY_CHARS_MAX or not secret.isprintable():
        return Answer(401, _login(console, visit, "That key is not valid: a key is at most 512 printable characters."))
    if not runtime.ready:
        return Answer(503, _login(console, visit, "The server is recovering its state; try again in a moment."))
    admin = runtime.admin.matches(secret)
    key_id, name, revoked = (None, None, False) if admin else views.key_named(console.kernel, secret)
    if not admin and not views.key_spaces(console.kernel, secret):
        why = "it was revoked" if revoked else "no API key of this server, and not its admin key"
        return Answer(401, _login(console, visit, f"That key is not valid: {why}."))
    session = console.sessions.open(secret, admin, key_id, name, console.now_s())
    console.check_key(session)
    following = visit.form.get("next")
    return redirect(_next_path(following[-1] if following else None), [("set-cookie", set_cookie(session, visit.secure))])


@page("POST", "/logout")
async def logout(console: Console, visit: Visit) -> Answer:
    console.sessions.close(visit.signed.id)
    return redirect(f"{PREFIX}/login", [("set-cookie", clear_cookie(visit.secure))])


@page("GET", "/static/{name}", public=True)
async def static(console: Console, visit: Visit, name: str) -> Answer:
    found = STATIC.get(name)
    if found is None:
        raise refuse(NOT_FOUND, f"no such file: {name}")
    content, content_type, _ = found
    return Answer(200, content, [("cache-control", "public, max-age=31536000, immutable")], content_type=content_type)


# -- spaces and keys -----------------------------------------------------------------------------


@page("GET", "/spaces")
async def spaces(console: Console, visit: Visit) -> Answer:
    """The spaces this key opens; for the admin key every space, with keys, runs and operations."""
    rows = []
    if visit.signed.admin:
        from .actions import call_api

        rows = (await call_api(console, visit, "GET", "/v1/admin/spaces"))["spaces"]
    return console.page(visit, "spaces.html", rows=rows, stats=console.feeds.stats)


@page("GET", "/keys")
async def keys(console: Console, visit: Visit) -> Answer:
    if not visit.signed.admin:
        raise refuse("FORBIDDEN", "only the admin key lists keys", status=403)
    from .actions import call_api

    listed = await call_api(console, visit, "GET", "/v1/admin/keys", query={"space": visit.text("space")})
    return console.page(visit, "keys.html", keys=listed["keys"], only=visit.text("space"))


@page("GET", "/s/{space}")
async def space_home(console: Console, visit: Visit, space: str) -> Answer:
    return redirect(f"{PREFIX}/s/{space}/runs")


@page("GET", "/s/{space}/space")
async def space_page(console: Console, visit: Visit, space: str) -> Answer:
    data = await views.space_overview(visit.reader, space)
    return console.page(visit, "space.html", **data)


# -- runs ----------------------------------------------------------------------------------------


@page("GET", "/s/{space}/runs")
async def runs(console: Console, visit: Visit, space: str) -> Answer:
    data = await views.runs(visit.reader, space, state=visit.choice("state", RUN_STATES), name=visit.text("name"),
                            cursor=visit.text("cursor"), limit=visit.limit())
    return console.page(visit, "runs.html", states=RUN_STATES, **data)


@page("GET", "/s/{space}/runs/{run_id}")
async def run(console: Console, visit: Visit, space: str, run_id: str) -> Answer:
    data = await views.run(visit.reader, space, run_id)
    return console.page(visit, "run.html", **data)


# -- claims --------------------------------------------------------------------------------------


@page("GET", "/s/{space}/claims")
async def claims(console: Console, visit: Visit, space: str) -> Answer:
    every = visit.choice("show", ("held", "all")) == "all"
    data = await views.claims(visit.reader, space, run=visit.text("run"), key=visit.text("key"), holder=visit.text("holder"),
                              held_only=not every, cursor=visit.text("cursor"), limit=visit.limit())
    from .actions import release_offered

    return console.page(visit, "claims.html", every=every, release=release_offered(), **data)


@page("GET", "/s/{space}/lanes")
async def lanes(console: Console, visit: Visit, space: str) -> Answer:
    window = visit.choice("window", ("fit", *WINDOWS)) or "fit"
    between = _between(visit)
    fenced = console.runtime.telemetry.fenced.in_space(space, "claim")
    if visit.past is not None:  # (the refusals seen up to the point; this server's memory of them)
        fenced = [mark for mark in fenced if mark.at_ms <= visit.past.point.now_ms]
    data = await views.lanes(visit.reader, space, fenced, run=visit.text("run"), key=visit.text("key"),
                             window_s=WINDOWS.get(window, 3600), fit=window == "fit", between=between)
    return console.page(visit, "lanes.html", windows=("fit", *WINDOWS), window=window, zoom=_zoom_links(visit, data), **data)


def _between(visit: Visit) -> tuple[int, int] | None:
    """A zoom's window, `from` and `to` (RFC 3339 times, both or neither), checked."""
    first, second = visit.text("from"), visit.text("to")
    if first is None and second is None:
        return None
    if first is None or second is None:
        raise refuse(VALIDATION_FAILED, "a zoom names both ends of its window: from and to")
    try:
        start_ms, end_ms = parse_timestamp(first), parse_timestamp(second)
    except ValueError:
        raise refuse(VALIDATION_FAILED, "from and to are RFC 3339 times with a zone, such as 2026-12-04T12:00:00.000Z") from None
    if not views.swimlanes.ZOOM_MS_MIN <= end_ms - start_ms <= WINDOWS["24h"] * 1000:
        raise refuse(VALIDATION_FAILED, f"a zoom's window is {views.swimlanes.ZOOM_MS_MIN} ms to 24 hours long, from before to")
    return start_ms, end_ms


def _zoom_links(visit: Visit, data: dict[str, Any]) -> dict[str, str]:
    """Links that zoom out (twice the window, about its middle), move it half a window back or on,
    and leave the zoom; each keeps the key and run filters."""
    start_ms, end_ms = data["start"], data["end"]
    span, middle = end_ms - start_ms, (start_ms + end_ms) // 2

    def window(a: int, b: int) -> str:
        b = min(b, data["now"])
        a = min(a, b - views.swimlanes.ZOOM_MS_MIN)
        if b - a > WINDOWS["24h"] * 1000:
            a = b - WINDOWS["24h"] * 1000
        return visit.here(**{"from": format_ms(a), "to": format_ms(b), "window": None})

    links = {"out": window(middle - span, middle + span), "back": window(start_ms - span // 2, end_ms - span // 2)}
    if end_ms < data["now"]:
        links["on"] = window(start_ms + span // 2, end_ms + span // 2)
    if data["zoomed"]:
        links["whole"] = visit.here(**{"from": None, "to": None})
    return links


# -- tasks ---------------------------------------------------------------------------------------


@page("GET", "/s/{space}/tasks")
async def tasks(console: Console, visit: Visit, space: str) -> Answer:
    data = await views.tasks(visit.reader, space, state=visit.choice("state", TASK_STATES), run=visit.text("run"),
                             mailbox=visit.text("mailbox"), key=visit.text("key"), cursor=visit.text("cursor"), limit=visit.limit())
    return console.page(visit, "tasks.html", states=TASK_STATES, **data)


@page("GET", "/s/{space}/tasks/{task_id}")
async def task(console: Console, visit: Visit, space: str, task_id: str) -> Answer:
    data = await views.task(visit.reader, space, task_id)
    return console.page(visit, "task.html", **data)


@page("GET", "/s/{space}/tasks/{task_id}/why")
async def why_task(console: Console, visit: Visit, space: str, task_id: str) -> Answer:
    data = await views.why_task(visit.reader, space, task_id)
    return console.page(visit, "why.html", back=f"{PREFIX}/s/{space}/tasks/{task_id}", **data)


@page("GET", "/s/{space}/claims/why")
async def why_claim(console: Console, visit: Visit, space: str) -> Answer:
    run, key = visit.text("run"), visit.text("key")
    if run is None or key is None:
        raise refuse(VALIDATION_FAILED, "name the claim: run and key")
    data = await views.why_claim(visit.reader, space, run, key)
    return console.page(visit, "why.html", back=f"{PREFIX}/s/{space}/claims?key={quote(key, safe='')}", **data)


@page("GET", "/s/{space}/waiters/{waiter_id}/why")
async def why_waiter(console: Console, visit: Visit, space: str, waiter_id: str) -> Answer:
    data = await views.why_waiter(visit.reader, space, waiter_id)
    return console.page(visit, "why.html", back=f"{PREFIX}/s/{space}/capacity", **data)


# -- queues, capacity, coordination ----------------------------------------------------------------


@page("GET", "/s/{space}/queues")
async def queues(console: Console, visit: Visit, space: str) -> Answer:
    data = await views.queues(visit.reader, space)
    return console.page(visit, "queues.html", **data)


@page("GET", "/s/{space}/queues/{mailbox_id}")
async def queue(console: Console, visit: Visit, space: str, mailbox_id: str) -> Answer:
    data = await views.queue(
        visit.reader, space, mailbox_id, state=visit.choice("state", DELIVERY_STATES), cursor=visit.text("cursor"),
        limit=visit.limit(), reason=visit.text("reason"), older_s=visit.number("older", 1, 365 * 86_400),
        dead_cursor=visit.text("deadCursor"),
    )
    from .actions import dead_letter_actions

    return console.page(visit, "queue.html", states=DELIVERY_STATES, actions=dead_letter_actions(), **data)


@page("GET", "/s/{space}/capacity")
async def capacity(console: Console, visit: Visit, space: str) -> Answer:
    data = await views.capacity(visit.reader, space)
    return console.page(visit, "capacity.html", **data)


@page("GET", "/s/{space}/coordination")
async def coordination(console: Console, visit: Visit, space: str) -> Answer:
    cursors = {name: visit.text(name + "Cursor") for name in ("groups", "barriers", "timers")}
    data = await views.coordination(visit.reader, space, run=visit.text("run"), cursors=cursors, limit=visit.limit())
    return console.page(visit, "coordination.html", **data)


# -- events --------------------------------------------------------------------------------------


@page("GET", "/s/{space}/events")
async def events(console: Console, visit: Visit, space: str) -> Answer:
    types_text = visit.text("types")
    types = None
    if types_text:
        types = frozenset(name.strip() for name in types_text.split(",") if name.strip())
        unknown = types - set(EVENT_TYPES)
        if unknown:
            raise refuse(VALIDATION_FAILED, f"no event type {sorted(unknown)[0]!r}; the types are {', '.join(EVENT_TYPES)}")
    data = await views.events(visit.reader, space, types=types, run=visit.text("run"), key=visit.text("key"),
                              before=visit.number("before", 1, 2**62), limit=visit.limit())
    return console.page(visit, "events.html", event_types=EVENT_TYPES, types=sorted(types or ()), **data)


# -- charts --------------------------------------------------------------------------------------


@page("GET", "/s/{space}/charts")
async def charts(console: Console, visit: Visit, space: str) -> Answer:
    """The space's traffic over time (`charts.py`, `plots.py`), drawn from what this server keeps."""
    window = visit.choice("window", tuple(plots.WINDOWS)) or "30m"
    # The charts are this server's memory of traffic, not rebuilt from the journal: at a past point
    # the page says so and draws them up to now.
    drawn = plots.charts_of(console.runtime.telemetry.charts.series.get(space), window)
    cursor = await views.newest_event(visit.reader, space)
    return console.page(visit, "charts.html", windows=tuple(plots.WINDOWS), window=window, interval=INTERVAL_S,
                        cursor=cursor, **drawn)


# -- what changed between two points ---------------------------------------------------------------


@page("GET", "/s/{space}/changes")
async def changes(console: Console, visit: Visit, space: str) -> Answer:
    """What changed in the space between two points (`history_views.Diff`, as GET /history/diff
    answers it): counts by state at each, events by type and cause, and the events themselves."""
    first, second = visit.text("from"), visit.text("to")
    if first is None:
        first = visit.text("at")
    found = None
    if first is not None:
        diff = Diff(space)
        points = await console.runtime.history.between(
            space, first, second or format_ms(console.kernel.clock.now_ms()), diff.at_point, diff.on_record,
        )
        found = wire.encode(diff.view(*points))  # (as the route writes it)
    return console.page(visit, "changes.html", diff=found, first=first, second=second, shown_max=CHANGES_SHOWN_MAX)


# -- search --------------------------------------------------------------------------------------


@page("GET", "/s/{space}/search")
async def search(console: Console, visit: Visit, space: str) -> Answer:
    """Runs, claim keys, holders, task keys and mailboxes that match `q` (`views/search.py`)."""
    text = visit.text("q")
    data = await views.search(visit.reader, space, text) if text else {"results": None, "more": {}, "text": ""}
    return console.page(visit, "search.html", **data)


# -- workers -------------------------------------------------------------------------------------


@page("GET", "/s/{space}/workers")
async def workers(console: Console, visit: Visit, space: str) -> Answer:
    holder = visit.text("holder")
    if holder is not None:  # (a worker named "." or "..", which a browser drops from a path)
        return await _worker_page(console, visit, space, holder)
    window = visit.choice("window", tuple(WINDOWS)) or "1h"
    data = await views.workers(visit.reader, space, window_s=WINDOWS[window])
    return console.page(visit, "workers.html", windows=tuple(WINDOWS), window=window, **data)


@page("GET", "/s/{space}/workers/{holder}")
async def worker(console: Console, visit: Visit, space: str, holder: str) -> Answer:
    return await _worker_page(console, visit, space, holder)


async def _worker_page(console: Console, visit: Visit, space: str, holder: str) -> Answer:
    """A worker's page: its blast radius in the window and what it holds now."""
    window = visit.choice("window", tuple(WINDOWS)) or "1h"
    data = await views.worker(visit.reader, space, holder, window_s=WINDOWS[window])
    return console.page(visit, "worker.html", windows=tuple(WINDOWS), window=window, **data)


# -- the live stream -----------------------------------------------------------------------------


@page("GET", "/s/{space}/stream", stream=True)
async def stream(console: Console, visit: Visit, space: str, *, send: Any, receive: Any) -> None:
    """The space's event stream (see `stream.py`): from Last-Event-ID (a reconnect), else `after`."""
    text = visit.headers.get("last-event-id") or visit.text("after") or "0"
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise refuse(VALIDATION_FAILED, f"the stream resumes from an event number, got {text[:40]!r}")
    await console.stream_head(send, visit)

    async def until_gone(cancel: trio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        cancel.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(until_gone, nursery.cancel_scope)
        try:
            await serve_stream(console.feeds, space, int(text), send, console.signed_in(visit.signed), console.serving,
                               console.stream_lifetime_s())
        except KernelError:
            pass  # the journal failed, or the server stops: the browser reconnects and learns then
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        nursery.cancel_scope.cancel()

