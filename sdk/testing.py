"""Test your agents against a real runstate kernel, in-process, in your own event loop.

::

    async with runstate.testing.serve() as rs:          # an AsyncRunstate
        run = await rs.scopes.create()
        async with await run.claim("company:acme").acquire() as lease:
            ...
        rs.kernel                                       # the server's kernel, for assertions
        other = rs.new_client(holder="worker-2")        # a second worker, same server

No port and no subprocess: requests go to the server's ASGI app through `ASGITransport`, a
transport that calls the app directly. How the app is run depends on the caller's library:

- **trio**: the app (its lifespan, the kernel and each request) runs in the caller's own trio run.
  Under `trio.testing.MockClock` with autojump, the kernel's leases and expiries and the SDK's
  renewals and waits all run in virtual time, so a test can keep a 5 s lease alive for an hour of
  virtual time in milliseconds, and assert exact instants. A plain (not async) function handed to
  `consume()` or `run(fn)` runs in a worker thread, and while it runs the autojump clock jumps on
  to the next timer: give such tests async functions, or a `MockClock` whose `autojump_threshold`
  outlasts the thread.
  The server's wall clock starts at the real time and then follows virtual time, so it runs
  ahead of this process's `datetime.now()` by the virtual time passed: a time worked out from
  `datetime.now()` (a run's `deadline=`, a reservation's `settle_by`, the run-bound API's
  `run(name, deadline="60s")`) lies that far in the server's past. Set them before time passes,
  or from a time the server gave (an answer's `createdAt`).
- **asyncio**: the kernel is trio-only, so it runs as a trio *guest run* on the caller's asyncio
  loop (`trio.lowlevel.start_guest_run`): same thread, same loop, no private thread. A request
  crosses over with `TrioToken.run_sync_soon` and comes back through an asyncio future; cancelling
  the request on the asyncio side cancels it on the trio side, as a client disconnect would.
  Time is real time here (asyncio has no virtual clock), so keep such tests short. trio hosts one
  guest run per thread, so one server at a time: a second `serve()` inside the first raises
  `ConfigError` (under trio, any number share the test's own run).

The server side needs the server extra: `pip install 'runstate[server]'`. The examples are
pytest tests for pytest-trio (`@pytest.mark.trio`, or `trio_mode = true` in the pytest
configuration); under asyncio, `@pytest.mark.anyio` runs them too, in real time.

Crashes, for testing takeover logic: `crash(x)` makes `x` behave as if its process had died at
that instant, without running any of its clean-up.

- `crash(lease)`: the claim lease stops renewing and is never released; the key stays held until
  the lease runs out on the server, then another holder can take it.
- `crash(delivery)`: inside `consume()`, the handler is cancelled, the lease stops renewing, and
  the delivery is neither completed nor put back: the task comes back with `attempt + 1` once
  its lease runs out.
- `crash(client)`: a worker killed mid-task. Every lease and delivery the client holds is
  crashed, every `consume()` it runs returns at once without giving anything back, and any later
  call through it raises `CrashedError` (a dead process sends nothing).

The server can die too: `await rs.restart_server(down_s=6)` kills it as `kill -9` would, keeps it
down (requests refused, as by a closed port), and starts it again on the same settings; with a
`data_dir` in the settings it recovers its state and gives the leases still running their restart
grace. Under trio, in virtual time, a test so shows that its workers ride through a restart. The
data directory's reads, writes and snapshots run on the loop, not in worker threads or a child
process, so the autojump clock stands still while the disk works.

Nothing else in the server is touched: the other clients, and the kernel's own expiry, carry on.

When the `async with` ends the server stops for good: a client kept past it (this one, or one
from `new_client()`) is refused as by a closed port, `UnreachableError`.

The run-bound API (`@runstate.once`, `runstate.queue`...) talks to the same server through
`rs.client(run="...")`, a `runstate.Runstate` on this server, or through the module functions
inside `with runstate.testing.use(rs):`, which points the default client at it for the block.
In-process, use the async forms (`async def` functions, `await runstate.aserve()`...): the
blocking forms run on a loop thread of their own, and the in-process server lives in your loop;
a blocking call to it raises `ConfigError` at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import threading
from typing import Any, Awaitable, Callable, Coroutine, Iterator, Mapping, Protocol, Union
from urllib.parse import unquote

import anyio
import anyio.abc

from . import _runtime
from ._context import CrashedError
from .blocking import BlockingDelivery, BlockingLease, Runstate
from .claims import ClaimLease
from .client import AsyncRunstate
from .errors import ConfigError
from .mailboxes import Delivery
from .transport import Exchange, TransportError

__all__ = ["serve", "serve_app", "ASGITransport", "InProcessRunstate", "crash", "CrashedError", "use"]

ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]], Awaitable[None]]

_ASGI = {"version": "3.0", "spec_version": "2.3"}
DEFAULT_CLIENT = ("127.0.0.1", 40000)
DEFAULT_SERVER = ("runstate.test", 80)
# How long the server may take to become ready after its lifespan started (virtual time under trio).
READY_TIMEOUT_S = 30.0
READY_POLL_S = 0.001


async def call_asgi(
    app: ASGIApp,
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes | None,
    *,
    client: tuple[str, int] = DEFAULT_CLIENT,
    server: tuple[str, int] = DEFAULT_SERVER,
    state: dict[str, Any] | None = None,
    disconnect: anyio.Event | None = None,
) -> Exchange:
    """Send one HTTP request to an ASGI app in the current task and collect its whole answer.

    After the request body, `receive()` blocks until the answer is complete and then reports
    `http.disconnect`, as a server does once the client is done; setting `disconnect` reports it
    earlier, as a client that goes away while its request is held (a long poll). If the caller is cancelled the
    app is cancelled with it: for the app that is the client going away.
    """
    raw_path, _, query = path.partition("?")
    header_list = [(b"host", server[0].encode("ascii"))]
    header_list += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    if body is not None or method in ("POST", "PUT", "PATCH"):
        header_list.append((b"content-length", str(len(body or b"")).encode("ascii")))
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": dict(_ASGI),
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": unquote(raw_path),
        "raw_path": raw_path.encode("ascii"),
        "query_string": query.encode("ascii"),
        "root_path": "",
        "headers": header_list,
        "client": client,
        "server": server,
        "extensions": {},
    }
    if state is not None:
        scope["state"] = dict(state)

    request_sent = False
    complete = anyio.Event()
    gone = disconnect if disconnect is not None else complete
    status: int | None = None
    response_headers: dict[str, str] = {}
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal request_sent
        if not request_sent:
            request_sent = True
            return {"type": "http.request", "body": body or b"", "more_body": False}
        if gone is complete:
            await complete.wait()
        else:
            async with anyio.create_task_group() as either:

                async def until(event: anyio.Event) -> None:
                    await event.wait()
                    either.cancel_scope.cancel()

                either.start_soon(until, complete)
                either.start_soon(until, gone)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            for name, value in message.get("headers", []):
                key = name.decode("latin-1").lower()
                text = value.decode("latin-1")
                response_headers[key] = f"{response_headers[key]}, {text}" if key in response_headers else text
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                complete.set()

    await app(scope, receive, send)
    if status is None or not complete.is_set():
        raise TransportError(f"the app returned without a complete answer to {method} {raw_path}")
    return status, response_headers, b"".join(chunks)


def _check_thread(home: int, method: str, path: str) -> None:
    """An app served in-process belongs to the event loop of the thread that served it; a call
    from another thread (a blocking client's loop thread) would run it on a loop it is not in."""
    if threading.get_ident() != home:
        raise ConfigError(
            f"{method} {path}: the in-process server runs in the event loop of the thread that started it;"
            " call it there with the async forms (await ...), not through a blocking client"
            " (runstate.Runstate), whose calls run on a loop thread of its own"
        )


class _Jitters:
    """The jitter of the clients of one in-process server (renewal intervals, retry pauses, wait
    loops): with the server's seed, each client made on its transport gets a generator of its own,
    seeded from the seed and the client's place in the order they were made, so the same seed
    repeats each client's draws, whatever the other clients draw meanwhile. Without a seed, None:
    the process's generator."""

    __slots__ = ("seed", "made")

    def __init__(self, seed: int | None) -> None:
        self.seed = seed
        self.made = 0

    def new(self) -> random.Random | None:
        if self.seed is None:
            return None
        self.made += 1
        return random.Random(f"runstate-jitter:{self.seed}:{self.made}")


class ASGITransport:
    """A transport that calls an ASGI app in the caller's task (same thread, same library).

    It is used from the thread it was made in: a request sent from another thread (a blocking
    client's loop thread) raises `ConfigError` at once.

    For a trio app under asyncio use `serve()` / `serve_app()`, which host it in a trio guest run.
    Errors raised by the app are raised to the caller (a test wants to see them); a request that
    outlives `timeout_s` is cancelled and reported as a `TransportError`, like a read timeout.
    `app` is the ASGI app it calls; while `down` is true (`InProcessRunstate.restart_server`)
    every request is refused, as by a closed port.
    """

    base_url = "the in-process test server"
    """What error messages call the server this transport reaches."""

    def __init__(
        self, app: ASGIApp, *, client: tuple[str, int] = DEFAULT_CLIENT, state: dict[str, Any] | None = None,
        seed: int | None = None,
    ) -> None:
        """`seed`: the server's seed, from which each client made on this transport draws its jitter
        (`new_jitter`); None, the process's generator."""
        self.app = app
        self._client = client
        self._state = state
        self._jitters = _Jitters(seed)
        # While the server is down (`InProcessRunstate.restart_server`): refused, as a closed port.
        self.down = False
        self._in_flight: set[anyio.CancelScope] = set()
        self._thread = threading.get_ident()

    def new_jitter(self) -> random.Random | None:
        """A generator for the jitter of a client made on this transport (see `_Jitters`)."""
        return self._jitters.new()

    async def send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Exchange:
        """Call the app with the request, in this task; its answer as `(status, headers, body)`."""
        _check_thread(self._thread, method, path)
        if self.down:
            raise TransportError(f"{method} {path}: connection refused (the server is down)")
        with anyio.CancelScope() as connection:
            self._in_flight.add(connection)
            try:
                with anyio.move_on_after(timeout_s):
                    return await call_asgi(self.app, method, path, headers, body, client=self._client, state=self._state)
            finally:
                self._in_flight.discard(connection)
        if connection.cancel_called:
            raise TransportError(f"{method} {path}: connection reset (the server died)")
        raise TransportError(f"{method} {path} timed out after {timeout_s} s")

    def _server_died(self) -> None:
        """The server is gone: requests in flight are reset, new ones refused, until `_server_back`."""
        self.down = True
        for connection in list(self._in_flight):
            connection.cancel()

    def _server_back(self, app: ASGIApp, state: dict[str, Any]) -> None:
        self.app, self._state, self.down = app, state, False


class _Spawner(Protocol):
    """What `_Lifespan` needs of a task group: an anyio `TaskGroup` or a trio `Nursery`."""

    def start_soon(self, async_fn: Callable[[], Coroutine[Any, Any, None]], /) -> object: ...


class _Lifespan:
    """Drives an app's ASGI lifespan: startup before the first request, shutdown at the end."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.state: dict[str, Any] = {}
        self._to_app = anyio.create_memory_object_stream[dict[str, Any]](2)
        self._from_app = anyio.create_memory_object_stream[dict[str, Any]](2)
        self._supported = True
        # Cancelling it kills the app (no shutdown), as a process killed with SIGKILL dies.
        self._alive = anyio.CancelScope()
        self._ended = anyio.Event()

    async def kill(self) -> None:
        """End the app's task at once, without its shutdown; return once it has ended."""
        self._alive.cancel()
        await self._ended.wait()
        self.close()

    def close(self) -> None:
        """Close this side's ends of the lifespan's streams (the app's own ends close with its
        task), so that none is left for the garbage collector to warn about."""
        for stream in (*self._to_app, *self._from_app):
            stream.close()

    async def startup(self, group: _Spawner) -> None:
        send_to_app, receive_in_app = self._to_app
        send_from_app, receive_from_app = self._from_app
        failure: list[BaseException] = []

        async def run_app() -> None:
            scope = {"type": "lifespan", "asgi": dict(_ASGI), "state": self.state}
            try:
                with self._alive:
                    async with send_from_app:
                        await self.app(scope, receive_in_app.receive, send_from_app.send)
            except Exception as err:
                failure.append(err)
            finally:
                self._ended.set()

        group.start_soon(run_app)
        await send_to_app.send({"type": "lifespan.startup"})
        try:
            message = await receive_from_app.receive()
        except anyio.EndOfStream:
            if failure:
                raise failure[0]
            self._supported = False  # an app without a lifespan: nothing to start or stop
            return
        if message["type"] != "lifespan.startup.complete":
            raise RuntimeError(f"the app failed to start: {message.get('message', message['type'])}")

    async def shutdown(self) -> None:
        if not self._supported or self._ended.is_set():
            return
        send_to_app, _ = self._to_app
        _, receive_from_app = self._from_app
        await send_to_app.send({"type": "lifespan.shutdown"})
        try:
            message = await receive_from_app.receive()
        except anyio.EndOfStream:
            return
        if message["type"] != "lifespan.shutdown.complete":
            raise RuntimeError(f"the app failed to stop: {message.get('message', message['type'])}")


async def _wait_ready(app: Any) -> None:
    """The runstate app answers 503 until its kernel is ready; other apps are ready at once."""
    runtime = getattr(app, "runtime", None)
    if runtime is None:
        return
    with anyio.fail_after(READY_TIMEOUT_S):
        while not runtime.ready:
            await anyio.sleep(READY_POLL_S)


class _TrioGuest:
    """A trio run hosted on the running asyncio loop, serving one ASGI app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.state: dict[str, Any] = {}

    async def start(self) -> None:
        import asyncio

        import trio

        if trio.lowlevel.in_trio_run():  # trio hosts one run per thread, and another server's is running
            raise ConfigError(
                "runstate.testing.serve() under asyncio: another in-process server already runs in this thread"
                " (its kernel is a trio guest run, and trio hosts one per thread); serve one at a time under"
                " asyncio, or run the test under trio, where several servers share the test's own run"
            )
        self._loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[Any] = self._loop.create_future()
        self._done: asyncio.Future[Any] = self._loop.create_future()
        self._stop = trio.Event()
        trio.lowlevel.start_guest_run(
            self._main,
            run_sync_soon_threadsafe=self._loop.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=self._loop.call_soon,
            done_callback=self._finished,
            host_uses_signal_set_wakeup_fd=True,
        )
        await self._ready

    async def _main(self) -> None:
        import trio

        self._token = trio.lowlevel.current_trio_token()
        lifespan = _Lifespan(self.app)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    await lifespan.startup(nursery)
                    await _wait_ready(self.app)
                except BaseException as err:
                    self._settle(self._ready, error=err if isinstance(err, Exception) else RuntimeError("startup was cancelled"))
                    raise
                self.state = lifespan.state
                self._settle(self._ready, result=None)
                await self._stop.wait()
                with trio.move_on_after(READY_TIMEOUT_S):
                    await lifespan.shutdown()
                nursery.cancel_scope.cancel()
        finally:
            lifespan.close()

    def _finished(self, outcome: Any) -> None:
        self._settle(self._ready, error=RuntimeError("the server's trio run ended before it was ready"))
        self._settle(self._done, result=outcome)

    def _settle(self, future: Any, *, result: Any = None, error: BaseException | None = None) -> None:
        def apply() -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        self._loop.call_soon_threadsafe(apply)

    async def request(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None) -> Exchange:
        """Called on the asyncio side: run one request in the trio run and wait for its answer."""
        import trio

        future = self._loop.create_future()
        cancel_scope = trio.CancelScope()

        async def serve_one() -> None:
            with cancel_scope:
                try:
                    result = await call_asgi(self.app, method, path, headers, body, state=self.state)
                except Exception as err:
                    self._settle(future, error=err)
                else:
                    self._settle(future, result=result)

        self._token.run_sync_soon(self._nursery.start_soon, serve_one)
        try:
            answer: Exchange = await future
            return answer
        finally:
            if not future.done():
                self._token.run_sync_soon(cancel_scope.cancel)

    async def stop(self) -> None:
        self._token.run_sync_soon(self._stop.set)
        outcome = await self._done
        outcome.unwrap()


class _GuestTransport:
    """The asyncio side of a trio guest run: a transport whose requests cross into trio."""

    base_url = "the in-process test server"

    def __init__(self, guest: _TrioGuest, seed: int | None = None) -> None:
        self.guest = guest
        self._jitters = _Jitters(seed)
        self._thread = threading.get_ident()
        # Once `serve()` has ended and the trio run with it: refused, as a closed port.
        self.down = False

    def new_jitter(self) -> random.Random | None:
        return self._jitters.new()

    async def send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Exchange:
        _check_thread(self._thread, method, path)
        if self.down:
            raise TransportError(f"{method} {path}: connection refused (the server is down)")
        with anyio.move_on_after(timeout_s):
            return await self.guest.request(method, path, headers, body)
        raise TransportError(f"{method} {path} timed out after {timeout_s} s")


class InProcessRunstate(AsyncRunstate):
    """The client `serve()` yields: an `AsyncRunstate` that also exposes the server it talks to
    (`app`, the ASGI app; `runtime`, its kernel)."""

    app: Any
    _extra_clients: list[AsyncRunstate]
    _server: "serve_app | None" = None

    @property
    def runtime(self) -> Any:
        """The server's runtime (routes' view of the kernel), when the app is runstate's."""
        return getattr(self.app, "runtime", None)

    @property
    def kernel(self) -> Any:
        """The running kernel, for assertions on its state."""
        runtime = self.runtime
        return None if runtime is None else runtime.kernel

    async def restart_server(self, *, down_s: float = 0.0) -> None:
        """Kill the server, as `kill -9` would (no shutdown, no final snapshot: what its data
        directory holds is what an acknowledged write made durable), keep it down `down_s`
        seconds (requests in flight are reset, new ones refused, as a closed port), then start it
        again on the same settings: with a `data_dir`, it recovers its state, and the leases that
        were still running get the restart grace. Under trio only (virtual time under MockClock);
        for a server made by `serve()`."""
        server = self._server
        if server is None or server._make_app is None or _runtime.current_library() != "trio":
            raise RuntimeError("restart_server() needs a server made by runstate.testing.serve(), under trio")
        await server._restart(down_s)

    def client(self, **options: Any) -> Runstate:
        """A run-bound client of this server (`runstate.Runstate`: `once`, `queue`, `stop`...), for
        its async forms in this event loop; `run=` picks its run, `worker=` its name."""
        config = self._config
        return Runstate(transport=self.transport, api_key=config.api_key, space_id=self.space_id, **options)

    def new_client(self, **kwargs: Any) -> AsyncRunstate:
        """Another client of the same server: its own holder (pass `holder=`) and session, any
        option of `AsyncRunstate` (`transport=`: one of your own, say one wrapping `transport` to
        fail some calls). It is closed when `serve()` ends."""
        config = self._config
        options = {"api_key": config.api_key, "space_id": self.space_id, "transport": self.transport, **kwargs}
        client = AsyncRunstate(**options)
        self._extra_clients.append(client)
        return client


