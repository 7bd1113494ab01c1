"""The `runstate` command. The server is an optional extra, so it is imported only when run."""

from __future__ import annotations

import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    try:
        from runstate.server import cli
    except ImportError:
        print("the runstate server is not installed: pip install 'runstate[server]'", file=sys.stderr)
        raise SystemExit(2)
    return cli.main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
