"""Running one seed, a batch of seeds, or a soak; the `make sim` / `make soak` command line.

    python -m tests.sim                     # a batch: SIM_SEEDS seeds (default 300), as `make sim` runs them
    python -m tests.sim --seed 17           # replay one seed exactly, print its trace on failure
    python -m tests.sim --seconds 3600      # soak: new seeds until an hour of wall time is used
    python -m tests.sim --seed 17 --trace   # print the whole trace

A seed decides everything: the fsync policy, the agents' choices (each agent has its own
`random.Random` derived from the seed and its name), the crashes, the kernel's ids and tokens
(`IdSource`), the SDK's jitter and trio's own scheduling order (`trio._core._run._r`, which
shuffles each batch of runnable tasks). The run is one `trio.run` under `MockClock` with autojump,
so virtual time passes only when every task waits; the same seed gives the same trace, byte for
byte (`tests/sim/test_sim.py` checks it). The last line a batch prints is
`sim: N seeds, M failures`.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import itertools
import logging
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
import weakref
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterator

import trio
import trio.testing

from runstate import _runtime as sdk_runtime
from runstate.actors import Limits
from runstate.actors.runs import sweep_ms

from . import agents, batch_agents, capacity
from .coordination_agents import COORDINATION_AGENTS
from .once_agents import once_agent
from .operator_agents import operator
from .cluster import Cluster, SimTransport, now_ms
from .oracle import Oracle, Violation

__all__ = ["SeedResult", "run_seed", "run_seed_apart", "run_seeds_until", "run_batch", "main", "VIRTUAL_SECONDS", "DEFAULT_SEEDS", "CI_SEEDS", "FOUND_SEEDS"]

# Virtual seconds one seed simulates (SIM_VIRTUAL_S to change it); each seed crashes the server
# every CRASH_MEAN_S on average, so a seed sees about four crashes and recoveries.
VIRTUAL_SECONDS = float(os.environ.get("SIM_VIRTUAL_S", "120"))
CRASH_MEAN_S = 30.0
DEFAULT_SEEDS = 300
# The slice of the batch `make test` runs (seeds 1 to CI_SEEDS, a test each): `make sim` runs the
# whole batch and `make soak` new seeds for as long as asked. The injected-bug tests do not depend on
# it: each runs the seeds that catch its bug. Past the slice, the seeds that once found a defect run
# too (124: a barrier's release recorded apart from its arrival).
CI_SEEDS = 24
FOUND_SEEDS = (124,)


@dataclass
class SeedResult:
    seed: int
    fsync: str
    virtual_s: float
    wall_s: float
    violations: list[Violation]
    trace: list[str] = field(repr=False)
    stats: dict[str, int]

    @property
    def digest(self) -> str:
        return hashlib.sha256("\n".join(self.trace).encode()).hexdigest()[:16]

    def describe(self) -> str:
        lines = [f"seed {self.seed} (fsync {self.fsync}): {len(self.violations)} violation(s)"]
        for violation in self.violations:
            lines.append(f"  [{violation.invariant}] at {violation.at_ms}: {violation.message}")
            lines.append("  trace before it:")
            lines.extend(f"    {line}" for line in violation.trace[-25:])
        return "\n".join(lines)


def _scheduler_seed(seed: int) -> None:
    """Seed every source of randomness the run reads that is not already an input."""
    trio._core._run._r.seed(seed)  # the order trio runs each batch of ready tasks in
    sdk_runtime._rng.seed(seed)  # the SDK's jitter (renewal intervals, retry back-off)
    global _sequence, _task_base
    _sequence = itertools.count()  # hashes and tiebreakers count from zero in every run
    _task_base = trio._core._run.Task.__attrs_attrs__._counter.default.factory()


# Trio is deterministic given its seeded shuffle (and the sort below), except where it falls back
# on memory addresses:
# ties between deadlines are broken by `id(scope)`, and tasks and cancel statuses live in sets,
# which iterate in the order of their hashes (addresses) when a cancellation is delivered. In
# virtual time deadlines coincide exactly and cancellations are everywhere (every long poll,
# every crash), so the order of events would depend on the allocator. The simulation gives those
# objects hashes (and deadlines a tiebreaker) in the order they were made instead, which a seed
# reproduces in any process.
_sequence = itertools.count()
_status_hashes: dict[int, int] = {}
_task_base = 0


def _add_deadline(self: Any, deadline: float, cancel_scope: Any) -> None:
    heapq.heappush(self._heap, (deadline, next(_sequence), cancel_scope))
    self._active += 1


def _status_hash(self: Any) -> int:
    key = id(self)
    value = _status_hashes.get(key)
    if value is None:
        value = _status_hashes[key] = next(_sequence)
        weakref.finalize(self, _status_hashes.pop, key, None)
    return value


def _deterministic_trio() -> None:
    run = trio._core._run
    # What trio does when Hypothesis is loaded: each batch of ready tasks is sorted by creation
    # before the seeded shuffle, so the order tasks were woken in does not matter.
    run._ALLOW_DETERMINISTIC_SCHEDULING = True
    run.Deadlines.add = _add_deadline  # type: ignore[method-assign]
    run.Task.__hash__ = lambda self: self._counter - _task_base  # type: ignore[method-assign]
    run.CancelStatus.__hash__ = _status_hash  # type: ignore[method-assign]


_deterministic_trio()


def run_seed(seed: int, *, virtual_s: float = VIRTUAL_SECONDS, crash_mean_s: float = CRASH_MEAN_S, keep_dir: bool = False) -> SeedResult:
    """Simulate one seed and return what the oracle found."""
    rng = random.Random(seed)
    fsync = rng.choice(["always", "always", "batch", "off"])
    root = tempfile.mkdtemp(prefix=f"sim-{seed}-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    trace: list[str] = []
    started = time.perf_counter()
    quieted = {name: logging.getLogger(name).level for name in ("runstate", "hypercorn")}
    for name in quieted:  # (put back at the end: tests run in the same process afterwards)
        logging.getLogger(name).setLevel(logging.CRITICAL)
    holder: dict = {}
    try:
        _scheduler_seed(seed)
        trio.run(_simulate, seed, rng, fsync, root, trace, virtual_s, crash_mean_s, holder, clock=trio.testing.MockClock(autojump_threshold=0))
    except Exception as error:  # the simulation itself broke: report it like a violation
        details = "".join(traceback.format_exception(error)).strip().splitlines()
        holder["oracle"].fail("sim", f"the run raised {type(error).__name__}: " + " | ".join(details[-6:]))
    finally:
        for name, level in quieted.items():
            logging.getLogger(name).setLevel(level)
        if not keep_dir:
            shutil.rmtree(root, ignore_errors=True)
    oracle: Oracle = holder["oracle"]
    cluster: Cluster = holder["cluster"]
    transport: SimTransport = holder["transport"]
    stats = {
        "checks": oracle.checks,
        "requests": transport.exchanges,
        "lost_replies": transport.lost_replies,
        "crashes": cluster.crashes,
        "power_cuts": cluster.fs.power_cuts,
        "torn_files": cluster.fs.torn_files,
        "kills": cluster.fs.kills,
        "disk_faults": cluster.fs.disk_faults,
        "partitions": cluster.partitions,
        "recoveries": len(cluster.recoveries),
        "repairs": sum(len(report.repairs) for report in cluster.recoveries),
        "snapshots": sum(1 for report in cluster.recoveries if report.snapshot_lsn),
        "claim_grants": sum(len(v) for k, v in oracle.leases.items() if k[0] == "claim"),
        "deliveries": sum(len(v) for k, v in oracle.leases.items() if k[0] == "message"),
        "tasks": len(oracle.tasks),
        "outcomes": len(oracle.outcomes),
        "forced_releases": sum(1 for leases in oracle.leases.values() for lease in leases if lease.forced_acked_ms is not None),
        "dead_letters_gone": len(oracle.gone),
        "runs_removed": len(oracle.removed),
        # -- capacity --
        "pool_grants": len(holder["world"].capacity.grants),
        "consumptions": len(holder["world"].capacity.consumptions),
        "waiters_granted": sum(1 for _, window in holder["world"].capacity.waiters.values() if window >= 0),
        "refunds": sum(1 for _, _, given in holder["world"].capacity.refunds.values() if given),
        "reservations": len(holder["world"].capacity.reservations),
        "admissions": holder["world"].capacity.admissions,
        "pool_waiters_granted": len(holder["world"].capacity.pool_waiters),
    }
    return SeedResult(seed, fsync, holder.get("virtual_s", 0.0), time.perf_counter() - started, oracle.violations, trace, stats)


# Data partitions a seed's server runs with (the default, and several).
PARTITION_COUNTS = (1, 1, 2, 4)

# The limits a seed's server runs with, by the seed: the defaults, and (one seed in three) a
# space's caps low enough that its stored idempotent answers are dropped for room and some writes
# are refused at a cap. Two seeds in three remove ended runs 30 s after their end (swept every 3 s).
LIMITS = (
    Limits(),
    Limits().replace(ended_run_retention_s=30),
    Limits().replace(space_entities_max=400, space_payload_bytes_max=48 * 1024, ended_run_retention_s=30),
)


async def _simulate(seed: int, rng: random.Random, fsync: str, root: str, trace: list[str], virtual_s: float, crash_mean_s: float, holder: dict) -> None:
    oracle = Oracle(now_ms, trace)
    limits = LIMITS[seed % len(LIMITS)]  # not drawn: a seed's random choices stay as they were
    oracle.retention_ms = limits.ended_run_retention_s * 1000
    partitions = rng.choice(PARTITION_COUNTS)
    cluster = Cluster(
        seed, os.path.join(root, "data"), rng, fsync=fsync, limits=limits, partitions=partitions, on_failure=oracle.fail,
        trace=lambda text: trace.append(f"{trio.current_time():10.3f} {'server':<9} {text}"),
    )
    transport = SimTransport(cluster, random.Random(rng.random()), reply_loss_p=0.01)
    holder.update(oracle=oracle, cluster=cluster, transport=transport)
    world = agents.World(seed, cluster, transport, oracle, trace, end_s=virtual_s)
    holder["world"] = world
    async with trio.open_nursery() as nursery:
        await nursery.start(cluster.run)
        if not await cluster.start():
            nursery.cancel_scope.cancel()
            return
        async with trio.open_nursery() as people:
            people.start_soon(agents.manager, world, "manager")
            for number in range(4):
                people.start_soon(agents.claimer, world, f"claimer{number}")
            for number in range(3):
                people.start_soon(agents.submitter, world, f"submit{number}")
            for number in range(4):
                people.start_soon(agents.worker, world, f"worker{number}")
            # Agents of one process on one client: coalesced calls, renewal batches, prefetch.
            people.start_soon(batch_agents.crew, world, "crew")
            people.start_soon(batch_agents.prefetcher, world, "prefetch")
            # -- capacity --
            for number in range(2):
                people.start_soon(capacity.pooler, world, f"pooler{number}")
                people.start_soon(capacity.slot_waiter, world, f"slots{number}")
            for number in range(2):
                people.start_soon(capacity.quota_taker, world, f"quota{number}")
                people.start_soon(capacity.spender, world, f"spender{number}")
            people.start_soon(capacity.admission_submitter, world, "admsubmit")
            for number in range(2):
                people.start_soon(capacity.admitter, world, f"admitter{number}")
            people.start_soon(capacity.returner, world, "returner")
            for number in range(2):  # (with several partitions: a space in another one than SPACE's)
                people.start_soon(agents.neighbor, world, f"neighbor{number}")
            people.start_soon(agents.crasher, world, "crasher", crash_mean_s)
            people.start_soon(agents.auditor, world, "auditor")
            for kind, agent in COORDINATION_AGENTS.items():  # barriers, timers, groups, the event log
                people.start_soon(agent, world, kind)
            for number in range(2):  # -- once --
                people.start_soon(once_agent, world, f"once{number}")
            people.start_soon(operator, world, "operator")
            with trio.move_on_at(virtual_s + 120) as watchdog:  # agents finish what they hold
                await _wait_for(people)
            if watchdog.cancelled_caught:
                oracle.fail("hang", "agents were still busy 120 virtual seconds after the end")
                people.cancel_scope.cancel()
        # The end: one last power cut and recovery, checked like the others.
        cluster.crash("kill" if fsync in ("batch", "off") else "power")
        await agents.restart(world)
        agents.audit(world)
        if oracle.retention_ms:  # the removals due by now are made a sweep after the start at the latest
            await trio.sleep(sweep_ms(limits) / 1000 + 1)
            agents.check_retention(world)
        holder["virtual_s"] = trio.current_time()
        await cluster.stop()
        nursery.cancel_scope.cancel()


async def _wait_for(people: trio.Nursery) -> None:
    while people.child_tasks:
        await trio.sleep(1)


def run_seeds_until(
    invariant: str, seeds: tuple[int, ...], *, virtual_s: float, crash_mean_s: float = CRASH_MEAN_S
) -> tuple[set[str], SeedResult]:
    """Simulate `seeds` in turn until one breaks `invariant` (an injected bug's test): the
    invariants broken so far, and the last seed's result."""
    found: set[str] = set()
    for seed in seeds:
        result = run_seed(seed, virtual_s=virtual_s, crash_mean_s=crash_mean_s)
        found |= {violation.invariant for violation in result.violations}
        if invariant in found:
            break
    return found, result


def _one(seed: int) -> SeedResult:
    result = run_seed(seed)
    if not result.violations:
        result.trace = []  # keep what crosses between processes small
    return result


def run_seed_apart(seed: int) -> SeedResult:
    """One seed in a process of its own, forked from this one: how the CI batch runs each seed (a
    test per seed, shared by pytest's processes). A seed leaves about 10 MB behind in the process
    that ran it, held where no Python object reaches it (`gc` finds no survivor), so hundreds of
    seeds in one long-lived process would pile it up; a process per seed gives it all back."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        return pool.submit(_one, seed).result()


SEEDS_PER_WORKER_PROCESS = 8


def run_batch(seeds: list[int], workers: int = 1) -> Iterator[SeedResult]:
    """Yield each seed's result (in seed order), using `workers` processes."""
    if workers <= 1:
        for seed in seeds:
            yield _one(seed)
        return
    # A fresh pool every few seeds per process: a seed's leftovers (a kernel's caches, a trace's
    # strings) never pile up over hundreds of seeds in one process. (Not `max_tasks_per_child`:
    # on Python 3.11 the pool can hang for good when it replaces a worker that has finished.)
    step = workers * SEEDS_PER_WORKER_PROCESS
    for start in range(0, len(seeds), step):
        with ProcessPoolExecutor(workers) as pool:
            yield from pool.map(_one, seeds[start:start + step])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument("--seeds", type=int, default=int(os.environ.get("SIM_SEEDS", DEFAULT_SEEDS)), help="how many seeds (from --first)")
    parser.add_argument("--first", type=int, default=1, help="the first seed of a batch")
    parser.add_argument("--seconds", type=float, help="soak: run new seeds until this much wall time has passed")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes (default: one per core)")
    parser.add_argument("--trace", action="store_true", help="print the whole trace of --seed")
    args = parser.parse_args(argv)

    if args.seed is not None:
        result = run_seed(args.seed)
        if args.trace:
            print("\n".join(result.trace))
        print(result.describe() if result.violations else f"seed {result.seed} (fsync {result.fsync}): ok, {result.stats}")
        print(f"trace digest {result.digest}, {len(result.trace)} lines, {result.virtual_s:.0f} virtual s in {result.wall_s:.2f} s")
        print(f"sim: 1 seeds, {1 if result.violations else 0} failures")
        return 1 if result.violations else 0

    started = time.perf_counter()
    if args.seconds is not None:
        seeds = _soak_seeds(args.first, args.seconds, started, args.workers)
    else:
        seeds = iter(range(args.first, args.first + args.seeds))
    count = failures = 0
    virtual = 0.0
    totals: dict[str, int] = {}
    for result in _run_stream(seeds, args.workers):
        count += 1
        virtual += result.virtual_s
        for name, value in result.stats.items():
            totals[name] = totals.get(name, 0) + value
        if result.violations:
            failures += 1
            print(result.describe(), flush=True)
            print(f"  replay: make sim SEED={result.seed}", flush=True)
    wall = time.perf_counter() - started
    print(f"{virtual / 3600:.1f} virtual hours in {wall:.1f} s; totals {totals}")
    print(f"sim: {count} seeds, {failures} failures")
    return 1 if failures else 0


def _soak_seeds(first: int, seconds: float, started: float, workers: int) -> Iterator[int]:
    seed = first
    while time.perf_counter() - started < seconds:
        for _ in range(max(1, workers) * 4):
            yield seed
            seed += 1


def _run_stream(seeds: Iterator[int], workers: int) -> Iterator[SeedResult]:
    chunk: list[int] = []
    for seed in seeds:
        chunk.append(seed)
        if len(chunk) >= max(1, workers) * 4:
            yield from run_batch(chunk, workers)
            chunk = []
    if chunk:
        yield from run_batch(chunk, workers)


if __name__ == "__main__":
    sys.exit(main())
