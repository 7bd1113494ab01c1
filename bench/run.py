"""Run the benchmark legs and print one table: `python -m bench.run [--quick] [--only LEGS]`.

Every leg is measured in the same run as its reference, and compared as a ratio, because absolute
figures drift on shared machines. Throughput legs alternate between the reference and the measured
servers inside each repetition (in reverse order every other repetition), and the ratio is taken
per repetition (median over repetitions).
See bench/README.md for what each leg means and the targets.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import cluster as cluster_legs
from . import agents as agents_leg
from . import console, hotkeys, inprocess_runner, queues, swarm
from .harness import ClaimSession, RedisLockSession, drive, run_bounded
from .procs import PINNED, RESULTS, ROOT, Processes, find_tool, missing_tool_message, pin_self, python
from .report import INFO, MISS, NA, PASS, REFERENCE, USABLE_CPUS, Row, ms, n, table, verdict_at_least, verdict_at_most, write_json
from .takeover import takeover_retry_after, takeover_sdk_loop
from .targets import (
    Target,
    create_capacity,
    create_scope,
    data_root,
    journal_on_disk,
    remove_data_root,
    start_ceiling,
    start_redis,
    start_runstate,
)
from .wrk import WrkResult, run_wrk

# The targets (bench/README.md). They live here and in bench/README.md, never in tests.
CYCLE_VS_CEILING_BATCH = 0.85
CYCLE_VS_CEILING_ALWAYS = 0.70
KERNEL_CLAIM_CYCLES_S = 50_000
KERNEL_TASK_LIFECYCLES_S = 20_000
WAKEUP_P50_MS = 2.0
TAKEOVER_MS = 50.0
# A takeover through the SDK's wait=True, parked on the server: p50 after the expiry.
SDK_TAKEOVER_P50_MS = 5.0
BYTES_PER_IDLE_CLAIM = 1024
BYTES_PER_QUEUED_TASK = 2048
RECOVERY_1M_S = 10.0
# A past point of a space with 1M records of history, read through HTTP (issue: under 2 s).
HISTORY_POINT_S = 2.0

CONNECTIONS = (1, 16)
LEGS = ("http", "capacity", "latency", "peer", "takeover", "queues", "swarm", "kernel", "scale", "console", "cluster",
        "etcdsize", "history", "historycluster", "agents", "hotkeys")
# Connected agents on one node (issue targets at 10,000): RSS, steady-state CPU, renewal p99.
AGENTS_RSS_MAX = 1 << 30
AGENTS_CPU_MAX = 0.30
AGENTS_P99_MS = 50.0
# Handoff efficiency of hot keys in the few-agent shapes.
HOT_EFFICIENCY_MIN = 0.9


@dataclass(frozen=True)
class Mode:
    name: str
    wrk_s: float
    reps: int
    harness_s: float
    warmup_s: float
    kernel_s: float
    kernel_reps: int
    scale_counts: tuple[int, ...]
    takeover_keys: int
    sdk_keys: int
    redis_aof: bool
    wake_samples: int
    peer_reps: int
    recovery_records: int
    swarm: swarm.SwarmSize


QUICK = Mode("quick", wrk_s=2, reps=3, harness_s=2, warmup_s=0.5, kernel_s=3, kernel_reps=1,
             scale_counts=(100_000,), takeover_keys=16, sdk_keys=8, redis_aof=False, wake_samples=100,
             peer_reps=1, recovery_records=250_000, swarm=swarm.QUICK)
FULL = Mode("full", wrk_s=3, reps=8, harness_s=6, warmup_s=1, kernel_s=6, kernel_reps=3,
            scale_counts=(100_000, 1_000_000), takeover_keys=32, sdk_keys=16, redis_aof=True, wake_samples=400,
            peer_reps=2, recovery_records=1_000_000, swarm=swarm.FULL)


class Bench:
    def __init__(self, mode: Mode, legs: set[str], procs: Processes) -> None:
        self.mode = mode
        self.legs = legs
        self.procs = procs
        self.rows: list[Row] = []
        self.notes: list[str] = []
        self.wrk: str | None = None
        self.redis_server: str | None = None
        self.claim_targets: list[tuple[str, Target, float | None]] = []  # (label, server, target ratio)
        self.etcd_size_s: float | None = None  # (the etcdsize leg's length; None: by the mode)
        self.ceiling: Target

    # -- servers ---------------------------------------------------------------------------------

    def start_servers(self) -> None:
        """The ceiling and the claim-cycle servers: --fsync batch, --fsync always, --fsync off, in memory."""
        self.ceiling = start_ceiling(self.procs)
        batch = start_runstate(self.procs, "fsync-batch", fsync="batch", data_root=data_root())
        run_bounded(create_scope(batch, "probe"))
        if not journal_on_disk(batch):
            raise RuntimeError(f"the --fsync batch server wrote nothing into {batch.data_dir}: the bench would not measure the journal")
        always = start_runstate(self.procs, "fsync-always", fsync="always", data_root=data_root())
        off = start_runstate(self.procs, "fsync-off", fsync="off", data_root=data_root())
        memory = start_runstate(self.procs, "memory")
        self.claim_targets = [
            ("--fsync batch", batch, CYCLE_VS_CEILING_BATCH),
            ("--fsync always", always, CYCLE_VS_CEILING_ALWAYS),
            ("--fsync off", off, None),  # what batch, which answers after the write too, is measured against
            ("in memory, no data dir", memory, None),
        ]

    # -- legs ------------------------------------------------------------------------------------

    def http(self) -> None:
        if self.wrk is None:
            self.rows.append(Row("HTTP ceiling and claim cycle (wrk)", missing_tool_message("wrk", "wrk"), verdict=NA))
            return

        def claim_cycle(server: Target) -> Callable[[int], WrkResult]:
            def run(connections: int) -> WrkResult:
                scope_id = run_bounded(create_scope(server, "wrk"))
                return run_wrk(self.procs, self.wrk, server.base_url, "claim_cycle.lua", [server.space, scope_id, server.api_key],  # type: ignore[arg-type]
                               connections=connections, duration_s=self.mode.wrk_s, server_pid=server.pid)
            return run

        runs, ratios, cost_ratios = self._against_ceiling({label: claim_cycle(server) for label, server, _ in self.claim_targets})
        for connections in CONNECTIONS:
            base_runs = runs[("ceiling", connections)]
            base_rps = med(r.rps for r in base_runs)
            self.rows.append(Row(
                f"HTTP ceiling, {connections} conn (wrk)",
                f"{n(base_rps)} req/s, p50 {ms(med(r.p50_ms for r in base_runs))}, p99 {ms(med(r.p99_ms for r in base_runs))}",
                verdict=REFERENCE,
                data={"runs": [r.as_dict() for r in base_runs]},
            ))
            for label, _, minimum in self.claim_targets:
                results = runs[(label, connections)]
                ratio = med(ratios[(label, connections)])
                cost_ratio = med(cost_ratios[(label, connections)])
                figure = cycle_figure(results, "", f"; per server CPU-second {cost_ratio:.2f}")
                self.rows.append(Row(
                    f"Claim cycle {label}, {connections} conn (wrk)",
                    figure,
                    reference=f"ceiling {n(base_rps)} req/s",
                    ratio=ratio,
                    target="-" if minimum is None else f">= {minimum:.2f}",
                    verdict=INFO if minimum is None else verdict_at_least(ratio, minimum),
                    data={"runs": [r.as_dict() for r in results], "ratios": ratios[(label, connections)],
                          "per_cpu_second_ratios": cost_ratios[(label, connections)]},
                ))
        self.notes.append(
            "'per server CPU-second' is the ratio of requests per second of server CPU (the claim cycle's over "
            "the ceiling's): unlike the throughput ratio it holds when other processes take CPU from the server."
        )
        loads = [r.wrk_cpu for rs in runs.values() for r in rs]
        self.notes.append(f"wrk used at most {max(loads):.0%} of its core (a load generator near 100% would be the bottleneck).")
        if max(loads) > 0.85:
            self.notes.append("WARNING: wrk was near saturation; the throughput figures are a floor.")

    def capacity(self) -> None:
        """The pool cycle (acquire + release) and the admit cycle (submit + admit + complete) through
        the --fsync batch server, each alternating with the ceiling as the claim cycle does."""
        if self.wrk is None:
            self.rows.append(Row("Pool and admit cycles (wrk)", missing_tool_message("wrk", "wrk"), verdict=NA))
            return
        label, server, _ = self.claim_targets[0]
        made = run_bounded(create_capacity(server, "wrk"))
        legs = {
            "pool": ("pool_cycle.lua", [server.space, made["scope_id"], server.api_key, made["permit_id"]]),
            "admit": ("admit_cycle.lua", [server.space, made["scope_id"], server.api_key, made["mailbox_id"], made["pool"]]),
        }
        runs_made = itertools.count(1)

        def leg(script: str, args: list[str]) -> Callable[[int], WrkResult]:
            # The last argument names the run, so each run's task keys are new ones.
            return lambda connections: run_wrk(self.procs, self.wrk, server.base_url, script, [*args, f"r{next(runs_made)}"],  # type: ignore[arg-type]
                                               connections=connections, duration_s=self.mode.wrk_s, server_pid=server.pid)

        runs, ratios, _ = self._against_ceiling({name: leg(script, args) for name, (script, args) in legs.items()})
        what = {"pool": ("Pool cycle (acquire + release)", 2), "admit": ("Admit cycle (submit + admit + complete)", 3)}
        for leg in legs:
            title, per_cycle = what[leg]
            for connections in CONNECTIONS:
                results = runs[(leg, connections)]
                figure = cycle_figure(results, f" ({per_cycle} requests each)", "")
                self.rows.append(Row(
                    f"{title} {label}, {connections} conn (wrk)",
                    figure,
                    reference="HTTP ceiling, same run",
                    ratio=med(ratios[(leg, connections)]),
                    verdict=INFO,
                    data={"runs": [r.as_dict() for r in results], "ratios": ratios[(leg, connections)]},
                ))

    def _against_ceiling(self, legs: dict[str, Callable[[int], WrkResult]]):  # type: ignore[no-untyped-def]
        """Run each leg (a function of the connection count) and the HTTP ceiling at each count,
        `reps` times: A B C ceiling, then ceiling C B A..., so each leg is on average as far in
        time from the ceiling run it is compared with. Returns the runs (the ceiling's under
        "ceiling") and, per repetition, each leg's throughput ratio and per-CPU-second ratio."""
        ceiling = self.ceiling
        runs: dict[tuple[str, int], list[WrkResult]] = {}
        ratios: dict[tuple[str, int], list[float]] = {}
        cost_ratios: dict[tuple[str, int], list[float]] = {}
        for rep in range(self.mode.reps):
            for connections in CONNECTIONS:
                order: list[str | None] = [None, *legs]
                if rep % 2:
                    order.reverse()
                measured: dict[str | None, WrkResult] = {}
                for name in order:
                    if name is None:
                        measured[None] = run_wrk(
                            self.procs, self.wrk, ceiling.base_url, "ceiling.lua", [ceiling.space],  # type: ignore[arg-type]
                            connections=connections, duration_s=self.mode.wrk_s, server_pid=ceiling.pid)
                    else:
                        measured[name] = legs[name](connections)
                base = measured.pop(None)
                runs.setdefault(("ceiling", connections), []).append(base)
                for name, result in measured.items():
                    assert name is not None
                    runs.setdefault((name, connections), []).append(result)
                    ratios.setdefault((name, connections), []).append(result.rps / base.rps)
                    cost_ratios.setdefault((name, connections), []).append(per_cpu_s(result) / per_cpu_s(base))
        return runs, ratios, cost_ratios

    def latency(self) -> None:
        # The quick run measures the first server only (--fsync batch).
        targets = self.claim_targets if self.mode.name == "full" else self.claim_targets[:1]
        for label, server, _ in targets:
            for connections in CONNECTIONS:
                result = self._harness_claims(server, connections)
                self.rows.append(Row(
                    f"Claim cycle latency {label}, {connections} conn (harness)",
                    f"p50 {ms(result.p50_ms)}, p99 {ms(result.p99_ms)} per cycle; {n(result.cycles_per_s)} cycles/s",
                    verdict=INFO,
                    data=result.as_dict(),
                ))
                self.note_harness(result)

    def _harness_claims(self, server: Target, connections: int):  # type: ignore[no-untyped-def]
        scope_id = run_bounded(create_scope(server, "harness"))

        async def make(i: int) -> ClaimSession:
            return await ClaimSession(server, scope_id, i).open()

        return run_bounded(drive(f"claims {server.name}", make, concurrency=connections,
                                 duration_s=self.mode.harness_s, warmup_s=self.mode.warmup_s, server_pid=server.pid))

    def note_harness(self, result) -> None:  # type: ignore[no-untyped-def]
        if result.harness_cpu > 0.85:
            self.note(f"WARNING: the Python harness used over 85% of its core in '{result.name}' at "
                      f"{result.concurrency} conn: its figure is a floor, not the server's limit.")

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def peer(self) -> None:
        if self.redis_server is None:
            self.rows.append(Row("Peer: Redis lock", missing_tool_message("redis-server", "redis-server"), verdict=NA))
            return
        try:
            import redis  # noqa: F401
        except ImportError:
            self.rows.append(Row("Peer: Redis lock", "redis-py missing: pip install -e '.[bench]' (make bench does)", verdict=NA))
            return
        pairs = [(False, self.claim_targets[0])]
        if self.mode.redis_aof:
            always = next((t for t in self.claim_targets if "always" in t[0]), None)
            pairs.append((True, always or self.claim_targets[0]))
        for aof, (label, ours) in [(a, (t[0], t[1])) for a, t in pairs]:
            redis_target = start_redis(self.procs, self.redis_server, appendfsync_always=aof, data_root=data_root())
            try:
                for connections in CONNECTIONS:
                    pairs = []
                    for _ in range(self.mode.peer_reps):
                        mine = self._harness_claims(ours, connections)

                        async def make(i: int) -> RedisLockSession:
                            return await RedisLockSession(redis_target, i).open()

                        theirs = run_bounded(drive(redis_target.name, make, concurrency=connections,
                                                   duration_s=self.mode.harness_s, warmup_s=self.mode.warmup_s,
                                                   server_pid=redis_target.pid))
                        self.note_harness(theirs)
                        pairs.append((mine, theirs))
                    kind = "appendfsync always" if aof else "no persistence"
                    self.rows.append(Row(
                        f"Peer: Redis Lock ({kind}) vs claim cycle {label}, {connections} conn",
                        f"ours {n(med(m.cycles_per_s for m, _ in pairs))} cycles/s, p50 {ms(med(m.p50_ms for m, _ in pairs))}",
                        reference=f"Redis {n(med(t.cycles_per_s for _, t in pairs))} cycles/s, p50 {ms(med(t.p50_ms for _, t in pairs))}",
                        ratio=med(m.cycles_per_s / t.cycles_per_s for m, t in pairs),
                        verdict=INFO,
                        data={"ours": [m.as_dict() for m, _ in pairs], "redis": [t.as_dict() for _, t in pairs]},
                    ))
            finally:
                self.procs.stop(redis_target.proc)
                shutil.rmtree(redis_target.data_dir or "", ignore_errors=True)

    def takeover(self) -> None:
        label, server, _ = self.claim_targets[0]
        fast = run_bounded(takeover_retry_after(server, self.mode.takeover_keys))
        self.rows.append(Row(
            f"Takeover of a claim, {label} (retry at Retry-After)",
            f"p50 {ms(fast['p50_ms'])}, p99 {ms(fast['p99_ms'])} after expiry ({fast['samples']} leases)",
            target=f"<= {TAKEOVER_MS:.0f} ms (p99)",
            verdict=verdict_at_most(fast["p99_ms"], TAKEOVER_MS),
            data=fast,
        ))
        slow = run_bounded(takeover_sdk_loop(server, self.mode.sdk_keys))
        self.rows.append(Row(
            f"Takeover of a claim, {label} (SDK wait=True, parked on the server)",
            f"p50 {ms(slow['p50_ms'])}, p99 {ms(slow['p99_ms'])} after expiry ({slow['samples']} leases)",
            target=f"<= {SDK_TAKEOVER_P50_MS:.0f} ms (p50)",
            verdict=verdict_at_most(slow["p50_ms"], SDK_TAKEOVER_P50_MS),
            data=slow,
        ))

    def queues(self) -> None:
        self.rows.extend(queues.run(self))

    def swarm(self) -> None:
        """The swarm workload through our SDK, the official client, Redis and etcd (bench/swarm.py);
        it starts and stops its own servers, one peer at a time."""
        rows, notes = swarm.run(self.procs, self.mode.swarm, list(swarm.PEERS))
        self.rows.extend(rows)
        self.notes.extend(notes)

    def cluster(self) -> None:
        """A partition leader's failover, and claim cycles in cluster mode against a single node
        (bench/cluster.py); it starts and stops its own etcd members and nodes."""
        if find_tool("etcd", "etcd-server") is None:
            self.rows.append(Row("Cluster (failover, claim cycles)", missing_tool_message("etcd", "etcd-server"), verdict=NA))
            return
        trials = 10 if self.mode.name == "quick" else 20
        times = cluster_legs.failover_trials(trials)
        p50, worst = cluster_legs.summary(times)
        self.rows.append(Row(
            f"Failover: SIGKILL of a partition leader to a write through another node ({len(times)} trials)",
            f"p50 {p50:.2f} s, max {worst:.2f} s (lease TTL 1 s, 3 etcd members)",
            target=f"max <= {cluster_legs.FAILOVER_TARGET_S:.0f} s",
            verdict=verdict_at_most(worst, cluster_legs.FAILOVER_TARGET_S),
            data={"seconds": times},
        ))
        measured = cluster_legs.claim_cycles(self.procs, self.mode.harness_s * 2, self.mode.warmup_s)
        singles = {row.connections: row for row in measured if row.label == cluster_legs.SINGLE}
        for row in measured:
            base = singles[row.connections]
            self.rows.append(Row(
                f"Claim cycle, {row.label}, {row.connections} conn (harness)",
                row.figure(),
                reference="-" if row is base else f"{base.label}, {base.connections} conn",
                ratio=None if row is base else row.cycles_per_s / base.cycles_per_s,
                verdict=REFERENCE if row is base else INFO,
                data=row.__dict__,
            ))
        for judged in cluster_legs.cost_ratios(measured):
            if judged.target is None:
                self.rows.append(Row(judged.leg, judged.figure, ratio=judged.ratio, verdict=INFO))
            else:
                self.rows.append(Row(judged.leg, judged.figure, ratio=judged.ratio, target=f"<= {judged.target:.1f}",
                                     verdict=verdict_at_most(judged.ratio, judged.target)))
        self.notes.append(
            f"The cluster rows share {len(USABLE_CPUS)} cores between the load generator, three etcd members and the "
            "nodes: more nodes add no CPU here, so the growth rows show the cost of spreading partitions, not the "
            "throughput separate machines would add."
        )

    def etcdsize(self) -> None:
        """etcd's database size under a sustained load on a cluster (bench/cluster.py `etcd_size`):
        flat once snapshots, trims and compactions go round, under the bound docs/cluster.md states."""
        if find_tool("etcd", "etcd-server") is None:
            self.rows.append(Row("etcd's size under load", missing_tool_message("etcd", "etcd-server"), verdict=NA))
            return
        seconds = self.etcd_size_s or (180 if self.mode.name == "quick" else 600)
        measured = cluster_legs.etcd_size(seconds)
        sizes = [size for _, size, _ in measured.samples]
        bound = measured.bound_bytes()
        self.rows.append(Row(
            f"etcd's database under claim cycles on every partition, {seconds / 60:.0f} min, 3 nodes, "
            f"--cluster-log-bytes-max {measured.log_bytes_max >> 20} MiB",
            measured.figure(),
            target=f"<= {bound >> 20} MiB (3 x the budget + 64 MiB)",
            verdict=verdict_at_most(max(sizes), bound),
            data={"samples": measured.samples, "written_bytes": measured.written_bytes, "cycles": measured.cycles},
        ))

    def agents(self) -> None:
        """Connected idle agents on one node, each renewing its claim (bench/agents.py)."""
        counts = (1000, 5000) if self.mode.name == "quick" else agents_leg.AGENT_COUNTS
        for count in counts:
            result = agents_leg.measure(count, 4, 20.0 if self.mode.name == "quick" else 30.0)
            judged = count == 10_000
            met = result.rss < AGENTS_RSS_MAX and result.server_cpu < AGENTS_CPU_MAX and result.p99_ms < AGENTS_P99_MS
            self.rows.append(Row(
                f"{count:,} connected agents, a claim each renewed every 10 s (--fsync batch)", result.figure(),
                target="RSS < 1 GiB, CPU < 30 %, p99 < 50 ms" if judged else "-",
                verdict=(PASS if met else MISS) if judged else INFO, data=result.as_dict(),
            ))

    def hotkeys(self) -> None:
        """Handoff efficiency of hot keys, ours and Redis's lock side by side (bench/hotkeys.py)."""
        shapes = list(hotkeys.SHAPES)
        for ours, redis in hotkeys.measure(shapes, 8.0 if self.mode.name == "quick" else 15.0, 3.0):  # type: ignore[arg-type]
            few = ours.agents < 256
            self.rows.append(Row(
                f"Hot keys: {ours.agents} agents on {ours.keys} keys holding {ours.hold_ms} ms (limit {ours.limit_per_s:,.0f}/s)",
                f"ours {ours.per_s:,.0f}/s (efficiency {ours.efficiency:.2f}, server {ours.server_cpu:.0%}); "
                f"Redis's lock {redis.per_s:,.0f}/s ({redis.efficiency:.2f})" + (f"; errors {ours.errors}/{redis.errors}" if ours.errors or redis.errors else ""),
                reference="Redis's lock", ratio=ours.per_s / max(redis.per_s, 1e-9),
                target=f"efficiency >= {HOT_EFFICIENCY_MIN}" if few else "ours >= Redis",
                verdict=verdict_at_least(ours.efficiency, HOT_EFFICIENCY_MIN) if few else verdict_at_least(ours.per_s, redis.per_s),
                data={"ours": ours.__dict__, "redis": redis.__dict__},
            ))

    def kernel(self) -> None:
        # The floor first: round trips between callers and a task per key with nothing done in
        # between, which every command pays in the actor-per-key shape. A claim cycle is two
        # commands and a task lifecycle three (and a read), so each row's ceiling is printed
        # beside it, measured in the same run.
        floor = self._per_core("floor")
        self.rows.append(Row(
            f"Kernel alone, floor: caller-to-actor round trips per CPU-second ({floor['callers']} callers, a task per key)",
            f"{n(floor['per_core'])} round trips/CPU-s ({1e6 / floor['per_core']:.1f} us each, no kernel work)",
            data={"runs": floor["runs"]},
        ))
        legs = [("kernel", "claim cycles", "cycles", KERNEL_CLAIM_CYCLES_S, 2), ("tasks", "task lifecycles", "lifecycles", KERNEL_TASK_LIFECYCLES_S, 3)]
        for leg, what, unit, target, commands in legs:
            measured = self._per_core(leg)
            per_core, ceiling = measured["per_core"], floor["per_core"] / commands
            self.rows.append(Row(
                f"Kernel alone, {what} per CPU-second ({measured['callers']} callers, 1 core)",
                f"{n(per_core)} {unit}/CPU-s ({n(measured['rate'])} {unit}/s at {measured['cpu']:.0%} of the core); "
                f"the floor allows {n(ceiling)} ({commands} round trips each), so the kernel's own work is "
                f"{1e6 / per_core - 1e6 / ceiling:.1f} us of each {1e6 / per_core:.1f} us",
                target=f">= {n(target)}",
                verdict=verdict_at_least(per_core, target),
                data={"runs": measured["runs"]},
            ))

    def _per_core(self, leg: str) -> dict:
        """An in-process leg's median rate per CPU-second over the mode's repetitions."""
        samples = [inprocess_runner.run(self.procs, [leg, "--seconds", str(self.mode.kernel_s)])
                   for _ in range(self.mode.kernel_reps)]
        return {
            "runs": samples, "callers": samples[0]["callers"], "rate": med(s["per_s"] for s in samples),
            "cpu": med(s["cpu"] for s in samples), "per_core": med(s["per_s"] / max(s["cpu"], 1e-6) for s in samples),
        }

    def scale(self) -> None:
        legs = [
            ("idle claim", "scale", "--claims", "claims", "bytes_per_claim", "", BYTES_PER_IDLE_CLAIM),
            ("queued task", "scale-tasks", "--tasks", "tasks", "bytes_per_task", ", no input", BYTES_PER_QUEUED_TASK),
        ]
        for what, leg, flag, counted, per_key, detail, limit in legs:
            for count in self.mode.scale_counts:
                result = inprocess_runner.run(self.procs, [leg, flag, str(count)], timeout_s=900)
                per = result[per_key]
                self.rows.append(Row(
                    f"RSS per {what} at {n(result[counted])} (in-process{detail})",
                    f"{n(per)} B (+{n(result['rss_grown_bytes'] / 2**20, 1)} MiB over an empty kernel)",
                    target=f"<= {n(limit)} B",
                    verdict=verdict_at_most(per, limit),
                    data=result,
                ))
            if 1_000_000 not in self.mode.scale_counts:
                self.rows.append(Row(f"RSS per {what} at 1,000,000", "full run only (make bench)", verdict=NA))
        self.recovery()

    def console(self) -> None:
        self.rows.extend(console.run(self))

    def recovery(self) -> None:
        records = self.mode.recovery_records
        directory = tempfile.mkdtemp(prefix="recovery-", dir=data_root())
        try:
            written = inprocess_runner.run(self.procs, ["write-log", "--records", str(records), directory], timeout_s=900)
            result = inprocess_runner.run(self.procs, ["recover", directory], timeout_s=900)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        seconds = result["seconds"]
        # The target is for 1M records; a shorter log (the quick run) is judged pro rata.
        limit = RECOVERY_1M_S * written["records"] / 1_000_000
        self.rows.append(Row(
            f"Recovery of a {n(written['records'])}-record WAL (open_store, fresh process)",
            f"{seconds:.2f} s ({result['cpu_s']:.2f} CPU-s) = {n(result['replayed'] / seconds)} records/s, "
            f"peak RSS {n(result['peak_rss_mib'])} MiB",
            target=f"<= {limit:.1f} s" + ("" if written["records"] >= 1_000_000 else " (10 s per 1M)"),
            verdict=verdict_at_most(seconds, limit),
            data={**written, **result},
        ))


    def history(self) -> None:
        """A past point of a space with as many records of history as the recovery leg's log
        (1M in `make bench`), read through a `runstate serve` process (bench/history.py)."""
        records = self.mode.recovery_records
        directory = tempfile.mkdtemp(prefix="history-", dir=data_root())
        env = {"PYTHONPATH": str(ROOT)}
        try:
            proc = self.procs.start("history", [python(), "-m", "bench.history", "all", directory, "--records", str(records)], env=env)
            try:
                proc.popen.wait(1800)
            finally:
                self.procs.stop(proc)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        line = next((l for l in proc.lines if l.startswith("BENCH_JSON ")), None)
        if proc.popen.returncode != 0 or line is None:
            raise RuntimeError("bench.history failed:\n" + "\n".join(proc.lines[-30:]))
        result = json.loads(line.split(" ", 1)[1])
        for name, figure in result["figures"].items():
            self.rows.append(Row(
                f"A past point of a space with {n(result['records'])} records of history, {name} (HTTP)",
                f"p50 {figure['p50_s']:.2f} s, max {figure['max_s']:.2f} s over {figure['points']} (server CPU p50 "
                f"{figure['cpu_p50_s']:.2f} s, max {figure['cpu_max_s']:.2f} s); records replayed "
                f"p50 {n(figure['replayed_p50'])}, max {n(figure['replayed_max'])}",
                target=f"max < {HISTORY_POINT_S:.0f} s", verdict=verdict_at_most(figure["max_s"], HISTORY_POINT_S), data=figure,
            ))
        self.notes.append(
            f"History: {result['checkpoints']} snapshots kept for {n(result['records'])} records "
            f"({result['disk_bytes'] / 2**20:.0f} MiB on disk); checkpoints every {n(result['checkpoint_every_records'])} records "
            "when snapshots keep up with the writes."
        )

    def historycluster(self) -> None:
        """A past point of a space with as many records of history as the history leg's, written
        through a three-node cluster and read through each node (bench/history_cluster.py)."""
        if find_tool("etcd", "etcd-server") is None:
            self.rows.append(Row("A past point of a history through each node of a cluster", missing_tool_message("etcd", "etcd-server"), verdict=NA))
            return
        records = self.mode.recovery_records
        proc = self.procs.start("historycluster", [python(), "-m", "bench.history_cluster", "--records", str(records)],
                                env={"PYTHONPATH": str(ROOT)})
        try:
            proc.popen.wait(3600)
        finally:
            self.procs.stop(proc)
        line = next((l for l in proc.lines if l.startswith("BENCH_JSON ")), None)
        if proc.popen.returncode != 0 or line is None:
            raise RuntimeError("bench.history_cluster failed:\n" + "\n".join(proc.lines[-30:]))
        result = json.loads(line.split(" ", 1)[1])
        ROLES = {"leader": "the partition's leader", "standby": "a standby of the partition"}
        by_node: dict[str, list[dict]] = {}
        for figure in result["figures"].values():
            by_node.setdefault(figure["node"], []).append(figure)
        for node, figures in by_node.items():
            reads = [read for figure in figures for read in figure["reads"]]
            slowest = max(figure["max_s"] for figure in figures)
            failed = sum(figure["failed"] for figure in figures)
            replayed = [read["replayed"] for read in reads if "replayed" in read] or [0]
            kinds = "; ".join(f"{name.split(', ', 1)[1]} p50 {f['p50_s']:.2f} s, max {f['max_s']:.2f} s" for name, f in result["figures"].items()
                              if f["node"] == node)
            self.rows.append(Row(
                f"A past point of a space with {n(result['records'])} records of history written through a 3-node cluster, "
                f"asked through {node} ({ROLES[figures[0]['role']]}, HTTP)",
                f"{kinds} ({len(reads)} points{f', {failed} not shown (an error)' if failed else ''}; server CPU max "
                f"{max(f['cpu_max_s'] for f in figures):.2f} s); records replayed p50 {n(statistics.median(replayed))}, max {n(max(replayed))}",
                target=f"max < {HISTORY_POINT_S:.0f} s", verdict=MISS if failed else verdict_at_most(slowest, HISTORY_POINT_S),
                data={"figures": figures},
            ))
        self.notes.append(
            f"History through a cluster: {n(result['records'])} records written in {result['write_s']:.0f} s in batch requests "
            f"of claim cycles on {result['connections']} connections to the partition's leader; leader changes on the way "
            f"{result['written']['leader_changes']}, {result['written']['resent']} batches sent again, operations refused "
            f"{result['written']['refusals'] or 0}; snapshots kept per node "
            + ", ".join(f"{name} {count} ({result['disk_bytes'][name] / 2**20:.0f} MiB of history on disk)"
                        for name, count in result["checkpoints"].items()) + "."
        )


