"""The simulated users: claimers, task submitters, workers, a run manager, the crasher and an auditor.

Every agent is a trio task with its own `AsyncRunstate` (its own holder and session) over the
simulation's transport, and its own `random.Random` derived from the seed and its name, so what it
decides does not depend on how the others were scheduled. Agents go through the SDK's public API
where it shows the oracle what it needs: claims (`acquire`, `run`, background renewal,
`release`, `aclose` to vanish), scopes, `mailboxes.ensure`, `submit`, tickets (`status`, `result`,
`cancel`, `join`, `detach`) and `send`. Deliveries and deliberately stale requests go through the
SDK's request layer (`ctx.call`: the same transport, idempotency keys and retries), because the
oracle needs every answer (each renewal's new lease end) and because the SDK, rightly, refuses to
send a token it knows is lost, while a zombie worker is exactly one that does.

Errors the server may rightly answer (409s, 404s, 503 while it recovers, a broken connection) are
part of the game; anything else an agent meets (a `KeyError` from a malformed answer, a 500) is a
failure of the run.
"""

from __future__ import annotations

import random
from datetime import datetime, timezone
from typing import Any, Callable
from urllib.parse import quote

import trio

from runstate import AsyncRunstate
from runstate.errors import RunstateError

from .disk import IO_LATENCY_MAX_S
from .cluster import API_KEY, NEIGHBOR_KEY, SPACE, Cluster, SimTransport, now_ms
from .oracle import Oracle

__all__ = ["World", "AGENTS"]

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED")


def wall_ms(text: str) -> int:
    """A wire timestamp (`...T08:00:01.250Z`) as wall milliseconds."""
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


class World:
    """What every agent shares: the server, the oracle, the trace, the runs and queues in use."""

    def __init__(self, seed: int, cluster: Cluster, transport: SimTransport, oracle: Oracle, trace: list[str], end_s: float) -> None:
        self.seed = seed
        self.cluster = cluster
        self.transport = transport
        self.oracle = oracle
        self.trace = trace
        self.end_s = end_s
        self.scopes: list[str] = []
        self.mailboxes: dict[str, str] = {}  # name -> id
        self.ready = trio.Event()
        from .capacity import CapacityBook  # -- capacity --

        self.capacity = CapacityBook(oracle)
        self.admission_runs: list[str] = []
        self._spectator: AsyncRunstate | None = None
        # Set by the crasher: cut the power the instant a spectator's read shows a task ended.
        self.crash_on_seen: trio.Event | None = None
        # Set while the disk under SPACE's partition fails (the crasher's "disk"): the neighbor
        # space, in another partition, must go on being served meanwhile.
        self.disk_failing = False

    def rng(self, name: str) -> random.Random:
        return random.Random(f"{self.seed}:{name}")

    def client(self, holder: str) -> AsyncRunstate:
        return AsyncRunstate(api_key=API_KEY, space_id=SPACE, holder=holder, transport=self.transport, request_timeout_ms=10_000)

    def spectator(self) -> AsyncRunstate:
        """The client of whoever reads a task while its worker settles it (see `settle`)."""
        if self._spectator is None:
            self._spectator = self.client("spectator")
        return self._spectator

    def log(self, who: str, text: str) -> None:
        self.trace.append(f"{trio.current_time():10.3f} {who:<9} {text}")

    @property
    def running(self) -> bool:
        return trio.current_time() < self.end_s

    def scope_gone(self, scope_id: str) -> None:
        if scope_id in self.scopes and len(self.scopes) > 1:
            self.scopes.remove(scope_id)

    async def call(self, who: str, what: str, step: Callable[[], Any]) -> tuple[bool, Any]:
        """Run one SDK step: (True, its value) or (False, the RunstateError it raised)."""
        try:
            return True, await step()
        except RunstateError as error:
            self.log(who, f"{what}: {error.code}")
            return False, error


# -- claims --------------------------------------------------------------------------------------


