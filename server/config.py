"""Configuration: every setting of `runstate serve`, from flags, the environment and a TOML file.

Each setting has one name and four spellings, derived from it so they can never drift apart:

    name            flag              variable                TOML
    port            --port            RUNSTATE_PORT           port
    lease_s_max     --lease-s-max     RUNSTATE_LEASE_S_MAX    [limits] lease_s_max

Precedence, highest first: flags > environment (`RUNSTATE_*`) > the TOML file (`--config FILE` or
`RUNSTATE_CONFIG`) > defaults. Every field of `Limits` is a setting by construction (a limit added
to `Limits` becomes a setting with no change here; its description belongs in `LIMIT_DOCS`).

A wrong setting stops the start with a `ConfigError` naming it and where it came from, and the
command exits 2: an unknown name (with the nearest known one), a value of the wrong type, one out
of range, or a combination that cannot work (a default lease outside the allowed leases). Starting
with a setting silently ignored is worse than not starting: the operator believes it is in force.

Secrets (`api_key`, `admin_key`) have no flag: a flag shows in `ps` to every user of the machine.
Empty environment variables count as unset, so `RUNSTATE_SERVER_API_KEY= runstate serve` clears one.

The API key and space the server accepts at start have variables of their own,
`RUNSTATE_SERVER_API_KEY` and `RUNSTATE_SERVER_SPACE_ID`: `RUNSTATE_API_KEY` and `RUNSTATE_SPACE_ID`
are what the clients read, so a shell that runs a client would hand its key to the server. The old
names are still read when the new ones are not set, with a warning.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import ssl
import tomllib
from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Mapping

from ..actors.limits import Limits
from ..actors.errors import KernelError
from ..actors.fields import SPACE_ID_LEN_MAX, check_space_id
from .settings import FSYNC_POLICIES, Settings

__all__ = ["ConfigError", "Setting", "SETTINGS", "LIMIT_DOCS", "Loaded", "load", "ENV_CONFIG", "CLIENT_VARIABLES"]

ENV_PREFIX = "RUNSTATE_"
ENV_CONFIG = "RUNSTATE_CONFIG"
# Variables of the same prefix that clients read (the SDKs, the product page's examples) and that a
# shell running both may well export: never an error for the server.
CLIENT_VARIABLES = frozenset({ENV_CONFIG, "RUNSTATE_BASE_URL", "RUNSTATE_SCOPE_ID", "RUNSTATE_RUN", "RUNSTATE_CA_BUNDLE"})

LOG_FORMATS = ("json", "text")
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_REQUESTS = ("all", "errors", "off")


class ConfigError(Exception):
    """A setting that cannot be used; the message names it and its source."""


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    kind: type
    default: Any
    doc: str
    limit: bool = False  # a field of `Limits` (TOML: in the [limits] table)
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    optional: bool = False  # None (unset) is a valid value
    secret: bool = False  # no flag; never printed
    # A variable of its own when RUNSTATE_<NAME> is one the clients read too (the API key, the space
    # id), and the old name, still read, with a warning, when the new one is not set.
    env_name: str | None = None
    legacy_env: str | None = None

    @property
    def flag(self) -> str | None:
        return None if self.secret else "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return self.env_name or ENV_PREFIX + self.name.upper()

    @property
    def toml(self) -> str:
        return f"limits.{self.name}" if self.limit else self.name

    def describe_default(self) -> str:
        if self.default is None:
            return "none"
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return str(self.default)


# -- the settings ---------------------------------------------------------------------------------

_DEFAULTS = Settings()

_SERVER: tuple[Setting, ...] = (
    Setting("host", str, _DEFAULTS.host, "Interface to listen on. Loopback only unless you say otherwise."),
    Setting("port", int, _DEFAULTS.port, "Port to listen on; 0 picks a free one (the chosen one is printed).", minimum=0, maximum=65535),
    Setting("data_dir", str, _DEFAULTS.data_dir, "Directory for the journal and snapshots; none keeps the state in memory only.", optional=True),
    Setting("fsync", str, _DEFAULTS.fsync, "When the journal is fsynced: before each answer (always); in the background every fsync_batch_ms, "
            "answering after the write (batch: a power cut loses at most that window); never, answering after the write "
            "(off: survives a killed process, not a power cut). See docs/durability.md.", choices=FSYNC_POLICIES),
    Setting("partitions", int, _DEFAULTS.partitions, "Data partitions, each with its own journal, timers and actors, spaces spread over them "
            "by a hash of their id. Fixed when the data directory is made (default 1); a later start may leave it out or repeat it.",
            minimum=1, maximum=256, optional=True),
    Setting("etcd", str, _DEFAULTS.etcd, "Run as a node of a cluster whose journal is on etcd: its members' client URLs, "
            "comma-separated (none: one node, its journal on the local disk). See docs/cluster.md.", optional=True),
    Setting("cluster", str, _DEFAULTS.cluster, "The cluster's name: the prefix of its keys in etcd (several clusters can share one etcd)."),
    Setting("node_id", str, _DEFAULTS.node_id, "This node's id in the cluster, the same across its restarts (default: the host name and port).",
            optional=True),
    Setting("advertise", str, _DEFAULTS.advertise, "The URL the cluster's other nodes reach this node by (default: http://HOST:PORT).",
            optional=True),
    Setting("cluster_lease_s", int, _DEFAULTS.cluster_lease_s, "TTL of this node's session with etcd, in seconds: a node that dies "
            "loses its partitions about this long (plus half a second) later. 1 needs etcd's tuned timing (docs/cluster.md).",
            minimum=1, maximum=30),
    Setting("cluster_forward_wait_s", float, _DEFAULTS.cluster_forward_wait_s, "How long a request for a partition without a leader "
            "(a failover) waits for the new one before it is answered 503.", minimum=0, maximum=60),
    Setting("cluster_log_bytes_max", int, _DEFAULTS.cluster_log_bytes_max, "Bytes the partitions' logs may hold in etcd, all "
            "together: a node snapshots a partition once its copy holds this divided by the partitions past its last snapshot, "
            "and the leader trims the log below the snapshots (etcd's database stays under about 3 times this plus 64 MiB: "
            "docs/cluster.md).", minimum=1 << 20, maximum=1 << 34),
    Setting("cluster_trim_every_s", float, _DEFAULTS.cluster_trim_every_s, "How often each leader trims its partitions' logs "
            "in etcd below the snapshots every node has, and etcd's history of what was trimmed is compacted.", minimum=0.5, maximum=3600),
    Setting("api_key", str, _DEFAULTS.api_key, "A bearer key accepted for `space_id` at start (journaled as its digest). "
            "RUNSTATE_API_KEY, the clients' variable, is read too while this is not set, with a warning.",
            optional=True, secret=True, env_name="RUNSTATE_SERVER_API_KEY", legacy_env="RUNSTATE_API_KEY"),
    Setting("space_id", str, _DEFAULTS.space_id, "The space `api_key` (or the key made at first start) opens. "
            "RUNSTATE_SPACE_ID, the clients' variable, is read too while this is not set, with a warning.",
            env_name="RUNSTATE_SERVER_SPACE_ID", legacy_env="RUNSTATE_SPACE_ID"),
    Setting("admin_key", str, _DEFAULTS.admin_key, "The admin credential for /v1/admin and `runstate keys`; at least 16 characters. "
            "Unset: read from (or made in) DATA_DIR/admin.key, or without a data directory made and printed once.",
            optional=True, secret=True),
    Setting("log_format", str, _DEFAULTS.log_format, "Log lines as JSON objects (json) or readable text (text).", choices=LOG_FORMATS),
    Setting("log_level", str, _DEFAULTS.log_level, "Least severe level logged; request lines are info.", choices=LOG_LEVELS),
    Setting("log_requests", str, _DEFAULTS.log_requests, "One line per request (all), only for answers of 400 and above (errors), or none (off).", choices=LOG_REQUESTS),
    Setting("metrics_public", bool, _DEFAULTS.metrics_public, "Serve /metrics without a key to any address (by default only to loopback; others need the admin key)."),
    Setting("shutdown_grace_s", float, _DEFAULTS.shutdown_grace_s, "On SIGTERM/SIGINT, how long requests in flight may take to finish.", minimum=0, maximum=3600),
    Setting("keep_alive_s", float, _DEFAULTS.keep_alive_s, "How long an idle keep-alive connection stays open (one whose client has gone closes at once). "
            "One sweep per server closes the idle ones, up to a second past this (a tenth of it, below 10 s).", minimum=1, maximum=3600),
    Setting("backlog", int, _DEFAULTS.backlog, "Connections the kernel queues before they are accepted (a swarm connecting at once; capped by net.core.somaxconn).",
            minimum=1, maximum=65535),
    Setting("body_timeout_s", float, _DEFAULTS.body_timeout_s, "A request body not complete this many seconds after its headers gets 408 and the connection closes.",
            minimum=0.1, maximum=3600),
    Setting("read_timeout_s", float, _DEFAULTS.read_timeout_s, "A connection whose client sends and reads nothing for this many seconds is closed "
            "(above the longest long poll, wait_ms_max, which a start checks; and above keep_alive_s).", minimum=0.1, maximum=3600),
    Setting("header_timeout_s", float, _DEFAULTS.header_timeout_s, "A request's line and headers not all arrived this many seconds "
            "after their first byte get 408 and the connection closes (a slowloris's trickle).", minimum=0.1, maximum=3600),
    Setting("connections_max", int, _DEFAULTS.connections_max, "Connections served at once; at the limit a new one takes the place "
            "of the oldest that has not shown a valid key, else it is answered 503 and closed "
            "(keep it below the open-files limit, ulimit -n).", minimum=1, maximum=1_000_000),
    Setting("body_bytes_in_flight_max", int, _DEFAULTS.body_bytes_in_flight_max, "Bytes of request bodies held across all requests "
            "in flight, at least request_bytes_max; past it a request gets 503 with Retry-After.", minimum=1024),
    Setting("batch_deliveries_max", int, _DEFAULTS.batch_deliveries_max, "Most deliveries the receives of one batch request lease "
            "together (a receive counts 1, a receive of many its maxMessages); an operation past it is refused alone (400).",
            minimum=1),
    Setting("batch_answer_bytes_max", int, _DEFAULTS.batch_answer_bytes_max, "Most bytes the deliveries of one batch request's answer "
            "may reach, each counted at its largest (payload_bytes_max and its other fields); an operation past it is refused alone (400).",
            minimum=65536),
    Setting("expiry_storm_per_s", int, _DEFAULTS.expiry_storm_per_s, "Expiries in one second that are logged as an expiry storm.", minimum=1),
    Setting("fsync_batch_ms", float, _DEFAULTS.fsync_batch_ms, "With fsync batch: a background fsync begins at most this many milliseconds after the last began.", minimum=0.1, maximum=1000),
    Setting("snapshot_every_records", int, _DEFAULTS.snapshot_every_records, "A snapshot once the WAL holds this many records past the last one.", minimum=1),
    Setting("snapshot_every_s", float, _DEFAULTS.snapshot_every_s, "A snapshot at least this often (seconds) while anything changed.", minimum=1),
    Setting("snapshots_kept", int, _DEFAULTS.snapshots_kept, "Snapshots kept (with the WAL after the oldest); at least 2.", minimum=2, maximum=100),
    Setting("fsync_slow_ms", float, _DEFAULTS.fsync_slow_ms, "An fsync slower than this many milliseconds is logged.", minimum=0),
    Setting("history_retention_s", float, _DEFAULTS.history_retention_s, "How far back (seconds before the newest snapshot) the "
            "snapshots and WAL that rebuild any past point of a space are kept, for the history API and `runstate replay`; "
            "0 keeps only what recovery needs. What it costs in disk: docs/history.md.", minimum=0, maximum=366 * 86400),
    Setting("history_checkpoint_every_records", int, _DEFAULTS.history_checkpoint_every_records, "While history is kept, a snapshot "
            "(a checkpoint) once the WAL holds this many records past the last one, or as many as that snapshot's entries if "
            "more: the most records a past point replays.", minimum=1000, maximum=100_000_000),
    Setting("certfile", str, _DEFAULTS.certfile, "TLS: the server's certificate chain (PEM); with keyfile the server speaks https itself "
            "(HTTP/1.1 over TLS 1.2 or later).", optional=True),
    Setting("keyfile", str, _DEFAULTS.keyfile, "TLS: the private key of certfile (PEM, not encrypted).", optional=True),
)

# One line per field of `Limits`, for `--help`, `runstate config` and the table of docs/configuration.md.
LIMIT_DOCS: dict[str, str] = {
    "lease_s_min": "Shortest lease a claim may ask for (leaseSeconds), in seconds.",
    "lease_s_max": "Longest lease a claim may ask for, in seconds.",
    "lease_s_default": "Lease of a claim that names none, in seconds.",
    "claim_key_len_max": "Longest claim key, in characters.",
    "holder_len_max": "Longest holder and holderSession, in characters.",
    "restart_grace_s": "After a restart, a lease alive at the crash lives at least this long, in seconds.",
    "restart_spread_s": "After a restart, the grace periods' ends spread over this long, in seconds.",
    "name_len_max": "Longest name (runs, mailboxes), in characters.",
    "scope_depth_max": "Deepest nesting of child runs.",
    "child_limit_max": "Largest childLimit a run may set.",
    "payload_bytes_max": "Largest payload, input, result or observation, in bytes of JSON.",
    "request_bytes_max": "Largest request body, in bytes (413 above).",
    "batch_operations_max": "Most operations in one batch request (its body is bounded by request_bytes_max).",
    "json_depth_max": "Deepest nesting of caller JSON data.",
    "idempotency_ttl_s": "How long an Idempotency-Key's answer is replayed, in seconds.",
    "idempotency_keys_max": "Most Idempotency-Key answers kept per space (the oldest of that space goes first).",
    "idempotency_key_len_max": "Longest Idempotency-Key, in characters.",
    "task_key_len_max": "Longest task key, in characters.",
    "work_key_len_max": "Longest work key, in characters.",
    "work_key_ttl_s": "How long a message's work key is remembered, in seconds.",
    "retention_s": "How long a finished task keeps its outcome before it is tombstoned, in seconds.",
    "ended_run_retention_s": "How long an ended run (with its child runs, task tombstones and all it kept) is kept before it is "
                             "removed, in seconds; its id then answers 404. 0 keeps ended runs for good.",
    "attempts_max_default": "Deliveries a message gets before it is dead-lettered, unless its mailbox says otherwise.",
    "attempts_max_max": "Largest attempt limit a mailbox may set.",
    "backoff_base_s": "First retry backoff after a nack, in seconds (doubles each attempt).",
    "backoff_max_s": "Longest retry backoff, in seconds.",
    "wait_ms_max": "Longest long poll (waitMs), in milliseconds.",
    "receive_count_max": "Most deliveries one receive of many (a prefetch, maxMessages) leases.",
    "backlog_limit_max": "Most unsettled messages of a mailbox that sets no backlogLimit, and the largest backlogLimit one may set "
                         "(also the largest maxOutstanding of a work limit).",
    "subscribers_max": "Most callers joined to one task.",
    "mailboxes_max": "Most mailboxes in one space.",
    "reason_len_max": "Longest nack error or cancel reason kept as a task's outcomeReason, in characters.",
    "space_scopes_max": "Most runs (scopes) not ended in one space; one more is 409 BACKLOG_FULL.",
    "space_claims_max": "Most claims held at once in one space; one more is 409 BACKLOG_FULL.",
    "space_tasks_max": "Most tasks not ended (queued or running) in one space; one more is 409 BACKLOG_FULL.",
    "space_payload_bytes_max": "Most bytes of JSON one space keeps in message payloads, task inputs, task results and once results; "
                               "past it a write is 409 BACKLOG_FULL. Stored Idempotency-Key answers take the room these leave "
                               "(the oldest go first).",
    "space_entities_max": "Most entities one space keeps, live or ended: runs, claim keys, messages, tasks, pool and allowance "
                          "waiters; past it a write is 409 BACKLOG_FULL. Stored Idempotency-Key answers take the room these leave.",
    # Pools, quotas, budgets and work limits.
    "pools_max": "Most permit pools in one space.",
    "pool_units_max": "Largest capacity of a permit pool, in units.",
    "allowances_max": "Most allowances (quotas) in one space.",
    "allowance_units_max": "Largest unitsLimit of an allowance, per window.",
    "window_s_max": "Longest window of an allowance, in seconds.",
    "waiters_max": "Most waiters still waiting on one allowance or in one permit pool's line (and ended ones kept readable).",
    "pool_turn_s": "How long the head of a permit pool's line has its units held back for it to acquire, in seconds.",
    "waiter_ttl_s_min": "Shortest TTL of an allowance waiter, in seconds.",
    "waiter_ttl_s_max": "Longest TTL of an allowance waiter, in seconds.",
    "cooldown_s_max": "Longest cooldown of an allowance, in seconds.",
    "budgets_max": "Most budgets in one space.",
    "budget_scale_max": "Most fraction digits (scale) of a budget's currency.",
    "currency_len_max": "Longest currency code of a budget, in characters.",
    "settle_by_s_default": "A budget reservation without settleBy is released after this long, in seconds.",
    "settle_by_s_max": "Latest settleBy a reservation may ask for, in seconds from now.",
    "work_limits_max": "Most work limits in one space.",
    # Barriers, timers, task groups and the event log.
    "barriers_max": "Most barriers kept in one space.",
    "barrier_target_max": "Largest target (arrivals needed) of a barrier.",
    "timers_per_scope_max": "Most armed or fired timers in one run.",
    "timer_after_s_max": "Longest afterSeconds of a timer, in seconds.",
    "timer_fired_ttl_s": "A fired timer never acknowledged becomes EXPIRED after this long, in seconds.",
    "timers_listed_max": "Most fired timers one poll lists (newest first).",
    "groups_max": "Most task groups kept in one space.",
    "group_members_max": "Most members of one task group.",
    "events_kept_max": "Most events kept in a space's event log.",
    "events_kept_s": "Oldest event kept in a space's event log, in seconds.",
    "watch_wait_s_default": "How long an empty watch is held when it names no waitSeconds, in seconds.",
    "watch_wait_s_legacy_max": "Longest hold of an empty watch for a client that may not extend its timeout for it (the official Python client before 0.3.0, any client not ours), in seconds.",
    "watch_wait_s_max": "Longest hold of an empty watch, in seconds.",
}

# Limits that may be zero (a grace or a spread of nothing; ended runs kept for good); every other one is at least 1 (> 0 for floats).
_LIMITS_MAY_BE_ZERO = frozenset({"restart_grace_s", "restart_spread_s", "backoff_base_s", "budget_scale_max", "ended_run_retention_s"})

# (smaller, larger): the first must not exceed the second.
_ORDERED: tuple[tuple[str, str], ...] = (
    ("lease_s_min", "lease_s_default"),
    ("lease_s_default", "lease_s_max"),
    ("waiter_ttl_s_min", "waiter_ttl_s_max"),
    ("settle_by_s_default", "settle_by_s_max"),
    ("backoff_base_s", "backoff_max_s"),
    ("attempts_max_default", "attempts_max_max"),
    ("payload_bytes_max", "request_bytes_max"),
    # A body the request limit allows but the bytes in flight never could: 503 "try again" for ever.
    ("request_bytes_max", "body_bytes_in_flight_max"),
)


def _limit_settings() -> tuple[Setting, ...]:
    made = []
    for field in fields(Limits):
        default = getattr(Limits(), field.name)
        kind = float if isinstance(default, float) else int
        minimum = 0 if field.name in _LIMITS_MAY_BE_ZERO else (1 if kind is int else 0.001)
        doc = LIMIT_DOCS.get(field.name, "See runstate.actors.Limits.")
        made.append(Setting(field.name, kind, default, doc, limit=True, minimum=minimum))
    return tuple(made)


SETTINGS: tuple[Setting, ...] = _SERVER + _limit_settings()
_BY_NAME = {setting.name: setting for setting in SETTINGS}
_BY_ENV = {setting.env: setting for setting in SETTINGS}
_BY_LEGACY_ENV = {setting.legacy_env: setting for setting in SETTINGS if setting.legacy_env}


# -- reading values -------------------------------------------------------------------------------

def _nearest(word: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _from_text(setting: Setting, text: str, source: str) -> Any:
    """A value given as text (a flag or a variable), converted to the setting's type."""
    if setting.kind is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"setting {setting.name} (from {source}): expected true or false, got {text!r}")
    if setting.kind is int:
        try:
            return int(text.strip(), 10)
        except ValueError:
            raise ConfigError(f"setting {setting.name} (from {source}): expected an integer, got {text!r}") from None
    if setting.kind is float:
        try:
            return float(text.strip())
        except ValueError:
            raise ConfigError(f"setting {setting.name} (from {source}): expected a number, got {text!r}") from None
    return text


