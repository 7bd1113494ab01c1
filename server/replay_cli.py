"""`runstate replay DATA_DIR`: a data directory's state at a past point, offline and read-only.

    runstate replay /var/lib/runstate --at 2027-01-15T03:12:00Z                 what each space held then
    runstate replay /var/lib/runstate --at 2027-01-15T03:12:00Z --json
    runstate replay /var/lib/runstate --at lsn:1234 --space research inspect claims sc_0123456789abcdef
    runstate replay /var/lib/runstate diff --from 2027-01-15T03:00:00Z --to 2027-01-15T03:15:00Z --space research

It rebuilds the state from the directory's snapshots and WAL exactly as the server's history does
(`server/history.py`), then shows it through the same views: `inspect WHAT` prints what
`runstate inspect WHAT` printed live at that point (the API's own read routes, handed the past
state), and `diff` what changed between two points. `--at` is a time with a zone, an LSN (`1234`
or `lsn:1234`, of the space's partition) or an event id (`ev_56`); without it, the end of the log.

It never writes to the directory (it opens files for reading only, takes no lock and repairs
nothing: a torn tail is read as a start would read it, without truncating it). A directory a
running server holds (its LOCK is taken) is refused, since the server may be writing the very
files read: `--copy` copies it to a temporary folder first and reads the copy (or ask the server
itself: `GET /v1/spaces/{space}/history/...`).

Exit status: 0 done; 1 the directory cannot be read as asked (held, damaged, a point not kept);
2 a usage error.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING, Any, Iterator

from . import admin_cli
from .admin_cli import CommandError

if TYPE_CHECKING:
    from ..actors.state import KernelState
    from .history import Point

__all__ = ["add_command", "run"]

_EXAMPLES = "\n".join(line.strip() for line in __doc__.split("\n\n")[1].splitlines()) if __doc__ else ""


def add_command(commands: Any) -> None:
    replay = commands.add_parser(
        "replay", help="a data directory's state at a past point (offline, read-only)",
        description="Rebuild a data directory's state as it was at a past point, offline and without changing it, and show it "
        "through the server's own views.", formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  " + _EXAMPLES.replace("\n", "\n  "),
    )
    replay.add_argument("data_dir", metavar="DATA_DIR", help="the data directory (or a copy of it)")
    replay.add_argument("--at", default=None, metavar="POINT", help="a time with a zone, an LSN (1234 or lsn:1234) or an event id "
                        "(ev_56); default: the end of the log")
    replay.add_argument("--space", default=None, help="only this space (inspect and diff: default $RUNSTATE_SPACE_ID, else 'default')")
    replay.add_argument("--copy", action="store_true", help="read a copy of the directory (needed while a server holds it)")
    replay.add_argument("--json", action="store_true", help="print JSON instead of tables")
    views = argparse.ArgumentParser(add_help=False)
    views.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON instead of a table")
    views.add_argument("--space", default=argparse.SUPPRESS, help="the space (default $RUNSTATE_SPACE_ID, else 'default')")
    what = replay.add_subparsers(dest="view", required=False, metavar="VIEW")
    inspect = what.add_parser("inspect", help="one view, as `runstate inspect` showed it at the point",
                              description="One view of a space at the point, as `runstate inspect` showed it live.")
    admin_cli.add_inspect_actions(inspect, views, "replay DATA_DIR --at POINT inspect")
    diff = what.add_parser("diff", help="what changed in a space between two points", parents=[views],
                           description="What changed in a space between two points: events and records by type, counts by state.")
    diff.add_argument("--from", dest="start", required=True, metavar="POINT", help="the earlier point")
    diff.add_argument("--to", dest="end", default=None, metavar="POINT", help="the later point (default: the end of the log)")


# -- the directory ----------------------------------------------------------------------------------

def _held(data_dir: str) -> bool:
    """Whether a running server holds `data_dir` (its LOCK is taken). Opens the lock for reading
    only, and lets it go at once: a server that starts meanwhile is not turned away."""
    try:
        fd = os.open(os.path.join(data_dir, "LOCK"), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _copy(data_dir: str, into: str) -> None:
    """Copy the manifest and each partition's WAL, then its snapshots (a snapshot pruning the older
    files meanwhile leaves a newer snapshot that covers what was missed). No lock, no admin key."""
    from ..snapshots.datadir import MANIFEST, partition_dir, read_manifest
    from ..snapshots.recovery import snapshot_dir, wal_dir

    manifest = read_manifest(data_dir)
    if manifest is None:
        raise CommandError(f"{data_dir} has no manifest ({MANIFEST}): not a data directory this version reads as it is")
    shutil.copy2(os.path.join(data_dir, MANIFEST), os.path.join(into, MANIFEST))
    for number in manifest.numbers():
        for folder in (wal_dir, snapshot_dir):
            source, target = folder(partition_dir(data_dir, number)), folder(partition_dir(into, number))
            os.makedirs(target, exist_ok=True)
            for name in sorted(os.listdir(source)) if os.path.isdir(source) else ():
                if name.endswith((".wal", ".snap")):
                    try:
                        shutil.copy2(os.path.join(source, name), os.path.join(target, name))
                    except FileNotFoundError:  # pruned as it was listed
                        pass


class _Directory:
    """The directory to read: the one given, or a copy of it (removed at the end)."""

    def __init__(self, data_dir: str, copy: bool) -> None:
        self.given = data_dir
        self.path = data_dir
        self._copy = copy
        self._temporary: str | None = None

    def __enter__(self) -> "_Directory":
        if not os.path.isdir(self.given):
            raise CommandError(f"{self.given} is not a directory")
        if self._copy:
            self._temporary = tempfile.mkdtemp(prefix="runstate-replay-")
            _copy(self.given, self._temporary)
            self.path = self._temporary
        elif _held(self.given):
            raise CommandError(
                f"{self.given} is in use by a running runstate server, which may be writing the files it would read: "
                "pass --copy to read a copy of it, or ask the server (GET /v1/spaces/{space}/history/...)"
            )
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)


# -- points -----------------------------------------------------------------------------------------

def _asked(text: str | None) -> Any:
    from .history import parse_point

    if text is None:
        return None
    text = text.strip()
    if text.isdigit():
        text = f"lsn:{text}"
    try:
        return parse_point(text, "--at")
    except Exception as error:
        raise CommandError(getattr(error, "message", str(error)), 2) from None


def _event_ms(folder: str, model: Any, number: int, space: str, asked: Any) -> int | None:
    """The time of event `ev_N`: from the event log as it stands at the end (which must hold it)."""
    if asked is None or asked.kind != "event":
        return None
    from .history import rebuild

    found: list[int] = []
    newest: list[int] = []

    def look(state: KernelState, point: Point) -> None:
        log = state.space_view(space).events
        newest.append(log.seq)
        found.extend(at_ms for seq, _, at_ms in log.scan() if seq == asked.value)

    rebuild(folder, model, number, space, [(_end(), None)], look, through_lsn=None)
    if not 1 <= asked.value <= newest[0]:  # never made: no history of any length holds it
        raise CommandError(f"the space made no event {asked.value} (its newest at the end of the journal is ev_{newest[0]})")
    if not found:
        raise CommandError(f"event {asked.value} is not in the space's event log at the end of the journal: ask by time instead")
    return found[0]


# A time past any record's: the end of the log.
_END_MS = 1 << 62


def _end() -> Any:
    """The end of the log: a time past any record (read to the end; then judged at its last record)."""
    from .history import Asked

    return Asked("time", _END_MS, "end")


def _points(directory: str, space: str | None, asked: Any) -> Iterator[tuple[int, Any, Any]]:
    """(partition, state, point) for the partition of `space` (None: every data partition), at `asked`."""
    from ..actors.layout import Layout
    from ..snapshots.datadir import partition_dir, read_manifest
    from ..snapshots.history import NotKept, PointNotReached
    from ..snapshots.recovery import RecoveryError
    from .durable import state_model
    from .history import rebuild

    manifest = read_manifest(directory)
    if manifest is None:
        raise CommandError(f"{directory} has no manifest: a directory written before partitions is upgraded by a server's start first")
    layout = Layout(manifest.partitions)
    numbers = [layout.of(space)] if space is not None else list(range(1, manifest.partitions + 1))
    model = state_model()
    for number in numbers:
        folder = partition_dir(directory, number)
        target = asked
        if asked is not None and asked.kind == "lsn" and space is None and len(numbers) > 1:
            raise CommandError("an LSN is a position in one partition's journal: give --space", 2)
        found: list[tuple[Any, Any]] = []
        try:
            event_ms = None if space is None else _event_ms(folder, model, number, space, asked)
            rebuild(folder, model, number, space, [(target or _end(), event_ms)], lambda state, point: found.append((state, point)),
                    through_lsn=None)
        except NotKept as error:
            raise CommandError(f"partition {number}: {error}") from None
        except PointNotReached as error:
            raise CommandError(f"partition {number}: {error}") from None
        except RecoveryError as error:
            raise CommandError(f"partition {number} cannot be read: {error}") from None
        state, point = found[0]
        if target is None:
            point = _at_its_record(point)
        yield number, state, point


def _at_its_record(point: Any) -> Any:
    """The end of the log, judged at its last record's time (not at the far-off time asked)."""
    import dataclasses

    return dataclasses.replace(point, now_ms=point.record_ms)


