"""Simulated users of barriers, timers, task groups and the event log, with their invariants.

Each agent goes through the SDK (and, for raw listings, its request layer) over the simulation's
transport, with crashes and lost replies like every other agent. What an agent *sent* is what the
server may have applied (a reply can be lost after the change was made), so the invariants are
phrased against what was sent, and against what was acknowledged:

- **barrier-release**: a barrier seen RELEASED had at least `target` distinct arrival keys sent
  to it before, and no view counts more arrivals than distinct keys were sent.
- **timer-early**: no timer is seen fired before its `fireAt`.
- **timer-once**: a timer seen fired (its poll answered once durable) always shows the same
  `firedAt` and token, across crashes too.
- **group-outcome**: a group's outcome follows its condition: `threshold_reached` only with at
  least the needed accepts sent; `threshold_unreachable` only after a close was sent and with
  fewer accepts sent than needed; no agent sends two verdicts on one member.
- **named-once**: a put by name (`PUT /timers/by-name/{name}`, `/barriers/by-name/{name}`) of one
  (scope, name) answers one timer or barrier of that scope, the same one every time it is
  answered, with the same `fireAt` or `target`, across crashes too.
- **event-log**: a reader that pages the log from a cursor sees event numbers strictly one after
  another (no gap, no repeat), and an event number always names the same event, across crashes.
"""

from __future__ import annotations

import weakref
from typing import Any

import trio

from .agents import World, wall_ms

__all__ = ["COORDINATION_AGENTS", "COORDINATION_INVARIANTS"]

COORDINATION_INVARIANTS = ("barrier-release", "timer-early", "timer-once", "group-outcome", "event-log", "named-once")


# What each (kind, scope, name) was first answered as, per simulated world.
_NAMED: "weakref.WeakKeyDictionary[World, dict[tuple, tuple]]" = weakref.WeakKeyDictionary()


def check_named(world: World, kind: str, scope_id: str, name: str, view: dict, fixed: str) -> None:
    """The named-once invariant for one answer of a put by name (`fixed`: what never changes)."""
    oracle = world.oracle
    oracle.checks += 1
    answered = _NAMED.setdefault(world, {}).setdefault((kind, scope_id, name), (view["id"], view[fixed]))
    if view["scopeId"] != scope_id:
        oracle.fail("named-once", f"{kind} {name!r} of scope {scope_id} answered {view['id']} of scope {view['scopeId']}")
    if answered != (view["id"], view[fixed]):
        oracle.fail("named-once", f"{kind} {name!r} of scope {scope_id} was {answered}, now {(view['id'], view[fixed])}")


async def barrier_agent(world: World, name: str) -> None:
    """Creates barriers of target 2-4 and arrives at them with keys from a small pool (repeats
    included), reading them in between."""
    rng, oracle = world.rng(name), world.oracle
    rs = world.client(name)
    sent: dict[str, set[str]] = {}  # barrier id -> keys sent to it
    targets: dict[str, int] = {}
    await world.ready.wait()
    while world.running:
        await trio.sleep(rng.expovariate(1 / 1.5))
        if rng.random() < 0.15:  # by name (as 0.3.0's together): a name's target is fixed, 2-4
            scope_id, number = rng.choice(world.scopes), rng.randint(0, 2)
            body = {"scopeId": scope_id, "target": 2 + number}
            ok, reply = await world.call(name, f"barrier b{number}", lambda: rs._ctx.call("PUT", f"/barriers/by-name/b{number}", body=body))
            if ok:
                check_named(world, "barrier", scope_id, f"b{number}", reply.body, "target")
                targets.setdefault(reply.body["id"], 2 + number)
                sent.setdefault(reply.body["id"], set())
            continue
        if not targets or rng.random() < 0.2:
            scope_id = rng.choice(world.scopes)
            target = rng.randint(2, 4)
            ok, barrier = await world.call(name, "create barrier", lambda: rs.scope(scope_id).barriers.create(target=target))
            if ok:
                targets[barrier.id] = target
                sent[barrier.id] = set()
                world.log(name, f"barrier {barrier.id} target {target}")
            continue
        barrier_id = rng.choice(sorted(targets))
        handle = rs.scope(world.scopes[0]).barriers.get(barrier_id)
        if rng.random() < 0.6:
            key = f"a{rng.randint(0, 5)}"
            sent[barrier_id].add(key)
            ok, view = await world.call(name, f"arrive {key}", lambda: handle.arrive(key=key))
        else:
            ok, view = await world.call(name, "barrier status", handle.status)
        if ok:
            oracle.checks += 1
            keys = len(sent[barrier_id])
            if view["arrived"] > keys:
                oracle.fail("barrier-release", f"barrier {barrier_id} counts {view['arrived']} arrivals, {keys} distinct keys were sent")
            if view["state"] == "RELEASED" and keys < targets[barrier_id]:
                oracle.fail("barrier-release", f"barrier {barrier_id} released with {keys} distinct keys sent, target {targets[barrier_id]}")


