"""The live stream: one watch of a space's event log, fanned out to a bounded buffer per tab.

Each open console tab holds one server-sent-events stream (`GET /console/s/{space}/stream`).
Every event goes out as `id: N`, N being its number in the log, which is its cursor: the
browser's automatic reconnect sends `Last-Event-ID: N` and the stream resumes strictly after it,
so nothing is missed and nothing comes twice. A page is rendered at a cursor and opens its stream
from there, so nothing falls between what the page shows and what the stream brings.

However many tabs watch a space, the event log is watched once for it (`Feed`): the same
`WatchEvents` long poll as `GET /watch`, parked on the space's events actor and woken by the turn
that makes an event. The watch runs in the task of one of the space's streams at a time: each
stream takes part through `Feed.watch`, which waits on the feed's lock, and the holder watches for
all. When that stream ends, the next one in line carries on from the same cursor, so no task
outlives the streams that need it and no event is fetched twice.

What the watch brings is appended to each stream's own buffer, at most `STREAM_BUFFER_MAX`
events; a tab that cannot keep up (a sleeping laptop, a slow link) overflows only its own buffer
and is then sent `reset` with the newest cursor: the page reloads what it shows and goes on from
there. It never holds the watch back or costs the other tabs anything. Writes refused for a stale
token (`fenced.py`) go out as `fenced`, and each new bucket of the space's charts (`charts.py`)
as `charts` (neither is an event, so they have no cursor).

A stream also ends: after `STREAM_S_MAX` (the browser reconnects at once, from its last id; the
server closes connections that send nothing for `read_timeout_s`), when the server shuts down,
and when its session ends (`signedout`). A comment line every `HEARTBEAT_S` keeps proxies from
closing it.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Awaitable, Callable

import orjson
import trio

from ...actors.commands import WatchEvents
from ...actors.errors import KernelError
from ...actors.events import CURSOR_EXPIRED
from ...actors.kernel import EMPTY
from . import views
from .fenced import Fenced
from ..services import RouteKernel
from .. import wire

__all__ = ["Feeds", "Feed", "Stream", "STREAM_BUFFER_MAX", "HEARTBEAT_S", "STREAM_S_MAX", "WATCH_WAIT_MS", "WATCH_LIMIT"]

# Events buffered for one stream before it is sent `reset` instead.
STREAM_BUFFER_MAX = 2000
# Events one watch answer brings at most, and how long it is held when nothing happens.
WATCH_LIMIT = 1000
WATCH_WAIT_MS = 15_000
HEARTBEAT_S = 15.0
# A stream ends after this long (at most half the server's read timeout); the browser reconnects.
STREAM_S_MAX = 300.0
# How long the browser waits before it reconnects a stream that ended.
RETRY_MS = 1000

Send = Callable[[dict[str, Any]], Awaitable[None]]


class Stream:
    """One tab's stream: its buffer of (cursor, bytes) to send, oldest first."""

    __slots__ = ("buffer", "wake", "reset", "closed")

    def __init__(self) -> None:
        self.buffer: deque[tuple[int | None, bytes]] = deque()
        self.wake = trio.Event()
        # Set when the buffer overflowed or the feed lost its place: send `reset` next.
        self.reset = False
        self.closed = False

    def push(self, items: list[tuple[int | None, bytes]]) -> bool:
        """Append `items` unless that goes past the buffer; False when it overflowed instead."""
        if self.reset:
            return True  # a reset is due anyway: what it would send is reloaded
        if len(self.buffer) + len(items) > STREAM_BUFFER_MAX:
            self.buffer.clear()
            self.reset = True
            self.wake.set()
            return False
        self.buffer.extend(items)
        self.wake.set()
        return True


