"""`runstate mcp`: a Model Context Protocol server, so that LLM agents coordinate through runstate.

An agent driven by a model reaches tools, not SDKs, and a model cannot renew a lease every ten
seconds. This server is a client of a runstate server (through `runstate.AsyncRunstate`) that lives
exactly as long as the agent's MCP session: it holds claims and taken tasks for the agent and
renews them in the background, and when the session ends, renewals stop and another agent takes
over with the next generation. One process is one holder session (`--holder`) in one run
(`--run`, joined by name: every agent that names it shares it).

The tools, their answers and the limits are in docs/mcp.md. This module is the command line only:
it imports the `mcp` package (an optional extra, `pip install 'runstate[mcp]'`) when the server
starts, never when `runstate` is imported.

    runstate mcp --run repo-refactor --holder agent-a              # stdio, for an MCP client
    runstate mcp --run repo-refactor --transport streamable-http --port 8931
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Sequence

__all__ = ["main"]

DEFAULT_RUN = "default"
DEFAULT_LEASE_SECONDS = 30
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8931
INSTALL_HINT = "pip install 'runstate[mcp]'"

_EPILOG = """environment (the SDK's own settings):
  RUNSTATE_BASE_URL   the runstate server (default http://localhost:8080)
  RUNSTATE_API_KEY    an API key of the space (required)
  RUNSTATE_SPACE_ID   the space (required)
  RUNSTATE_RUN        the run to join when --run is not given (else "default")

An MCP client starts it over stdio. In its configuration (Claude Desktop's
claude_desktop_config.json, a project's .mcp.json, and most others take this shape):

  {"mcpServers": {"runstate": {
      "command": "runstate",
      "args": ["mcp", "--run", "repo-refactor", "--holder", "agent-a"],
      "env": {"RUNSTATE_BASE_URL": "http://127.0.0.1:8080",
              "RUNSTATE_API_KEY": "rs_...", "RUNSTATE_SPACE_ID": "default"}}}}

Give each agent its own --holder and the same --run. Tools: claim, release, held, submit, take,
complete, fail, result, status. What it holds is renewed while this process lives; when the
session ends it is given back, and if the process dies its leases run out and another agent takes
over. docs/mcp.md has the details and the limits."""


class Options:
    """What the command line asked for, checked."""

    def __init__(
        self, run: str, holder: str, lease_seconds: int, transport: str, host: str, port: int
    ) -> None:
        self.run = run
        self.holder = holder
        self.lease_seconds = lease_seconds
        self.transport = transport
        self.host = host
        self.port = port


def default_holder() -> str:
    """The host and the process: two agents on one machine never share a name by accident."""
    return f"{socket.gethostname()}-{os.getpid()}"


def parser() -> argparse.ArgumentParser:
    made = argparse.ArgumentParser(
        prog="runstate mcp",
        description=(
            "Serve runstate's claims, shared tasks and work queues to an LLM agent as MCP tools.\n"
            "One process is one holder: what it holds is renewed while it lives."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    made.add_argument(
        "--run", metavar="NAME", default=None,
        help="the run to join by name, made if missing and shared by every agent naming it "
        "(default: $RUNSTATE_RUN, else 'default')",
    )
    made.add_argument(
        "--holder", metavar="NAME", default=None,
        help="this agent's name, as other agents see it in 'held by' (default: HOST-PID)",
    )
    made.add_argument(
        "--lease-seconds", metavar="N", type=int, default=DEFAULT_LEASE_SECONDS,
        help="the lease of a claim or a taken task when the tool call names none: how long a dead "
        f"agent blocks the others (5 to 600, default {DEFAULT_LEASE_SECONDS})",
    )
    made.add_argument(
        "--transport", choices=("stdio", "streamable-http"), default="stdio",
        help="stdio (default: the MCP client starts this process) or the protocol's streamable HTTP "
        "(one process, one holder, for every client that connects)",
    )
    made.add_argument("--host", default=DEFAULT_HOST, help=f"with streamable-http: the address to listen on ({DEFAULT_HOST})")
    made.add_argument(
        "--port", type=int, default=DEFAULT_PORT,
        help=f"with streamable-http: the port ({DEFAULT_PORT}); the endpoint is /mcp",
    )
    return made


def _options(argv: Sequence[str] | None) -> Options:
    made = parser()
    args = made.parse_args(argv)
    from ..claims import LEASE_SECONDS_MAX, LEASE_SECONDS_MIN
    from ..client import HOLDER_LEN_MAX
    from ..scopes import NAME_LEN_MAX

    if not LEASE_SECONDS_MIN <= args.lease_seconds <= LEASE_SECONDS_MAX:
        made.error(f"--lease-seconds must be from {LEASE_SECONDS_MIN} to {LEASE_SECONDS_MAX}, got {args.lease_seconds}")
    if not 0 <= args.port <= 65535:
        made.error(f"--port must be from 0 to 65535, got {args.port}")
    run = args.run or os.environ.get("RUNSTATE_RUN") or DEFAULT_RUN
    holder = args.holder or default_holder()
    if len(holder) > HOLDER_LEN_MAX:
        made.error(f"--holder is longer than {HOLDER_LEN_MAX} characters")
    if len(run) > NAME_LEN_MAX:
        made.error(f"--run is longer than {NAME_LEN_MAX} characters")
    if not run.strip() or not holder.strip():
        made.error("--run and --holder must not be empty")
    return Options(run, holder, args.lease_seconds, args.transport, args.host, args.port)


def main(argv: Sequence[str] | None = None) -> int:
    """`runstate mcp ...`: serve until the session ends; 2 for a wrong setting or a missing extra."""
    options = _options(argv)
    try:
        import mcp.server.mcpserver  # noqa: F401  (the optional extra: only here)
    except ImportError as err:
        print(
            f"runstate mcp: the MCP package is not installed ({err}): {INSTALL_HINT}",
            file=sys.stderr,
        )
        return 2
    from ._serve import serve

    return serve(options)
