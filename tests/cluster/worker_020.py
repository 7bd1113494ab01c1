"""A worker of the fault tests, on the official runstate-sdk 0.2.0 client (run as a script with
PYTHONPATH=<the client's folder>, never with our package; see `workload.py`).

It works one space through every node of the cluster at random, and writes one JSON line for each
call it makes, with `ts` (sent) and `ta` (answered) on the host's monotonic clock (one clock for
every process here), so that the checker (`history.py`) can order calls across workers:

- `scope`: a run created (its id);
- `acquire`, `renew`, `release`: a claim on one of a few shared keys, taken without waiting, renewed
  a few times and released (or left to run out), each through a node picked at random;
- `submit`: a task (its key and id) put on the space's work queue;
- `lease`, `complete`: a delivery of a task received (its message, attempt and token) and its
  result recorded (a nonce no other call sends), or left to run out so another worker takes it.

A line with `"ok": false` is a call that was not acknowledged (its error's code): the checker
counts it but never relies on it. The worker stops when the file ARGS["stop"] appears.
"""

import asyncio
import json
import os
import random
import time
import uuid
from urllib.parse import quote

import runstate
from runstate import AsyncRunstate, ConflictError, RunstateError
from runstate.mailboxes import Delivery

ARGS = json.loads(os.environ["CHAOS_ARGS"])
assert runstate.__file__.startswith(os.environ["PYTHONPATH"]), runstate.__file__
NAME = ARGS["name"]
NODES = ARGS["nodes"]
SPACE = ARGS["space"]
SCOPE = ARGS["scope"]
MAILBOX = ARGS["mailbox"]
KEYS = ARGS["keys"]
LEASE_S = 5  # the shortest lease the server grants
random.seed(ARGS["seed"])
OUT = open(ARGS["out"], "a", buffering=1)
_clients: dict = {}


def now() -> float:
    return time.monotonic()


def running() -> bool:
    return not os.path.exists(ARGS["stop"])


def log(op: str, **fields) -> None:
    OUT.write(json.dumps({"op": op, "w": NAME, "space": SPACE, **fields}) + "\n")


def client(holder: str, node: int) -> AsyncRunstate:
    found = _clients.get((holder, node))
    if found is None:
        found = _clients[(holder, node)] = AsyncRunstate(
            api_key=ARGS["api_key"], space_id=SPACE, base_url=NODES[node], holder=holder,
            request_timeout_ms=4000, retries=1,
        )
    return found


def code(error: BaseException) -> str:
    """The error's code and the start of its message (for the report; never relied on)."""
    return f"{getattr(error, 'code', None) or type(error).__name__}: {str(getattr(error, 'message', error))[:100]}"


def pick() -> int:
    return random.randrange(len(NODES))


async def post(holder: str, node: int, path: str, body: dict) -> dict:
    """A call through the official client's own transport."""
    answer = await client(holder, node)._ctx.transport.request("POST", f"/v1/spaces/{SPACE}{path}", body=body)
    return answer["body"]


async def runs() -> None:
    while running():
        ts, node = now(), pick()
        try:
            handle = await client(f"{NAME}.s", node).scopes.create(name=f"{NAME}-run")
            log("scope", id=handle.id, node=node, ts=ts, ta=now())
        except RunstateError as error:
            log("scope", ok=False, node=node, err=code(error), ts=ts, ta=now())
        await asyncio.sleep(random.uniform(0.3, 0.8))


async def claims(slot: int) -> None:
    holder = f"{NAME}.c{slot}"
    while running():
        key = random.choice(KEYS)
        ts, node = now(), pick()
        try:
            lease = await client(holder, node).scope(SCOPE).claim(key).acquire(lease_seconds=LEASE_S)
        except ConflictError:
            await asyncio.sleep(random.uniform(0.05, 0.3))
            continue
        except RunstateError as error:
            log("acquire", ok=False, key=key, node=node, err=code(error), ts=ts, ta=now())
            await asyncio.sleep(random.uniform(0.1, 0.4))
            continue
        lease._renewal.stop()  # renewed below, one call at a time, each one logged
        token, generation = lease.token(), lease.generation
        log("acquire", key=key, gen=generation, token=token, holder=holder, node=node, ts=ts, ta=now())
        held = True
        for _ in range(random.randint(0, 3)):
            await asyncio.sleep(random.uniform(0.3, 1.5))
            ts, node = now(), pick()
            try:
                await post(holder, node, f"/claims/{quote(key, safe='')}/renew", {"token": token, "leaseSeconds": LEASE_S})
            except RunstateError as error:
                log("renew", ok=False, key=key, gen=generation, node=node, err=code(error), ts=ts, ta=now())
                held = False
                break
            log("renew", key=key, gen=generation, token=token, node=node, ts=ts, ta=now())
        if held and random.random() < 0.75:
            ts, node = now(), pick()
            try:
                await post(holder, node, f"/claims/{quote(key, safe='')}/release", {"token": token})
                log("release", key=key, gen=generation, token=token, node=node, ts=ts, ta=now())
            except RunstateError as error:
                log("release", ok=False, key=key, gen=generation, node=node, err=code(error), ts=ts, ta=now())
        await asyncio.sleep(random.uniform(0.05, 0.3))


async def producer() -> None:
    number = 0
    while running():
        key = f"{NAME}-t{number}"
        number += 1
        ts, node = now(), pick()
        try:
            ticket = await client(f"{NAME}.p", node).scope(SCOPE).mailbox_by_id(MAILBOX).submit({"key": key}, key=key)
            log("submit", key=key, task=ticket.id, node=node, ts=ts, ta=now())
        except RunstateError as error:
            log("submit", ok=False, key=key, node=node, err=code(error), ts=ts, ta=now())
        await asyncio.sleep(random.uniform(0.2, 0.6))


async def consumer(slot: int) -> None:
    holder = f"{NAME}.r{slot}"
    while running():
        ts, node = now(), pick()
        rs = client(holder, node)
        try:
            raw = await rs.scope(SCOPE).mailbox_by_id(MAILBOX)._recv(LEASE_S, 1000)
        except RunstateError as error:
            log("lease", ok=False, node=node, err=code(error), ts=ts, ta=now())
            await asyncio.sleep(random.uniform(0.1, 0.4))
            continue
        if raw is None:
            continue
        delivery = Delivery(rs._ctx, raw)
        key = (delivery.data or {}).get("key")
        log("lease", msg=delivery.id, attempt=delivery.attempt, token=raw["token"], key=key, holder=holder, node=node, ts=ts, ta=now())
        await asyncio.sleep(random.uniform(0.0, 1.0))
        if random.random() < 0.1:
            continue  # walked away: the lease runs out and the task goes to another worker
        result = {"by": holder, "nonce": uuid.uuid4().hex}
        ts, node = now(), pick()
        try:
            await post(holder, node, f"/messages/{delivery.id}/complete", {"token": raw["token"], "result": result})
            log("complete", msg=delivery.id, attempt=delivery.attempt, key=key, result=result, node=node, ts=ts, ta=now())
        except RunstateError as error:
            log("complete", ok=False, msg=delivery.id, attempt=delivery.attempt, key=key, node=node, err=code(error), ts=ts, ta=now())


async def main() -> None:
    await asyncio.gather(runs(), claims(0), claims(1), claims(2), producer(), consumer(0), consumer(1))


asyncio.run(main())
