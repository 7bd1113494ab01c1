"""One client process of the swarm benchmark: `bench/swarm.py` starts K of them for each peer.

The process runs its share of the agents through one peer's client: our SDK (`ours`), the
official `runstate-sdk` 0.2.0 (`official`: run under the base interpreter with only that client
and this repository on its path, so nothing here may import more than the standard library and
anyio at the top), redis-py (`redis`) or our etcd client (`etcd`, under trio, the only loop it
runs on; the others run on asyncio). Agents come in three roles, all holding two long-lived claims
renewed by the peer's own mechanism:

- claimers loop: take a key (skewed: `hot_share` of the draws go to `hot_keys` of the `keys`),
  waiting for it, work `claim_work_s`, release;
- producers put a task on the shared queue every 1/`task_rate` seconds (open loop);
- workers take tasks from the queue, work `task_work_s` each, and acknowledge them.

Talking to `bench/swarm.py`: the configuration is JSON in `SWARM_CONFIG`; once every agent holds
its two claims the process prints `{"event": "ready"}`, then reads `go <t0>` on stdin, `t0` being
`time.monotonic()` (one clock for every process of the machine) at which the measured window of
`window_s` seconds begins. Agents start at once (the time until `t0` is the warm-up), stop at the
window's end, and the process prints `{"event": "result", ...}`: what was done inside the window,
the samples, its own CPU seconds and the requests its client sent over the window, and the
errors it met (counted and the first few quoted, never hidden).

Whether an acquire was contended is decided without asking the peer: every process counts, in a
table shared through a memory-mapped file (`occupancy`), how many of its agents want or hold each
key. An acquire is contended when another agent, of any process, wanted or held the key as it
began. The same file holds, per key, when its last release began: a contended acquire that got
the key after a release that began while it waited measures the handoff, from that release's
start to this agent holding the key (the time the key held nobody although someone wanted it).
"""

from __future__ import annotations

import json
import mmap
import os
import random
import sys
import time
import traceback
from typing import Any, Awaitable, Callable

import anyio