# -- the commands -----------------------------------------------------------------------------------

def _space(args: argparse.Namespace) -> str:
    return args.space or os.environ.get("RUNSTATE_SPACE_ID") or "default"


def _said(point: Any) -> str:
    from ..actors.timestamps import format_ms

    record = f", its last record at {format_ms(point.record_ms)}" if point.record_ms else ""
    return (f"partition {point.partition} as of LSN {point.lsn} at {format_ms(point.now_ms)}{record} (the snapshot at LSN "
            f"{point.snapshot_lsn} + {point.records} records, rebuilt in {point.seconds:.2f} s)")


def _summary(args: argparse.Namespace, directory: str) -> None:
    from . import wire
    from .history import PastKernel
    from .history_views import read_route, space_states

    space = args.space
    document: dict[str, Any] = {"dataDir": args.data_dir, "partitions": [], "spaces": {}}
    for _, state, point in _points(directory, space, _asked(args.at)):
        document["partitions"].append(wire.encode(point.view()))
        for space_id in sorted(state.spaces) if space is None else [space]:
            past = PastKernel(state, space_id, point)
            document["spaces"][space_id] = {
                "asOf": wire.encode(point.view()), "states": space_states(past) if space_id in state.spaces else {},
                "caps": read_route(past, "/caps")["caps"],
            }
    if args.json:
        admin_cli.print_json(document)
        return
    print(f"data directory {args.data_dir}")
    for point in document["partitions"]:
        print(f"  partition {point['partition']}: as of LSN {point['lsn']} at {point['at']}")
    for space_id, found in document["spaces"].items():
        print(f"\nspace {space_id} (partition {found['asOf']['partition']}, LSN {found['asOf']['lsn']}):")
        rows = [{"kind": kind, "state": name, "count": count} for kind, states in found["states"].items() for name, count in states.items()]
        admin_cli.print_table(rows, [("KIND", "kind"), ("STATE", "state"), ("COUNT", "count")])
        print()
        admin_cli.print_table(found["caps"], [("CAP", "setting"), ("HELD", "held"), ("LIMIT", "limit")])


