"""Running `runstate mcp`: one holder session for as long as the MCP transport serves.

The order of events, which is what makes a lease fit a session:

1. the settings are checked before anything starts (a missing API key exits 2 naming it);
2. the MCP transport serves at once; the run is joined beside it (a server that cannot be
   reached yet is said on stderr, and each tool call tries again);
3. the transport ends: stdin closed (the client ended the session, or died), or SIGTERM/SIGINT
   (streamable HTTP: uvicorn's graceful shutdown, after which ours run);
4. what the session holds is given back within `CLOSE_BOUND_S` and the client closes. A process
   killed outright skips 4: the server lets its leases run out.

Under stdio a signal cannot end the transport while stdin stays open (the `mcp` package reads it
in a worker thread, which a cancellation does not interrupt), so there SIGTERM/SIGINT give back
what is held first and then end the process at once.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import anyio

from .. import resolve_config
from ..client import AsyncRunstate
from ..errors import ConfigError
from . import Options
from ._session import HolderSession

__all__ = ["serve"]

# The first attempt to join the run, before the first tool call needs it.
JOIN_BOUND_S = 10.0


def serve(options: Options) -> int:
    try:
        resolve_config(holder=options.holder)
    except ConfigError as err:
        print(f"runstate mcp: {err} (set it in the MCP client's \"env\" for this server; see runstate mcp --help)", file=sys.stderr)
        return 2
    anyio.run(_serve, options)
    return 0


async def _serve(options: Options) -> None:
    from ._tools import build

    session = HolderSession(AsyncRunstate(holder=options.holder), options.run, options.lease_seconds)
    app = build(session)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_join, session, options)
            if options.transport == "stdio":
                group.start_soon(_until_signal, session, options)
                await app.run_stdio_async()
            else:
                _let_signals_return()
                await app.run_streamable_http_async(host=options.host, port=options.port)
            group.cancel_scope.cancel()
    finally:
        await _end(session, options)


async def _end(session: HolderSession, options: Options) -> None:
    await session.aclose()
    print(f"runstate mcp: session of {options.holder} ended", file=sys.stderr, flush=True)


async def _join(session: HolderSession, options: Options) -> None:
    where = f"{options.transport}" + (f" on http://{options.host}:{options.port}/mcp" if options.transport != "stdio" else "")
    try:
        with anyio.fail_after(JOIN_BOUND_S):
            run = await session.run()
    except Exception as err:  # said, not fatal: the tools try again at each call
        print(f"runstate mcp: could not join run {options.run} yet ({err}); serving {where}, each tool call tries again",
              file=sys.stderr, flush=True)
        return
    print(f"runstate mcp: holder {options.holder} in run {options.run} ({run.id}) of space {session.rs.space_id}, "
          f"serving {where}", file=sys.stderr, flush=True)


async def _until_signal(session: HolderSession, options: Options) -> None:
    """SIGTERM or SIGINT ends the stdio session as a closed stdin does (what is held is given
    back), then the process, without waiting for stdin (see above)."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            await _end(session, options)
            sys.stdout.flush()
            os._exit(0)


def _let_signals_return() -> None:
    """uvicorn shuts down gracefully on SIGTERM/SIGINT and then raises the signal again with the
    handlers it found; with these, that ends its `serve()` and our clean-up runs, instead of the
    default handlers ending the process first."""

    def noted(signum: int, frame: Any) -> None:
        pass

    signal.signal(signal.SIGTERM, noted)
    signal.signal(signal.SIGINT, noted)
