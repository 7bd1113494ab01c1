"""`runstate keys`, `runstate spaces`, `runstate inspect`: a running server's admin and read endpoints.

They talk HTTP to the server (`--url`, else RUNSTATE_BASE_URL, else http://127.0.0.1:8080), so a
key made or revoked takes effect at once on the server that answers, with nothing to restart.

Credentials, first found wins, in the order `runstate serve` itself uses (flag > environment >
data directory), so the commands find the key the server really has:
- keys, spaces: the admin key: the file `--admin-key-file`, else RUNSTATE_ADMIN_KEY, else
  DATA_DIR/admin.key (`--data-dir` or RUNSTATE_DATA_DIR: on the server's machine). A server with
  RUNSTATE_ADMIN_KEY set ignores the file in its data directory, and so do these commands;
- inspect: the admin key as above (any space, `--space`), else RUNSTATE_API_KEY in its own space
  (`--space`, RUNSTATE_SPACE_ID, else the space the server says the key opens: `GET /v1/key`).

Every refusal names the server's URL and where the key came from.

Exit status: 0 done; 1 the server refused or could not be reached (the message says which);
2 a usage error (a missing credential, a bad argument).
"""

from __future__ import annotations

import argparse
import os
import secrets
from collections import deque
from decimal import Decimal
import ssl
import sys
from typing import Any, Callable, Protocol, Sequence

import orjson

from .admin import ADMIN_KEY_FILE

__all__ = ["add_commands", "run", "print_table", "show", "space_access", "request", "CommandError", "Credential", "print_json", "sub", "common", "limit", "count"]

DEFAULT_URL = "http://127.0.0.1:8080"
TIMEOUT_S = 10.0

Column = tuple[str, "str | Callable[[dict[str, Any]], Any]"]


class Credential:
    """A key and where it came from (for messages; never the key itself)."""

    def __init__(self, secret: str, source: str, admin: bool) -> None:
        self.secret = secret
        self.source = source
        self.admin = admin

    def describe(self) -> str:
        return f"the {'admin' if self.admin else 'API'} key from {self.source}"