class serve_app:
    """Serve any ASGI app in-process and yield an `InProcessRunstate` connected to it.

    Use as `async with serve_app(app, api_key=..., space_id=...) as rs:`. Exceptions from the
    body of the `async with` come out as they are, never wrapped in an exception group. `app` is
    the app it serves.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        api_key: str = "test-key",
        space_id: str = "default",
        make_app: Callable[[], ASGIApp] | None = None,
        seed: int | None = None,
        **client_kwargs: Any,
    ) -> None:
        self.app = app
        self._make_app = make_app  # another app on the same settings, for `restart_server`
        self._seed = seed  # the server's, which its clients' jitter is drawn from (`_Jitters`)
        self._client_kwargs = {"api_key": api_key, "space_id": space_id, **client_kwargs}
        self._client: InProcessRunstate | None = None

    async def __aenter__(self) -> InProcessRunstate:
        if _runtime.current_library() == "trio":
            self._group = anyio.create_task_group()
            await self._group.__aenter__()
            try:
                self._lifespan = _Lifespan(self.app)
                await self._lifespan.startup(self._group)
                await _wait_ready(self.app)
            except BaseException:
                self._group.cancel_scope.cancel()
                await self._group.__aexit__(None, None, None)
                self._lifespan.close()
                raise
            transport: ASGITransport | _GuestTransport = ASGITransport(self.app, state=self._lifespan.state, seed=self._seed)
        else:
            self._guest = _TrioGuest(self.app)
            await self._guest.start()
            transport = _GuestTransport(self._guest, self._seed)
        self._transport = transport
        client = InProcessRunstate(transport=transport, **self._client_kwargs)
        client.app = self.app
        client._extra_clients = []
        client._server = self
        self._client = client
        return client

    async def _restart(self, down_s: float) -> None:
        assert self._make_app is not None and self._client is not None
        transport = self._client.transport
        assert isinstance(transport, ASGITransport)
        transport._server_died()
        await self._lifespan.kill()
        await anyio.sleep(down_s)
        self.app = self._make_app()
        self._lifespan = _Lifespan(self.app)
        await self._lifespan.startup(self._group)
        await _wait_ready(self.app)
        transport._server_back(self.app, self._lifespan.state)
        self._client.app = self.app

    async def __aexit__(self, *exc_info: Any) -> None:
        client = self._client
        on_trio = _runtime.current_library() == "trio"
        try:
            with anyio.CancelScope(shield=True):
                if client is not None:
                    for extra in client._extra_clients:
                        await extra.aclose()
                    await client.aclose()
                if on_trio:
                    with anyio.move_on_after(READY_TIMEOUT_S):
                        await self._lifespan.shutdown()
                else:
                    await self._guest.stop()
        finally:
            # The server is gone: a client kept past the block is refused, as by a closed port.
            if client is not None:
                self._transport.down = True
            if on_trio:
                # Outside the shielded scope: a task group must be exited where it was entered.
                self._group.cancel_scope.cancel()
                await self._group.__aexit__(None, None, None)
                self._lifespan.close()


def serve(
    *,
    api_key: str = "test-key",
    space_id: str = "default",
    settings: Any = None,
    seed: int | None = 1,
    **client_kwargs: Any,
) -> serve_app:
    """A fresh in-memory runstate server in this event loop, and a client for it.

    `settings` is a `runstate.server.settings.Settings`; by default an in-memory server that
    accepts `api_key` for `space_id`, with a fixed seed. A seed repeats from run to run the
    server's ids, tokens and retry backoffs, and the jitter of every client made on this server's
    transport (this one, `new_client()`, `client()`: renewal intervals, retries through an
    outage, wait-loop pauses), each client drawing from a generator of its own seeded from the
    seed and the order the clients were made in; so under trio's `MockClock` a test whose tasks do
    not race one another repeats its timing exactly. (`seed=None`: drawn afresh each run. A client
    on a transport of your own, one wrapping `rs.transport`, draws from the process's generator.)
    Settings that name no API key (`Settings(data_dir=...)`) are given `api_key` for `space_id`
    too, and `seed` when they have none, so that the client is accepted. Other keyword arguments go to the client
    (`holder=`, `request_timeout_ms=`, `retries=`...).
    """
    try:
        from runstate.server.app import create_app
        from runstate.server.settings import Settings
        from runstate.snapshots.wal import inline
    except ImportError as err:  # pragma: no cover - depends on the installed extras
        raise ImportError("runstate.testing.serve() needs the server: pip install 'runstate[server]'") from err
    if settings is None:
        settings = Settings(api_key=api_key, space_id=space_id, seed=seed)
    elif settings.api_key is None:  # a server that would make a key of its own, unknown to the client
        settings = dataclasses.replace(
            settings, api_key=api_key, space_id=space_id, seed=seed if settings.seed is None else settings.seed
        )
    # A data directory's IO runs on the loop (`inline`): in a worker thread or a snapshot's child
    # process it would let a mock clock jump while it ran, and virtual time would not repeat.
    return serve_app(
        # quart types an app's scope and messages as its own TypedDicts; `ASGIApp` takes the plain
        # dicts any ASGI app is handed, which is what the app is given here.
        create_app(settings, run_blocking=inline), api_key=api_key, space_id=space_id,  # type: ignore[arg-type]  # quart's ASGI TypedDicts (above)
        make_app=lambda: create_app(settings, run_blocking=inline),  # type: ignore[arg-type, return-value]  # the same
        seed=settings.seed,
        **client_kwargs,
    )


Crashable = Union[ClaimLease, Delivery, AsyncRunstate, BlockingLease, BlockingDelivery, Runstate]


def crash(target: Crashable) -> None:
    """Make a lease, a delivery or a whole client behave as if its process died now (see above).

    Synchronous, so a handler can call it at the exact point where the crash should happen;
    whatever runs on after it sends nothing. The blocking client's objects are accepted too.
    """
    if isinstance(target, (BlockingLease, BlockingDelivery, Runstate)):
        # The blocking client's objects live on its own loop: crash them there, and wait.
        inner: ClaimLease | Delivery | AsyncRunstate
        if isinstance(target, BlockingLease):
            inner = target._lease
        elif isinstance(target, BlockingDelivery):
            inner = target._delivery
        else:
            inner = target._async

        async def on_the_loop() -> None:
            _crash(inner)

        target._loop.run(on_the_loop())
        return
    _crash(target)


def _crash(target: ClaimLease | Delivery | AsyncRunstate) -> None:
    if isinstance(target, ClaimLease):
        target._crash()
    elif isinstance(target, Delivery):
        target._crash()
    elif isinstance(target, AsyncRunstate):
        holdings = target._ctx.holdings
        holdings.crashed = True
        for lease in list(holdings.leases):
            lease._crash()
        for delivery in list(holdings.deliveries):
            delivery._crash()
        for consumer in list(holdings.consumers):
            consumer.cancel()
    else:
        raise TypeError(f"crash() takes a ClaimLease, a Delivery or a client, not {type(target).__name__}")


@contextlib.contextmanager
def use(rs: InProcessRunstate, **options: Any) -> Iterator[None]:
    """Point the module functions (`runstate.once`, `runstate.aserve()`...) at this in-process
    server for the block (`run=`, `worker=` as for `configure()`), and back where they were after."""
    import runstate

    default = runstate._default
    shared = default._shared
    saved = dict(shared._options)
    shared.configure({"transport": rs.transport, "api_key": rs._config.api_key, "space_id": rs.space_id, **options})
    default._binding.reset()
    try:
        yield
    finally:
        with shared._lock:
            shared._options = saved
        shared.configure({})  # drop what was made for the block: the next call starts afresh
        default._binding.reset()