class Feed:
    """The watch of one space's event log, for every stream of that space."""

    def __init__(self, feeds: "Feeds", space: str) -> None:
        self.feeds = feeds
        self.space = space
        self.streams: set[Stream] = set()
        # The newest event fetched (None until the first stream reads it).
        self.cursor: int | None = None
        self.lock = trio.Lock()

    async def watch(self) -> None:
        """Wait for the watch, then watch for every stream of the space until cancelled."""
        async with self.lock:
            kernel = self.feeds.kernel()
            while True:
                if kernel.waits_ended:  # the server shuts down: no watch parks any more
                    self.close()
                    return
                cursor = self.cursor
                assert cursor is not None, "a feed has a cursor before its first stream watches"
                command = WatchEvents(space=self.space, after=cursor, limit=WATCH_LIMIT, wait_ms=WATCH_WAIT_MS)
                try:  # (answered once the events it brings are durable, as every answer is)
                    reply = await kernel.submit(command, wait_ms=WATCH_WAIT_MS)
                    if reply is EMPTY:
                        continue
                except KernelError as error:
                    if error.code != CURSOR_EXPIRED:
                        raise
                    # The log moved on past the cursor (more than it keeps in one fetch): start
                    # again from its newest event, and have every stream reload.
                    self.cursor = await views.newest_event(kernel, self.space)
                    self.reset_all()
                    continue
                self.publish([wire.encode(event) for event in reply.events], int(reply.next_cursor))  # (as the API writes them)

    def publish(self, events: list[dict[str, Any]], cursor: int) -> None:
        items: list[tuple[int | None, bytes]] = [_encode(event) for event in events]
        self.cursor = max(self.cursor or 0, cursor)
        stats = self.feeds.stats
        stats["events"] += len(items)
        for stream in self.streams:
            if not stream.push(items):
                stats["resets"] += 1
            stats["bufferHighWater"] = max(stats["bufferHighWater"], len(stream.buffer))

    def fenced(self, fenced: Fenced) -> None:
        data = orjson.dumps({"kind": fenced.kind, "ident": fenced.ident, "operation": fenced.operation, "message": fenced.message})
        for stream in self.streams:
            stream.push([(None, b"event: fenced\ndata: %s\n\n" % data)])

    def charts(self, number: int) -> None:
        data = b'{"bucket": %d}' % number
        for stream in self.streams:
            stream.push([(None, b"event: charts\ndata: %s\n\n" % data)])

    def reset_all(self) -> None:
        for stream in self.streams:
            stream.buffer.clear()
            stream.reset = True
            stream.wake.set()

    def close(self) -> None:
        for stream in self.streams:
            stream.closed = True
            stream.wake.set()


class Feeds:
    """The feeds of this process, one per space with a stream open."""

    def __init__(self, kernel: Callable[[], Any]) -> None:
        self.kernel = kernel
        self._feeds: dict[str, Feed] = {}
        # For operators and the bench: streams open, events fanned out, resets, the fullest buffer.
        self.stats = {"streams": 0, "events": 0, "resets": 0, "bufferHighWater": 0}

    def get(self, space: str) -> Feed | None:
        return self._feeds.get(space)

    def join(self, space: str, stream: Stream) -> Feed:
        feed = self._feeds.get(space)
        if feed is None:
            feed = self._feeds[space] = Feed(self, space)
        feed.streams.add(stream)
        self.stats["streams"] += 1
        return feed

    def leave(self, feed: Feed, stream: Stream) -> None:
        feed.streams.discard(stream)
        self.stats["streams"] -= 1
        if not feed.streams and self._feeds.get(feed.space) is feed:
            del self._feeds[feed.space]

    def charts(self, space: str, number: int) -> None:
        """A bucket of `space`'s charts is done (the `Charts` listener): its open tabs redraw them."""
        feed = self._feeds.get(space)
        if feed is not None:
            feed.charts(number)

    def fenced(self, space: str, fenced: Fenced) -> None:
        """A write refused for a stale token in `space` (the shell's `FencedWrites` listener)."""
        feed = self._feeds.get(space)
        if feed is not None:
            feed.fenced(fenced)