async def claimer(world: World, name: str) -> None:
    """Acquires claim keys and holds, runs, abandons or stalls on them; sometimes acts as a zombie."""
    rng, oracle = world.rng(name), world.oracle
    rs = world.client(name)
    old: list[tuple[str, str, str, int]] = []  # (scope, key, token, lease seconds) it once held
    await world.ready.wait()
    while world.running:
        await trio.sleep(rng.expovariate(1 / 2.0))
        if old and rng.random() < 0.15:
            await zombie_claim(world, name, rs, rng.choice(old), rng)
            continue
        scope_id, key = rng.choice(world.scopes), f"k{rng.randint(0, 2)}"
        lease_s = rng.choice([5, 5, 10, 30])
        mode = rng.choices(["hold", "run", "abandon", "stall"], [5, 3, 1, 1])[0]
        ref = rs.scope(scope_id).claim(key)
        if mode == "run":
            async def work(lease: Any) -> None:
                grant(world, name, scope_id, key, lease, lease_s)
                await hold(world, lease, rng.uniform(0, 3 * lease_s))
                oracle.extended(lease.token(), wall_ms_of(lease))
                oracle.letting_go(lease.token())  # run() releases when this returns

            ok, error = await world.call(name, f"run {key}", lambda: ref.run(work, lease_seconds=lease_s, wait=rng.random() < 0.5, timeout_ms=5_000))
            if not ok and error.code == "SCOPE_CANCELLED":
                world.scope_gone(scope_id)
            continue
        wait = rng.random() < 0.4
        ok, lease = await world.call(name, f"acquire {key}", lambda: ref.acquire(lease_seconds=lease_s, wait=wait, timeout_ms=rng.choice([2_000, 15_000])))
        if not ok:
            if lease.code == "SCOPE_CANCELLED":
                world.scope_gone(scope_id)
            continue
        grant(world, name, scope_id, key, lease, lease_s)
        old.append((scope_id, key, lease.token(), lease_s))
        if mode == "hold":
            await hold(world, lease, rng.uniform(0, 3 * lease_s))
            oracle.extended(lease.token(), wall_ms_of(lease))
            oracle.letting_go(lease.token())
            # Every other generation's release says what it saw (drawn from no random number:
            # the seeds' schedules stay as they were); its event must carry it through recovery.
            observation = {"by": name, "generation": lease.generation} if lease.generation % 2 == 0 else None
            ok, _ = await world.call(name, f"release {key}", lambda: lease.release(observation))
            if ok and not lease.is_lost:
                oracle.released(lease.token(), now_ms(), observation)
            world.log(name, f"released {key} g{lease.generation}" if ok else f"release {key} failed")
        else:  # abandon (vanish), or stall past the lease and come back as a zombie
            await hold(world, lease, rng.uniform(0, lease_s))
            oracle.extended(lease.token(), wall_ms_of(lease))
            await lease.aclose()
            world.log(name, f"{mode}s {key} g{lease.generation}")
            if mode == "stall":
                await trio.sleep(lease_s + rng.uniform(0, 10))
                await zombie_claim(world, name, rs, old[-1], rng)
        if len(old) > 20:
            del old[:-20]
    await rs.aclose()


def wall_ms_of(lease: Any) -> int:
    return round(lease.expires_at.timestamp() * 1000)


def grant(world: World, name: str, scope_id: str, key: str, lease: Any, lease_s: int) -> None:
    end = wall_ms_of(lease)
    token = lease.token()
    world.oracle.granted(("claim", scope_id, key), name, token, lease.generation, end - lease_s * 1000, end)
    # A renewal that fails (any error: a 409, or the server down past the SDK's retries) makes the
    # SDK count the lease lost; `run()` then releases it. From then on the holder has let go.
    lease._when_lost(lambda: world.oracle.letting_go(token))
    world.log(name, f"holds {key} in {scope_id[-4:]} g{lease.generation} until {end % 10**7}")


async def hold(world: World, lease: Any, seconds: float) -> None:
    """Keep a lease (the SDK renews it) for `seconds`, telling the oracle each new end; stop if lost."""
    until = trio.current_time() + seconds
    while trio.current_time() < until and not lease.is_lost:
        await trio.sleep(min(1.0, until - trio.current_time()))
        world.oracle.extended(lease.token(), wall_ms_of(lease))


