"""A worker of the fault tests, on the official runstate-sdk 0.3.0 client (run as a script with
PYTHONPATH=<the client's folder>; see `workload.py`).

It calls one `once` function on items that every 0.3.0 worker calls too, around the same time and
again later, each call through a node picked at random. A body may run again when its holder's
lease is lost, but every caller of an item must get the same result: the one recorded. Lines:

- `once_run`: the body began for an item (its nonce; not an acknowledgement);
- `once`: a call returned the item's result (acknowledged), or failed (`"ok": false`).

It stops when the file ARGS["stop"] appears.
"""

import asyncio
import json
import os
import random
import time
import uuid

import runstate

ARGS = json.loads(os.environ["CHAOS_ARGS"])
assert runstate.__version__ == "0.3.0" and runstate.__file__.startswith(os.environ["PYTHONPATH"]), runstate.__file__
NAME = ARGS["name"]
NODES = ARGS["nodes"]
SPACE = ARGS["space"]
random.seed(ARGS["seed"])
OUT = open(ARGS["out"], "a", buffering=1)
STARTED = ARGS["start"]  # the same for every worker: they call the same items at the same time


def log(op: str, **fields) -> None:
    OUT.write(json.dumps({"op": op, "w": NAME, "space": SPACE, **fields}) + "\n")


def running() -> bool:
    return not os.path.exists(ARGS["stop"])


async def body(item: int) -> dict:
    nonce = uuid.uuid4().hex
    log("once_run", item=item, nonce=nonce, ts=time.monotonic())
    await asyncio.sleep(random.uniform(0.1, 1.2))
    return {"item": item, "by": NAME, "nonce": nonce}


CLIENTS = [
    runstate.Runstate(api_key=ARGS["api_key"], space_id=SPACE, base_url=url, run=ARGS["run"], worker=NAME, timeout=4, retries=1)
    for url in NODES
]
ONCE = [client.once(body, name="item", lease=5) for client in CLIENTS]


async def caller(slot: int) -> None:
    while running():
        newest = int((time.time() - STARTED) / 1.5)
        item = random.randint(max(0, newest - 4), newest)
        ts, node = time.monotonic(), random.randrange(len(ONCE))
        try:
            result = await ONCE[node](item)
            log("once", item=item, result=result, node=node, ts=ts, ta=time.monotonic())
        except runstate.RunstateError as error:
            log("once", ok=False, item=item, node=node, err=f"{getattr(error, 'code', None) or type(error).__name__}: {str(error)[:100]}", ts=ts, ta=time.monotonic())
        await asyncio.sleep(random.uniform(0.05, 0.4))


async def main() -> None:
    await asyncio.gather(*(caller(slot) for slot in range(3)))


asyncio.run(main())
