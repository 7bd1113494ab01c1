"""`runstate top`: a live view of one space in the terminal, refreshed in place.

Every `--interval` seconds it reads the space through the API (runs, each shown run's workers and
waits from `/ops/runs`, the mailboxes' counts, `/ops/waits`, the newest events) and draws one frame:
who holds what (claim keys, once keys, deliveries, with their earliest lease end), the queues'
depths, who waits for what (a claim's key and the holders waiting for it, a mailbox's receivers,
a pool's or an allowance's line), and what happened last, with who did it. At a terminal each frame replaces the one before
(the cursor goes home, each line clears what is left of the old one, the screen below is cleared);
piped, frames follow one another; `--json` prints one snapshot per line. Ctrl-C ends it.

It reads with the admin key when one is at hand (any space, `--space`) or the space's API key,
like `runstate inspect`, and changes nothing.
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import sys
import time
from typing import Any

import orjson

from . import admin_cli
from .admin_cli import CommandError, Credential

__all__ = ["add_command", "run", "render"]

# What draws over the last frame: cursor home; clear to the end of each line; clear what is below.
HOME, CLEAR_LINE, CLEAR_BELOW = "\x1b[H", "\x1b[K", "\x1b[J"
HIDE_CURSOR, SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"
# The longest refresh interval (nan, inf, or one past what `time.sleep` takes, failed with a traceback).
INTERVAL_S_MAX = 3600


def add_command(commands: Any) -> None:
    reader = admin_cli.common(admin_only=False)
    top = admin_cli.sub(commands, "top", "a live view of a space: who holds what, queue depths, who waits, recent events",
                        "  runstate top\n  runstate top --space research --interval 5\n  runstate top --frames 1 --json", [reader])
    top.add_argument("--interval", type=float, default=2.0, metavar="SECONDS", help=f"time between refreshes (more than 0, at most {INTERVAL_S_MAX}; default 2)")
    top.add_argument("--frames", type=admin_cli.count(0, None), default=0, metavar="N", help="stop after N frames (default 0: until Ctrl-C)")
    top.add_argument("--runs", type=admin_cli.count(0, admin_cli.LIMIT_MAX), default=10, metavar="N",
                     help=f"the newest N active runs shown (0-{admin_cli.LIMIT_MAX}, default 10)")
    top.add_argument("--events", type=admin_cli.count(0, admin_cli.LIMIT_MAX), default=10, metavar="N",
                     help=f"the newest N events shown (0-{admin_cli.LIMIT_MAX}, default 10)")


def snapshot(args: argparse.Namespace, key: Credential, space: str) -> dict[str, Any]:
    """What one frame shows, read from the server."""
    base = f"/v1/spaces/{space}"
    scopes = admin_cli.request(args, "GET", base + "/scopes", key, params={"limit": 1000})
    active = [scope for scope in scopes["scopes"] if scope["effective"] == "ACTIVE"]
    runs = []
    for scope in active[: args.runs]:
        view = admin_cli.request(args, "GET", f"{base}/ops/runs/{scope['id']}", key)
        runs.append({"id": scope["id"], "name": scope.get("name"), "workers": view["workers"], "counts": view["counts"]})
    return {
        "space": space,
        "at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "activeRuns": len(active) if not scopes.get("truncated") else f"{len(active)}+",
        "runs": runs,
        "mailboxes": admin_cli.request(args, "GET", base + "/mailboxes", key)["mailboxes"],
        "waits": admin_cli.request(args, "GET", base + "/ops/waits", key)["waits"],
        "events": admin_cli.request(args, "GET", base + "/events", key, params={"latest": args.events})["events"],
    }


def _table(rows: list[list[str]], width: int) -> list[str]:
    if len(rows) == 1:
        return ["  " + "  ".join(rows[0]), "  (none)"]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths))).rstrip()[:width] for row in rows]


def _seconds_left(stamp: str, now: datetime.datetime) -> str:
    try:
        when = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    left = (when - now).total_seconds()
    return f"{left:.0f}s" if left >= 0 else "ended"


def render(snap: dict[str, Any], width: int = 120, now: datetime.datetime | None = None) -> list[str]:
    """The lines of one frame."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    show = admin_cli.show
    lines = [f"runstate top  space {snap['space']}  {snap['at']}  active runs {snap['activeRuns']}  (Ctrl-C to quit)", ""]
    lines.append("WHO HOLDS WHAT")
    rows = [["RUN", "HOLDER", "HOLDS", "LEASE ENDS IN"]]
    for run in snap["runs"]:
        for worker in run["workers"]:
            rows.append([run["id"], worker["holder"], show(worker["keys"]), _seconds_left(worker["earliestLeaseExpiry"], now)])
    lines += _table(rows, width)
    lines += ["", "QUEUES"]
    rows = [["MAILBOX", "QUEUED", "DELAYED", "LEASED", "DEAD", "BACKLOG"]]
    for mailbox in snap["mailboxes"]:
        counts = mailbox.get("counts") or {}
        rows.append([mailbox["name"], *(show(counts.get(name)) for name in ("queued", "delayed", "leased", "deadLetters")),
                     show(mailbox.get("backlog"))])
    lines += _table(rows, width)
    lines += ["", "WAITING"]
    rows = [["ON", "WHERE", "WHO", "CALLS"]]
    names = {mailbox["id"]: mailbox["name"] for mailbox in snap["mailboxes"]}
    for wait in snap["waits"]:
        rows.append([wait["on"], _where(wait, names), _who(wait), show(wait.get("calls"))])
    lines += _table(rows, width)
    lines += ["", "RECENT EVENTS"]
    rows = [["AT", "TYPE", "ABOUT", "RUN", "BY"]]
    for event in reversed(snap["events"]):  # newest first
        aggregate = event["aggregate"]
        rows.append([event["createdAt"][11:19], event["type"], f"{aggregate['type']}:{aggregate['id']}", show(event.get("scopeId")),
                     show(admin_cli.event_by(event))])
    lines += _table(rows, width)
    return lines