async def zombie_claim(world: World, name: str, rs: AsyncRunstate, held: tuple, rng: random.Random) -> None:
    """Renew or release with a token this agent held once, whatever happened since."""
    scope_id, key, token, lease_s = held
    oracle = world.oracle
    why = oracle.stale_for_certain(token)
    action = rng.choice(["renew", "release"])
    path = f"/claims/{quote(key, safe='')}/{action}"
    body = {"token": token, "leaseSeconds": lease_s} if action == "renew" else {"token": token}
    if action == "release":
        oracle.letting_go(token)
    ok, reply = await world.call(name, f"zombie {action} {key}", lambda: rs._ctx.call("POST", path, body=body))
    if not ok:
        return
    world.log(name, f"zombie {action} {key} accepted")
    if why is not None:
        oracle.accepted_stale(token, why, f"a {action} of {key!r}")
    if action == "renew":
        oracle.extended(token, wall_ms(reply.body["leaseExpiresAt"]))
    else:
        oracle.released(token, now_ms())


# -- tasks and messages --------------------------------------------------------------------------


async def submitter(world: World, name: str) -> None:
    """Submits tasks (same key and input as others, sometimes another input), reads, cancels, sends."""
    rng, oracle = world.rng(name), world.oracle
    rs = world.client(name)
    tickets: list[Any] = []
    await world.ready.wait()
    while world.running:
        await trio.sleep(rng.expovariate(1 / 1.5))
        action = rng.choices(["submit", "status", "cancel", "join", "send", "result"], [6, 4, 1, 1, 2, 0.5])[0]
        if action == "submit" or not tickets and action != "send":
            scope_id, key = rng.choice(world.scopes), f"t{rng.randint(0, 7)}"
            box = rng.choice(["work", "work", "fragile"]) if rng.random() < 0.1 else "work"
            task_input = {"key": key, "n": 1 if rng.random() < 0.9 else 2}
            expected_conflict = oracle.conflict_expected(scope_id, key, (box, task_input))
            mailbox = rs.scope(scope_id).mailbox_by_id(world.mailboxes[box])
            ok, ticket = await world.call(name, f"submit {key}", lambda: mailbox.submit(task_input, key=key, subscriber_id=name))
            if not ok:
                if ticket.code == "SCOPE_CANCELLED":
                    world.scope_gone(scope_id)
                continue
            world.log(name, f"submitted {key} in {scope_id[-4:]} -> {ticket.id}")
            oracle.submitted(scope_id, key, (box, task_input), ticket.id)
            if expected_conflict:
                world.log(name, "a conflicting submission was accepted")
            tickets.append(ticket)
            del tickets[:-12]
        elif action == "send":
            scope_id = rng.choice(world.scopes)
            mailbox = rs.scope(scope_id).mailbox_by_id(world.mailboxes["work"])
            work_key = rng.choice([None, f"w{rng.randint(0, 3)}"])
            ok, sent = await world.call(name, "send", lambda: mailbox.send({"note": rng.randint(0, 9)} if not work_key else {"w": work_key}, work_key=work_key))
            if ok:
                oracle.messages.add(sent["id"])
                oracle.message_scopes[sent["id"]] = scope_id
                world.log(name, f"sent {sent['id']} replay={sent['replay']}")
        else:
            ticket = rng.choice(tickets)
            if action == "status":
                ok, view = await world.call(name, "status", ticket.status)
                if ok:
                    oracle.task_seen(ticket.id, view["state"], view["outcome"], view["tombstoned"])
                    world.log(name, f"sees {ticket.id} {view['state']} {view['outcome']!r}")
            elif action == "result":
                ok, result = await world.call(name, "result", lambda: ticket.result(timeout_ms=rng.choice([1_000, 10_000])))
                if ok:
                    oracle.task_seen(ticket.id, result["state"], result["outcome"])
            elif action == "cancel":
                ok, view = await world.call(name, "cancel", lambda: ticket.cancel(rng.choice([None, "changed my mind"])))
                if ok:
                    oracle.task_seen(ticket.id, view["state"], view["outcome"], view["tombstoned"], acked=True)
                    world.log(name, f"cancelled {ticket.id}: {view['state']}")
            else:
                if rng.random() < 0.5:
                    await world.call(name, "join", lambda: ticket.join(f"{name}-2"))
                else:
                    await world.call(name, "detach", lambda: ticket.detach(f"{name}-2"))
    await rs.aclose()


