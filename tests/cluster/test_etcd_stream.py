"""A watch's stream read line by line on a connection of its own (`http1.ChunkedLines`,
`http1.Connections.stream`, `etcd.Watch`), against hand-made bytes.

The reader is tested on bytes alone first: chunks split anywhere (in a line, in a size line, in
the CRLF after a chunk's data), several lines in one chunk, a line across chunks, extensions and
trailers, and what is not well formed. Then a watch is served by hand-made etcd gateways on
local sockets, so that the stream can be made to break where etcd's never would on demand: in
the middle of a chunk, after which the watch resumes on the next member from the first revision
it had not delivered. These tests wait on nothing but local sockets (each bounded by a timeout).
"""

from __future__ import annotations

import base64
import random
from typing import Awaitable, Callable

import orjson
import pytest
import trio

from runstate.snapshots.etcd import EtcdClient, EtcdServerError, EtcdUnavailable, WatchCanceled
from runstate.snapshots.http1 import Broken, ChunkedLines

# -- the reader, on bytes alone -----------------------------------------------------------------


def chunked(*chunks: bytes, trailer: bytes = b"") -> bytes:
    """A body in chunks, one per argument, then the last chunk and the trailer section."""
    return b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks) + b"0\r\n" + trailer + b"\r\n"


def read(pieces: list[bytes], reader: ChunkedLines | None = None) -> list[bytes]:
    reader = reader or ChunkedLines()
    lines: list[bytes] = []
    for piece in pieces:
        lines += reader.feed(piece)
    assert reader.done
    return lines


def test_several_lines_in_one_chunk_and_one_line_across_chunks() -> None:
    """A chunk may hold several whole lines and the start of the next; the line it began is
    finished by the chunks after it; a last line with no newline is the body's last."""
    body = chunked(b'{"a":1}\n{"b":2}\n{"c"', b':3}\n{"d":', b"4}\n", b"tail")
    assert read([body]) == [b'{"a":1}', b'{"b":2}', b'{"c":3}', b'{"d":4}', b"tail"]


def test_every_way_of_splitting_the_bytes_gives_the_same_lines() -> None:
    """Reads cut the stream anywhere: inside a line, inside a size line, between the data and its
    CRLF, inside the CRLF, inside the last chunk. Every single cut, and random cuts, of one body
    give its lines, each once and in order."""
    messages = [b'{"result":{"n":%d,"pad":"%s"}}' % (n, b"x" * (n * 7 % 23)) for n in range(12)]
    stream = b"\n".join(messages) + b"\n"
    body = chunked(*(stream[i:i + 37] for i in range(0, len(stream), 37)), trailer=b"x-trailer: 1\r\n")
    for cut in range(1, len(body)):
        assert read([body[:cut], body[cut:]]) == messages, f"cut at {cut}"
    chance = random.Random(36)
    for _ in range(200):
        cuts = sorted(chance.sample(range(1, len(body)), chance.randint(1, 40)))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)])]
        assert read(pieces) == messages, f"cuts at {cuts}"
    assert read([body[i:i + 1] for i in range(len(body))]) == messages


def test_chunk_extensions_upper_case_sizes_and_trailers_are_read_past() -> None:
    body = b"A;name=value\r\n0123456789\r\n3 ; x\r\nab\n\r\n0\r\nexpires: never\r\nx: y\r\n\r\n"
    assert read([body]) == [b"0123456789ab"]


def test_a_body_ending_before_its_last_chunk_is_broken() -> None:
    """The connection closing in the middle of a chunk (or between chunks) ends the body early:
    `end` says so; the lines that came whole before it were given already."""
    reader = ChunkedLines()
    assert reader.feed(b"10\r\n{}\n{\"half") == [b"{}"]
    with pytest.raises(Broken, match="before the last chunk"):
        reader.end()
    between = ChunkedLines()
    assert between.feed(b"3\r\n{}\n\r\n") == [b"{}"]
    with pytest.raises(Broken):
        between.end()
    whole = ChunkedLines()
    assert whole.feed(b"3\r\n{}\n\r\n0\r\n\r\n") == [b"{}"] and whole.done
    assert whole.end() == []


