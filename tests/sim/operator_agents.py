"""The simulated operator: forced claim releases, dead letters and purges, and their invariants.

The operator goes through the SDK (`claim.force_release`, `rs.mailboxes.dead_letters` and the
rest) over the simulation's transport, with crashes and lost replies like every other agent. What
it sent may have been applied even when no answer came back, so a claim it tries to force free counts as let go from the moment the request is sent;
what it was told is checked against the other agents' view:

- **one-holder** and **generations** (the oracle's): after a forced release the next holder's
  lease starts after it was sent and has a greater generation;
- **stale-token**: once a forced release is acknowledged, the old holder's token is refused for
  renewals, releases and completions (the oracle's `stale_for_certain`), and no renewal of it made
  after that is answered;
- **dead-letters**: a scan of a mailbox's dead letters, page after page, shows only dead letters
  of that mailbox, newest first, none twice; a requeue never puts a task's dead letter back (its
  FAILED outcome stands: the oracle's one-outcome); what a requeue made is a new message that
  recovery keeps (durability), and what an acknowledged requeue or delete took away never comes
  back, across crashes too.

In the mailbox where the other agents' plain messages are (whose existence the oracle checks
after every recovery) it names dead letters by id, from a scan; in the one that holds only
tasks' messages it uses filters and `all`.
"""

from __future__ import annotations

import random
from typing import Any

import trio

from .agents import World
from .cluster import now_ms

__all__ = ["operator"]


async def operator(world: World, name: str) -> None:
    """Now and then, forces free a claim that some agent holds right now, or acts on dead letters."""
    rng = world.rng(name)
    rs = world.client(name)
    await world.ready.wait()
    while world.running:
        await trio.sleep(rng.expovariate(1 / 8))
        choice = rng.random()
        if choice < 0.5:
            await force_release(world, name, rs, rng)
        elif choice < 0.9:
            await dead_letters(world, name, rs, rng)
        else:
            await purge(world, name, rs, rng)
    await rs.aclose()


async def force_release(world: World, name: str, rs: Any, rng: random.Random) -> None:
    """Force free a claim that some agent holds right now."""
    oracle = world.oracle
    now = now_ms()
    held = sorted(
        (lease for subject, leases in oracle.leases.items() if subject[0] == "claim" for lease in leases
         if lease.released_ms is None and lease.forced_ms is None and lease.end_ms > now),
        key=lambda lease: (lease.start_ms, lease.token),
    )
    if not held:
        return
    lease = rng.choice(held)
    _, scope_id, key = lease.subject
    oracle.forcing(lease.subject, lease.generation, now)
    claim = rs.scope(scope_id).claim(key)
    ok, view = await world.call(name, f"force-release {key}", lambda: claim.force_release(f"{name} frees {lease.owner}'s claim"))
    if not ok:
        return
    world.log(name, f"forced {key} in {scope_id[-4:]} free from {view['holder']} g{view['generation']}")
    oracle.forced(lease.subject, view["generation"], now_ms())

async def scan(world: World, name: str, rs: Any, mailbox_id: str, rng: random.Random) -> list[dict] | None:
    """Every dead letter of the mailbox, page by page (small pages), checked; None if a page failed."""
    oracle = world.oracle
    seen: dict[str, dict] = {}
    cursor = None
    while True:
        limit = rng.choice([1, 2, 5])
        ok, page = await world.call(name, "dead letters", lambda: rs.mailboxes.dead_letters(mailbox_id, limit=limit, cursor=cursor))
        if not ok:
            return None
        oracle.checks += 1
        for letter in page["deadLetters"]:
            if letter["state"] != "DEAD" or letter["mailboxId"] != mailbox_id:
                oracle.fail("dead-letters", f"a scan of {mailbox_id} listed {letter['id']} ({letter['state']}, {letter['mailboxId']})")
            if letter["id"] in seen:
                oracle.fail("dead-letters", f"a scan of {mailbox_id} listed {letter['id']} twice")
            if letter["id"] in oracle.gone:
                oracle.fail("dead-letters", f"{letter['id']} is listed after its requeue or delete was acknowledged")
            seen[letter["id"]] = letter
        cursor = page["nextCursor"]
        if cursor is None:
            return list(seen.values())


async def dead_letters(world: World, name: str, rs: Any, rng: random.Random) -> None:
    oracle = world.oracle
    box = rng.choice(["work", "fragile"])
    mailbox_id = world.mailboxes[box]
    letters = await scan(world, name, rs, mailbox_id, rng)
    if letters is None:
        return
    action = rng.choice(["requeue", "delete"])
    dry_run = rng.random() < 0.2
    if box == "work":  # by id: the oracle may have been told of these messages
        if not letters:
            return
        ids = [letter["id"] for letter in rng.sample(letters, min(len(letters), rng.randint(1, 3)))]
        which: dict[str, Any] = {"message_ids": ids}
    else:
        ids = None
        which = rng.choice([{"all": True}, {"reason": "attempts_exhausted"}, {"older_than_s": 5}, {"newer_than_s": 30}])
    if not dry_run and ids is not None:
        oracle.maybe_gone.update(ids)
    act = rs.mailboxes.requeue_dead_letters if action == "requeue" else rs.mailboxes.delete_dead_letters
    ok, answer = await world.call(name, f"{action} dead letters of {box}", lambda: act(mailbox_id, dry_run=dry_run, **which))
    if not ok:
        return
    oracle.checks += 1
    if action == "requeue":
        if box == "fragile" and answer["requeued"]:
            oracle.fail("dead-letters", f"a requeue put back {answer['requeued']} of a mailbox that holds only tasks' dead letters")
        world.log(name, f"requeued {answer['requeued']} of {answer['matched']} in {box}{' (dry run)' if dry_run else ''}")
        if not dry_run:
            oracle.gone.update(answer["requeuedAs"])
            oracle.messages.update(answer["requeuedAs"].values())
            # A requeued letter stays in its run: it may leave with it (invariant 7).
            runs = {letter["id"]: letter["scopeId"] for letter in letters}
            for old, new in answer["requeuedAs"].items():
                scope_id = runs.get(old) or oracle.message_scopes.get(old)
                if scope_id is not None:
                    oracle.message_scopes[new] = scope_id
    else:
        world.log(name, f"deleted {answer['deleted']} of {answer['matched']} in {box}{' (dry run)' if dry_run else ''}")
        if not dry_run:
            oracle.gone.update(answer["deletedIds"])


async def purge(world: World, name: str, rs: Any, rng: random.Random) -> None:
    """Purge one run's waiting messages of a mailbox: its tasks end CANCELLED (the oracle's
    one-outcome holds them there), deliveries under way go on (one-holder)."""
    box, scope_id = rng.choice(["work", "fragile"]), rng.choice(world.scopes)
    dry_run = rng.random() < 0.3
    purge_it = lambda: rs.mailboxes.purge(world.mailboxes[box], scope_id=scope_id, reason=f"{name} drains it", dry_run=dry_run)  # noqa: E731
    ok, answer = await world.call(name, f"purge {box}", purge_it)
    if ok:
        world.log(name, f"purged {answer['purged']} of {box} in {scope_id[-4:]}{' (dry run)' if answer['dryRun'] else ''}")