async def timer_agent(world: World, name: str) -> None:
    """Arms timers of 0-20 s and polls for them (held polls and plain ones), acking some."""
    rng, oracle = world.rng(name), world.oracle
    rs = world.client(name)
    fired: dict[str, tuple[str, str]] = {}  # timer id -> (firedAt, token) first seen
    fire_at: dict[str, int] = {}
    scopes: dict[str, str] = {}
    await world.ready.wait()
    while world.running:
        await trio.sleep(rng.expovariate(1 / 1.0))
        if rng.random() < 0.15:  # by name (as 0.3.0's sleep): answered as it is, whatever is sent
            scope_id, number, after = rng.choice(world.scopes), rng.randint(0, 2), rng.randint(0, 20)
            body = {"scopeId": scope_id, "afterSeconds": after}
            ok, reply = await world.call(name, f"timer t{number}", lambda: rs._ctx.call("PUT", f"/timers/by-name/t{number}", body=body))
            if ok:
                check_named(world, "timer", scope_id, f"t{number}", reply.body, "fireAt")
                fire_at.setdefault(reply.body["id"], wall_ms(reply.body["fireAt"]))
                scopes.setdefault(reply.body["id"], scope_id)
            continue
        if len(fire_at) < 3 or rng.random() < 0.3:
            scope_id = rng.choice(world.scopes)
            after = rng.randint(0, 20)
            ok, timer = await world.call(name, "create timer", lambda: rs.scope(scope_id).timers.create(after_seconds=after))
            if ok:
                fire_at[timer.id] = round(timer.fire_at.timestamp() * 1000)
                scopes[timer.id] = scope_id
                world.log(name, f"timer {timer.id} in {after} s")
            continue
        timer_id = rng.choice(sorted(fire_at))
        body: dict[str, Any] = {"scopeId": scopes[timer_id]}
        if rng.random() < 0.5:
            body.update(timerId=timer_id, waitMs=rng.choice([0, 2_000, 8_000]))
        ok, reply = await world.call(name, "poll timers", lambda: rs._ctx.call("POST", "/timers/poll", body=body, wait_ms=body.get("waitMs", 0)))
        if not ok:
            continue
        for entry in reply.body["timers"]:
            oracle.checks += 1
            entry_id, fired_ms = entry["id"], wall_ms(entry["firedAt"])
            if fired_ms < wall_ms(entry["fireAt"]):
                oracle.fail("timer-early", f"timer {entry_id} fired at {entry['firedAt']}, before its time {entry['fireAt']}")
            seen = (entry["firedAt"], entry["token"])
            first = fired.setdefault(entry_id, seen)
            if first != seen:
                oracle.fail("timer-once", f"timer {entry_id} fired at {first[0]} and again at {seen[0]}")
            if entry_id in fire_at and rng.random() < 0.5:
                token = entry["token"]
                await world.call(name, "ack timer", lambda: rs._ctx.call("POST", f"/timers/{entry_id}/ack", body={"token": token}))