def _from_toml(setting: Setting, value: Any, source: str) -> Any:
    """A value from the TOML file, which must already have the setting's type (no quoting numbers)."""
    wanted = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[setting.kind]
    ok = (
        isinstance(value, bool) if setting.kind is bool
        else isinstance(value, int) and not isinstance(value, bool) if setting.kind is int
        else isinstance(value, (int, float)) and not isinstance(value, bool) if setting.kind is float
        else isinstance(value, str)
    )
    if not ok:
        raise ConfigError(f"setting {setting.name} (from {source}): expected {wanted}, got {value!r}")
    return float(value) if setting.kind is float else value


def _check(setting: Setting, value: Any, source: str) -> None:
    if value is None:
        return
    where = f"setting {setting.name} (from {source})"
    if setting.kind is float and not math.isfinite(value):  # nan passes every comparison; inf is no duration
        raise ConfigError(f"{where}: must be a finite number, got {value!r}")
    if setting.choices is not None and value not in setting.choices:
        raise ConfigError(f"{where}: must be one of {', '.join(setting.choices)}, got {value!r}")
    if setting.minimum is not None and value < setting.minimum:
        raise ConfigError(f"{where}: must be at least {setting.minimum:g}, got {value!r}")
    if setting.maximum is not None and value > setting.maximum:
        raise ConfigError(f"{where}: must be at most {setting.maximum:g}, got {value!r}")
    if setting.kind is str and not value and not setting.optional:
        raise ConfigError(f"{where}: must not be empty")
    if setting.name == "space_id":
        try:
            check_space_id(value)
        except KernelError:
            raise ConfigError(f"{where}: must be 1-{SPACE_ID_LEN_MAX} characters of A-Z a-z 0-9 - _, got {value!r}") from None
    if setting.name == "admin_key" and len(value) < 16:
        raise ConfigError(f"{where}: must be at least 16 characters (it opens every space)")
    if setting.name == "etcd":
        for url in value.split(","):
            if not re.fullmatch(r"https?://[^\s/,]+/?", url.strip()):
                raise ConfigError(f"{where}: must be etcd members' client URLs (http://HOST:PORT), comma-separated, got {url.strip()!r}")
    if setting.name == "data_dir" and not value.strip():  # (an unset shell variable, say: never memory by mistake)
        raise ConfigError(f"{where}: must not be empty (leave it unset to keep the state in memory only)")
    if setting.name == "data_dir" and os.path.exists(value) and not os.path.isdir(value):  # (one that does not exist is made)
        raise ConfigError(f"{where}: {value} is not a directory")
    if setting.name == "advertise" and not re.fullmatch(r"https?://[^\s/]+/?", value):
        raise ConfigError(f"{where}: must be a URL (http://HOST:PORT) other nodes reach this one by, got {value!r}")
    if setting.name in ("cluster", "node_id") and not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", value):
        raise ConfigError(f"{where}: must be 1-64 characters of A-Z a-z 0-9 . _ -, got {value!r}")