async def worker(world: World, name: str) -> None:
    """Receives deliveries (long polls included) and completes, retries, rejects, returns unhandled
    (as a worker cancelled as it received does), overruns or vanishes."""
    rng, oracle = world.rng(name), world.oracle
    life = 0
    rs = world.client(name)
    await world.ready.wait()
    while world.running:
        scope_id = rng.choice(world.scopes)
        box = rng.choice(["work", "work", "fragile"])
        wait_ms = rng.choice([0, 0, 2_000, 10_000, 25_000])
        lease_s = rng.choice([5, 10, 30])
        body = {"scopeId": scope_id, "holder": name, "holderSession": rs.session, "leaseSeconds": lease_s, "waitMs": wait_ms or None}
        path = f"/mailboxes/{world.mailboxes[box]}/recv"
        ok, reply = await world.call(name, "recv", lambda: rs._ctx.call("POST", path, body=body, wait_ms=wait_ms))
        if not ok or reply.status == 204:
            if not ok and reply.code == "SCOPE_CANCELLED":
                world.scope_gone(scope_id)
            await trio.sleep(rng.uniform(0.1, 2.0))
            continue
        delivery = reply.body
        message, token = delivery["message"], delivery["token"]
        end = wall_ms(delivery["leaseExpiresAt"])
        oracle.granted(("message", message["id"]), name, token, message["attempt"], end - delivery["leaseSeconds"] * 1000, end)
        world.log(name, f"leased {message['id']} attempt {message['attempt']} task {message['taskId']} until {end % 10**7}")
        mode = rng.choices(["complete", "slow", "retry", "reject", "return", "stall", "vanish"], [8, 2, 2, 1, 2, 1, 1])[0]
        if mode == "vanish":
            world.log(name, f"vanishes with {message['id']}")
            await rs.aclose()
            life += 1
            rs = world.client(name)  # the process came back: a new session
            continue
        if mode == "slow":  # longer than the lease, renewing as it goes
            for _ in range(rng.randint(2, 4)):
                await trio.sleep(lease_s / 3)
                ok, renewed = await world.call(name, "renew", lambda: rs._ctx.call("POST", f"/messages/{message['id']}/renew", body={"token": token, "leaseSeconds": lease_s}))
                if not ok:
                    break
                oracle.extended(token, wall_ms(renewed.body["leaseExpiresAt"]))
        elif mode == "stall":
            await trio.sleep(lease_s + rng.uniform(0, 5))
        elif mode == "return":  # cancelled as it received, again and again (a worker in a restart loop)
            given_back = False
            for _ in range(rng.randint(0, 3)):
                await trio.sleep(rng.uniform(0, 0.1 * lease_s))
                await settle(world, name, rs, message, token, mode, rng)
                again = {**body, "waitMs": None}
                ok, reply = await world.call(name, "recv", lambda: rs._ctx.call("POST", path, body=again))
                given_back = not ok or reply.status == 204
                if given_back:
                    break
                message, token = reply.body["message"], reply.body["token"]
                end = wall_ms(reply.body["leaseExpiresAt"])
                oracle.granted(("message", message["id"]), name, token, message["attempt"], end - lease_s * 1000, end)
                world.log(name, f"leased {message['id']} attempt {message['attempt']} again until {end % 10**7}")
            if given_back:
                continue
            await trio.sleep(rng.uniform(0, 0.1 * lease_s))
        else:
            await trio.sleep(rng.uniform(0, 0.8 * lease_s))
        await settle(world, name, rs, message, token, mode, rng)
    await rs.aclose()


async def settle(world: World, name: str, rs: AsyncRunstate, message: dict, token: str, mode: str, rng: random.Random) -> None:
    oracle = world.oracle
    why = oracle.stale_for_certain(token)
    if mode in ("retry", "reject"):
        action, body = "nack", {"token": token, "retry": mode == "retry"}
        result = None
    elif mode == "return":
        action, body = "return", {"token": token}
        result = None
    else:
        result = f"{name}:{message['id']}:{message['attempt']}"
        action, body = "complete", {"token": token, "result": {"payload": result}}
    oracle.letting_go(token)
    answers: list = []
    sent_ms = now_ms()

    async def settle_it() -> None:
        answers.append(await world.call(name, f"{action} {message['id']}", lambda: rs._ctx.call("POST", f"/messages/{message['id']}/{action}", body=body)))

    async with trio.open_nursery() as both:
        both.start_soon(settle_it)
        if message.get("taskId") is not None and rng.random() < 0.5:
            # Someone else reads the task while the settlement is on its way to the disk: what
            # that read shows must survive any crash (the dirty-read invariant).
            both.start_soon(peek, world, message["taskId"], rng.uniform(0, IO_LATENCY_MAX_S))
    ok, reply = answers[0]
    if not ok:
        return
    if why is not None:
        oracle.accepted_stale(token, why, f"a {action} of message {message['id']}")
    oracle.released(token, now_ms())
    answer = reply.body
    world.log(name, f"{action} {message['id']} -> {answer.get('state')} task {answer.get('taskState')}")
    task_id, task_state = answer.get("taskId"), answer.get("taskState")
    if action == "return" and (answer.get("state") == "DEAD" or task_state == "FAILED"):
        oracle.fail("returned-uncounted", f"the return of message {message['id']} (attempt {message['attempt']}) "
                    f"dead-lettered it: {answer.get('state')}, task {task_state}")
    if task_id is not None and task_state in TERMINAL:
        oracle.task_settled(task_id, token, task_state, result if task_state == "SUCCEEDED" else None)
        if task_state == "SUCCEEDED":
            oracle.completed(task_id, sent_ms)


