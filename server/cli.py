"""The `runstate` command: `serve`, `config`, `check`, the admin commands `keys`, `spaces`, `inspect`,
an operator's `runs`, `tasks`, `claims`, `mailboxes`, `dead-letters`, and `mcp`, a Model Context
Protocol server for an LLM agent (a client of a server, `runstate.mcp`).

Examples:
    runstate serve                              # 127.0.0.1:8080, state in memory
    runstate serve --data-dir /var/lib/runstate # durable: WAL + snapshots, recovered at start
    runstate serve --port 9000 --log-format text
    runstate serve --config /etc/runstate.toml  # flags > RUNSTATE_* > the file > defaults
    runstate config --lease-s-max 300           # the settings `serve` would use, and where each came from
    runstate check --data-dir /var/lib/runstate # verify a data directory offline
    runstate replay /var/lib/runstate --at 2027-01-15T03:12:00Z   # its state at a past point, offline
    runstate keys create --space research       # prints the new key once
    runstate inspect claims sc_0123456789abcdef
    runstate claims release sc_0123456789abcdef company:acme --reason 'holder hung'
    runstate dead-letters requeue research --older-than 1h --dry-run
    runstate mcp --run repo-refactor --holder agent-a   # an LLM agent's MCP server (docs/mcp.md)

`serve` and `config` read the settings (`config.py`); a wrong one exits 2 naming it. `keys`,
`spaces` and `inspect` talk to a running server over HTTP (`admin_cli.py`), and so do the
operator's commands (`ops_cli.py`). `mcp` is listed here with its own options, for `--help` and
completion, but the console command runs it before this parser (`runstate._cli`), so that it
needs only the `mcp` extra, not the server. Every command but
`serve` takes `--json`; `runstate --version` prints the version. Output cut short by its reader
(`runstate config | head`) ends the command quietly, without a traceback.

The data directory comes from `--data-dir`, else the environment variable RUNSTATE_DATA_DIR (or
the TOML file); with none the server keeps its state in memory only (and says so at start). There
is deliberately no implicit directory such as `./.runstate`: two servers started in one folder
would contend for it, and a server that silently wrote into whatever folder it was started from
would surprise as much as one that silently lost everything. Production runs pass one.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import os
import sys
from typing import Any, Sequence

import orjson

from . import admin_cli, completion, ops_cli, replay_cli, top
from .config import SETTINGS, ConfigError, Loaded, describe, load
from .logs import AccessLog, event, setup
from .settings import Settings

__all__ = ["main"]

log = logging.getLogger("runstate.server")

_SERVE_EXAMPLES = """examples:
  runstate serve
  runstate serve --port 9000 --log-format text
  runstate serve --data-dir /var/lib/runstate --fsync batch
  runstate serve --config runstate.toml --lease-s-max 300
  RUNSTATE_SERVER_API_KEY=rs_dev RUNSTATE_SERVER_SPACE_ID=default runstate serve
  runstate serve --certfile cert.pem --keyfile key.pem     # https

Every setting is a flag, a variable RUNSTATE_<NAME> and a key of the TOML file (limits in its
[limits] table); precedence: flags > environment > file > defaults. Secrets (RUNSTATE_SERVER_API_KEY,
RUNSTATE_ADMIN_KEY) have no flag. With RUNSTATE_SERVER_API_KEY set, that key opens the space
RUNSTATE_SERVER_SPACE_ID; with no key at all the server makes one and prints it once (the lines to
export, for the clients, come last, after it is ready). SIGTERM or SIGINT shut it down gracefully;
a second one stops it at once."""

_CHECK_EXAMPLES = """examples:
  runstate check --data-dir /var/lib/runstate
  RUNSTATE_DATA_DIR=/var/lib/runstate runstate check

Verifies the snapshots and the WAL without changing anything and prints what they hold, with the
record format version of the files (older ones are upgraded by the next start). Exits 1 when a
server would refuse to start on the directory (the message names the file and offset)."""

_CONFIG_EXAMPLES = """examples:
  runstate config
  runstate config --config runstate.toml --json
  RUNSTATE_LEASE_S_MAX=300 runstate config --port 9000