def _read_file(path: str) -> dict[str, tuple[Any, str]]:
    """The settings a TOML file gives: name -> (value, source)."""
    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: not found") from None
    except OSError as error:
        raise ConfigError(f"config file {path}: cannot be read ({error.strerror})") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config file {path}: not valid TOML ({error})") from None
    except UnicodeDecodeError as error:  # TOML is UTF-8 (a file saved as Latin-1 or UTF-16, say)
        raise ConfigError(f"config file {path}: not valid TOML (not UTF-8 at byte offset {error.start})") from None
    found: dict[str, tuple[Any, str]] = {}
    server_names = [s.name for s in SETTINGS if not s.limit]
    limit_names = [s.name for s in SETTINGS if s.limit]
    for key, value in data.items():
        if key == "limits":
            if not isinstance(value, dict):
                raise ConfigError(f"config file {path}: 'limits' must be a table ([limits])")
            for name, limit_value in value.items():
                setting = _BY_NAME.get(name)
                if setting is None or not setting.limit:
                    raise ConfigError(f"config file {path}: unknown setting limits.{name}{_nearest(name, limit_names)}")
                source = f"{path} [limits] {name}"
                found[name] = (_from_toml(setting, limit_value, source), source)
            continue
        setting = _BY_NAME.get(key)
        if setting is None or setting.limit:
            hint = _nearest(key, server_names)
            if setting is not None:
                hint = f" (limits go in the [limits] table: limits.{key})"
            raise ConfigError(f"config file {path}: unknown setting {key}{hint}")
        found[key] = (_from_toml(setting, value, f"{path} {key}"), f"{path} {key}")
    return found