def cycle_figure(results: list[WrkResult], per_cycle: str, after: str) -> str:
    """The figure of a cycle leg's wrk runs: medians of req/s, cycles/s, p50 and p99, then `after`,
    and how many requests were refused, if any."""
    rps = med(r.rps for r in results)
    cycles = med(r.counters.get("cycles", 0) / r.duration_s for r in results)
    figure = (f"{n(rps)} req/s = {n(cycles)} cycles/s{per_cycle}, p50 {ms(med(r.p50_ms for r in results))}, "
              f"p99 {ms(med(r.p99_ms for r in results))}{after}")
    refused = sum(r.counters.get("refused", 0) + r.errors for r in results)
    return figure + (f", {refused} refused" if refused else "")


def per_cpu_s(result: WrkResult) -> float:
    """Requests per second of server CPU: what a request costs, whatever else runs on the machine."""
    return result.rps / max(result.server_cpu, 1e-6)


def med(values) -> float:  # type: ignore[no-untyped-def]
    values = list(values)
    return statistics.median(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="runstate benchmarks")
    parser.add_argument("--quick", action="store_true", help="short runs, one repetition (under 3 minutes)")
    parser.add_argument("--only", default=",".join(LEGS), help=f"comma-separated legs out of {','.join(LEGS)}")
    parser.add_argument("--json", default=str(RESULTS / "latest.json"), help="where to write the results")
    parser.add_argument("--etcd-size-minutes", type=float, default=None,
                        help="how long the etcdsize leg loads the cluster (default 3 quick, 10 full)")
    args = parser.parse_args(argv)
    mode = QUICK if args.quick else FULL
    legs = {leg.strip() for leg in args.only.split(",") if leg.strip()}
    unknown = legs - set(LEGS)
    if unknown:
        parser.error(f"unknown legs: {', '.join(sorted(unknown))}")
    started = time.time()
    load_before = os.getloadavg()[0]
    pin_self()
    print(f"bench: {mode.name} run, legs {', '.join(l for l in LEGS if l in legs)}"
          + ("" if PINNED else " (one core: servers and load generators share it)"), flush=True)
    status = 0
    with Processes() as procs:
        bench = Bench(mode, legs, procs)
        bench.etcd_size_s = None if args.etcd_size_minutes is None else args.etcd_size_minutes * 60
        try:
            if legs & {"http", "capacity", "latency", "peer", "takeover", "queues"}:
                bench.wrk = find_tool("wrk", "wrk") if legs & {"http", "capacity"} else None
                bench.redis_server = find_tool("redis-server", "redis-server") if "peer" in legs else None
                bench.start_servers()
                for leg in ("http", "capacity", "latency", "peer", "takeover", "queues"):
                    if leg in legs:
                        step(bench, leg, getattr(bench, leg))
                procs.stop_all()
            for leg in ("swarm", "kernel", "scale", "console", "cluster", "etcdsize", "history", "historycluster", "agents", "hotkeys"):
                if leg in legs:
                    step(bench, leg, getattr(bench, leg))
        except KeyboardInterrupt:
            print("bench: interrupted; stopping every process it started", file=sys.stderr)
            status = 130
        finally:
            procs.stop_all()
            remove_data_root()
    bench.notes.append(
        f"Load average (1 min) {load_before:.1f} at the start and {os.getloadavg()[0]:.1f} at the end on "
        f"{len(USABLE_CPUS)} cores: above about 2, other processes took CPU from this run and absolute figures suffer."
    )
    print()
    print(table(bench.rows))
    for note in bench.notes:
        print(f"- {note}")
    write_json(Path(args.json), mode.name, bench.rows, bench.notes, started, ROOT, complete=status != 130)
    print(f"\nbench: {time.time() - started:.0f} s; results in {args.json}")
    if any(r.verdict == "error" for r in bench.rows):
        status = status or 1
    return status


def step(bench: Bench, leg: str, body) -> None:  # type: ignore[no-untyped-def]
    print(f"bench: {leg} ...", flush=True)
    began = time.monotonic()
    try:
        body()
    except KeyboardInterrupt:
        raise
    except Exception as error:  # one leg failing still prints the others
        traceback.print_exc()
        bench.rows.append(Row(f"{leg}", f"failed: {type(error).__name__}: {str(error)[:120]}", verdict="error"))
    print(f"bench: {leg} took {time.monotonic() - began:.0f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
