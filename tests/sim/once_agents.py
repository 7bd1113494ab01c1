"""Simulated callers of once (`POST /once/acquire`, `/once/renew`, `/once/complete`, `/once/fail`,
`/once/release`, `GET /once`), as the 0.3.0 client's `@once` drives them (and ours, which gives a
key back unused when its caller was cancelled as it acquired), with their invariant:

- **once-result**: a key has at most one result and it never changes. Every DONE answer shows a
  result that some holder of that key sent; once a completion is acknowledged, every later answer
  for the key is DONE with that result, across crashes too; a key whose failure was acknowledged
  as FAILED never shows anything else.
- **dirty-read**: what any answer showed (a read included) is never taken back: once a key was
  shown DONE with a result, every later answer shows that result, across crashes too.

The holders' leases are checked like claims' (the attempt number is the generation): one holder
at a time, attempt numbers that grow, and a completion or failure with the token of a holder that
is certainly no longer current is refused (a release too). A released key is OPEN again.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import orjson
import trio

from .agents import World, wall_ms
from .cluster import now_ms

__all__ = ["once_agent", "ONCE_INVARIANTS"]

ONCE_INVARIANTS = ("once-result",)
KEYS = 4
MAX_ATTEMPTS = 3


@dataclass
class _Key:
    sent: set[bytes] = field(default_factory=set)  # results sent in completions (as JSON)
    acked: bytes | None = None  # the result whose completion was acknowledged
    shown: bytes | None = None  # the result an answer (any answer, a read too) showed
    failed: bool = False  # a failure answered FAILED was acknowledged


_BOOKS: "weakref.WeakKeyDictionary[World, dict[tuple[str, str], _Key]]" = weakref.WeakKeyDictionary()


def _book(world: World, scope_id: str, key: str) -> _Key:
    return _BOOKS.setdefault(world, {}).setdefault((scope_id, key), _Key())


def observe(world: World, scope_id: str, key: str, view: dict, what: str) -> None:
    """The once-result invariant for one answer about (scope, key)."""
    oracle = world.oracle
    oracle.checks += 1
    book = _book(world, scope_id, key)
    state = view.get("state")
    name = f"once key {key} of {scope_id[-4:]} ({what})"
    if state == "DONE":
        result = orjson.dumps(view.get("result"))
        if result not in book.sent:
            oracle.fail("once-result", f"{name} shows result {result.decode()}, which no holder sent")
        if book.acked is not None and result != book.acked:
            oracle.fail("once-result", f"{name} shows result {result.decode()}, its acknowledged one is {book.acked.decode()}")
        if book.failed:
            oracle.fail("once-result", f"{name} shows DONE after its failure was acknowledged")
        if book.shown is not None and result != book.shown:
            oracle.fail("dirty-read", f"{name} shows result {result.decode()}, an answer showed {book.shown.decode()}")
        book.shown = result
    elif book.acked is not None:
        oracle.fail("once-result", f"{name} shows {state} after its result {book.acked.decode()} was acknowledged")
    elif book.shown is not None:
        oracle.fail("dirty-read", f"{name} shows {state} after an answer showed it DONE with {book.shown.decode()}")
    elif book.failed and state != "FAILED":
        oracle.fail("once-result", f"{name} shows {state} after it was acknowledged FAILED")


async def once_agent(world: World, name: str) -> None:
    """Runs once keys: holds and completes, fails (3 attempts), gives back unused, vanishes,
    overruns its lease, renews, waits for a key held by another, and comes back as a zombie with
    an old token."""
    rng, oracle = world.rng(name), world.oracle
    rs = world.client(name)
    old: list[tuple[str, str, str]] = []  # (scope, key, token) it once held
    sessions = 0
    await world.ready.wait()
    while world.running:
        await trio.sleep(rng.expovariate(1 / 1.5))
        if old and rng.random() < 0.1:
            await _settle(world, name, rs, rng.choice(old), rng.choice(["complete", "fail", "release"]), zombie=True)
            continue
        scope_id, key = rng.choice(world.scopes), f"o{rng.randint(0, KEYS - 1)}"
        if rng.random() < 0.2:  # as a caller that found the key held: wait for it to settle
            wait = rng.choice([0, 5_000])
            query = {"scopeId": scope_id, "key": key, "waitMs": wait}
            ok, reply = await world.call(name, f"once wait {key}", lambda: rs._ctx.call("GET", "/once", query=query, wait_ms=wait))
            if ok:
                observe(world, scope_id, key, reply.body, "wait")
            continue
        sessions += 1
        lease_s = rng.choice([5, 10])
        body = {"scopeId": scope_id, "key": key, "holder": name, "holderSession": f"{name}-{sessions}", "leaseSeconds": lease_s}
        ok, reply = await world.call(name, f"once acquire {key}", lambda: rs._ctx.call("POST", "/once/acquire", body=body))
        if not ok:
            if reply.code == "SCOPE_CANCELLED":
                world.scope_gone(scope_id)
            continue
        view = reply.body
        if view["state"] != "ACQUIRED":
            observe(world, scope_id, key, view, "acquire")
            continue
        token, attempt, end = view["token"], view["attempts"] + 1, wall_ms(view["leaseExpiresAt"])
        oracle.granted(("once", scope_id, key), name, token, attempt, end - lease_s * 1000, end)
        world.log(name, f"holds once {key} in {scope_id[-4:]} attempt {attempt} until {end % 10**7}")
        old.append((scope_id, key, token))
        del old[:-20]
        mode = rng.choices(["complete", "fail", "renew", "vanish", "overrun", "release"], [5, 2, 2, 1, 1, 1])[0]
        if mode == "renew":
            await trio.sleep(rng.uniform(0.3, 0.7) * lease_s)
            renew = {"scopeId": scope_id, "key": key, "token": token, "leaseSeconds": lease_s}
            ok, reply = await world.call(name, f"once renew {key}", lambda: rs._ctx.call("POST", "/once/renew", body=renew))
            if not ok:
                continue
            oracle.extended(token, wall_ms(reply.body["leaseExpiresAt"]))
            mode = "complete"
        await trio.sleep(rng.uniform(0, 0.8 * lease_s) if mode != "overrun" else lease_s + rng.uniform(0, 5))
        if mode == "vanish":
            world.log(name, f"vanishes holding once {key}")
            continue
        action = mode if mode in ("fail", "release") else "complete"
        await _settle(world, name, rs, (scope_id, key, token), action, zombie=False)
    await rs.aclose()


async def _settle(world: World, name: str, rs: Any, held: tuple[str, str, str], action: str, *, zombie: bool) -> None:
    """Complete, fail or release the attempt `held` stands for; a stale token must be refused."""
    scope_id, key, token = held
    oracle = world.oracle
    book = _book(world, scope_id, key)
    why = oracle.stale_for_certain(token)
    if action == "complete":
        result = f"{name}:{token[-8:]}"
        book.sent.add(orjson.dumps(result))  # sent: the server may apply it even if the answer is lost
        body: dict = {"scopeId": scope_id, "key": key, "token": token, "result": result}
    elif action == "fail":
        body = {"scopeId": scope_id, "key": key, "token": token, "error": "boom", "maxAttempts": MAX_ATTEMPTS}
    else:
        body = {"scopeId": scope_id, "key": key, "token": token}
    oracle.letting_go(token)
    what = f"{'zombie ' if zombie else ''}once {action} {key}"
    ok, reply = await world.call(name, what, lambda: rs._ctx.call("POST", f"/once/{action}", body=body))
    if not ok:
        return
    if why is not None:
        oracle.accepted_stale(token, why, f"a once {action}")
    oracle.released(token, now_ms())
    if action == "complete":
        acked = orjson.dumps(body["result"])
        if book.acked is not None and book.acked != acked:
            oracle.fail("once-result", f"once key {key} of {scope_id[-4:]}: a second completion was acknowledged "
                        f"({acked.decode()} after {book.acked.decode()})")
        book.acked = acked
    elif action == "fail" and reply.body.get("state") == "FAILED":
        book.failed = True
    elif action == "release" and reply.body.get("state") != "OPEN":
        oracle.fail("once-result", f"once key {key} of {scope_id[-4:]}: a release answered {reply.body.get('state')}, not OPEN")
    world.log(name, f"{what} -> {reply.body.get('state')}")
    observe(world, scope_id, key, reply.body, action)