def _read_environment(environ: Mapping[str, str], warnings: list[str]) -> dict[str, tuple[Any, str]]:
    found: dict[str, tuple[Any, str]] = {}
    for variable, setting in _BY_LEGACY_ENV.items():
        # The server's old name of a setting, which clients read too: used only when the server's
        # own variable is not set, and said, since in a client's shell it is the client's value.
        text = environ.get(variable, "")
        if text and not environ.get(setting.env):
            found[setting.name] = (_from_text(setting, text, variable), variable)
            warnings.append(
                f"{variable} is taken as the server's {setting.name} (deprecated: it is the clients' variable; "
                f"set {setting.env} for the server)"
            )
    for variable, text in environ.items():
        if not variable.startswith(ENV_PREFIX) or variable in CLIENT_VARIABLES or variable in _BY_LEGACY_ENV:
            continue
        named = _BY_ENV.get(variable)
        if named is None:
            raise ConfigError(f"unknown setting in the environment: {variable}{_nearest(variable, _BY_ENV)}")
        if text == "":
            continue
        found[named.name] = (_from_text(named, text, variable), variable)
    return found


@dataclass(slots=True)
class Loaded:
    settings: Settings
    # name -> where its value came from: "default", a flag, a variable or "FILE [table] key".
    sources: dict[str, str]
    config_file: str | None
    # What the start should warn of (a deprecated variable taken).
    warnings: list[str] = field(default_factory=list)


