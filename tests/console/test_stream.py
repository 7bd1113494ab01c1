"""The live stream (`server/console/stream.py`) in process, in virtual time: event ids are cursors,
a resume has no gap and no repeat, one watch serves every stream of a space and passes on when
its stream ends, and a stream that falls behind overflows only its own buffer."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from runstate.actors import Clock, IdSource, Kernel, KernelState
from runstate.actors import commands as c
from runstate.actors.journal import MemoryJournal
from runstate.server.console import stream as stream_module
from runstate.server.console.stream import STREAM_BUFFER_MAX, Feeds, serve_stream

pytestmark = pytest.mark.trio

T0 = 1_800_000_000_000
SPACE = "default"


class Client:
    """What one tab receives: its frames, parsed (id, event, data), and a gate that can stall it."""

    def __init__(self) -> None:
        self.frames: list[tuple[int | None, str, str]] = []
        self.gate: trio.Event | None = None
        self._partial = b""

    async def send(self, message: dict) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self._partial += message.get("body", b"")
        *whole, self._partial = self._partial.split(b"\n\n")
        for frame in whole:
            fields = dict(line.split(": ", 1) for line in frame.decode().split("\n") if ": " in line and not line.startswith(":"))
            if "event" in fields:
                self.frames.append((int(fields["id"]) if "id" in fields else None, fields["event"], fields.get("data", "")))

    def ids(self, event: str = "change") -> list[int]:
        return [ident for ident, kind, _ in self.frames if kind == event and ident is not None]


@pytest.fixture
async def kernel(nursery, autojump_clock) -> Kernel:
    made = Kernel(state=KernelState(), journal=MemoryJournal(), clock=Clock(wall_anchor_ms=T0), ids=IdSource(seed=5))
    await nursery.start(made.run)
    return made


async def _events(kernel: Kernel, count: int, run: str | None = None) -> str:
    """`count` new events (claims acquired), each one event."""
    if run is None:
        run = (await kernel.submit(kernel.parse(c.CreateScope, {"name": "r"}, {"space": SPACE}))).id
    for _ in range(count):
        body = {"scopeId": run, "key": f"k{kernel.turns}", "holder": "w", "holderSession": "s", "leaseSeconds": 600}
        await kernel.submit(kernel.parse(c.AcquireClaim, body, {"space": SPACE}))
    return run


def _open(nursery: trio.Nursery, feeds: Feeds, client: Client, after: int, lifetime_s: float = 3600) -> trio.CancelScope:
    scope = trio.CancelScope()

    async def run() -> None:
        with scope:
            await serve_stream(feeds, SPACE, after, client.send, lambda: True, lambda: True, lifetime_s)

    nursery.start_soon(run)
    return scope


async def test_event_ids_are_cursors_and_a_resume_has_no_gap_and_no_repeat(kernel: Kernel, autojump_clock):
    """A stream from cursor 0 gets events 1..6 in order; one resumed at 4 (a reconnect with
    Last-Event-ID 4) gets 5, 6 and what follows, each once."""
    feeds = Feeds(lambda: kernel)
    run = await _events(kernel, 5)  # events 1..6: the run, then five claims
    async with trio.open_nursery() as nursery:
        first, resumed = Client(), Client()
        _open(nursery, feeds, first, 0)
        _open(nursery, feeds, resumed, 4)
        await trio.sleep(1)
        await _events(kernel, 3, run)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert first.ids() == list(range(1, 10))
    assert resumed.ids() == list(range(5, 10))


async def test_one_watch_serves_every_stream_and_passes_on_when_its_stream_ends(kernel: Kernel, autojump_clock):
    """Three streams of a space park one watch on its event log, not three; when the stream
    running the watch ends, another carries on from the same cursor, missing nothing."""
    feeds = Feeds(lambda: kernel)
    run = await _events(kernel, 1)
    clients = [Client() for _ in range(3)]
    async with trio.open_nursery() as nursery:
        scopes = [_open(nursery, feeds, client, 2) for client in clients]
        await trio.sleep(1)
        assert kernel.parked() == [(("events", SPACE), 1)]
        await _events(kernel, 2, run)
        await trio.sleep(1)
        scopes[0].cancel()  # the first stream to join runs the watch
        await trio.sleep(1)
        await _events(kernel, 2, run)
        await trio.sleep(1)
        assert kernel.parked() == [(("events", SPACE), 1)]
        nursery.cancel_scope.cancel()
    assert clients[0].ids() == [3, 4]
    assert clients[1].ids() == clients[2].ids() == [3, 4, 5, 6]
    assert feeds.stats["streams"] == 0 and feeds.get(SPACE) is None


async def test_a_stream_that_falls_behind_is_reset_and_holds_no_one_else_back(kernel: Kernel, autojump_clock, monkeypatch):
    """A tab that stops reading overflows only its own buffer: it is then sent `reset` with the
    newest cursor (its page reloads from there) while the other tab gets every event in order;
    no buffer ever holds more than STREAM_BUFFER_MAX."""
    monkeypatch.setattr(stream_module, "STREAM_BUFFER_MAX", 50)
    feeds = Feeds(lambda: kernel)
    run = await _events(kernel, 1)
    slow, fast = Client(), Client()
    async with trio.open_nursery() as nursery:
        _open(nursery, feeds, fast, 2)
        _open(nursery, feeds, slow, 2)
        await trio.sleep(1)
        slow.gate = trio.Event()  # stops reading
        await _events(kernel, 120, run)
        await trio.sleep(1)
        slow.gate.set()
        await trio.sleep(1)
        await _events(kernel, 1, run)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert fast.ids() == list(range(3, 124)) and not fast.ids("reset")
    (reset,) = slow.ids("reset")
    assert slow.ids()[-1] == 123 and reset < 123 and slow.ids() == sorted(set(slow.ids()))
    assert feeds.stats["resets"] >= 1 and feeds.stats["bufferHighWater"] <= 50


async def test_a_cursor_no_longer_kept_or_ahead_of_the_log_gets_a_reset(kernel: Kernel, autojump_clock):
    """Resuming from a cursor the log no longer keeps (or one from a log that was lost: ahead of
    it) would skip events silently: the stream says `reset` with the newest cursor instead."""
    feeds = Feeds(lambda: kernel)
    await _events(kernel, 3)
    ahead = Client()
    async with trio.open_nursery() as nursery:
        _open(nursery, feeds, ahead, 99)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert ahead.frames and ahead.frames[0][1] == "reset" and ahead.frames[0][0] == 4
    assert STREAM_BUFFER_MAX >= 1000


async def test_a_stream_ends_after_its_lifetime_and_when_signed_out(kernel: Kernel, autojump_clock):
    """A stream ends by itself after its lifetime (the browser reconnects from its last id) and
    tells a signed-out tab so."""
    feeds = Feeds(lambda: kernel)
    await _events(kernel, 1)
    client = Client()
    with trio.fail_after(100):
        await serve_stream(feeds, SPACE, 0, client.send, lambda: True, lambda: True, 60)
    assert client.ids() == [1, 2]
    signed: dict[str, Any] = {"in": True}
    out = Client()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_stream, feeds, SPACE, 2, out.send, lambda: signed["in"], lambda: True, 3600)
        await trio.sleep(1)
        signed["in"] = False
        await _events(kernel, 1)
    assert out.frames[-1][1] == "signedout"
