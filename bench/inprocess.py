"""In-process legs, each run in its own process on one core (`python -m bench.inprocess LEG ...`).

- `kernel`: claim cycles per second through the kernel's commands (parsed from their JSON bodies,
  as the HTTP shell does) with many concurrent callers and no HTTP: the kernel's own cost
  (parsing and checks, state machines, actors, supervisor, in-memory journal).
- `cold`: the claim cycles of `kernel`, each on a key of its own never used before, so each
  command's key has no actor: past the first moment (1,024 actors linger, the most a partition
  keeps) each actor is given a task for its one call and retires as soon as it is run, as a key
  renewed every few seconds does (`bench/agents.py`). What an actor's start and retirement cost.
- `tasks`: task lifecycles per second (submit, receive, complete, read the result), each caller on
  its own scope (so its own queue).
- `floor`: what the actor-per-key shape costs before the kernel does anything: each caller hands
  a call to a task of its own key's and parks until that task hands the answer back (trio's
  lowest-level park and reschedule, as `actors/partition.py` does), with the kernel legs'
  callers; round trips per CPU-second. Every command is one such round trip, so a claim cycle
  (two commands) can go no faster than half of it, and a task lifecycle (three commands and a
  read) a third.
- `scale`: resident memory per idle claim: N claims acquired with a long lease and left alone,
  measured as the growth of the process's RSS over an empty kernel (after a full collection).
- `scale-tasks`: the same per queued task (submitted with no input, nobody receiving).
- `recovery`: writes a WAL of N records (claim acquires, renewals and releases, 60/25/15 %, with
  the writer in bench/_logs.py) and times `open_store` on it in a fresh process (`recover`): read
  and verify every frame, replay through the state machines, record the boot, as `runstate serve
  --data-dir` does at start.

`kernel` and `tasks` take `--gc on|off|frozen` (on: as a server runs; off: no collection, to
see the collector's share; frozen: what is alive at the start frozen, `gc.freeze()`, and a
young generation of 10,000 objects, a tuning the server's process could make).

Each prints one JSON line, `BENCH_JSON {...}`, that bench/run.py reads.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import sys
import time

import orjson
import trio

from runstate.actors import Clock, IdSource, Kernel, KernelState, Limits

from runstate.actors import commands as c
from runstate.actors import reads

from .procs import pin_self, rss_bytes

SPACE = "default"


def report(document: dict) -> None:
    sys.stdout.write("BENCH_JSON " + orjson.dumps(document).decode() + "\n")
    sys.stdout.flush()


async def _until_actors_retire(kernel: Kernel, timeout_s: float = 10.0) -> int:
    """Wait until no actor is alive (they may linger a moment after their last call); returns how
    many are still alive after `timeout_s`. An idle key has no actor: only its state is counted."""
    with trio.move_on_after(timeout_s):
        while kernel.actors:
            await trio.sleep(0.1)
    return kernel.actors


# The scale legs hold up to a million claims or tasks in one space: past the default caps of a
# space (`actors/caps.py`), which an operator raises the same way.
SCALE_LIMITS = dataclasses.replace(
    Limits(), space_claims_max=10_000_000, space_tasks_max=10_000_000, backlog_limit_max=10_000_000,
    space_entities_max=100_000_000,
)


async def _with_kernel(body, limits: Limits | None = None):  # type: ignore[no-untyped-def]
    kernel = Kernel(state=KernelState(limits or Limits()), clock=Clock(), ids=IdSource())
    async with trio.open_nursery() as nursery:
        await nursery.start(kernel.run)
        try:
            return await body(kernel)
        finally:
            nursery.cancel_scope.cancel()


async def _count_cycles(callers: int, make_cycle, warmup_s: float, duration_s: float) -> dict:  # type: ignore[no-untyped-def]
    """Run `callers` concurrent callers, each repeating the cycle `await make_cycle(i)` returns,
    and count the cycles finished within `duration_s` after a `warmup_s` warm-up."""
    counting = False
    stop = False
    done = 0

    async def caller(i: int) -> None:
        nonlocal done
        cycle = await make_cycle(i)
        while not stop:
            await cycle()
            if counting:
                done += 1

    async with trio.open_nursery() as nursery:
        for i in range(callers):
            nursery.start_soon(caller, i)
        await trio.sleep(warmup_s)
        counting = True
        began, cpu_began = time.perf_counter(), time.process_time()
        await trio.sleep(duration_s)
        counting = False
        elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu_began
        stop = True
    return {"callers": callers, "duration_s": elapsed, "count": done, "per_s": done / elapsed, "cpu": cpu / elapsed}


IN_SPACE = {"space": SPACE}


async def run(kernel: Kernel, command_class: type, body: dict, params: dict[str, str] = IN_SPACE):  # type: ignore[no-untyped-def]
    """One command as the HTTP shell runs it, minus HTTP: parsed from its body and path
    parameters (`params`, the space included), then submitted."""
    command = kernel.parse(command_class, body, params)
    return await kernel.submit(command, wait_ms=getattr(command, "wait_ms", None))


async def kernel_claims(callers: int, duration_s: float, warmup_s: float) -> dict:
    async def body(kernel: Kernel) -> dict:
        scope_id = (await run(kernel, c.CreateScope, {"name": "bench"})).id

        async def make_cycle(i: int):  # type: ignore[no-untyped-def]
            acquire = {"scopeId": scope_id, "key": f"k{i}", "holder": f"worker-{i}", "holderSession": f"session-{i}", "leaseSeconds": 30}
            release = {"space": SPACE, "key": acquire["key"]}

            async def cycle() -> None:
                view = await run(kernel, c.AcquireClaim, acquire)
                await run(kernel, c.ReleaseClaim, {"token": view.token}, release)

            return cycle

        return await _count_cycles(callers, make_cycle, warmup_s, duration_s)

    return await _with_kernel(body)


async def kernel_claims_cold(callers: int, duration_s: float, warmup_s: float) -> dict:
    async def body(kernel: Kernel) -> dict:
        scope_id = (await run(kernel, c.CreateScope, {"name": "bench"})).id

        async def make_cycle(i: int):  # type: ignore[no-untyped-def]
            count = 0

            async def cycle() -> None:
                nonlocal count
                count += 1
                key = f"k{i}-{count}"
                acquire = {"scopeId": scope_id, "key": key, "holder": f"worker-{i}", "holderSession": f"session-{i}", "leaseSeconds": 30}
                view = await run(kernel, c.AcquireClaim, acquire)
                await run(kernel, c.ReleaseClaim, {"token": view.token}, {"space": SPACE, "key": key})

            return cycle

        return await _count_cycles(callers, make_cycle, warmup_s, duration_s)

    return await _with_kernel(body)


async def floor(callers: int, duration_s: float, warmup_s: float) -> dict:
    """Round trips between each caller and a task of its own (a key's actor), nothing done in
    between: the switching every command pays in the kernel's shape."""

    def abort(_: object) -> trio.lowlevel.Abort:
        return trio.lowlevel.Abort.SUCCEEDED

    async with trio.open_nursery() as actors:

        async def make_cycle(i: int):  # type: ignore[no-untyped-def]
            parked: dict[str, trio.lowlevel.Task | None] = {"actor": None, "caller": None}
            started = trio.Event()

            async def actor() -> None:
                while True:
                    parked["actor"] = trio.lowlevel.current_task()
                    started.set()
                    await trio.lowlevel.wait_task_rescheduled(abort)
                    caller, parked["caller"] = parked["caller"], None
                    assert caller is not None, "the actor is woken only by a call"
                    trio.lowlevel.reschedule(caller)

            actors.start_soon(actor)
            await started.wait()

            async def cycle() -> None:
                parked["caller"] = trio.lowlevel.current_task()
                task, parked["actor"] = parked["actor"], None
                assert task is not None, "one call at a time per key"
                trio.lowlevel.reschedule(task)
                await trio.lowlevel.wait_task_rescheduled(abort)

            return cycle

        result = await _count_cycles(callers, make_cycle, warmup_s, duration_s)
        actors.cancel_scope.cancel()
    return result


async def _rss_growth(kernel: Kernel, count: int, callers: int, make_one, what: str) -> dict:  # type: ignore[no-untyped-def]
    """Make `count` entities with `callers` concurrent callers (`await make_one(i, j)` makes one),
    let every actor retire, and report the RSS grown over the baseline taken before."""
    await _until_actors_retire(kernel)
    gc.collect()
    baseline = rss_bytes()
    began = time.perf_counter()
    per_caller = count // callers

    async def caller(i: int) -> None:
        for j in range(per_caller):
            await make_one(i, j)

    async with trio.open_nursery() as nursery:
        for i in range(callers):
            nursery.start_soon(caller, i)
    built_s = time.perf_counter() - began
    alive = await _until_actors_retire(kernel)
    gc.collect()
    grown = rss_bytes() - baseline
    made = per_caller * callers
    return {
        what: made,
        "rss_baseline_bytes": baseline,
        "rss_grown_bytes": grown,
        f"bytes_per_{what[:-1]}": grown / made,
        "build_s": built_s,
        "actors_alive": alive,
    }


async def scale_claims(count: int, callers: int) -> dict:
    async def body(kernel: Kernel) -> dict:
        scope_id = (await run(kernel, c.CreateScope, {"name": "bench"})).id
        # A first claim, so that every structure a claim needs exists before the baseline.
        await run(kernel, c.AcquireClaim, {"scopeId": scope_id, "key": "warm", "holder": "h", "holderSession": "s", "leaseSeconds": 600})

        async def make_one(i: int, j: int) -> None:
            # Keys, holders and sessions as an agent swarm would send them (not interned).
            body = {"scopeId": scope_id, "key": f"company:{i}-{j}", "holder": f"worker-{i}", "holderSession": f"session-{i}", "leaseSeconds": 600}
            await run(kernel, c.AcquireClaim, body)

        return await _rss_growth(kernel, count, callers, make_one, "claims")

    return await _with_kernel(body, SCALE_LIMITS)


async def kernel_tasks(callers: int, duration_s: float, warmup_s: float) -> dict:
    async def body(kernel: Kernel) -> dict:
        mailbox_id = (await run(kernel, c.CreateMailbox, {"name": "bench"})).id

        async def make_cycle(i: int):  # type: ignore[no-untyped-def]
            scope_id = (await run(kernel, c.CreateScope, {"name": f"caller-{i}"})).id
            receive = {"scopeId": scope_id, "holder": f"worker-{i}", "holderSession": f"session-{i}", "leaseSeconds": 30, "waitMs": 10_000}
            in_mailbox = {"space": SPACE, "mailbox_id": mailbox_id}
            count = 0

            async def cycle() -> None:
                nonlocal count
                count += 1
                submit = {"scopeId": scope_id, "mailboxId": mailbox_id, "taskKey": f"w{i}-t{count}", "input": {"n": count}}
                task = await run(kernel, c.SubmitTask, submit)
                delivery = await run(kernel, c.Receive, receive, in_mailbox)
                await run(kernel, c.CompleteDelivery, {"token": delivery.token, "result": {"ok": True}}, {"space": SPACE, "message_id": delivery.message.id})
                if reads.task(kernel, SPACE, task.id).state != "SUCCEEDED":
                    raise RuntimeError("the task did not show its result")

            return cycle

        return await _count_cycles(callers, make_cycle, warmup_s, duration_s)

    return await _with_kernel(body)


async def scale_tasks(count: int, callers: int) -> dict:
    async def body(kernel: Kernel) -> dict:
        mailbox_id = (await run(kernel, c.CreateMailbox, {"name": "bench"})).id
        scope_ids = [(await run(kernel, c.CreateScope, {"name": f"caller-{i}"})).id for i in range(callers)]
        await run(kernel, c.SubmitTask, {"scopeId": scope_ids[0], "mailboxId": mailbox_id, "taskKey": "warm"})

        async def make_one(i: int, j: int) -> None:
            await run(kernel, c.SubmitTask, {"scopeId": scope_ids[i], "mailboxId": mailbox_id, "taskKey": f"task:{i}-{j}"})

        return await _rss_growth(kernel, count, callers, make_one, "tasks")

    return await _with_kernel(body, SCALE_LIMITS)


def write_log(records: int, directory: str) -> dict:
    from ._logs import write_claims_log

    claims = int(records * 0.6)
    renews = int(records * 0.25)
    began = time.perf_counter()
    # Two records more than asked: the boot and the scope come first.
    written = write_claims_log(directory, claims, renews=renews, releases=records - claims - renews - 2)
    return {"records": written, "write_s": time.perf_counter() - began}


async def recover(directory: str) -> dict:
    import resource

    from runstate.actors import Clock
    from runstate.server.durable import state_model
    from runstate.snapshots import open_store

    began, cpu_began = time.perf_counter(), time.process_time()
    store = await open_store(directory, model=state_model(), clock=Clock(), fsync="always")
    took, cpu = time.perf_counter() - began, time.process_time() - cpu_began
    report_ = store.report
    store.close()
    return {
        "seconds": took,
        "cpu_s": cpu,
        "replayed": report_.records,
        "snapshot_lsn": report_.snapshot_lsn,
        "wal_bytes": report_.wal_bytes,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


# The young generation's size with `--gc frozen` (CPython's default is 700).
FROZEN_GC_GEN0 = 10_000


def _collector(mode: str) -> None:
    """Set the garbage collector for a leg (`--gc`): as it is, off, or frozen with a larger young generation."""
    if mode == "off":
        gc.disable()
    elif mode == "frozen":
        gc.collect()
        gc.freeze()
        gc.set_threshold(FROZEN_GC_GEN0, *gc.get_threshold()[1:])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="leg", required=True)
    k = commands.add_parser("kernel")
    k.add_argument("--callers", type=int, default=64)
    k.add_argument("--seconds", type=float, default=5)
    k.add_argument("--warmup", type=float, default=1)
    kc = commands.add_parser("cold")
    kc.add_argument("--callers", type=int, default=64)
    kc.add_argument("--seconds", type=float, default=5)
    kc.add_argument("--warmup", type=float, default=1)
    t = commands.add_parser("tasks")
    t.add_argument("--callers", type=int, default=64)
    t.add_argument("--seconds", type=float, default=5)
    t.add_argument("--warmup", type=float, default=1)
    f = commands.add_parser("floor")
    f.add_argument("--callers", type=int, default=64)
    f.add_argument("--seconds", type=float, default=5)
    f.add_argument("--warmup", type=float, default=1)
    s = commands.add_parser("scale")
    s.add_argument("--claims", type=int, default=100_000)
    s.add_argument("--callers", type=int, default=100)
    st = commands.add_parser("scale-tasks")
    st.add_argument("--tasks", type=int, default=100_000)
    st.add_argument("--callers", type=int, default=100)
    w = commands.add_parser("write-log")
    w.add_argument("--records", type=int, default=1_000_000)
    w.add_argument("directory")
    r = commands.add_parser("recover")
    r.add_argument("directory")
    for leg in (k, kc, t):
        leg.add_argument("--gc", choices=("on", "off", "frozen"), default="on")
    args = parser.parse_args(argv)
    pin_self()
    _collector(getattr(args, "gc", "on"))
    if args.leg == "kernel":
        report(trio.run(kernel_claims, args.callers, args.seconds, args.warmup))
    elif args.leg == "cold":
        report(trio.run(kernel_claims_cold, args.callers, args.seconds, args.warmup))
    elif args.leg == "floor":
        report(trio.run(floor, args.callers, args.seconds, args.warmup))
    elif args.leg == "scale":
        report(trio.run(scale_claims, args.claims, args.callers))
    elif args.leg == "write-log":
        report(write_log(args.records, args.directory))
    elif args.leg == "recover":
        report(trio.run(recover, args.directory))
    elif args.leg == "tasks":
        report(trio.run(kernel_tasks, args.callers, args.seconds, args.warmup))
    elif args.leg == "scale-tasks":
        report(trio.run(scale_tasks, args.tasks, args.callers))


if __name__ == "__main__":
    main()