def load(flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None, config_file: str | None = None) -> Loaded:
    """The settings from `flags` (name -> text or bool, None when not given), the environment and the file.

    The file is `config_file` (the `--config` flag), else the one `RUNSTATE_CONFIG` names, else none.
    Raises `ConfigError`.
    """
    environ = os.environ if environ is None else environ
    flags = flags or {}
    values: dict[str, Any] = {s.name: s.default for s in SETTINGS}
    sources: dict[str, str] = {s.name: "default" for s in SETTINGS}
    path = config_file or environ.get(ENV_CONFIG) or None
    layers = [_read_file(path)] if path else []
    warnings: list[str] = []
    layers.append(_read_environment(environ, warnings))
    given: dict[str, tuple[Any, str]] = {}
    for name, raw in flags.items():
        if raw is None:
            continue
        setting = _BY_NAME.get(name)
        if setting is None:
            raise ConfigError(f"unknown setting {name}{_nearest(name, _BY_NAME)}")
        flag = setting.flag or name
        given[name] = (raw if isinstance(raw, bool) else _from_text(setting, raw, flag), flag)
    layers.append(given)
    for layer in layers:  # lowest first: each later one overrides
        for name, (value, source) in layer.items():
            values[name] = value
            sources[name] = source
    for setting in SETTINGS:
        _check(setting, values[setting.name], sources[setting.name])
    for smaller, larger in _ORDERED:
        if values[smaller] > values[larger]:
            raise ConfigError(
                f"settings {smaller} = {values[smaller]} (from {sources[smaller]}) and {larger} = {values[larger]} "
                f"(from {sources[larger]}) do not fit: {smaller} must not exceed {larger}"
            )
    if values["read_timeout_s"] * 1000 <= values["wait_ms_max"]:  # a long poll's quiet would close its connection
        raise ConfigError(
            f"settings read_timeout_s = {values['read_timeout_s']} (from {sources['read_timeout_s']}) and wait_ms_max = "
            f"{values['wait_ms_max']} (from {sources['wait_ms_max']}) do not fit: a connection quiet for read_timeout_s is "
            "closed, so a long poll held wait_ms_max would lose its answer; read_timeout_s must be more than wait_ms_max / 1000"
        )
    if values["etcd"] and not values["data_dir"]:
        raise ConfigError(
            f"setting etcd (from {sources['etcd']}): a node of a cluster keeps a copy of the partitions' logs and "
            "their snapshots: give it --data-dir too"
        )
    if values["etcd"] and not values["port"] and not values["advertise"]:
        raise ConfigError(
            f"setting etcd (from {sources['etcd']}) with port 0 (from {sources['port']}): the other nodes cannot reach a port "
            "chosen at start: give --advertise (the URL they reach this node by) or a port"
        )
    if values["etcd"] and values["payload_bytes_max"] > 512 * 1024:
        raise ConfigError(
            f"setting payload_bytes_max (from {sources['payload_bytes_max']}): in a cluster a change is one etcd value "
            "of at most about 1 MiB: keep payloads at most 512 KiB"
        )
    _check_tls(values, sources)
    limits = Limits(**{s.name: values[s.name] for s in SETTINGS if s.limit})
    settings = Settings(limits=limits, **{s.name: values[s.name] for s in SETTINGS if not s.limit})
    return Loaded(settings, sources, path, warnings)