async def peek(world: World, task_id: str, after_s: float) -> None:
    await trio.sleep(after_s)  # the settlement's turn has run; its write may still be under way
    ok, view = await world.call("spectator", f"status {task_id}", lambda: world.spectator()._ctx.call("GET", f"/tasks/{task_id}"))
    if ok:
        task = view.body
        world.oracle.task_seen(task_id, task["state"], task["outcome"], task.get("tombstoned", False))
        world.log("spectator", f"sees {task_id} {task['state']}")
        armed = world.crash_on_seen
        if armed is not None and task["state"] in TERMINAL and world.cluster.current is not None:
            # The power goes the instant the read is answered: whatever it showed must already be
            # on disk, or the crash takes it back (a dirty read).
            world.crash_on_seen = None
            world.cluster.crash("power")
            armed.set()


# -- runs and the server -------------------------------------------------------------------------


async def manager(world: World, name: str) -> None:
    """Makes the queues and the first runs, then now and then ends a run and starts another."""
    rng, oracle = world.rng(name), world.oracle
    rs = world.client(name)

    async def must(what: str, step: Callable[[], Any]) -> Any:
        while True:
            ok, value = await world.call(name, what, step)
            if ok:
                return value
            await trio.sleep(0.5)

    work = await must("ensure work", lambda: rs.mailboxes.ensure("work"))

    async def ensure_fragile() -> dict:
        for row in await rs.mailboxes.list():
            if row["name"] == "fragile":
                return row
        return (await rs._ctx.call("POST", "/mailboxes", body={"name": "fragile", "maxAttempts": 2})).body

    fragile = await must("ensure fragile", ensure_fragile)
    world.mailboxes = {"work": work["id"], "fragile": fragile["id"]}
    oracle.mailboxes.update(world.mailboxes.values())
    for number in range(3):
        scope = await must("create run", lambda: rs.scopes.create(name=f"run-{number}"))
        oracle.scopes.add(scope.id)
        world.scopes.append(scope.id)
    world.log(name, f"runs {[s[-4:] for s in world.scopes]}, mailboxes {world.mailboxes}")
    world.ready.set()
    number = 3
    ended: list[str] = []  # runs it ended (or that have a deadline): it reads them again later
    while world.running:
        await trio.sleep(min(rng.expovariate(1 / 40), max(0.0, world.end_s - trio.current_time())))
        if not world.running:
            break
        if len(world.scopes) > 2 and rng.random() < 0.6:
            scope_id = rng.choice(world.scopes)
            end = rng.choice(["cancel", "complete"])
            oracle.run_may_end(scope_id, now_ms())  # from now on, whether the answer comes or not
            ok, view = await world.call(name, f"{end} run", lambda: getattr(rs.scope(scope_id), end)())
            ended.append(scope_id)
            if ok:
                world.log(name, f"{end}s run {scope_id[-4:]}")
                oracle.run_ended(scope_id, now_ms())
                world.scope_gone(scope_id)
        if ended and oracle.retention_ms:
            await read_ended_run(world, name, rs, rng.choice(ended))
        deadline = deadline_ms = None
        if rng.random() < 0.3:
            deadline_ms = now_ms() + rng.randint(20_000, 200_000)
            deadline = datetime.fromtimestamp(deadline_ms / 1000, tz=timezone.utc).isoformat()
        ok, scope = await world.call(name, "create run", lambda: rs.scopes.create(name=f"run-{number}", deadline=deadline))
        if ok:
            number += 1
            oracle.scopes.add(scope.id)
            world.scopes.append(scope.id)
            if deadline_ms is not None:
                oracle.run_may_end(scope.id, deadline_ms - 1)  # (a millisecond early: the wire's rounding)
                ended.append(scope.id)
            world.log(name, f"new run {scope.id[-4:]} deadline={deadline is not None}")
    await rs.aclose()