@pytest.mark.parametrize("body", [
    b"0x3\r\nabc\r\n0\r\n\r\n",  # a prefix int() would take
    b"+3\r\nabc\r\n0\r\n\r\n",  # a sign
    b"1_0\r\n" + b"a" * 16 + b"\r\n0\r\n\r\n",  # an underscore
    b"\r\nabc\r\n",  # no size at all
    b"3\r\nabcd\r\n0\r\n\r\n",  # more data than its size
    b"3\r\nabc0\r\n\r\n",  # no CRLF after the data
    b"1" * 4100,  # a size line without end
])
def test_a_body_not_well_formed_is_broken(body: bytes) -> None:
    with pytest.raises(Broken):
        ChunkedLines().feed(body)


def test_a_line_longer_than_the_limit_breaks_the_stream() -> None:
    reader = ChunkedLines(line_bytes_max=10)
    assert reader.feed(b"6\r\n012345\r\n") == []
    with pytest.raises(Broken, match="longer than 10 bytes"):
        reader.feed(b"6\r\n678901\r\n")


# -- a watch on hand-made gateways ----------------------------------------------------------------

Script = Callable[[trio.SocketStream, dict], Awaitable[None]]


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def message(revision: int, *events: tuple[str, int], created: bool = False, **more: object) -> bytes:
    """A watch message as etcd's gateway writes it: one JSON document, then a newline."""
    result: dict[str, object] = {"header": {"revision": str(revision)}, **more}
    if created:
        result["created"] = True
    if events:
        result["events"] = [{"kv": {"key": b64(key), "value": b64(f"v{rev}"), "mod_revision": str(rev)}} for key, rev in events]
    return orjson.dumps({"result": result}) + b"\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"


