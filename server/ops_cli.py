"""`runstate runs|tasks|claims|mailboxes|dead-letters`: an operator's actions on a running server.

They act in one space through the API's own routes (docs/operations.md, "Operator actions"), with
the admin key when one is at hand (any space, `--space`) or the space's API key
(RUNSTATE_API_KEY), as `runstate inspect` reads. Each change is sent with an Idempotency-Key and
sent once more with the same key if the connection failed, so it is never made twice.

What acts on a set (a purge, a requeue or delete by filter or `--all`) is counted first; it goes
ahead with `--yes`, or when the operator answers `y` at a terminal; without a terminal and without
`--yes` it stops (exit 2) saying how many it would change. `--dry-run` only counts. One request
acts on at most 1000: the command repeats it until nothing remains and prints the totals.

Exit status: 0 done; 1 the server refused or could not be reached; 2 a usage error.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Callable
from urllib.parse import quote

from . import admin_cli
from .admin_cli import CommandError, Credential

__all__ = ["add_commands", "run", "COMMANDS", "parse_duration"]

COMMANDS = ("runs", "tasks", "claims", "mailboxes", "dead-letters")

_DURATION = re.compile(r"^(\d+)\s*([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> int:
    """Seconds from `90`, `90s`, `15m`, `2h` or `7d` (for argparse: a bad one is a usage error)."""
    match = _DURATION.match(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: write 90, 90s, 15m, 2h or 7d")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


# -- the parsers ----------------------------------------------------------------------------------

def add_commands(commands: Any) -> None:
    reader = admin_cli.common(admin_only=False)
    sub = admin_cli.sub

    runs = sub(commands, "runs", "list, create and cancel runs", "  runstate runs list\n  runstate runs create --name nightly\n"
               "  runstate runs cancel sc_0123456789abcdef", [])
    run_actions = runs.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = sub(run_actions, "list", "list runs, newest first", "  runstate runs list --limit 20 --json", [reader])
    _paged(listing)
    create = sub(run_actions, "create", "create a run (needs the space's API key: the admin key creates nothing)",
                 "  runstate runs create --name nightly --deadline 2027-01-16T00:00:00Z", [reader])
    create.add_argument("--name", default=None, help="a label (not unique)")
    create.add_argument("--deadline", default=None, metavar="TIMESTAMP", help="ISO 8601 with a zone: the run expires then")
    create.add_argument("--parent", default=None, metavar="RUN", help="make it a child of this run")
    cancel = sub(run_actions, "cancel", "cancel a run and everything under it", "  runstate runs cancel sc_0123456789abcdef", [reader])
    cancel.add_argument("run", metavar="RUN", help="the run's id (sc_...)")

    tasks = sub(commands, "tasks", "list and cancel tasks", "  runstate tasks list sc_0123456789abcdef\n"
                "  runstate tasks cancel tk_0123456789abcdef --reason 'not needed'", [])
    task_actions = tasks.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = sub(task_actions, "list", "list the tasks of a run, newest first", "  runstate tasks list sc_0123456789abcdef", [reader])
    listing.add_argument("run", metavar="RUN", help="the run's id (sc_...)")
    _paged(listing)
    cancel = sub(task_actions, "cancel", "cancel a task (its subscribers see CANCELLED)", "  runstate tasks cancel tk_0123456789abcdef", [reader])
    cancel.add_argument("task", metavar="TASK", help="the task's id (tk_...)")
    cancel.add_argument("--reason", default=None, help="kept as the task's outcomeReason")

    claims = sub(commands, "claims", "list claims and force one free", "  runstate claims list sc_0123456789abcdef\n"
                 "  runstate claims release sc_0123456789abcdef company:acme --reason 'holder hung'", [])
    claim_actions = claims.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = sub(claim_actions, "list", "list the live claims of a run, in the order of their keys", "  runstate claims list sc_0123456789abcdef", [reader])
    listing.add_argument("run", metavar="RUN", help="the run's id (sc_...)")
    _paged(listing)
    release = sub(claim_actions, "release", "force a held claim free without its token: the holder's token is refused from "
                  "then on, the next holder gets the next generation", "  runstate claims release sc_0123456789abcdef company:acme", [reader])
    release.add_argument("run", metavar="RUN", help="the run's id (sc_...)")
    release.add_argument("key", metavar="KEY", help="the claim key")
    release.add_argument("--reason", default=None, help="why (shown in the event log)")

    mailboxes = sub(commands, "mailboxes", "list mailboxes and purge one", "  runstate mailboxes list\n"
                    "  runstate mailboxes purge research --dry-run", [])
    mailbox_actions = mailboxes.add_subparsers(dest="action", required=True, metavar="ACTION")
    sub(mailbox_actions, "list", "list the mailboxes of a space with their counts", "  runstate mailboxes list --json", [reader])
    purge = sub(mailbox_actions, "purge", "end what waits in a mailbox (tasks CANCELLED, messages dropped; deliveries under way "
                "finish)", "  runstate mailboxes purge research --run sc_0123456789abcdef --yes", [reader])
    purge.add_argument("mailbox", metavar="MAILBOX", help="the mailbox's name or id")
    purge.add_argument("--run", default=None, help="only this run's messages")
    purge.add_argument("--reason", default=None, help="kept with the cancelled tasks (purged: REASON)")
    _confirmations(purge)

    dead = sub(commands, "dead-letters", "list, requeue and delete a mailbox's dead letters",
               "  runstate dead-letters list research --reason timeout\n  runstate dead-letters requeue research --older-than 1h --yes\n"
               "  runstate dead-letters delete research --id ms_0123456789abcdef", [])
    dead_actions = dead.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = sub(dead_actions, "list", "list dead letters, newest first, with their payloads",
                  "  runstate dead-letters list research --newer-than 15m --json", [reader])
    listing.add_argument("mailbox", metavar="MAILBOX", help="the mailbox's name or id")
    _filters(listing)
    _paged(listing)
    for name, text in (("requeue", "put dead letters back at the end of their queues as new messages"),
                       ("delete", "forget dead letters now")):
        action = sub(dead_actions, name, text, f"  runstate dead-letters {name} research --id ms_0123456789abcdef\n"
                     f"  runstate dead-letters {name} research --reason timeout --dry-run\n  runstate dead-letters {name} research --all --yes",
                     [reader])
        action.add_argument("mailbox", metavar="MAILBOX", help="the mailbox's name or id")
        action.add_argument("--id", dest="ids", action="append", default=None, metavar="MESSAGE", help="this dead letter (repeat for more)")
        action.add_argument("--all", action="store_true", help="every dead letter of the mailbox")
        _filters(action)
        _confirmations(action)


def _paged(command: argparse.ArgumentParser) -> None:
    """A listing read a page at a time: `--limit` rows, from `--cursor` (what the last page printed)."""
    command.add_argument("--limit", type=admin_cli.limit, default=100, help="at most this many (1-1000, default 100)")
    command.add_argument("--cursor", default=None, help="the next page: the cursor the last page printed")


def _page(args: argparse.Namespace) -> dict[str, Any]:
    """The query of one page of a listing (`_paged`)."""
    return {"limit": args.limit} if args.cursor is None else {"limit": args.limit, "cursor": args.cursor}


def _filters(command: argparse.ArgumentParser) -> None:
    command.add_argument("--reason", default=None, help="dead letters whose reason contains this text")
    command.add_argument("--older-than", type=parse_duration, default=None, metavar="AGE", help="that died at least this long ago (90s, 15m, 2h, 7d)")
    command.add_argument("--newer-than", type=parse_duration, default=None, metavar="AGE", help="that died at most this long ago")


def _confirmations(command: argparse.ArgumentParser) -> None:
    command.add_argument("--dry-run", action="store_true", help="only count what it would change")
    command.add_argument("--yes", "-y", action="store_true", help="go ahead without asking")


# -- helpers --------------------------------------------------------------------------------------

def _mailbox_id(args: argparse.Namespace, key: Credential, base: str, given: str) -> str:
    """A mailbox named by its id or its name (an id wins)."""
    rows = admin_cli.request(args, "GET", base + "/mailboxes", key)["mailboxes"]
    for row in rows:
        if row["id"] == given:
            return str(row["id"])
    for row in rows:
        if row["name"] == given:
            return str(row["id"])
    raise CommandError(f"no mailbox {given!r} in this space (`runstate mailboxes list` shows them)")


def _confirm(args: argparse.Namespace, what: str, count: int) -> None:
    """Go ahead with `--yes`, or when the operator says so at a terminal; else stop (exit 2)."""
    if args.yes or count == 0:
        return
    if not sys.stdin.isatty():
        raise CommandError(f"this would {what} {count}: pass --yes to go ahead (or --dry-run to only count)", 2)
    answer = input(f"{what} {count}? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise CommandError("nothing changed", 1)


def _repeat(args: argparse.Namespace, key: Credential, path: str, body: dict[str, Any], done: str) -> dict[str, Any]:
    """Send the action until nothing remains; the answers summed (`requests`: how many were sent)."""
    total: dict[str, Any] = {}
    while True:
        answer = admin_cli.request(args, "POST", path, key, body, idempotent=True)
        total["requests"] = total.get("requests", 0) + 1
        total.setdefault("matched", answer["matched"])
        for name, value in answer.items():
            if name in ("matched", "dryRun"):
                continue
            if isinstance(value, int) and not isinstance(value, bool):
                total[name] = value if name == "remaining" else total.get(name, 0) + value
            elif name == "skipped":  # the same dead letters every time: they stay where they are
                total.setdefault(name, value)
            elif isinstance(value, dict):
                total.setdefault(name, {}).update(value)
            elif isinstance(value, list):
                total.setdefault(name, []).extend(value)
        if not answer["remaining"] or not answer[done]:
            total["dryRun"] = False
            return total


def _say(args: argparse.Namespace, data: Any, line: str) -> None:
    if args.json:
        admin_cli.print_json(data)
    else:
        print(line)


# -- the commands ---------------------------------------------------------------------------------

RUN_COLUMNS: list[admin_cli.Column] = [("ID", "id"), ("NAME", "name"), ("STATE", "effective"), ("PARENT", "parentId"), ("CHILDREN", "children"),
               ("CREATED", "createdAt"), ("DEADLINE", "deadline")]
TASK_COLUMNS: list[admin_cli.Column] = [("ID", "id"), ("KEY", "taskKey"), ("STATE", "state"), ("ATTEMPT", "attempt"), ("MAILBOX", "mailboxId"),
                ("REASON", "outcomeReason"), ("UPDATED", "updatedAt")]
CLAIM_COLUMNS: list[admin_cli.Column] = [("KEY", "key"), ("HOLDER", "holder"), ("SESSION", "holderSession"), ("GENERATION", "generation"),
                 ("LEASE S", "leaseSeconds"), ("EXPIRES", "leaseExpiresAt"), ("ACQUIRED", "acquiredAt")]
DEAD_LETTER_COLUMNS: list[admin_cli.Column] = [("ID", "id"), ("RUN", "scopeId"), ("TASK", "taskId"), ("ATTEMPT", "attempt"), ("DIED", "finishedAt"),
                       ("REASON", "reason"), ("PAYLOAD", "payload")]


def _listing(args: argparse.Namespace, data: dict[str, Any], rows_name: str, columns: list[admin_cli.Column]) -> None:
    if args.json:
        admin_cli.print_json(data)
        return
    admin_cli.print_table(data[rows_name], columns)
    if data.get("nextCursor"):
        print(f"(more: next page --cursor {data['nextCursor']})")
    elif data.get("truncated"):  # (a server that does not page its listings)
        print("(more not shown: raise --limit)")


def _runs(args: argparse.Namespace) -> None:
    key, space = admin_cli.space_access(args, prefer_api_key=args.action == "create")
    base = f"/v1/spaces/{space}"
    if args.action == "list":
        _listing(args, admin_cli.request(args, "GET", base + "/scopes", key, params=_page(args)), "scopes", RUN_COLUMNS)
    elif args.action == "create":
        if key.admin:
            raise CommandError("creating a run needs the space's API key (RUNSTATE_API_KEY): the admin key creates nothing in a space", 2)
        body = {"name": args.name, "deadline": args.deadline, "parentId": args.parent}
        made = admin_cli.request(args, "POST", base + "/scopes", key, {k: v for k, v in body.items() if v is not None}, idempotent=True)
        _say(args, made, f"created run {made['id']}" + (f" ({made['name']})" if made.get("name") else ""))
    else:
        ended = admin_cli.request(args, "POST", f"{base}/scopes/{args.run}/cancel", key, idempotent=True)
        _say(args, ended, f"run {ended['id']} is {ended['storedState']}")


def _tasks(args: argparse.Namespace) -> None:
    key, space = admin_cli.space_access(args)
    base = f"/v1/spaces/{space}"
    if args.action == "list":
        _listing(args, admin_cli.request(args, "GET", f"{base}/scopes/{args.run}/tasks", key, params=_page(args)), "tasks", TASK_COLUMNS)
        return
    body = {} if args.reason is None else {"reason": args.reason}
    view = admin_cli.request(args, "POST", f"{base}/tasks/{args.task}/cancel", key, body, idempotent=True)
    _say(args, view, f"task {view['id']} is {view['state']}" + (f" ({view['outcomeReason']})" if view.get("outcomeReason") else ""))


def _claims(args: argparse.Namespace) -> None:
    key, space = admin_cli.space_access(args)
    base = f"/v1/spaces/{space}"
    if args.action == "list":
        _listing(args, admin_cli.request(args, "GET", f"{base}/scopes/{args.run}/claims", key, params=_page(args)), "claims", CLAIM_COLUMNS)
        return
    body = {"scopeId": args.run, "reason": args.reason}
    view = admin_cli.request(args, "POST", f"{base}/claims/{quote(args.key, safe='')}/force-release", key,
                             {k: v for k, v in body.items() if v is not None}, idempotent=True)
    _say(args, view, f"claim {view['key']!r} forced free from {view['holder']} (generation {view['generation']}); "
                     "the next holder gets the next generation")


def _mailboxes(args: argparse.Namespace) -> None:
    key, space = admin_cli.space_access(args)
    base = f"/v1/spaces/{space}"
    if args.action == "list":
        data = admin_cli.request(args, "GET", base + "/mailboxes", key)
        counts: Callable[[str], Callable[[dict[str, Any]], Any]] = lambda name: lambda row: (row.get("counts") or {}).get(name)  # noqa: E731
        _listing(args, data, "mailboxes", [
            ("NAME", "name"), ("ID", "id"), ("QUEUED", counts("queued")), ("DELAYED", counts("delayed")),
            ("LEASED", counts("leased")), ("DEAD LETTERS", counts("deadLetters")), ("BACKLOG LIMIT", "backlogLimit"),
        ])
        return
    mailbox = _mailbox_id(args, key, base, args.mailbox)
    path = f"{base}/mailboxes/{mailbox}/purge"
    body = {k: v for k, v in {"scopeId": args.run, "reason": args.reason}.items() if v is not None}
    counted = admin_cli.request(args, "POST", path, key, {**body, "dryRun": True}, idempotent=True)
    where = f"mailbox {args.mailbox}" + (f" in run {args.run}" if args.run else "")
    if args.dry_run:
        _say(args, counted, f"would purge {counted['matched']} waiting in {where}")
        return
    _confirm(args, f"purge the messages waiting in {where}:", counted["matched"])
    total = _repeat(args, key, path, body, "purged")
    _say(args, total, f"purged {total.get('purged', 0)} waiting in {where}")


def _dead_letters(args: argparse.Namespace) -> None:
    key, space = admin_cli.space_access(args)
    base = f"/v1/spaces/{space}"
    mailbox = _mailbox_id(args, key, base, args.mailbox)
    where = {"reason": args.reason, "olderThanSeconds": args.older_than, "newerThanSeconds": args.newer_than}
    if args.action == "list":
        params = {"limit": args.limit, "cursor": args.cursor, **where}
        page = admin_cli.request(args, "GET", f"{base}/mailboxes/{mailbox}/dead-letters", key, params={k: v for k, v in params.items() if v is not None})
        if args.json:
            admin_cli.print_json(page)
            return
        admin_cli.print_table(page["deadLetters"], DEAD_LETTER_COLUMNS)
        more = f"; next page: --cursor {page['nextCursor']}" if page["nextCursor"] else ""
        print(f"({len(page['deadLetters'])} shown of {page['matched']} matching, {page['total']} kept{more})")
        return
    body: dict[str, Any] = {k: v for k, v in where.items() if v is not None}
    if args.ids:
        body["messageIds"] = args.ids
    if args.all:
        body["all"] = True
    chosen = [bool(args.ids), bool(args.all), bool(set(body) - {"messageIds", "all"})]
    if sum(chosen) != 1:
        raise CommandError("name the dead letters one way: --id (repeat for more), a filter (--reason, --older-than, --newer-than), or --all", 2)
    path = f"{base}/mailboxes/{mailbox}/dead-letters/{args.action}"
    counted = admin_cli.request(args, "POST", path, key, {**body, "dryRun": True}, idempotent=True)
    verb = "requeued" if args.action == "requeue" else "deleted"
    skipped = counted.get("skipped") or {}
    note = ", ".join(f"{count} {why}" for why, count in skipped.items() if count)
    would = counted["matched"] - sum(skipped.values())
    if args.dry_run:
        _say(args, counted, f"would {args.action} {would} of {counted['matched']} matching dead letters" + (f" (skipped: {note})" if note else ""))
        return
    if not args.ids:
        _confirm(args, f"{args.action} dead letters of mailbox {args.mailbox}:", would)
    total = _repeat(args, key, path, body, verb)
    skipped = total.get("skipped") or {}
    note = ", ".join(f"{count} {why}" for why, count in skipped.items() if count)
    _say(args, total, f"{verb} {total.get(verb, 0)} of {total['matched']} matching dead letters" + (f" (skipped: {note})" if note else ""))


def run(args: argparse.Namespace) -> int:
    handler = {"runs": _runs, "tasks": _tasks, "claims": _claims, "mailboxes": _mailboxes, "dead-letters": _dead_letters}[args.command]
    try:
        handler(args)
    except CommandError as error:
        print(f"runstate {args.command}: {error}", file=sys.stderr, flush=True)
        return error.status
    return 0