async def read_ended_run(world: World, name: str, rs: AsyncRunstate, scope_id: str) -> None:
    """Read a run that was ended (or has a deadline): a 404 is only for a run past its retention."""
    ok, answer = await world.call(name, f"read run {scope_id[-4:]}", lambda: rs._ctx.call("GET", f"/scopes/{scope_id}"))
    if not ok and answer.code == "NOT_FOUND":
        world.oracle.run_gone(scope_id, now_ms(), "read")
    elif ok and answer.body["effective"] == "ACTIVE" and scope_id in world.oracle.run_ends:
        world.oracle.fail("ended-run", f"run {scope_id} was acknowledged ended and reads ACTIVE")


def check_retention(world: World) -> None:
    """At the end of a seed (the server up a sweep past its last start): every run whose end was
    acknowledged a retention and a sweep ago is gone, with everything it kept (invariant 7)."""
    oracle, cluster = world.oracle, world.cluster
    if not oracle.retention_ms or cluster.kernel is None:
        return
    from runstate.actors.runs import sweep_ms

    space = cluster.kernel.partition_of(SPACE).state.spaces.get(SPACE)
    horizon = now_ms() - oracle.retention_ms - sweep_ms(cluster.limits) - 1_000
    for scope_id, acked_ms in oracle.run_ends.items():
        if scope_id in oracle.scopes and acked_ms <= horizon and space is not None and scope_id in space.scopes:
            oracle.fail("retention", f"run {scope_id}, ended by {acked_ms}, is still kept at {now_ms()}")
    for scope_id in oracle.scopes:
        if space is not None and scope_id not in space.scopes:
            oracle.run_gone(scope_id, now_ms(), "recovery")
    if space is not None:
        oracle.check_removed(space)


async def crasher(world: World, name: str, mean_s: float) -> None:
    """Crashes the server now and then (power cut, torn write, kill, or inside a WAL write), waits,
    restarts it on what the disk kept, and has the oracle check the recovered state."""
    rng, cluster = world.rng(name), world.cluster
    # Under `batch` and `off` a power cut may lose answered changes (by design): only kills then.
    kinds = ["kill"] if cluster.fsync in ("batch", "off") else ["power", "torn", "kill", "write", "write", "seen", "seen"]
    if cluster.neighbor is not None and cluster.fsync == "always":
        # (Under `batch` a failed fsync rolls back what was answered since the last good one, as
        # a power cut would: only `always` keeps every answer through it.)
        kinds += ["disk", "disk"]
    await world.ready.wait()
    while world.running:
        await trio.sleep(min(rng.expovariate(1 / mean_s), max(0.0, world.end_s - trio.current_time())))
        if not world.running:
            break
        how = rng.choice(kinds)
        if how == "disk":  # SPACE's partition's disk fails for a while; nothing crashes
            cluster.fail_disk(SPACE)
            world.disk_failing = True
            await trio.sleep(rng.uniform(0.5, 8.0))
            cluster.fail_disk(None)
            world.disk_failing = False
            world.log(name, "the disk works again")
            continue
        if how == "seen":  # the next time a read shows a task ended, at that instant
            world.crash_on_seen = seen = trio.Event()
            with trio.move_on_after(30):
                await seen.wait()
            world.crash_on_seen = None
            if not seen.is_set():
                cluster.crash("power")
        elif how == "write":
            cluster.crash_in_next_write()
            with trio.move_on_after(5):
                while cluster.current is not None:
                    await trio.sleep(0.01)
            if cluster.current is not None:  # nothing was written meanwhile
                cluster.fs.tear_next_write = False
                cluster.crash("power")
        else:
            cluster.crash(how)
        await trio.sleep(rng.choice([0.001, 0.5, 3.0, 12.0]))
        await restart(world)


