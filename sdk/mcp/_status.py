"""The `status` tool and the run's status resource: the run as the console's run page shows it.

The console reads the kernel in-process (`server/console/views`); a client reads the same facts
through the SDK's reads, six at once:

- `run.status()`: the run's state, deadline, when it was made and ended;
- `rs.diagnostics.run(id)` (`/ops/runs`): who holds what (holders with their keys and earliest
  lease end), who waits in a pool's line, the calls parked on a queue (takes waiting for work) and
  on a claim (acquires waiting for the key, with who waits), counts by state;
- `run.claims()`: every claim held, by whom, at which generation, until when;
- `run.tasks()`: the tasks, newest first: those not ended are listed with their queue and, when
  one is being worked on, its worker;
- `rs.mailboxes.list()`: the queues' names;
- `rs.events.list(latest=N)`: the space's newest events, of which this run's are shown (what just
  happened: a claim that expired from a dead holder, a task requeued).

A claim this session waits for is also known from its own side: a server that does not hold
waiting acquires (the SDK then tries again every ~0.3 s) parks none to read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from ._session import LIST_MAX, LIST_READ_MAX

if TYPE_CHECKING:
    from ._session import HolderSession

__all__ = ["run_status", "EVENTS_READ_MAX"]

# The space's newest events read; this run's among them are shown, at most EVENTS_SHOWN_MAX.
EVENTS_READ_MAX = 200
EVENTS_SHOWN_MAX = 10


async def run_status(session: HolderSession) -> dict[str, Any]:
    run = await session.run()
    rs = session.rs
    reads: dict[str, Any] = {}

    async def read(name: str, call: Any) -> None:
        reads[name] = await call

    async with anyio.create_task_group() as group:
        group.start_soon(read, "run", run.status())
        group.start_soon(read, "ops", rs.diagnostics.run(run.id))
        group.start_soon(read, "claims", run.claims(limit=LIST_READ_MAX))
        group.start_soon(read, "tasks", run.tasks(limit=LIST_READ_MAX))
        group.start_soon(read, "queues", rs.mailboxes.list())
        group.start_soon(read, "events", rs.events.list(latest=EVENTS_READ_MAX))
    return _compose(session, reads)


def _compose(session: HolderSession, reads: dict[str, Any]) -> dict[str, Any]:
    scope, ops = reads["run"], reads["ops"]
    queues = {row["id"]: row["name"] for row in reads["queues"]}
    holders = [
        {"holder": row["holder"], "holds": row["keys"][:LIST_MAX], "earliest_lease_end": row["earliestLeaseExpiry"]}
        for row in ops["workers"][:LIST_MAX]
    ]
    waiters = {row["key"]: row for row in ops.get("parked", []) if row.get("on") == "claim" and "key" in row}
    claims = []
    for row in reads["claims"]["claims"]:
        claim = {"key": row["key"], "held_by": row["holder"], "generation": row["generation"],
                 "lease_ends_at": row["leaseExpiresAt"], "acquired_at": row["acquiredAt"]}
        if row["key"] in waiters:
            claim["waiting"] = waiters[row["key"]].get("holders", [])[:LIST_MAX]
        claims.append(claim)
    tasks = _tasks(reads["tasks"]["tasks"], ops["workers"], queues)
    waiting = _waiting(session, ops, queues, claims, waiters)
    answer: dict[str, Any] = {
        "run": {
            "name": scope.get("name") or session.run_name, "id": scope["id"], "state": scope["effective"],
            "deadline": scope.get("deadline"), "created_at": scope.get("createdAt"), "ended_at": scope.get("endedAt"),
        },
        "you": {"holder": session.holder, "claims": sorted(session.claims), "tasks": sorted(session.work.taken)},
        "holders": holders,
        "claims": claims[:LIST_MAX],
        "tasks": tasks,
        "waiting": waiting,
        "recent_events": _events(reads["events"]["events"], scope["id"], queues),
    }
    if len(claims) > LIST_MAX or reads["claims"].get("truncated"):
        answer["claims_not_shown"] = len(claims) - LIST_MAX if len(claims) > LIST_MAX else f"more than {LIST_READ_MAX} in all"
    held = f"More than {LIST_READ_MAX}" if reads["claims"].get("truncated") else str(len(claims))
    answer["summary"] = _summary(answer, len(ops["workers"]), held)
    return answer


def _tasks(rows: list[dict[str, Any]], workers: list[dict[str, Any]], queues: dict[str, str]) -> dict[str, Any]:
    """Counts by state, and the tasks not ended: running ones with their worker, waiting ones."""
    by_message = {message: row["holder"] for row in workers for message in row.get("deliveries", [])}
    counts: dict[str, int] = {}
    running, queued = [], []
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
        entry = {"task": row["id"], "key": row["taskKey"], "queue": queues.get(row["mailboxId"], row["mailboxId"]),
                 "attempt": row["attempt"]}
        if row["state"] == "RUNNING":
            running.append({**entry, "worker": by_message.get(row.get("messageId") or "")})
        elif row["state"] == "QUEUED":
            queued.append(entry)
    running.reverse()  # oldest first: the order they are worked on and waited for
    queued.reverse()
    return {"counts": dict(sorted(counts.items())), "running": running[:LIST_MAX], "queued": queued[:LIST_MAX]}


def _waiting(
    session: HolderSession, ops: dict[str, Any], queues: dict[str, str], claims: list[dict[str, Any]],
    waiters: dict[str, dict[str, Any]],
) -> list[str]:
    """What waits in the run and why, in words."""
    said = []
    held = {row["key"]: row for row in claims}
    for key in sorted(set(session.waiting) | set(waiters)):
        claim = held.get(key)
        why = f"held by {claim['held_by']} until {claim['lease_ends_at']} unless renewed" if claim else "free now"
        parked, mine = waiters.get(key), session.waiting.get(key)
        names = ", ".join(str(name) for name in parked.get("holders", [])[:LIST_MAX]) if parked else ""
        if mine and parked:
            said.append(f"you wait for claim {key} ({mine} of your calls; {parked['calls']} in all: {names}, "
                        f"oldest first): {why}")
        elif mine:
            said.append(f"you wait for claim {key} ({mine} call(s)): {why}")
        elif parked:
            said.append(f"{parked['calls']} call(s) wait for claim {key} ({names}, oldest first): {why}")
    for row in ops.get("parked", []):
        if row.get("on") == "queue":
            name = queues.get(row.get("mailboxId", ""), row.get("mailboxId"))
            said.append(f"{row['calls']} take(s) wait for work on queue {name}: it has none they can take now")
    for row in ops.get("waiting", []):
        said.append(f"{row['holder']} waits for {row['units']} unit(s) of pool {row['permit']} since {row['since']}: "
                    "the pool is full")
    delayed = ops["counts"].get("messages", {}).get("DELAYED", 0)
    if delayed:
        said.append(f"{delayed} task(s) wait out a retry backoff after a failed attempt")
    return said[:LIST_MAX]


def _events(rows: list[dict[str, Any]], run_id: str, queues: dict[str, str]) -> list[dict[str, Any]]:
    """This run's newest events, oldest first, in the words of the answers (a queue by name)."""
    shown = []
    for row in [row for row in rows if row.get("scopeId") == run_id][-EVENTS_SHOWN_MAX:]:
        event = {"at": row["createdAt"], "type": row["type"], "on": (row.get("aggregate") or {}).get("id")}
        for field, value in (row.get("payload") or {}).items():
            if field == "mailboxId":
                event["queue"] = queues.get(value, value)
            elif field != "messageId":
                event[field] = value
        shown.append(event)
    return shown


def _summary(answer: dict[str, Any], holders_count: int, claims_held: str) -> str:
    """One line: the run's state, who holds something, how many claims are held (all of them,
    not only the rows shown), tasks by state, how many things wait."""
    run = answer["run"]
    tasks = answer["tasks"]["counts"]
    parts = [f"Run {run['name']} is {run['state'].lower()}."]
    holders = answer["holders"]
    parts.append(f"{holders_count} holder(s) hold something" + (f" ({', '.join(h['holder'] for h in holders[:5])})" if holders else "") + ".")
    parts.append(f"{claims_held} claim(s) held.")
    if tasks:
        parts.append("Tasks: " + ", ".join(f"{state.lower()} {n}" for state, n in tasks.items()) + ".")
    parts.append(f"{len(answer['waiting'])} thing(s) wait." if answer["waiting"] else "Nothing waits.")
    return " ".join(parts)