class Gateway:
    """One hand-made member: answers each watch request with its script; keeps the requests."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict] = []
        self.headers: list[bytes] = []
        self.closed = trio.Event()  # set when the client closed a connection
        self.url = ""

    async def serve(self, nursery: trio.Nursery) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.url = "http://127.0.0.1:%d" % listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, self.handle, listeners)

    async def handle(self, stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        while len(body) < length:
            body += await stream.receive_some(65536)
        self.headers.append(head.lower())
        request = orjson.loads(body)["create_request"]
        self.requests.append(request)
        await self.script(stream, request)
        # Then wait for the client to close its end.
        try:
            while await stream.receive_some(65536):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # (broken, or closed by the script)
        self.closed.set()


async def gateways(nursery: trio.Nursery, *scripts: Script) -> list[Gateway]:
    made = [Gateway(script) for script in scripts]
    for gateway in made:
        await gateway.serve(nursery)
    return made


@pytest.mark.trio
async def test_a_stream_cut_mid_chunk_resumes_on_the_next_member_from_the_revision_not_delivered() -> None:
    """Member A confirms the watch, sends revision 5 and the first half of a chunk holding
    revision 6, and closes. The watch delivers 5, then takes the stream up on member B from 6
    (A's half message is never delivered): B's events, split in chunks mid-line and several
    to a chunk, come once each and in order. Both requests asked etcd for a leader."""

    async def first(stream: trio.SocketStream, request: dict) -> None:
        half = chunk(message(6, ("k/b", 6)))
        await stream.send_all(HEAD + chunk(message(4, created=True)) + chunk(message(5, ("k/a", 5))) + half[:len(half) // 2])
        await stream.aclose()

    async def second(stream: trio.SocketStream, request: dict) -> None:
        assert request["start_revision"] == "6"
        rest = message(6, ("k/b", 6)) + message(8, ("k/c", 7), ("k/d", 8))
        await stream.send_all(HEAD + chunk(message(8, created=True) + rest[:10]))
        await stream.send_all(chunk(rest[10:50]))
        await stream.send_all(chunk(rest[50:]))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            a, b = await gateways(nursery, first, second)
            async with EtcdClient([a.url, b.url]) as etcd:
                async with etcd.watch("k/", prefix=True, start_revision=5) as watch:
                    assert watch.header.revision == 4 and watch.endpoint == a.url
                    seen = []
                    async for response in watch:
                        seen += [(event.kv.key, event.kv.value, event.kv.mod_revision) for event in response.events]
                        if len(seen) == 4:
                            break
                    assert seen == [(b"k/a", b"v5", 5), (b"k/b", b"v6", 6), (b"k/c", b"v7", 7), (b"k/d", b"v8", 8)]
                    assert watch.resumed == 1 and watch.endpoint == b.url and watch.next_revision == 9
                await b.closed.wait()  # closed on leaving the watch
                assert etcd.connections_busy == 0  # its connection freed
            nursery.cancel_scope.cancel()
    assert a.requests[0]["start_revision"] == "5" and a.requests[0]["key"] == b64("k/")
    assert all(b"grpc-metadata-hasleader: true" in head for head in a.headers + b.headers)


@pytest.mark.trio
async def test_a_no_leader_error_inside_the_stream_moves_the_watch_to_the_next_member() -> None:
    """A member cut off from its quorum ends the watch with an error message inside the stream:
    the watch goes on at the next member, from the revision after the last one delivered."""

    async def cut_off(stream: trio.SocketStream, request: dict) -> None:
        error = orjson.dumps({"error": {"grpc_code": 14, "http_code": 503, "message": "etcdserver: no leader"}}) + b"\n"
        await stream.send_all(HEAD + chunk(message(3, created=True) + message(3, ("k/a", 3)) + error))

    async def healthy(stream: trio.SocketStream, request: dict) -> None:
        assert request["start_revision"] == "4"
        await stream.send_all(HEAD + chunk(message(4, created=True)) + chunk(message(4, ("k/b", 4))))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            a, b = await gateways(nursery, cut_off, healthy)
            async with EtcdClient([a.url, b.url]) as etcd, etcd.watch("k/", prefix=True) as watch:
                revisions = [(await watch.__anext__()).events[0].kv.mod_revision for _ in range(2)]
                assert revisions == [3, 4] and watch.endpoint == b.url
            nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_compacted_start_is_canceled_and_a_stream_ended_everywhere_is_unavailable() -> None:
    """etcd confirms a watch from a compacted revision and then cancels it with the compaction's
    revision: `WatchCanceled` says so (the caller starts again from a snapshot). A member whose
    stream ends before `created`, on every member, leaves the watch unavailable."""

    async def compacted(stream: trio.SocketStream, request: dict) -> None:
        await stream.send_all(HEAD + chunk(message(9, created=True)))
        await stream.send_all(chunk(message(9, canceled=True, compact_revision="7", cancel_reason="compacted")))

    async def ends(stream: trio.SocketStream, request: dict) -> None:
        await stream.send_all(HEAD + b"0\r\n\r\n")

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            (a,) = await gateways(nursery, compacted)
            async with EtcdClient([a.url]) as etcd, etcd.watch("k", start_revision=2) as watch:
                with pytest.raises(WatchCanceled) as canceled:
                    await watch.__anext__()
                assert canceled.value.compact_revision == 7
            c, d = await gateways(nursery, ends, ends)
            async with EtcdClient([c.url, d.url]) as etcd:
                with pytest.raises(EtcdUnavailable, match="ended before it was created"):
                    async with etcd.watch("k"):
                        pass
                assert etcd.connections_busy == 0
            nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_a_watch_refused_with_a_whole_answer_moves_on_or_says_what_etcd_refused() -> None:
    """A member that refuses the watch answers a whole error (with a Content-Length, no stream):
    one that cannot serve it now (503, no leader) gives way to the next member; one that refuses
    the request itself (400) is the caller's error, raised as etcd said it."""

    def refusal(status: bytes, code: int, text: str) -> Script:
        async def script(stream: trio.SocketStream, request: dict) -> None:
            body = orjson.dumps({"error": text, "code": code, "message": text})
            await stream.send_all(b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (status, len(body), body))
        return script

    async def healthy(stream: trio.SocketStream, request: dict) -> None:
        await stream.send_all(HEAD + chunk(message(2, created=True)))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            a, b, c = await gateways(nursery, refusal(b"503 Service Unavailable", 14, "etcdserver: no leader"), healthy,
                                     refusal(b"400 Bad Request", 3, "etcdserver: key is not provided"))
            async with EtcdClient([a.url, b.url]) as etcd, etcd.watch("k") as watch:
                assert watch.endpoint == b.url and watch.header.revision == 2
            async with EtcdClient([c.url]) as etcd:
                with pytest.raises(EtcdServerError, match="key is not provided") as refused:
                    async with etcd.watch("k"):
                        pass
                assert refused.value.status == 400 and etcd.connections_busy == 0
            nursery.cancel_scope.cancel()