async def serve_stream(
    feeds: Feeds,
    space: str,
    after: int,
    send: Send,
    signed_in: Callable[[], bool],
    serving: Callable[[], bool],
    lifetime_s: float,
) -> None:
    """Send the events of `space` after the cursor `after` until the stream ends (see the module).

    The answer's head is sent already. `signed_in()` and `serving()` are asked at every wake-up
    and heartbeat: a session that ended is told `signedout`; a server shutting down just ends it.
    """
    kernel = feeds.kernel()
    stream = Stream()
    existing = feeds.get(space)
    newest = None
    if existing is None or existing.cursor is None:
        newest = await views.newest_event(kernel, space)
    feed = feeds.join(space, stream)
    try:
        if feed.cursor is None:
            feed.cursor = newest
        joined = feed.cursor
        assert joined is not None, "a feed joined knows its newest event"
        await send({"type": "http.response.body", "body": b"retry: %d\n\n" % RETRY_MS, "more_body": True})
        last = await _catch_up(kernel, space, stream, after, joined, send)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(feed.watch)
            with trio.move_on_after(lifetime_s):
                await _pump(feed, stream, last, send, lambda: signed_in() and serving())
            nursery.cancel_scope.cancel()
        if serving() and not signed_in():
            await send({"type": "http.response.body", "body": b"event: signedout\ndata: {}\n\n", "more_body": True})
    finally:
        feeds.leave(feed, stream)


def _encode(event: dict[str, Any]) -> tuple[int, bytes]:
    seq = int(event["eventId"].removeprefix("ev_"))
    return seq, b"id: %d\nevent: change\ndata: %s\n\n" % (seq, orjson.dumps({"seq": seq, **event}))


async def _catch_up(kernel: RouteKernel, space: str, stream: Stream, after: int, joined: int, send: Send) -> int:
    """Send the events after `after` up to the feed's cursor when this stream joined (the feed
    brings what follows). A cursor too far behind, no longer kept, or ahead of the log (a log that
    was lost) gets `reset` instead. Returns the cursor of the last event sent."""
    last = after
    while True:
        if joined - last > STREAM_BUFFER_MAX:
            stream.reset = True
            return last
        try:
            events, _ = await views.events_after(kernel, space, last, views.PAGE_MAX)
        except KernelError as error:
            if error.code != CURSOR_EXPIRED:
                raise
            stream.reset = True
            return 0  # the reset names the feed's cursor, not this one (it may be ahead)
        if events:
            chunks = []
            for event in events:
                last, chunk = _encode(event)
                chunks.append(chunk)
            await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": True})
        if not events or last >= joined:
            return last


async def _pump(feed: Feed, stream: Stream, last: int, send: Send, still_open: Callable[[], bool]) -> None:
    """Send what the feed puts in the stream's buffer, in order, each event once."""
    while still_open() and not stream.closed:
        if stream.reset:
            # Resume from the newest event the feed has: the page reloads what it shows, which
            # is at least that new, and the feed brings what follows.
            stream.reset = False
            stream.buffer.clear()
            last = max(last, feed.cursor or 0)
            body = b"id: %d\nevent: reset\ndata: %s\n\n" % (last, orjson.dumps({"cursor": last}))
            await send({"type": "http.response.body", "body": body, "more_body": True})
            continue
        if stream.buffer:
            chunks = []
            while stream.buffer:
                seq, chunk = stream.buffer.popleft()
                if seq is not None:
                    if seq <= last:
                        continue  # sent already while catching up
                    last = seq
                chunks.append(chunk)
            if chunks:
                await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": True})
            continue
        stream.wake = trio.Event()
        with trio.move_on_after(HEARTBEAT_S):
            await stream.wake.wait()
            continue
        await send({"type": "http.response.body", "body": b": still here\n\n", "more_body": True})
