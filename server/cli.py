"""The `runstate` command: `runstate serve`, `runstate check`.

Examples:
    runstate serve                              # 127.0.0.1:8080, state in memory
    runstate serve --data-dir /var/lib/runstate # durable: WAL + snapshots, recovered at start
    runstate serve --port 9000
    RUNSTATE_API_KEY=rs_dev runstate serve      # accept this key for space "default"
    runstate check --data-dir /var/lib/runstate # verify a data directory offline

The data directory comes from `--data-dir`, else the environment variable RUNSTATE_DATA_DIR; with
neither the server keeps its state in memory only (and says so at start). There is deliberately no
implicit directory such as `./.runstate`: two servers started in one folder would contend for it,
and a server that silently wrote into whatever folder it was started from would surprise as much
as one that silently lost everything. Production runs pass one.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Sequence

import trio

from ..snapshots import RecoveryError, StoreLocked, check
from .serve import serve
from .settings import FSYNC_POLICIES, Settings

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="runstate",
        description="runstate: a coordination kernel for agent swarms (claims, shared tasks, work queues).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve_cmd = commands.add_parser(
        "serve",
        help="run the server",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the HTTP server.",
        epilog=(
            "examples:\n"
            "  runstate serve\n"
            "  runstate serve --port 9000\n"
            "  RUNSTATE_API_KEY=rs_dev RUNSTATE_SPACE_ID=default runstate serve\n\n"
            "With RUNSTATE_API_KEY set, that key opens the space RUNSTATE_SPACE_ID (default 'default').\n"
            "With no key configured the server makes one and prints it once."
        ),
    )
    serve_cmd.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve_cmd.add_argument("--port", type=int, default=8080, help="port to listen on; 0 picks a free one (default 8080)")
    serve_cmd.add_argument(
        "--data-dir",
        default=os.environ.get("RUNSTATE_DATA_DIR") or None,
        help="directory for the journal and snapshots (default $RUNSTATE_DATA_DIR; none: in memory only)",
    )
    serve_cmd.add_argument(
        "--fsync",
        choices=FSYNC_POLICIES,
        default="always",
        help="always: answer after fsync (default); batch: fsync every few ms, answer after it; "
        "off: answer after the write, no fsync (survives a killed process, not a power cut)",
    )
    check_cmd = commands.add_parser(
        "check",
        help="verify a data directory offline",
        description="Verify a data directory without changing it and print what it holds. "
        "Exits 1 when a server would refuse to start on it.",
    )
    check_cmd.add_argument("--data-dir", default=os.environ.get("RUNSTATE_DATA_DIR") or None, required=False)
    return parser


def _key_announcer(settings: Settings):  # type: ignore[no-untyped-def]
    def announce(secret: str, space: str) -> None:
        base_url = f" RUNSTATE_BASE_URL=http://{settings.host}:{settings.port}" if settings.port else ""
        print(
            "runstate: no API key was configured, so this one was made for space "
            f"{space!r}. It is shown only now; the server keeps only its hash.\n\n"
            f"    export RUNSTATE_API_KEY={secret} RUNSTATE_SPACE_ID={space}{base_url}\n",
            flush=True,
        )

    return announce


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "serve":
        settings = Settings(
            host=args.host,
            port=args.port,
            data_dir=args.data_dir,
            fsync=args.fsync,
            api_key=os.environ.get("RUNSTATE_API_KEY") or None,
            space_id=os.environ.get("RUNSTATE_SPACE_ID") or "default",
        )
        try:
            trio.run(serve, settings, _key_announcer(settings))
        except KeyboardInterrupt:
            pass
        except (RecoveryError, StoreLocked) as error:
            print(f"runstate: cannot start: {error}", file=sys.stderr, flush=True)
            return 1
        return 0
    if args.command == "check":
        if not args.data_dir:
            print("runstate check: give --data-dir (or set RUNSTATE_DATA_DIR)", file=sys.stderr)
            return 2
        report = check(args.data_dir)
        print(report.format(), flush=True)
        return 0 if report.ok else 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