class CommandError(Exception):
    def __init__(self, message: str, status: int = 1, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code  # the server's error code (CURSOR_EXPIRED, ...), when it refused


# -- the parsers ----------------------------------------------------------------------------------

LIMIT_MAX = 1000  # the most a listing route returns at once


def count(low: int, high: int | None) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high` (None: no most), else a usage error
    (exit 2) before the server is asked."""

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}" if high is not None else f"must be {low} or more, got {value}")
        return value

    return whole


# A `--limit`: 1-LIMIT_MAX.
limit = count(1, LIMIT_MAX)


def _common(admin_only: bool) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=None, help=f"the server (default $RUNSTATE_BASE_URL, else {DEFAULT_URL})")
    common.add_argument("--admin-key-file", default=None, metavar="FILE", help="read the admin key from FILE (it wins over RUNSTATE_ADMIN_KEY and --data-dir)")
    common.add_argument("--data-dir", default=None, metavar="DIR", help=f"read the admin key from DIR/{ADMIN_KEY_FILE} (default $RUNSTATE_DATA_DIR)")
    common.add_argument("--json", action="store_true", help="print the server's JSON instead of a table")
    if not admin_only:
        common.add_argument("--space", default=None, help="the space to inspect (default $RUNSTATE_SPACE_ID, else 'default')")
    return common


def _sub(
    commands: Any, name: str, help_text: str, examples: str, parents: list[argparse.ArgumentParser], aliases: tuple[str, ...] = (),
) -> argparse.ArgumentParser:
    # `commands` is `Any`: what `add_subparsers` returns is of a class argparse keeps private.
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help_text, description=help_text[0].upper() + help_text[1:] + ".", parents=parents,
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog="examples:\n" + examples, aliases=list(aliases),
    )
    return parser


def add_commands(commands: Any) -> None:
    admin = _common(admin_only=True)
    reader = _common(admin_only=False)

    keys = _sub(commands, "keys", "create, list and revoke API keys (admin key needed)",
                "  runstate keys create --space research --name crawler\n  runstate keys list\n  runstate keys revoke ak_0123456789abcdef", [])
    key_commands = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = _sub(key_commands, "create", "make an API key for a space; it is printed once",
                  "  runstate keys create --space research\n  runstate keys create --space research --name crawler --json\n"
                  "  runstate keys create --space research --name dashboard --role viewer", [admin])
    create.add_argument("--space", required=True, action="append", help="the space the key opens (repeat for several)")
    create.add_argument("--name", default=None, help="a label to recognise the key by")
    create.add_argument("--role", default=None, choices=("editor", "viewer"),
                        help="what the key may do: editor (the default) reads and changes, viewer only reads")
    listing = _sub(key_commands, "list", "list API keys (never their secrets)",
                   "  runstate keys list\n  runstate keys list --space research --json", [admin])
    listing.add_argument("--space", default=None, help="only keys that open this space")
    revoke = _sub(key_commands, "revoke", "revoke an API key at once",
                  "  runstate keys revoke ak_0123456789abcdef", [admin])
    revoke.add_argument("key_id", metavar="KEY_ID", help="the key's id (ak_...), as `keys list` shows it")

    # `runstate spaces` alone lists them, as `spaces list` does (its one action).
    spaces = _sub(commands, "spaces", "list spaces (admin key needed)", "  runstate spaces\n  runstate spaces list --json", [admin])
    spaces.set_defaults(action="list")
    space_commands = spaces.add_subparsers(dest="action", required=False, metavar="ACTION")
    _sub(space_commands, "list", "list the spaces the server knows, with keys, runs, live claims and operations",
         "  runstate spaces list\n  runstate spaces list --json", [admin])

    inspect = _sub(commands, "inspect", "look at a running server: runs, claims, tasks, mailboxes, usage, barriers, timers, groups, events",
                   "  runstate inspect runs\n  runstate inspect claims sc_0123456789abcdef\n  runstate inspect usage --space research --json", [])
    add_inspect_actions(inspect, reader, "inspect")
    from . import cluster_cli  # (`runstate cluster status`)

    cluster_cli.add_commands(commands)


def add_inspect_actions(inspect: argparse.ArgumentParser, reader: argparse.ArgumentParser, prefix: str) -> None:
    """The WHATs of `runstate inspect` (and of `runstate replay DIR inspect`: the same views at a
    past point), each with `reader`'s options; `prefix` begins their examples."""
    what = inspect.add_subparsers(dest="action", required=True, metavar="WHAT")
    _sub = _sub_in(prefix)
    runs = _sub(what, "runs", "list runs (scopes), newest first", "  runstate inspect runs\n  runstate inspect runs --limit 10 --json", [reader])
    runs.add_argument("--limit", type=limit, default=100, help="at most this many (1-1000, default 100)")
    claims = _sub(what, "claims", "list the live claims of a run", "  runstate inspect claims sc_0123456789abcdef", [reader])
    claims.add_argument("run", metavar="RUN", help="the run's id (sc_...)")
    claims.add_argument("--limit", type=limit, default=1000, help="at most this many (1-1000, default 1000)")
    tasks = _sub(what, "tasks", "list the tasks of a run, newest first", "  runstate inspect tasks sc_0123456789abcdef", [reader])
    tasks.add_argument("run", metavar="RUN", help="the run's id (sc_...)")
    tasks.add_argument("--limit", type=limit, default=100, help="at most this many (1-1000, default 100)")
    _sub(what, "mailboxes", "list the mailboxes (queues) of a space", "  runstate inspect mailboxes --json", [reader], ("queues",))
    _sub(what, "usage", "operations counted for a space (renewals are free)", "  runstate inspect usage\n  runstate inspect usage --space research", [reader])
    # Pools, quotas and budgets (a space's); barriers, timers and task groups (a run's).
    _sub(what, "pools", "list the permit pools of a space and their units in use", "  runstate inspect pools --json", [reader])
    _sub(what, "quotas", "list the allowances of a space and their current window", "  runstate inspect quotas", [reader])
    _sub(what, "budgets", "list the budgets of a space: limit, spent, reserved, available", "  runstate inspect budgets", [reader])
    for name, help_text in (("barriers", "list the barriers of a run"), ("timers", "list the timers of a run"),
                            ("groups", "list the task groups of a run")):
        listing = _sub(what, name, help_text, f"  runstate inspect {name} sc_0123456789abcdef", [reader])
        listing.add_argument("run", metavar="RUN", help="the run's id (sc_...)")
        listing.add_argument("--limit", type=limit, default=100, help="at most this many (1-1000, default 100)")
    events = _sub(what, "events", "list the newest events of a space, newest first (--from-start: from the oldest kept; "
                  "--follow: print them as they happen, from now on)",
                  "  runstate inspect events\n  runstate inspect events --type claim.force_released --limit 20\n"
                  "  runstate inspect events --from-start --json\n"
                  "  runstate inspect events --follow --run sc_0123456789abcdef --type claim.force_released\n"
                  "  runstate inspect events --follow --from-start --key company:acme --json", [reader])
    events.add_argument("--cursor", default=None, help="the events after this cursor, in the order they happened (default: the newest; "
                        "with --follow, from now on)")
    events.add_argument("--from-start", action="store_true", help="from the oldest event kept, in the order they happened "
                        "(with --follow: print those first, then follow)")
    events.add_argument("--limit", type=limit, default=100, help="at most this many (a page with --cursor or --from-start; 1-1000, default 100)")
    events.add_argument("--follow", action="store_true", help="keep waiting for new events until interrupted")
    events.add_argument("--run", default=None, metavar="RUN", help="only the events of this run and the runs under it")
    events.add_argument("--type", dest="types", action="append", default=None, metavar="TYPE",
                        help="only events of this type (repeat, or separate with commas)")
    events.add_argument("--key", default=None, metavar="KEY", help="only events about this claim key, task, message or mailbox (id or task key)")


def _sub_in(prefix: str) -> Callable[..., argparse.ArgumentParser]:
    """`_sub`, with the examples' `runstate inspect` spelled as `prefix` says."""

    def sub(commands: Any, name: str, help_text: str, examples: str, parents: list[argparse.ArgumentParser], aliases: tuple[str, ...] = ()) -> argparse.ArgumentParser:
        return _sub(commands, name, help_text, examples.replace("runstate inspect", f"runstate {prefix}"), parents, aliases)

    return sub


# -- talking to the server ------------------------------------------------------------------------

def _admin_key(args: argparse.Namespace, required: bool) -> Credential | None:
    """The admin key, in the order the server itself takes it: flag > environment > data directory."""
    if args.admin_key_file is not None:
        return Credential(_read_key(args.admin_key_file), f"--admin-key-file {args.admin_key_file}", admin=True)
    secret = os.environ.get("RUNSTATE_ADMIN_KEY") or None
    if secret:
        return Credential(secret, "RUNSTATE_ADMIN_KEY", admin=True)
    data_dir, origin = (args.data_dir, "--data-dir") if args.data_dir else (os.environ.get("RUNSTATE_DATA_DIR") or None, "RUNSTATE_DATA_DIR")
    if data_dir:
        path = os.path.join(data_dir, ADMIN_KEY_FILE)
        return Credential(_read_key(path), f"{path} ({origin})", admin=True)
    if required:
        raise CommandError(
            "this needs the admin key: set RUNSTATE_ADMIN_KEY, or pass --data-dir DIR on the server's machine "
            f"(the server keeps it in DIR/{ADMIN_KEY_FILE}), or --admin-key-file FILE",
            2,
        )
    return None


def _read_key(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            secret = file.read().strip()
    except OSError as error:
        raise CommandError(f"cannot read the admin key from {path}: {error.strerror}", 2) from None
    if not secret:
        raise CommandError(f"the admin key file {path} is empty", 2)
    return secret


def _verify() -> ssl.SSLContext | bool:
    """How an https server's certificate is checked: against RUNSTATE_CA_BUNDLE (a PEM file of the
    certificates to trust, for a self-signed or private CA's certificate), else the system's roots."""
    bundle = os.environ.get("RUNSTATE_CA_BUNDLE") or None
    if bundle is None:
        return True
    try:
        return ssl.create_default_context(cafile=bundle)
    except (OSError, ssl.SSLError) as error:
        raise CommandError(f"cannot read the CA bundle RUNSTATE_CA_BUNDLE={bundle}: {error}", 2) from None


def _server_url(args: argparse.Namespace) -> tuple[str, str]:
    """The server's URL and where it came from."""
    if args.url:
        return args.url.rstrip("/"), "--url"
    if os.environ.get("RUNSTATE_BASE_URL"):
        return os.environ["RUNSTATE_BASE_URL"].rstrip("/"), "RUNSTATE_BASE_URL"
    return DEFAULT_URL, "the default; --url or RUNSTATE_BASE_URL to change it"


def _request(
    args: argparse.Namespace, method: str, path: str, key: Credential, body: Any = None, params: dict[str, Any] | None = None,
    *, idempotent: bool = False,
) -> Any:
    """One call to the server: its JSON answer, or `CommandError` naming the server and the key.

    `idempotent`: a change sent with an Idempotency-Key, sent once more with the same key when the
    connection failed, so a change that was made but whose answer was lost is answered, not made twice.
    """
    import httpx  # (here: `runstate serve` imports this module and needs no HTTP client)

    url, url_source = _server_url(args)
    headers = {"authorization": f"Bearer {key.secret}"}
    if idempotent:
        headers["idempotency-key"] = secrets.token_hex(12)
    answer = None
    for attempt in range(2 if idempotent else 1):
        try:
            answer = httpx.request(method, url + path, headers=headers, json=body, params=params, timeout=TIMEOUT_S, verify=_verify())
            break
        except httpx.HTTPError as error:
            if attempt + 1 < (2 if idempotent else 1):
                continue
            raise CommandError(f"cannot reach the runstate server at {url} ({url_source}): {error}; is it running?") from None
    assert answer is not None
    try:
        data = answer.json()
    except ValueError:
        data = None
    if answer.status_code >= 400:
        envelope = data.get("error") if isinstance(data, dict) else None
        if not isinstance(envelope, dict):
            raise CommandError(f"{method} {url}{path}: HTTP {answer.status_code}, not a runstate answer (is {url} a runstate server?)")
        message = envelope.get("message", "")
        code = envelope.get("code")
        if answer.status_code == 404 and message.startswith("no such route"):
            raise CommandError(f"this server has no route {method} {path}: it was built without that part")
        detail = f"request {envelope.get('requestId')}"
        if code in ("UNAUTHENTICATED", "FORBIDDEN"):
            detail = f"{key.describe()}, sent to {url}; {detail}"
        elif code == "NOT_FOUND" and not key.admin and message.startswith("space "):
            detail = (
                f"{key.describe()} does not open it: pass --space or set RUNSTATE_SPACE_ID to the key's own space; {detail}"
            )
        raise CommandError(f"{code}: {message} ({detail})", code=code)
    return data


# -- output ---------------------------------------------------------------------------------------

def show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(show(v) for v in value) or "-"
    if isinstance(value, dict):
        return orjson.dumps(value).decode()
    return str(value)


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> None:
    cells = [[h for h, _ in columns]]
    for row in rows:
        cells.append([show(get(row) if callable(get) else row.get(get)) for _, get in columns])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())


def _print_json(data: Any) -> None:
    print(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())


# -- the commands ---------------------------------------------------------------------------------

KEY_COLUMNS: list[Column] = [("ID", "id"), ("NAME", "name"), ("ROLE", "role"), ("SPACES", "spaces"), ("CREATED", "createdAt"),
                             ("REVOKED", "revokedAt")]


def _keys(args: argparse.Namespace) -> None:
    secret = _admin_key(args, required=True)
    assert secret is not None
    if args.action == "create":
        body = {"spaces": args.space, **({"name": args.name} if args.name else {}), **({"role": args.role} if args.role else {})}
        made = _request(args, "POST", "/v1/admin/keys", secret, body)
        if args.json:
            _print_json(made)
            return
        spaces = ",".join(made["spaces"])
        role = made.get("role", "editor")
        print(f"created API key {made['id']} ({role}) for space {spaces}. It is shown only now; the server keeps only its digest.\n")
        print(f"    export RUNSTATE_API_KEY={made['key']} RUNSTATE_SPACE_ID={made['spaces'][0]} RUNSTATE_BASE_URL={_server_url(args)[0]}\n")
    elif args.action == "list":
        listed = _request(args, "GET", "/v1/admin/keys", secret, params={"space": args.space} if args.space else None)
        _print_json(listed) if args.json else print_table(listed["keys"], KEY_COLUMNS)
    else:
        revoked = _request(args, "POST", f"/v1/admin/keys/{args.key_id}/revoke", secret)
        _print_json(revoked) if args.json else print(f"revoked {revoked['id']} at {revoked['revokedAt']}")


def _spaces(args: argparse.Namespace) -> None:
    secret = _admin_key(args, required=True)
    assert secret is not None
    listed = _request(args, "GET", "/v1/admin/spaces", secret)
    if args.json:
        _print_json(listed)
        return
    print_table(listed["spaces"], [("SPACE", "id"), ("KEYS", "keys"), ("RUNS", "runs"), ("LIVE CLAIMS", "claimsLive"), ("OPERATIONS", "operations")])


def _own_space(args: argparse.Namespace, secret: Credential) -> str:
    """The space an API key opens (asked of the server); the admin key reads 'default' by default."""
    if secret.admin:
        return "default"
    spaces = _request(args, "GET", "/v1/key", secret)["spaces"]
    if len(spaces) != 1:
        raise CommandError(f"{secret.describe()} opens {len(spaces)} spaces ({', '.join(spaces)}): pass --space", 2)
    return str(spaces[0])


def space_access(args: argparse.Namespace, *, prefer_api_key: bool = False) -> tuple[Credential, str]:
    """The key to use in a space, and the space: the admin key when one is at hand (any space),
    else RUNSTATE_API_KEY (its own space); `prefer_api_key` for the work only a space's key may do.
    The space: --space, else RUNSTATE_SPACE_ID, else the one the key opens (the admin key: 'default')."""
    admin = _admin_key(args, required=False)
    api = Credential(os.environ["RUNSTATE_API_KEY"], "RUNSTATE_API_KEY", admin=False) if os.environ.get("RUNSTATE_API_KEY") else None
    secret = (api or admin) if prefer_api_key else (admin or api)
    if secret is None:
        raise CommandError(
            f"{args.command} needs a key: RUNSTATE_API_KEY (its own space) or the admin key (RUNSTATE_ADMIN_KEY or --data-dir)", 2
        )
    return secret, args.space or os.environ.get("RUNSTATE_SPACE_ID") or _own_space(args, secret)


class Fetch(Protocol):
    """A read of the space: its path after /v1/spaces/{space} and its query -> the answer."""

    def __call__(self, tail: str, params: dict[str, Any] | None = None, /) -> Any: ...  # `Any`: the JSON answer


def _inspect(args: argparse.Namespace, fetch: Fetch | None = None) -> None:
    """Print one view of a space: read from the server (`fetch` None), or through `fetch` (`runstate replay`)."""
    if fetch is None:
        secret, space = space_access(args)
        base = f"/v1/spaces/{space}"

        def fetch(tail: str, params: dict[str, Any] | None = None) -> Any:
            return _request(args, "GET", base + tail, secret, params=params)

    rows: list[dict[str, Any]]
    columns: list[Column]
    action = args.action
    if action == "runs":
        data = fetch("/scopes", {"limit": args.limit})
        rows, columns = data["scopes"], [
            ("ID", "id"), ("NAME", "name"), ("STATE", "effective"), ("PARENT", "parentId"),
            ("CHILDREN", "children"), ("CREATED", "createdAt"), ("DEADLINE", "deadline"),
        ]
    elif action == "claims":
        data = fetch(f"/scopes/{args.run}/claims", {"limit": args.limit})
        rows, columns = data["claims"], [
            ("KEY", "key"), ("HOLDER", "holder"), ("SESSION", "holderSession"), ("GENERATION", "generation"),
            ("LEASE S", "leaseSeconds"), ("EXPIRES", "leaseExpiresAt"), ("ACQUIRED", "acquiredAt"),
        ]
    elif action == "tasks":
        data = fetch(f"/scopes/{args.run}/tasks", {"limit": args.limit})
        rows, columns = data["tasks"], [
            ("ID", "id"), ("KEY", "taskKey"), ("STATE", "state"), ("ATTEMPT", "attempt"), ("MAILBOX", "mailboxId"),
            ("REASON", "outcomeReason"), ("UPDATED", "updatedAt"),
        ]
    elif action in ("mailboxes", "queues"):
        data = fetch("/mailboxes")
        rows = data["mailboxes"]
        columns = [
            ("NAME", "name"), ("ID", "id"), ("MODE", "mode"), ("QUEUED", _count("queued")), ("DELAYED", _count("delayed")),
            ("LEASED", _count("leased")), ("DEAD LETTERS", _count("deadLetters")), ("BACKLOG LIMIT", "backlogLimit"),
            ("MAX ATTEMPTS", "maxAttempts"),
        ]
    elif action == "pools":
        data = fetch("/permits")
        rows, columns = data["permits"], [("NAME", "name"), ("ID", "id"), ("UNITS", "unitsTotal"), ("IN USE", "unitsInUse"), ("AVAILABLE", "unitsAvailable")]
    elif action == "quotas":
        data = fetch("/allowances")
        rows, columns = data["allowances"], [
            ("NAME", "name"), ("ID", "id"), ("LIMIT", "unitsLimit"), ("WINDOW S", "windowSeconds"), ("REMAINING", "remaining"),
            ("WAITING", "waiting"), ("WINDOW START", "windowStart"), ("COOLDOWN UNTIL", "cooldownUntil"),
        ]
    elif action == "budgets":
        # Amounts in the currency (a limit of 1 USD at scale 2 is 1.00, not 100); --json keeps the
        # server's minor units.
        data = fetch("/budgets")
        rows, columns = data["budgets"], [
            ("NAME", "name"), ("ID", "id"), ("CURRENCY", "currency"), ("LIMIT", _amount("limitMinor")),
            ("SPENT", _amount("spentMinor")), ("RESERVED", _amount("reservedMinor")), ("AVAILABLE", _amount("availableMinor")),
        ]
    elif action in ("barriers", "timers", "groups"):
        data = fetch(f"/scopes/{args.run}/{action}", {"limit": args.limit})
        by_kind: dict[str, list[Column]] = {
            "barriers": [("ID", "id"), ("STATE", "state"), ("ARRIVED", "arrived"), ("TARGET", "target"), ("EPOCH", "epoch"),
                         ("CREATED", "createdAt")],
            "timers": [("ID", "id"), ("STATE", "state"), ("FIRE AT", "fireAt"), ("FIRED", "firedAt"), ("ENDED", "endedAt")],
            "groups": [("ID", "id"), ("CONDITION", "condition"), ("STATE", "state"), ("OUTCOME", "outcome"),
                       ("REASON", "outcomeReason"), ("MEMBERS", lambda row: row["counts"]["members"]), ("GATE", "scopeId")],
        }
        rows, columns = data[action], by_kind[action]
    elif action == "events":
        _events(args, fetch)
        return
    else:
        data = fetch("/usage")
        rows = [{"kind": kind, "name": name, "count": count} for kind in ("operations", "free", "events") for name, count in data[kind].items()]
        rows.append({"kind": "total", "name": "operations counted", "count": data["total"]})
        columns = [("KIND", "kind"), ("NAME", "name"), ("COUNT", "count")]
    if args.json:
        _print_json(data)
        return
    print_table(rows, columns)
    if data.get("truncated"):
        print("(more not shown: raise --limit)")


def _count(name: str) -> Callable[[dict[str, Any]], Any]:
    """A mailbox's count of messages in one state (`counts.<name>`), or None when the row has none."""
    return lambda row: (row.get("counts") or {}).get(name)


def _amount(field: str) -> Callable[[dict[str, Any]], str | None]:
    """A budget's amount in minor units (a digit string) as the currency writes it: scale 2, "150" -> "1.50"."""

    def amount(row: dict[str, Any]) -> str | None:
        minor, scale = row.get(field), row.get("scale") or 0
        if minor is None:
            return None
        value = Decimal(str(minor)).scaleb(-int(scale))
        return f"{value:.{int(scale)}f}"

    return amount


def event_by(event: dict[str, Any]) -> str | None:
    """Who an event is by: the operator (`by`: an API key's id, or `admin`) when its record says,
    else the holder it names (who took a claim or a delivery, or whose delivery ended); None
    when it names neither (a release or an expiry records only the generation)."""
    payload = event.get("payload") or {}
    return payload.get("by") or payload.get("holder")


# The columns of `runstate events` (a space's event log).
EVENT_COLUMNS: list[Column] = [
    ("CURSOR", lambda row: row["eventId"].split("_", 1)[-1]), ("TYPE", "type"), ("AT", "createdAt"),
    ("AGGREGATE", lambda row: f"{row['aggregate']['type']}:{row['aggregate']['id']}"), ("RUN", "scopeId"),
    ("BY", event_by),
]


# How many times a scan for the newest events starts again from the oldest kept when the log moved
# past its cursor (CURSOR_EXPIRED: a busy space dropped the events it was reading).
SCAN_RESTARTS_MAX = 3
# The page size of a scan for the newest events (the server's most per page; `--limit` asks at most as many).
SCAN_PAGE_MAX = LIMIT_MAX


def _about(event: dict[str, Any], key: str) -> bool:
    """Whether an event is about `key`: its aggregate's id (a claim key, a task, a message, a
    mailbox), or the task key it carries."""
    return event["aggregate"]["id"] == key or (event.get("payload") or {}).get("taskKey") == key


def _events(args: argparse.Namespace, fetch: Fetch) -> None:
    """The newest events, newest first; or with --cursor or --from-start one page in the order
    they happened (a replay); or with --follow every event from now on (or from the cursor, or
    from the oldest kept with --from-start), one line (or JSON object) each, under a header."""
    types = ",".join(name.strip() for given in args.types or () for name in given.split(",") if name.strip()) or None
    if not args.follow and args.cursor is None and not args.from_start:
        _newest_events(args, fetch, types)
        return
    filtered = types is not None or args.run is not None
    cursor = args.cursor
    if args.follow and cursor is None and not args.from_start:
        cursor = fetch("/events", {"latest": 0})["nextCursor"]
    if args.follow and not args.json:
        print("  ".join(name for name, _ in EVENT_COLUMNS), flush=True)
    while True:
        params: dict[str, Any] = {"limit": args.limit, "types": types, "scopeId": args.run}
        if cursor:
            params["cursor"] = cursor
        if args.follow or filtered:
            params["waitSeconds"] = 5 if args.follow else 0
        params = {name: value for name, value in params.items() if value is not None}
        page = fetch("/watch" if args.follow or filtered else "/events", params)
        shown = [event for event in page["events"] if args.key is None or _about(event, args.key)]
        if not args.follow:
            _print_events({**page, "events": shown}, args.json)
            return
        for event in shown:
            if args.json:
                print(orjson.dumps(event).decode(), flush=True)
            else:
                print("  ".join(show(column(event) if callable(column) else event.get(column)) for _, column in EVENT_COLUMNS), flush=True)
        cursor = page["nextCursor"]


def _newest_events(args: argparse.Namespace, fetch: Fetch, types: str | None) -> None:
    """The newest `--limit` events (of the filters), newest first, and the cursor after the newest:
    where a follower of what happens from now on starts. Without filters the server picks them
    (`latest`); with them, the log is read once from the oldest kept up to its newest event when
    the command started, at most a thousand a page, keeping the last `--limit` that match."""
    if types is None and args.run is None and args.key is None:
        page = fetch("/events", {"latest": args.limit})
        _print_events({**page, "events": page["events"][::-1]}, args.json)
        return
    end = int(fetch("/events", {"latest": 0})["nextCursor"])
    for _ in range(SCAN_RESTARTS_MAX):
        kept: deque[dict[str, Any]] = deque(maxlen=args.limit)
        cursor = None
        try:
            while cursor is None or int(cursor) < end:
                params = {"limit": SCAN_PAGE_MAX, "types": types, "scopeId": args.run, "waitSeconds": 0, "cursor": cursor}
                params = {name: value for name, value in params.items() if value is not None}
                page = fetch("/watch", params)
                kept.extend(event for event in page["events"] if args.key is None or _about(event, args.key))
                if cursor == page["nextCursor"]:
                    break  # (nothing after it: a log that lost events since `end` was read)
                cursor = page["nextCursor"]
        except CommandError as error:
            if error.code != "CURSOR_EXPIRED":
                raise
            continue
        _print_events({"events": list(kept)[::-1], "nextCursor": cursor}, args.json)
        return
    raise CommandError("the space's events move faster than they can be read: try again, or narrow the search with --run or --type")


def _print_events(page: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _print_json(page)
    else:
        print_table(page["events"], EVENT_COLUMNS)
        print(f"(next cursor: {page['nextCursor']})")


def run(args: argparse.Namespace) -> int:
    try:
        from .cluster_cli import status

        {"keys": _keys, "spaces": _spaces, "inspect": _inspect, "cluster": status}[args.command](args)
    except CommandError as error:
        print(f"runstate {args.command}: {error}", file=sys.stderr, flush=True)
        return error.status
    return 0


# Names the other command modules (`ops_cli.py`, `top.py`) use.
request = _request
print_json = _print_json
sub = _sub
common = _common
