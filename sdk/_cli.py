"""The `runstate` console command: the server's CLI, when the server is installed, and `runstate mcp`.

`runstate mcp` is a client of a server (`runstate.mcp`), so it runs with the `mcp` extra alone
and never needs the server's packages.
"""

from __future__ import annotations

import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["mcp"]:
        from .mcp import main as mcp_main

        return mcp_main(args[1:])
    try:
        from .server.cli import main as server_main
    except ImportError:
        print(
            "the runstate server is not installed: pip install 'runstate[server]' "
            "(`runstate mcp` needs only 'runstate[mcp]')",
            file=sys.stderr,
        )
        return 2
    status: int = server_main(argv)
    return status