def _check_tls(values: dict[str, Any], sources: dict[str, str]) -> None:
    """certfile and keyfile come together and load as a pair, or the start stops here (exit 2)
    rather than at the first connection."""
    certfile, keyfile = values["certfile"], values["keyfile"]
    if certfile is None and keyfile is None:
        return
    if certfile is None or keyfile is None:
        given, missing = ("certfile", "keyfile") if certfile is not None else ("keyfile", "certfile")
        raise ConfigError(f"setting {given} (from {sources[given]}) needs {missing} too: TLS takes a certificate and its key")
    for name in ("certfile", "keyfile"):  # (ssl names neither the missing file nor which one it was)
        try:
            with open(values[name], "rb"):
                pass
        except FileNotFoundError:
            raise ConfigError(f"setting {name} (from {sources[name]}): {values[name]} not found") from None
        except OSError as error:
            raise ConfigError(f"setting {name} (from {sources[name]}): {values[name]} cannot be read ({error.strerror})") from None
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(
            f"settings certfile {certfile} and keyfile {keyfile} (from {sources['certfile']}, {sources['keyfile']}) "
            f"do not load as a certificate and its key: {error}"
        ) from None


def value_of(settings: Settings, setting: Setting) -> Any:
    return getattr(settings.limits if setting.limit else settings, setting.name)


def describe(loaded: Loaded) -> list[dict[str, Any]]:
    """Every setting with its value (secrets masked) and source, for `runstate config`."""
    rows = []
    for setting in SETTINGS:
        value = value_of(loaded.settings, setting)
        if setting.secret and value is not None:
            value = "(set)"
        rows.append({"name": setting.toml, "value": value, "source": loaded.sources[setting.name]})
    return rows


def markdown_table() -> str:
    """The settings table of docs/configuration.md (`python -m runstate.server.config` prints it)."""
    lines = ["| Flag | Variable | TOML | Default | Meaning |", "|---|---|---|---|---|"]
    for setting in SETTINGS:
        flag = f"`{setting.flag}`" if setting.flag else "none (secret)"
        extra = f" One of {', '.join(setting.choices)}." if setting.choices else ""
        lines.append(f"| {flag} | `{setting.env}` | `{setting.toml}` | `{setting.describe_default()}` | {setting.doc}{extra} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