ROLES = ("claimer", "producer", "worker")
# After the window ends, agents get this long to finish what they are doing before being cancelled.
STOP_GRACE_S = 3.0
# How many holds are taken at once while the agents start.
HOLD_CONCURRENCY = 16
ERRORS_QUOTED_MAX = 5
REDIS_CONNECTIONS_MAX = 1024
# The runstate SDKs' default request timeout, used as the etcd client's attempt bound.
REQUEST_TIMEOUT_S = 10.0
INT_BYTES = 4
FLOAT_BYTES = 8


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def roles(agents: int) -> list[str]:
    """Half the agents claim, an eighth produce, the rest work the queue."""
    claimers = agents // 2
    producers = max(1, agents // 8)
    workers = max(1, agents - claimers - producers)
    return ["claimer"] * claimers + ["producer"] * producers + ["worker"] * workers


def occupancy_bytes(processes: int, keys: int) -> int:
    """The shared file: processes x keys int32 counters, then keys float64 release times."""
    return processes * keys * INT_BYTES + keys * FLOAT_BYTES


class Occupancy:
    """processes x keys int32 counters in a shared file (this process writes only its own row),
    then one float64 per key: when its last release began (`time.monotonic()`, any process)."""

    def __init__(self, path: str, processes: int, keys: int, process: int) -> None:
        self._file = open(path, "r+b")
        self._map = mmap.mmap(self._file.fileno(), occupancy_bytes(processes, keys))
        counters = processes * keys * INT_BYTES
        self._cells = memoryview(self._map)[:counters].cast("i")
        self._released = memoryview(self._map)[counters:].cast("d")
        self._base = process * keys
        self._keys = keys
        self._processes = processes

    def releasing(self, key: int, moment: float) -> None:
        self._released[key] = moment

    def last_release(self, key: int) -> float:
        return float(self._released[key])

    def taken(self, key: int) -> bool:
        cells, keys = self._cells, self._keys
        return any(cells[p * keys + key] for p in range(self._processes))

    def add(self, key: int, delta: int) -> None:
        self._cells[self._base + key] += delta

    def close(self) -> None:
        self._cells.release()
        self._released.release()
        self._map.close()
        self._file.close()


class Stats:
    def __init__(self) -> None:
        self.t0 = float("inf")
        self.t1 = float("inf")
        self.cycles = 0
        self.hot_cycles = 0  # of `cycles`, those on one of the hot keys
        self.acquires = 0
        self.contended_ms: list[float] = []
        self.handoff_ms: list[float] = []
        self.tasks = 0
        self.latency_ms: list[float] = []
        self.produced = 0
        self.errors: dict[str, int] = {}
        self.quoted: list[str] = []
        self.cpu_s = 0.0
        self.requests = 0

    def inside(self, moment: float) -> bool:
        return self.t0 <= moment <= self.t1

    def error(self, where: str, err: BaseException) -> None:
        name = f"{where}: {type(err).__name__}"
        self.errors[name] = self.errors.get(name, 0) + 1
        if len(self.quoted) < ERRORS_QUOTED_MAX:
            self.quoted.append(f"{name}: {str(err)[:300]}")


# -- peers ----------------------------------------------------------------------------------------


class Peer:
    """One system's client, shared by the process's agents. `background` is a task group for
    renewals, set before `open()`."""

    background: Any

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.process = config["process"]
        self.hold_lease_s = config["hold_lease_s"]
        self.cycle_lease_s = config["cycle_lease_s"]
        self.acquire_timeout_s = config["acquire_timeout_s"]

    async def open(self, agents: int) -> None: ...
    async def close(self) -> None: ...
    async def hold(self, agent: int, key: str) -> Any: ...
    async def release_hold(self, agent: int, held: Any) -> None: ...
    async def acquire(self, agent: int, key: str) -> Any: ...
    async def release(self, agent: int, held: Any) -> None: ...
    async def produce(self, agent: int, task_key: str, payload: dict[str, Any]) -> None: ...
    async def work(self, agent: int, handle: Callable[[dict[str, Any]], Awaitable[None]], stop: anyio.Event) -> None: ...

    def count_requests(self) -> Callable[[], int]:
        """Count every request the client sends from now on; returns the reader of the count.

        The HTTP clients (both runstate SDKs, our etcd client) all send through
        `httpx.AsyncClient.send`, counted there; each peer's own counter replaces this one where
        its client speaks something else."""
        import httpx

        sent = [0]
        send = httpx.AsyncClient.send

        async def counted(client: Any, request: Any, **kwargs: Any) -> Any:
            sent[0] += 1
            return await send(client, request, **kwargs)

        httpx.AsyncClient.send = counted  # type: ignore[method-assign]
        return lambda: sent[0]


class RunstatePeer(Peer):
    """Our SDK or the official 0.2.0 client, the same way: one client (a holder, with its own
    connection pool) per agent, as an agent written against either would have it."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.clients: list[Any] = []
        self.scopes: list[Any] = []
        self.mailboxes: list[Any] = []

    async def open(self, agents: int) -> None:
        import runstate
        from runstate import AsyncRunstate


        # The official client must be the one this process runs (never ours from the venv).
        official_folder = os.environ.get("PYTHONPATH", "").split(os.pathsep)[0]
        is_official = bool(official_folder) and runstate.__file__.startswith(official_folder)
        if is_official != (self.config["peer"] == "official"):
            raise SystemExit(f"peer {self.config['peer']!r} imported the wrong client: {runstate.__file__}")
        target = self.config["target"]
        shared = None
        if self.config["peer"] == "ours":
            # Our SDK as a swarm uses it: one client per process (one connection pool, one renewal
            # loop, calls made at the same time batched), one view of it per agent (its own holder).
            shared = AsyncRunstate(api_key=target["api_key"], space_id=target["space"], base_url=target["url"],
                                   holder=f"swarm-{self.process}")
            self.clients.append(shared)
        for agent in range(agents):
            holder = f"swarm-{self.process}-{agent}"
            if shared is not None:
                client = shared.with_holder(holder)
            else:
                client = AsyncRunstate(api_key=target["api_key"], space_id=target["space"], base_url=target["url"], holder=holder)
                self.clients.append(client)
            scope = client.scope(target["scope_id"])
            self.scopes.append(scope)
            self.mailboxes.append(scope.mailbox_by_id(target["mailbox_id"]))

    async def close(self) -> None:
        for client in self.clients:
            await client.aclose()

    def count_requests(self) -> Callable[[], int]:
        """Our SDK sends on its own sockets (`SocketTransport`, which counts what it writes), not
        through httpx; the official client through httpx."""
        if self.config["peer"] != "ours":
            return super().count_requests()
        counted = super().count_requests()  # (a transport of httpx, should one be made)
        return lambda: counted() + sum(getattr(client.transport, "requests", 0) for client in self.clients)

    async def hold(self, agent: int, key: str) -> Any:
        return await self.scopes[agent].claim(key).acquire(lease_seconds=self.hold_lease_s)

    async def release_hold(self, agent: int, held: Any) -> None:
        await held.release()

    async def acquire(self, agent: int, key: str) -> Any:
        return await self.scopes[agent].claim(key).acquire(
            lease_seconds=self.cycle_lease_s, wait=True, timeout_ms=round(self.acquire_timeout_s * 1000))

    async def release(self, agent: int, held: Any) -> None:
        await held.release()

    async def produce(self, agent: int, task_key: str, payload: dict[str, Any]) -> None:
        await self.mailboxes[agent].submit(payload, key=task_key)

    async def work(self, agent: int, handle: Callable[[dict[str, Any]], Awaitable[None]], stop: anyio.Event) -> None:
        async def handler(data: Any, delivery: Any) -> None:
            await handle(data)

        options = {"prefetch": self.config["prefetch"]} if self.config["peer"] == "ours" else {}
        await self.mailboxes[agent].consume(handler, concurrency=1, lease_seconds=30, stop_event=stop, shutdown_timeout=2.0, **options)


class RedisPeer(Peer):
    """redis-py's asyncio `Lock` (blocking acquire with its default 0.1 s sleep; `extend` per held
    lock, on the same schedule as our SDK's renewals) and a reliable list queue (LPUSH; BLMOVE
    into the worker's own processing list; LREM as the ack)."""

    QUEUE = "swarm:queue"

    def count_requests(self) -> Callable[[], int]:
        """Every command (the Lock's scripts, BLMOVE, ...) goes through `execute_command`."""
        from redis.asyncio.client import Redis

        sent = [0]
        execute = Redis.execute_command

        async def counted(client: Any, *args: Any, **options: Any) -> Any:
            sent[0] += 1
            return await execute(client, *args, **options)

        Redis.execute_command = counted  # type: ignore[method-assign]
        return lambda: sent[0]

    async def open(self, agents: int) -> None:
        import redis.asyncio as aioredis

        # One pool for the process's agents. redis-py's asyncio pool refuses (rather than waits)
        # past 100 connections, which 64 agents' blocking calls can reach.
        self.redis = aioredis.Redis.from_url(self.config["target"]["url"], max_connections=REDIS_CONNECTIONS_MAX)
        await self.redis.ping()

    async def close(self) -> None:
        await self.redis.aclose()

    async def hold(self, agent: int, key: str) -> Any:
        lock = self.redis.lock(f"swarm:hold:{key}", timeout=self.hold_lease_s, blocking=False)
        if not await lock.acquire():
            raise RuntimeError(f"the hold {key} was taken")
        scope = anyio.CancelScope()
        self.background.start_soon(self._extend, lock, scope)
        return lock, scope

    async def _extend(self, lock: Any, scope: anyio.CancelScope) -> None:
        with scope:
            while True:
                await anyio.sleep(renew_interval_s(self.hold_lease_s))
                await lock.extend(self.hold_lease_s, replace_ttl=True)

    async def release_hold(self, agent: int, held: Any) -> None:
        lock, scope = held
        scope.cancel()
        await lock.release()

    async def acquire(self, agent: int, key: str) -> Any:
        lock = self.redis.lock(f"swarm:claim:{key}", timeout=self.cycle_lease_s, blocking=True,
                               blocking_timeout=self.acquire_timeout_s)
        if not await lock.acquire():
            raise TimeoutError(f"no lock on {key} after {self.acquire_timeout_s} s")
        return lock

    async def release(self, agent: int, held: Any) -> None:
        await held.release()

    async def produce(self, agent: int, task_key: str, payload: dict[str, Any]) -> None:
        await self.redis.lpush(self.QUEUE, json.dumps(payload))

    async def work(self, agent: int, handle: Callable[[dict[str, Any]], Awaitable[None]], stop: anyio.Event) -> None:
        processing = f"swarm:processing:{self.process}-{agent}"
        while not stop.is_set():
            item = await self.redis.blmove(self.QUEUE, processing, 1, "RIGHT", "LEFT")
            if item is None:
                continue
            await handle(json.loads(item))
            await self.redis.lrem(processing, 1, item)


class EtcdPeer(Peer):
    """Our etcd client (`runstate.snapshots.etcd`): a session lease per agent kept alive with a
    keepalive every third of its TTL (its holds and its locks are attached to it); a txn lock
    (create the key if absent, else watch it for its deletion and try again); the queue recipe
    of etcd's own `contrib/recipes/queue.go` (take the oldest key with a txn on its mod revision;
    when the queue is empty, watch it and race for the first key put) made reliable by moving
    the task to a processing key in the same txn and deleting that as the ack."""

    PREFIX = "swarm/"

    async def open(self, agents: int) -> None:
        from runstate.snapshots.etcd import EtcdClient

        # One member: there is no other to move on to, so an attempt may last as long as a request
        # of the runstate SDKs (10 s) instead of the ~1 s a cluster uses to rotate.
        self.etcd = EtcdClient(self.config["target"]["endpoints"], attempt_s=REQUEST_TIMEOUT_S)
        self.keepers = [await self._grant() for _ in range(agents)]

    async def _grant(self) -> Any:
        from runstate.snapshots.etcd import LeaseKeeper

        keeper = await LeaseKeeper.grant(self.etcd, self.hold_lease_s)
        self.background.start_soon(keeper.run)
        return keeper

    async def _lease(self, agent: int) -> int:
        """The agent's session lease; a lost one is replaced (as clientv3's concurrency sessions are),
        and the loss raised once so that it is counted."""
        keeper = self.keepers[agent]
        if keeper.alive:
            return int(keeper.lease_id)
        self.keepers[agent] = await self._grant()
        raise RuntimeError(f"agent {agent}'s session lease was lost ({keeper.lost_reason or 'its deadline passed'}); a new one was granted")

    async def close(self) -> None:
        for keeper in self.keepers:
            await keeper.revoke()
        await self.etcd.aclose()

    def _me(self, agent: int) -> str:
        return f"{self.process}-{agent}"

    async def _lock(self, agent: int, key: str, wait: bool) -> tuple[str, int]:
        from runstate.snapshots.etcd import Compare, Op

        lease = await self._lease(agent)
        while True:
            taken = await self.etcd.txn([Compare.absent(key)], [Op.put(key, self._me(agent), lease=lease)], [Op.get(key)])
            if taken.succeeded:
                return key, taken.header.revision
            if not wait:
                raise RuntimeError(f"{key} was taken")
            async with self.etcd.watch(key, start_revision=taken.header.revision + 1, no_put=True) as watch:
                async for response in watch:
                    if response.events:
                        break

    async def _unlock(self, held: tuple[str, int]) -> None:
        from runstate.snapshots.etcd import Compare, Op

        key, revision = held
        await self.etcd.txn([Compare.create_revision(key, "==", revision)], [Op.delete(key)])

    async def hold(self, agent: int, key: str) -> Any:
        return await self._lock(agent, f"{self.PREFIX}hold/{key}", wait=False)

    async def release_hold(self, agent: int, held: Any) -> None:
        await self._unlock(held)

    async def acquire(self, agent: int, key: str) -> Any:
        with anyio.fail_after(self.acquire_timeout_s):
            return await self._lock(agent, f"{self.PREFIX}claim/{key}", wait=True)

    async def release(self, agent: int, held: Any) -> None:
        await self._unlock(held)

    async def produce(self, agent: int, task_key: str, payload: dict[str, Any]) -> None:
        await self.etcd.put(f"{self.PREFIX}queue/{task_key}", json.dumps(payload))

    async def work(self, agent: int, handle: Callable[[dict[str, Any]], Awaitable[None]], stop: anyio.Event) -> None:
        from runstate.snapshots.etcd import Compare, Op

        queue = f"{self.PREFIX}queue/"
        processing = f"{self.PREFIX}processing/{self._me(agent)}/"
        while not stop.is_set():
            lease = await self._lease(agent)
            first = await self.etcd.range(queue, prefix=True, limit=1, sort_target="CREATE", sort_order="ASCEND")
            kv = first.kvs[0] if first.kvs else await until_stopped(stop, self._next_task(queue, first.header.revision + 1))
            if kv is None:
                return
            mine = processing.encode() + kv.key[len(queue):]
            taken = await self.etcd.txn([Compare.mod_revision(kv.key, "==", kv.mod_revision)],
                                        [Op.delete(kv.key), Op.put(mine, kv.value, lease=lease)])
            if not taken.succeeded:
                continue  # another worker took it first
            await handle(json.loads(kv.value))
            await self.etcd.delete(mine)

    async def _next_task(self, queue: str, revision: int) -> Any:
        """The first task put on the queue from `revision` on (the recipe's WaitPrefixEvents)."""
        async with self.etcd.watch(queue, prefix=True, start_revision=revision, no_delete=True) as watch:
            async for response in watch:
                if response.events:
                    return response.events[0].kv
        return None


async def until_stopped(stop: anyio.Event, waiting: Awaitable[Any]) -> Any:
    """What `waiting` answers, or None as soon as `stop` is set (then `waiting` is cancelled)."""
    outcome: list[Any] = [None]

    async def wait() -> None:
        outcome[0] = await waiting
        group.cancel_scope.cancel()

    async def stopper() -> None:
        await stop.wait()
        group.cancel_scope.cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(wait)
        group.start_soon(stopper)
    return outcome[0]


def make_peer(config: dict[str, Any]) -> Peer:
    peer = config["peer"]
    if peer in ("ours", "official"):
        return RunstatePeer(config)
    if peer == "redis":
        return RedisPeer(config)
    if peer == "etcd":
        return EtcdPeer(config)
    raise SystemExit(f"unknown peer {peer!r}")


def renew_interval_s(lease_s: float) -> float:
    """The renewal schedule our SDK uses (a third of the lease, at least 1 s, +-10 % jitter), so
    every peer renews as often."""
    return max(1.0, lease_s / 3) * random.uniform(0.9, 1.1)


# -- agents ---------------------------------------------------------------------------------------


class Swarm:
    def __init__(self, config: dict[str, Any], peer: Peer, stats: Stats) -> None:
        self.config = config
        self.peer = peer
        self.stats = stats
        self.stop = anyio.Event()
        self.process = config["process"]
        self.roles = roles(config["agents"])
        self.occupancy = Occupancy(config["occupancy"], config["processes"], config["keys"], self.process)
        self.run_id = config["run_id"]

    def pick(self, rng: random.Random) -> int:
        hot = self.config["hot_keys"]
        if rng.random() < self.config["hot_share"]:
            return rng.randrange(hot)
        return rng.randrange(hot, self.config["keys"])

    async def claimer(self, agent: int) -> None:
        rng = random.Random(f"{self.config['seed']}-{self.process}-{agent}")
        stats, occupancy, work_s = self.stats, self.occupancy, self.config["claim_work_s"]
        hot_keys = self.config["hot_keys"]
        while not self.stop.is_set():
            key = self.pick(rng)
            contended = occupancy.taken(key)
            occupancy.add(key, 1)
            try:
                began = time.monotonic()
                held = await self.peer.acquire(agent, f"c{key}")
                got = time.monotonic()
                released = occupancy.last_release(key)
                await anyio.sleep(work_s)
                occupancy.releasing(key, time.monotonic())
                await self.peer.release(agent, held)
            except Exception as err:  # counted and quoted in the result, never hidden
                stats.error("claim cycle", err)
                await anyio.sleep(0.1)
                continue
            finally:
                occupancy.add(key, -1)
            if stats.inside(time.monotonic()):
                stats.cycles += 1
                stats.hot_cycles += key < hot_keys
                stats.acquires += 1
                if contended:
                    stats.contended_ms.append((got - began) * 1000)
                    if began < released <= got:  # handed over: released by another while this one waited
                        stats.handoff_ms.append((got - released) * 1000)

    async def producer(self, agent: int) -> None:
        rng = random.Random(f"{self.config['seed']}-p-{self.process}-{agent}")
        interval_s = 1 / self.config["task_rate"]
        next_at = time.monotonic() + rng.random() * interval_s
        sent = 0
        while True:
            await anyio.sleep(max(0.0, next_at - time.monotonic()))
            if self.stop.is_set():
                return
            now = time.monotonic()
            # Open loop, but a producer that fell behind does not send its backlog in a burst.
            next_at = max(next_at + interval_s, now - interval_s)
            sent += 1
            key = f"{self.run_id}-{self.process}-{agent}-{sent}"
            try:
                await self.peer.produce(agent, key, {"t": now, "n": sent})
            except Exception as err:
                self.stats.error("produce", err)
                continue
            if self.stats.inside(now):
                self.stats.produced += 1

    async def worker(self, agent: int) -> None:
        stats, work_s = self.stats, self.config["task_work_s"]

        async def handle(payload: dict[str, Any]) -> None:
            await anyio.sleep(work_s)
            done = time.monotonic()
            if stats.inside(done):
                stats.tasks += 1
                stats.latency_ms.append((done - payload["t"]) * 1000)

        while not self.stop.is_set():
            try:
                await self.peer.work(agent, handle, self.stop)
            except Exception as err:
                stats.error("work", err)
                await anyio.sleep(0.1)

    async def take_holds(self) -> list[tuple[int, Any]]:
        held: list[tuple[int, Any]] = []
        limiter = anyio.Semaphore(HOLD_CONCURRENCY)

        async def one(agent: int, index: int) -> None:
            async with limiter:
                held.append((agent, await self.peer.hold(agent, f"h{self.run_id}-{self.process}-{agent}-{index}")))

        async with anyio.create_task_group() as group:
            for agent in range(len(self.roles)):
                for index in range(2):
                    group.start_soon(one, agent, index)
        return held

    async def give_back(self, held: list[tuple[int, Any]]) -> None:
        with anyio.move_on_after(10):
            for agent, lease in held:
                try:
                    await self.peer.release_hold(agent, lease)
                except Exception as err:
                    self.stats.error("release hold", err)

    async def measure(self, requests: Callable[[], int]) -> None:
        stats = self.stats
        await anyio.sleep(max(0.0, stats.t0 - time.monotonic()))
        cpu, sent = time.process_time(), requests()
        await anyio.sleep(max(0.0, stats.t1 - time.monotonic()))
        stats.cpu_s = time.process_time() - cpu
        stats.requests = requests() - sent
        self.stop.set()

    async def run(self) -> None:
        stats = self.stats
        async with anyio.create_task_group() as background:
            self.peer.background = background
            requests = self.peer.count_requests()
            await self.peer.open(len(self.roles))
            held = await self.take_holds()
            emit(event="ready", agents=len(self.roles))
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            word, _, value = line.partition(" ")
            if word != "go":
                raise SystemExit(f"expected `go <t0>` on stdin, got {line!r}")
            stats.t0 = float(value)
            stats.t1 = stats.t0 + self.config["window_s"]
            async with anyio.create_task_group() as agents:
                agents.start_soon(self.measure, requests)
                for agent, role in enumerate(self.roles):
                    agents.start_soon(getattr(self, role), agent)
                await self.stop.wait()
                # The group ends when every agent has finished; what is still running then is cancelled.
                agents.cancel_scope.deadline = anyio.current_time() + STOP_GRACE_S
            await self.give_back(held)
            background.cancel_scope.cancel()  # renewals end before their client is closed
        try:
            with anyio.fail_after(30):
                await self.peer.close()
        except Exception as err:
            stats.error("close", err)
        self.occupancy.close()


def main() -> int:
    config = json.loads(os.environ["SWARM_CONFIG"])
    stats = Stats()
    backend = "trio" if config["peer"] == "etcd" else "asyncio"
    try:
        anyio.run(Swarm(config, make_peer(config), stats).run, backend=backend)
    except BaseException as err:  # the controller reads the reason from the last line
        emit(event="failed", error=f"{type(err).__name__}: {err}", trace=traceback.format_exc()[-4000:])
        return 1
    emit(
        event="result",
        process=config["process"],
        peer=config["peer"],
        cycles=stats.cycles,
        hot_cycles=stats.hot_cycles,
        acquires=stats.acquires,
        contended_ms=[round(x, 3) for x in stats.contended_ms],
        handoff_ms=[round(x, 3) for x in stats.handoff_ms],
        tasks=stats.tasks,
        latency_ms=[round(x, 3) for x in stats.latency_ms],
        produced=stats.produced,
        cpu_s=stats.cpu_s,
        requests=stats.requests,
        errors=stats.errors,
        quoted=stats.quoted,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
