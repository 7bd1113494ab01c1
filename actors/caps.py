"""The caps of a space: how much its callers can make it hold, and the refusal past one.

Each table counts what it holds as it applies records (`ScopeTree.live`, `ClaimTable` held
tokens and keys, `TaskTable.live`, the payload bytes of `MessageTable`, `TaskTable` and
`OnceTable`, and the tables' sizes), so replay and a snapshot's image rebuild the counts exactly
and a check costs a few additions. A command that would go past a cap is refused with
`BACKLOG_FULL` (409, with Retry-After) before any record is decided: a refusal writes nothing.
The message names the setting and how to raise it, spelled as `runstate serve` spells settings
(`--space-scopes-max`, `RUNSTATE_SPACE_SCOPES_MAX`). Every cap on how many of a kind a space, a
run, a pool, an allowance, a task or a group holds (`mailboxes_max`, `pools_max`,
`allowances_max`, `budgets_max`, `work_limits_max`, `barriers_max`, `groups_max`,
`timers_per_scope_max`, `waiters_max`, `subscribers_max`, `group_members_max`) is refused in this
one shape, by `full`.

What counts, per space:
- `space_scopes_max`: scopes not ended (a scope under an ended one has ended with it);
- `space_claims_max`: claims held (a key released or expired is free, though its generation is
  remembered until its scope ends);
- `space_tasks_max`: tasks not ended (QUEUED or RUNNING); a finished task is bounded by its
  result's bytes (and its input's, when kept beside it) while it keeps its outcome, and by nothing
  once tombstoned (a tombstone keeps the id, key, state and reason so that the key keeps
  returning the task);
- `space_payload_bytes_max`: bytes of JSON of the values kept: message payloads and task inputs
  while their message is not settled, dead letters' payloads until retention forgets them, task
  outcomes until tombstoned and a succeeded task's input beside its outcome (kept only when its
  completion found room for both: otherwise the input is let go then, and a completion whose
  result is no larger than its input still passes), and once results (kept until their run is removed); and the stored idempotent answers,
  which take the room the values leave (`idempotency.py`: the oldest go first to make room for a
  new one, and a value is never refused for their sake). Not counted: release observations
  (journaled; a claim release's event keeps one of at most `OBSERVATION_EVENT_BYTES_MAX` while
  the event log keeps the event, so they are bounded by `events_kept_max`).
- `space_entities_max`: every entity kept, live or ended: runs (ended ones until their retention,
  `runs.py`, with what they kept),
  claim keys (a released key keeps its generation until its run ends), messages (unsettled, and
  settled ones until retention forgets them), tasks (tombstones included), the waiters of pools
  and allowances (waiting, and the newest ended ones), and the stored idempotent answers, which
  take the room the others leave as they do for bytes;
- `backlog_limit_max`: per mailbox, unsettled messages of a mailbox that sets no `backlogLimit`
  (one that does may only set less, see `CreateMailbox`).

Pure: no IO, no clock reads.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from .errors import BACKLOG_FULL, KernelError
from .outcome import Space
from .shapes import View

__all__ = ["full", "value_bytes", "check_bytes", "view", "held", "CapView", "RETRY_AFTER_S", "SPACE_CAPS"]

# What a refused caller is told to wait before trying again: something else must end first.
RETRY_AFTER_S = 1.0


# The caps of a whole space, by setting (a mailbox's backlog is on the mailbox's own view).
SPACE_CAPS = ("space_scopes_max", "space_claims_max", "space_tasks_max", "space_payload_bytes_max", "space_entities_max")


class CapView(NamedTuple):
    """One cap of a space: its setting, what the space holds against it, and its limit."""

    setting: str
    held: int
    limit: int


def held(space: Space) -> tuple[CapView, ...]:
    """For each cap, what the space holds and its limit (`SpaceState`, duck-typed)."""
    counts = {
        "space_scopes_max": space.scopes.live,
        "space_claims_max": space.claims.held_count,
        "space_tasks_max": space.tasks.live,
        "space_payload_bytes_max": space.values_bytes() + space.idempotency.bytes,
        "space_entities_max": space.entities() + len(space.idempotency),
    }
    limits = space.limits
    return tuple(CapView(name, counts[name], getattr(limits, name)) for name in SPACE_CAPS)


def view(space: Space) -> View:
    """How full a space is, as the metrics and the console read it: `{"spaceId", "caps": [{"setting", "held", "limit"}]}`."""
    return {"spaceId": space.id, "caps": [cap._asdict() for cap in held(space)]}


def value_bytes(value: Any) -> int:
    """The bytes a kept caller value is counted for: its JSON; nothing for an absent one (None)."""
    return 0 if value is None else len(orjson.dumps(value))


def setting_spelling(setting: str) -> str:
    """How an operator raises `setting`: its flag and its variable (as `server/config.py` derives them)."""
    return f"--{setting.replace('_', '-')} / RUNSTATE_{setting.upper()}"


def full(holding: str, setting: str) -> KernelError:
    """The refusal at a cap: what the space holds, and the setting that bounds it."""
    return KernelError(
        BACKLOG_FULL,
        f"{holding} (limit {setting}; raise it with {setting_spelling(setting)})",
        retry_after_s=RETRY_AFTER_S,
    )


def check_bytes(held: int, adding: int, freeing: int, limit: int) -> None:
    """Refuse a change that keeps `adding` bytes more and lets `freeing` go, if it ends past `limit`.

    A change that keeps no more than it lets go always passes, so a full space can still settle
    its work (a completion whose result is no larger than its task's input).
    """
    if adding > freeing and held - freeing + adding > limit:
        raise full(
            f"space holds {held} bytes of payloads, inputs and results and this needs {adding - freeing} more",
            "space_payload_bytes_max",
        )