async def group_agent(world: World, name: str) -> None:
    """Creates N_ACCEPTED and FIRST_ACCEPTED groups, submits members, gives each member at most one
    verdict, closes some, and checks the outcome it reads against what it sent."""
    rng, oracle = world.rng(name), world.oracle
    rs = world.client(name)
    await world.ready.wait()
    while world.running:
        await trio.sleep(rng.expovariate(1 / 3.0))
        condition = rng.choice(["N_ACCEPTED", "FIRST_ACCEPTED"])
        needed = rng.randint(1, 3) if condition == "N_ACCEPTED" else 1
        threshold = needed if condition == "N_ACCEPTED" else None
        parent = rng.choice(world.scopes)
        ok, group = await world.call(
            name, "create group",
            lambda: rs.scope(parent).groups.create(mailbox="work", condition=condition, threshold=threshold, parent_scope_id=parent),
        )
        if not ok:
            continue
        world.log(name, f"group {group.id} {condition} needs {needed}")
        members: list[str] = []
        for number in range(rng.randint(1, 4)):
            ok, ticket = await world.call(name, "submit member", lambda: group.submit({"n": number}, key=f"m{number}"))
            if ok:
                members.append(ticket.id)
        accepts, closed = 0, False
        for task_id in members:
            if rng.random() < 0.3:
                continue
            accept = rng.random() < 0.5
            accepts += accept
            await world.call(name, "verdict", (lambda: group.accept(task_id)) if accept else (lambda: group.reject(task_id)))
        if rng.random() < 0.7:
            closed = True
            await world.call(name, "close group", group.close)
        ok, view = await world.call(name, "group status", group.status)
        if not ok:
            continue
        oracle.checks += 1
        reason = view.get("outcomeReason")
        if reason == "threshold_reached" and accepts < needed:
            oracle.fail("group-outcome", f"group {group.id} reached its threshold {needed} with {accepts} accepts sent")
        if reason == "threshold_unreachable" and (not closed or accepts >= needed):
            oracle.fail("group-outcome", f"group {group.id} unreachable with {accepts} of {needed} accepts sent, closed {closed}")
        if view["state"] == "FINALIZED" and reason not in ("threshold_reached", "threshold_unreachable", "scope_cancelled", "scope_completed", "scope_expired"):
            oracle.fail("group-outcome", f"group {group.id} finalized with reason {reason!r}")
        if view["state"] != "FINALIZED" and accepts >= needed and len(view["members"]) == len(members):
            # every accept was sent and answered or lost; a lost one may not have been applied
            world.log(name, f"group {group.id} not finalized after {accepts} accepts sent")


async def event_reader(world: World, name: str) -> None:
    """Pages the event log from a cursor: numbers one after another, each always the same event."""
    rng, oracle = world.rng(name), world.oracle
    rs = world.client(name)
    known: dict[str, tuple] = {}
    cursor: str | None = None
    await world.ready.wait()
    while world.running:
        await trio.sleep(rng.expovariate(1 / 2.0))
        ok, page = await world.call(name, "events", lambda: rs.events.list(cursor=cursor, limit=rng.choice([5, 50, 500])))
        if not ok:
            if page.code == "CURSOR_EXPIRED":
                cursor = None
            continue
        expected = None if cursor is None else int(cursor) + 1
        for event in page["events"]:
            oracle.checks += 1
            number = int(event["eventId"].split("_")[1])
            if expected is not None and number != expected:
                oracle.fail("event-log", f"after cursor {cursor} the reader got event {number}, expected {expected}")
            expected = number + 1
            what = (event["type"], event["aggregate"]["type"], event["aggregate"]["id"], event["createdAt"])
            if known.setdefault(event["eventId"], what) != what:
                oracle.fail("event-log", f"event {event['eventId']} was {known[event['eventId']]}, now {what}")
        if page["events"] and int(page["nextCursor"]) != expected - 1:
            oracle.fail("event-log", f"nextCursor {page['nextCursor']} after event {expected - 1}")
        cursor = page["nextCursor"]


COORDINATION_AGENTS = {
    "barrier": barrier_agent,
    "timer": timer_agent,
    "group": group_agent,
    "events": event_reader,
}