def _where(wait: dict[str, Any], mailbox_names: dict[str, str]) -> str:
    """What a wait is on, named: the claim or once key and its run, the mailbox (by name) and run of held
    receives, the task whose end is awaited and its run, the pool or allowance, the run whose timers
    are polled, or the space's event log."""
    on, run = wait["on"], wait.get("scopeId")
    if on in ("claim", "once"):
        return f"{wait.get('key')} in {run}"
    if on == "task":
        return f"{wait.get('taskId')} in {run}"
    if on == "queue":
        mailbox: str | None = wait.get("mailboxId")
        return f"{None if mailbox is None else mailbox_names.get(mailbox, mailbox)} in {run}"
    if on == "events":
        return "event log"
    return str(wait.get("permit") or wait.get("allowance") or run or "-")


def _who(wait: dict[str, Any]) -> str:
    """Who waits: the waiter of a pool's line or an allowance's queue, or the holders the parked
    calls are for (the server names the oldest few; `+N` says how many more calls wait)."""
    if wait.get("holder") is not None:
        return str(wait["holder"])
    holders = wait.get("holders") or []
    more = (wait.get("calls") or 0) - len(holders)
    if not holders:
        return "-"
    return ",".join(holders) + (f" +{more}" if more > 0 else "")


def run(args: argparse.Namespace) -> int:
    try:
        if not 0 < args.interval <= INTERVAL_S_MAX:  # (nan fails this too)
            raise CommandError(f"--interval must be more than 0 and at most {INTERVAL_S_MAX} seconds, got {args.interval:g}", 2)
        key, space = admin_cli.space_access(args)
        _loop(args, key, space)
    except CommandError as error:
        print(f"runstate top: {error}", file=sys.stderr, flush=True)
        return error.status
    except KeyboardInterrupt:
        pass
    finally:
        if sys.stdout.isatty() and not args.json:
            sys.stdout.write(SHOW_CURSOR)
            sys.stdout.flush()
    return 0


def _loop(args: argparse.Namespace, key: Credential, space: str) -> None:
    in_place = sys.stdout.isatty() and not args.json
    if in_place:
        sys.stdout.write(HIDE_CURSOR)
    shown = 0
    while True:
        snap = snapshot(args, key, space)
        if args.json:
            sys.stdout.write(orjson.dumps(snap).decode() + "\n")
        else:
            width = shutil.get_terminal_size((120, 40)).columns
            lines = render(snap, width)
            if in_place:
                sys.stdout.write(HOME + "".join(line + CLEAR_LINE + "\n" for line in lines) + CLEAR_BELOW)
            else:
                sys.stdout.write("\n".join(lines) + "\n\n")
        sys.stdout.flush()
        shown += 1
        if args.frames and shown >= args.frames:
            return
        time.sleep(args.interval)