Prints every setting `runstate serve` would use with the same flags, environment and file, and
where each value came from. Exits 2 on a wrong setting, like `serve`."""


def _add_setting_flags(command: argparse.ArgumentParser) -> None:
    command.add_argument("--config", metavar="FILE", default=None, help="TOML file of settings (default $RUNSTATE_CONFIG)")
    server = command.add_argument_group("server settings")
    limits = command.add_argument_group("limits (TOML table [limits])")
    for setting in SETTINGS:
        if setting.flag is None:
            continue
        group = limits if setting.limit else server
        extra = f" One of: {', '.join(setting.choices)}." if setting.choices else ""
        help_text = f"{setting.doc}{extra} (default {setting.describe_default()}; ${setting.env})".replace("%", "%%")
        if setting.kind is bool:
            group.add_argument(setting.flag, dest=setting.name, default=None, action=argparse.BooleanOptionalAction, help=help_text)
        else:
            metavar = {int: "N", float: "SECONDS" if setting.name.endswith("_s") else "X"}.get(setting.kind, "TEXT")
            group.add_argument(setting.flag, dest=setting.name, default=None, metavar=metavar, help=help_text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="runstate",
        description="runstate: a coordination kernel for agent swarms (claims, shared tasks, work queues).",
        epilog=__doc__.split("\n\n")[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"runstate {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve_cmd = commands.add_parser(
        "serve",
        help="run the server",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the HTTP server.",
        epilog=_SERVE_EXAMPLES,
    )
    _add_setting_flags(serve_cmd)
    config_cmd = commands.add_parser(
        "config",
        help="show the settings serve would use, and their sources",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Show the effective configuration: every setting, its value and where it came from.",
        epilog=_CONFIG_EXAMPLES,
    )
    _add_setting_flags(config_cmd)
    config_cmd.add_argument("--json", action="store_true", help="print JSON instead of a table")
    check_cmd = commands.add_parser(
        "check",
        help="verify a data directory offline",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Verify a data directory without changing it and print what it holds.",
        epilog=_CHECK_EXAMPLES,
    )
    check_cmd.add_argument("--data-dir", default=None, metavar="DIR", help="the directory (default $RUNSTATE_DATA_DIR)")
    check_cmd.add_argument("--json", action="store_true", help="print the report as JSON")
    admin_cli.add_commands(commands)
    ops_cli.add_commands(commands)
    top.add_command(commands)
    replay_cli.add_command(commands)
    completion.add_command(commands)
    _add_mcp(commands)
    return parser


def _add_mcp(commands: Any) -> None:
    """`runstate mcp` with the options of its own parser (`runstate.mcp.parser()`), which runs it."""
    from .. import mcp

    own = mcp.parser()
    commands.add_parser(
        "mcp", help="serve claims and tasks to an LLM agent as MCP tools (needs 'runstate[mcp]')",
        parents=[own], add_help=False, description=own.description, epilog=own.epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


class _Announcements:
    """What `serve` tells whoever started it on standard output, once it is ready: where it serves
    and the keys it made, as lines to export, apart from the log and after its `ready` line (the
    keys are made during the start, but kept until then; a key made once it is ready, as a node of
    a cluster makes it when it first leads the keys' partition, is said when it is made)."""

    def __init__(self) -> None:
        self.api_key: tuple[str, str] | None = None  # (secret, space)
        self.admin_key: str | None = None
        self.binds: list[str] | None = None  # once ready

    def new_key(self, secret: str, space: str) -> None:
        self.api_key = (secret, space)
        if self.binds is not None:
            self._say(self._key_lines())

    def new_admin_key(self, secret: str) -> None:
        self.admin_key = secret
        if self.binds is not None:
            self._say(self._admin_key_lines())

    def ready(self, binds: list[str]) -> None:
        self.binds = binds
        lines = [""]
        lines.extend(f"runstate: serving on {bind}" for bind in binds)
        self._say(lines + self._key_lines() + self._admin_key_lines())

    @staticmethod
    def _say(lines: list[str]) -> None:
        if lines:
            print("\n".join(lines) + "\n", flush=True)

    def _key_lines(self) -> list[str]:
        lines: list[str] = []
        if self.api_key is not None and self.binds is not None:
            secret, space = self.api_key
            base_url = f" RUNSTATE_BASE_URL={self.binds[0]}" if self.binds else ""
            lines += [
                "",
                f"runstate: no API key was configured, so this one was made for space {space!r}. It is shown only",
                "now; the server keeps only its hash. For the clients:",
                "",
                f"    export RUNSTATE_API_KEY={secret} RUNSTATE_SPACE_ID={space}{base_url}",
            ]
        return lines

    def _admin_key_lines(self) -> list[str]:
        lines: list[str] = []
        if self.admin_key is not None:
            lines += [
                "",
                "runstate: no admin key was configured and there is no data directory, so this one was made",
                "for `runstate keys`, `runstate spaces`, `runstate inspect` and the operator's commands. It is",
                "shown only now and lasts until the server stops.",
                "",
                f"    export RUNSTATE_ADMIN_KEY={self.admin_key}",
            ]
        return lines


def _load(args: argparse.Namespace) -> Loaded:
    flags = {setting.name: getattr(args, setting.name) for setting in SETTINGS if setting.flag is not None}
    return load(flags, os.environ, args.config)


def _print_config(loaded: Loaded, as_json: bool) -> None:
    rows = describe(loaded)
    if as_json:
        print(orjson.dumps({"configFile": loaded.config_file, "settings": rows}, option=orjson.OPT_INDENT_2).decode())
        return
    if loaded.config_file:
        print(f"config file: {loaded.config_file}")
    admin_cli.print_table(
        rows,
        [("SETTING", "name"), ("VALUE", lambda row: admin_cli.show(row["value"])), ("SOURCE", "source")],
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("runstate")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from .. import __version__

        return __version__


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _check(data_dir: str | None, as_json: bool = False) -> int:
    from ..snapshots.check import check
    from .durable import state_model

    data_dir = data_dir or os.environ.get("RUNSTATE_DATA_DIR") or None
    if not data_dir:
        print("runstate check: give --data-dir (or set RUNSTATE_DATA_DIR)", file=sys.stderr)
        return 2
    report = check(data_dir, state_model())
    if as_json:
        fields: dict[str, Any] = {_camel(name): value for name, value in dataclasses.asdict(report).items()}
        print(orjson.dumps(fields, option=orjson.OPT_INDENT_2).decode(), flush=True)
    else:
        print(report.format(), flush=True)
    return 0 if report.ok else 1


# A full collection of the cyclic garbage collector walks every object the server holds (each
# connection's task, socket and buffers, every claim) with the event loop stopped: with 5,000
# connected agents renewing, one took about 0.17 s of CPU, every 5 s (objects that outlive two
# young collections, an idle connection's wait for its next request, count towards the next).
# What the server holds dies by reference count, and the young generations find the cycles of a
# request; a full collection is left for every 1,000 collections of the middle one, not 10.
GC_FULL_EVERY = 1000


def _collect_rarely() -> None:
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, GC_FULL_EVERY)


def _serve(loaded: Loaded) -> int:
    import trio  # the server's imports are kept out of the admin commands' start-up

    from ..snapshots import DataDirError, RecoveryError, StoreLocked
    from ..snapshots.etcd_wire import EtcdError
    from .cluster import ClusterError
    from .runtime import CLUSTER_OPEN_S
    from .serve import serve

    settings = loaded.settings
    write = setup(settings.log_format, settings.log_level)
    access = AccessLog(write, log_format=settings.log_format, log_level=settings.log_level, log_requests=settings.log_requests)
    changed = {name: source for name, source in loaded.sources.items() if source != "default"}
    event(
        log, "starting", "starting",
        host=settings.host, port=settings.port, data_dir=settings.data_dir, fsync=settings.fsync,
        config_file=loaded.config_file, settings_changed=sorted(changed),
    )
    for warning in loaded.warnings:
        log.warning("%s", warning)
    _collect_rarely()
    try:
        said = _Announcements()
        forced = trio.run(
            lambda: serve(settings, said.new_key, on_admin_key=said.new_admin_key, access=access, on_ready=said.ready)
        )
    except KeyboardInterrupt:  # before the signal handlers were in place
        return 0
    except (RecoveryError, StoreLocked, DataDirError) as error:  # the data directory cannot be used as it is
        print(f"runstate: cannot start: {error}", file=sys.stderr, flush=True)
        return 1
    except (ClusterError, EtcdError, trio.TooSlowError) as error:  # etcd unreachable, or the cluster not as asked
        reason = str(error) or f"it did not open within {CLUSTER_OPEN_S} s"
        print(f"runstate: cannot join cluster {settings.cluster}: {reason}", file=sys.stderr, flush=True)
        return 1
    except (OSError, BaseExceptionGroup) as error:
        cause = _os_error(error)
        if cause is None:
            raise
        if cause.filename is None:  # the address: a port in use, an interface not on this machine
            print(f"runstate serve: cannot serve on {settings.host}:{settings.port}: {cause.strerror or cause}", file=sys.stderr, flush=True)
        else:
            print(f"runstate: cannot start: {cause}", file=sys.stderr, flush=True)
        return 1
    return 1 if forced else 0


def _os_error(error: BaseException) -> OSError | None:
    """The OSError (a port in use, an address not on this machine) inside what trio raised, if any."""
    if isinstance(error, OSError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _os_error(inner)
            if found is not None:
                return found
    return None


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["mcp"]:  # (the console command runs it before this: `runstate._cli`)
        from ..mcp import main as mcp_main

        return mcp_main(words[1:])
    args = _parser().parse_args(words)
    if args.command == "serve":
        return _main(args)
    try:
        status = _main(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`runstate config | head`): nothing more to say, and no traceback.
        # Point stdout at /dev/null so the interpreter's own final flush cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # as a shell reports a command ended by SIGPIPE
    return status


def _main(args: argparse.Namespace) -> int:
    if args.command in ("serve", "config"):
        try:
            loaded = _load(args)
        except ConfigError as error:
            print(f"runstate {args.command}: {error}", file=sys.stderr, flush=True)
            return 2
        if args.command == "config":
            for warning in loaded.warnings:
                print(f"runstate config: warning: {warning}", file=sys.stderr, flush=True)
            _print_config(loaded, args.json)
            return 0
        return _serve(loaded)
    if args.command == "check":
        return _check(args.data_dir, args.json)
    if args.command in ops_cli.COMMANDS:
        return ops_cli.run(args)
    if args.command == "top":
        return top.run(args)
    if args.command == "replay":
        return replay_cli.run(args)
    if args.command == "completion":
        print(completion.script(_parser(), args.shell), end="")
        return 0
    return admin_cli.run(args)


if __name__ == "__main__":
    sys.exit(main())