async def neighbor(world: World, name: str) -> None:
    """Claims in the neighbor space (another partition than SPACE's), one after another: each
    acquired, held a moment (renewed) and released. Its invariant besides the claims' own:
    **isolation**: while the disk of SPACE's partition fails, this space is served as ever
    (no 503 from a server that is up)."""
    space = world.cluster.neighbor
    if space is None:
        return
    rng, oracle = world.rng(name), world.oracle
    rs = AsyncRunstate(api_key=NEIGHBOR_KEY, space_id=space, holder=name, transport=world.transport, request_timeout_ms=10_000)
    await world.ready.wait()
    scope_id = None
    while world.running:
        await trio.sleep(rng.expovariate(1 / 1.0))
        failing = world.disk_failing and world.cluster.current is not None
        if scope_id is None:
            ok, scope = await world.call(name, "new run", lambda: rs.scopes.create(name="neighbor"))
            _isolated(world, name, ok, scope, failing)
            if ok:
                scope_id = scope.id
                oracle.scopes_elsewhere.add(scope_id)
            continue
        key, lease_s = f"n{rng.randint(0, 2)}", rng.choice([5, 10])
        ok, lease = await world.call(name, f"acquire {key}", lambda: rs.scope(scope_id).claim(key).acquire(lease_seconds=lease_s, wait=True, timeout_ms=3_000))
        _isolated(world, name, ok, lease, failing and world.disk_failing)
        if not ok:
            continue
        grant(world, name, scope_id, key, lease, lease_s)
        await hold(world, lease, rng.uniform(0, 2 * lease_s))
        oracle.extended(lease.token(), wall_ms_of(lease))
        oracle.letting_go(lease.token())
        ok, _ = await world.call(name, f"release {key}", lease.release)
        if ok and not lease.is_lost:
            oracle.released(lease.token(), now_ms())
    await rs.aclose()


def _isolated(world: World, name: str, ok: bool, answer: Any, failing: bool) -> None:
    if not ok and failing and world.disk_failing and answer.code == "UNAVAILABLE" and world.cluster.current is not None:
        world.oracle.fail("isolation", f"{name}: the neighbor space was refused while another partition's disk failed: {answer}")


async def restart(world: World) -> None:
    cluster = world.cluster
    if await cluster.start():
        world.oracle.check_recovered(cluster.kernel.partition_of(SPACE).state, SPACE)
        if cluster.neighbor is not None:
            space = cluster.kernel.partition_of(cluster.neighbor).state.spaces.get(cluster.neighbor)
            for scope_id in world.oracle.scopes_elsewhere:
                if space is None or scope_id not in space.scopes:
                    world.oracle.fail("durability", f"acknowledged run {scope_id} of {cluster.neighbor} is missing after recovery")


async def auditor(world: World, name: str) -> None:
    """Once in a while, when nothing waits to be written: the live state equals a replay of the disk.

    (Also at the end of every run. Comparing whole states costs more than the rest of a run, so
    it is done rarely.)"""
    rng = world.rng(name)
    await world.ready.wait()
    for at in sorted(rng.uniform(0.1, 1.0) * world.end_s for _ in range(2)):
        await trio.sleep_until(at)
        while world.running and not audit(world):
            await trio.sleep(0.5)


def audit(world: World) -> bool:
    from runstate.server.durable import state_model
    from runstate.snapshots import load
    from runstate.snapshots.datadir import partition_dir
    from runstate.snapshots.equality import contents, first_difference

    cluster = world.cluster
    kernel = cluster.kernel
    if kernel is None or cluster.current is None or not cluster.current.serving:
        return False
    for partition in kernel.partitions:
        journal = partition.journal
        if journal.failure is not None or journal._pending or journal.appended_lsn != journal.durable_lsn:
            return False
    model = state_model(cluster.limits)
    for partition in kernel.partitions:
        folder = partition_dir(cluster.data_dir, partition.number)
        loaded = load(folder, model, repair=False, partition=partition.number)
        difference = first_difference(contents(partition.state), contents(loaded.state))
        world.oracle.checks += 1
        if difference is not None:
            world.oracle.fail(
                "replay", f"partition {partition.number}: the live state differs from a replay of the disk at {difference}"
            )
    return True


AGENTS = {"claimer": claimer, "submitter": submitter, "worker": worker}
