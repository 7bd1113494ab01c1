"""The `runstate` console command: the server's CLI, when the server is installed."""

from __future__ import annotations

import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from .server.cli import main as server_main
    except ImportError:
        print("the runstate server is not installed: pip install 'runstate[server]'", file=sys.stderr)
        return 2
    status: int = server_main(argv)
    return status