def _inspect(args: argparse.Namespace, directory: str) -> None:
    from . import wire
    from .history import PastKernel
    from .history_views import read_route

    space = _space(args)
    if args.action == "events" and args.follow:
        raise CommandError("--follow waits for what happens next: a past point has no next", 2)
    ((_, state, point),) = list(_points(directory, space, _asked(args.at)))
    past = PastKernel(state, space, point)

    def fetch(tail: str, params: dict[str, Any] | None = None) -> Any:
        answer = read_route(past, tail, params)
        return {**answer, "asOf": wire.encode(point.view())} if args.json else answer

    print(f"(space {space}, {_said(point)})", file=sys.stderr, flush=True)
    admin_cli._inspect(args, fetch)


def _diff(args: argparse.Namespace, directory: str) -> None:
    from ..actors.layout import Layout
    from ..snapshots.datadir import partition_dir, read_manifest
    from ..snapshots.history import NotKept, PointNotReached
    from ..snapshots.recovery import RecoveryError
    from .durable import state_model
    from . import wire
    from .history import PastKernel, rebuild, stands_before
    from .history_views import Diff

    space = _space(args)
    manifest = read_manifest(directory)
    if manifest is None:
        raise CommandError(f"{directory} has no manifest: a directory written before partitions is upgraded by a server's start first")
    number = Layout(manifest.partitions).of(space)
    folder, model = partition_dir(directory, number), state_model()
    first, second = _asked(args.start), _asked(args.end) or _end()
    if first.kind == second.kind and second.value < first.value:
        raise CommandError(f"--from ({first.text}) is after --to ({second.text})", 2)
    found = Diff(space)
    points: list[Point] = []

    def at_point(state: KernelState, point: Point) -> None:
        found.at_point(PastKernel(state, space, point))
        points.append(point)

    points_asked = [(first, _event_ms(folder, model, number, space, first)), (second, _event_ms(folder, model, number, space, second))]
    try:
        rebuild(folder, model, number, space, points_asked, at_point, through_lsn=None, on_record=found.on_record)
    except (NotKept, PointNotReached, RecoveryError) as error:
        raise CommandError(f"partition {number}: {error}") from None
    if stands_before(points[0], second, points_asked[1][1]):
        raise CommandError(f"--from ({first.text}, LSN {points[0].lsn}) is after --to ({second.text})", 2)
    if second.text == "end":
        points[1] = _at_its_record(points[1])
    document = wire.encode(found.view(points[0], points[1]))
    if args.json:
        admin_cli.print_json(document)
        return
    print(f"space {space}, from {_said(points[0])}\n{' ' * len(space)}        to {_said(points[1])}\n")
    rows = [{"kind": kind, "state": name, "from": counts["from"], "to": counts["to"], "change": f"{counts['to'] - counts['from']:+d}"}
            for kind, states in document["states"].items() for name, counts in states.items()]
    admin_cli.print_table(rows, [("KIND", "kind"), ("STATE", "state"), ("FROM", "from"), ("TO", "to"), ("CHANGE", "change")])
    print()
    events = [{"type": kind, "count": count, "causes": document["causes"].get(kind)} for kind, count in document["events"].items()]
    admin_cli.print_table(events, [("EVENT", "type"), ("COUNT", "count"), ("CAUSES", "causes")])
    more = " (more: --json lists the first 1000)" if document["truncated"] else ""
    print(f"\n{sum(document['records'].values())} records of the space between them; {len(document['changes'])} events listed with --json{more}")


def run(args: argparse.Namespace) -> int:
    try:
        with _Directory(args.data_dir, args.copy) as directory:
            if args.view == "inspect":
                _inspect(args, directory.path)
            elif args.view == "diff":
                _diff(args, directory.path)
            else:
                _summary(args, directory.path)
    except CommandError as error:
        print(f"runstate replay: {error}", file=sys.stderr, flush=True)
        return error.status
    except Exception as error:  # a refusal of a view (KernelError: a run that did not exist then)
        code = getattr(error, "code", None)
        if code is None:
            raise
        print(f"runstate replay: {code}: {getattr(error, 'message', error)}", file=sys.stderr, flush=True)
        return 1
    return 0
