"""The swarm leg: a workload of many agents in a few processes, through our SDK and its peers.

A agents in K client processes (`bench/swarm_agent.py`) each hold two long-lived claims, renewed,
while half of them loop over claim cycles on skewed keys (take, wait if held, 20 ms of work,
release), an eighth put tasks on a shared queue at a fixed rate and the rest take, work (10 ms)
and acknowledge them. The same workload, from the same harness at the same concurrency, runs
through:

- `ours`: our SDK against `runstate serve --fsync always` (the default: answer after fsync);
- `official`: the official `runstate-sdk` 0.2.0 client against the same kind of server (what the
  server does for clients without our extensions);
- `redis`: redis-py against `redis-server --appendonly yes --appendfsync always`;
- `etcd`: our etcd client against one etcd member (3.4, fsync on every commit, its default).

Each peer gets a fresh server on the last core and its client processes on the first. The table
gives useful operations per second (claim cycles + tasks completed in the window), server
CPU-seconds per 1,000 of them, client CPU per one, requests per one, the time to get a contended
key (p50/p99) and the task latency from submit to work done (p50/p99). bench/README.md has the
rules that keep it fair.

    python -m bench.swarm [--quick] [--peers ours,official,redis,etcd] [--agents A] [--processes K]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

from .harness import percentile, run_bounded
from .procs import CPU_LOAD, CPU_SERVER, PINNED, RESULTS, ROOT, Proc, Processes, cpu_seconds, find_tool, free_port, missing_tool_message, pin_self, python
from .queues import create_mailbox
from .swarm_agent import occupancy_bytes
from .report import INFO, NA, Row, ms, n, table, verdict_at_least, verdict_at_most
from .targets import API_KEY, SPACE, create_scope, data_root, remove_data_root, start_redis, start_runstate

PEERS = ("ours", "official", "redis", "etcd")
LABELS = {
    "ours": "our SDK, runstate serve --fsync always",
    "official": "official runstate-sdk 0.2.0, runstate serve --fsync always",
    "redis": "redis-py, Redis appendfsync always",
    "etcd": "our etcd client, etcd 3.4 (1 member)",
}

# The workload (bench/README.md, "Swarm").
KEYS = 1000
HOT_KEYS = 10
HOT_SHARE = 0.5
CLAIM_WORK_S = 0.020
TASK_WORK_S = 0.010
HOLD_LEASE_S = 10
CYCLE_LEASE_S = 10
ACQUIRE_TIMEOUT_S = 60
# Deliveries one worker of our SDK takes in one request (`consume(prefetch=...)`).
PREFETCH = 2

# The targets of the swarm (bench/README.md): goals, never assertions in tests.
USEFUL_VS_REDIS = 1.0
USEFUL_VS_ETCD = 3.0
CLIENT_CPU_VS_REDIS_PY = 2.0

READY_TIMEOUT_S = 120
RESULT_GRACE_S = 60


@dataclass(frozen=True)
class SwarmSize:
    agents: int
    processes: int
    window_s: float
    warmup_s: float
    task_rate: float  # tasks per second, per producer


QUICK = SwarmSize(agents=64, processes=2, window_s=8, warmup_s=2, task_rate=5)
FULL = SwarmSize(agents=256, processes=4, window_s=20, warmup_s=3, task_rate=5)


@dataclass
class PeerResult:
    peer: str
    agents: int
    processes: int
    window_s: float
    cycles: int
    hot_cycles: int
    tasks: int
    produced: int
    server_cpu_s: float
    client_cpu_s: float
    requests: int
    contended: int
    contended_p50_ms: float
    contended_p99_ms: float
    handoffs: int
    handoff_p50_ms: float
    handoff_p99_ms: float
    latency_p50_ms: float
    latency_p99_ms: float
    errors: dict[str, int]
    quoted: list[str]
    load_average: float

    @property
    def useful(self) -> int:
        return self.cycles + self.tasks

    @property
    def useful_per_s(self) -> float:
        return self.useful / self.window_s

    @property
    def hot_efficiency(self) -> float:
        """The hot keys' claim cycles per second over the most they allow (`hot_keys_limit_per_s`)."""
        return self.hot_cycles / self.window_s / hot_keys_limit_per_s()

    @property
    def server_cpu_per_1k(self) -> float:
        return self.server_cpu_s / max(self.useful, 1) * 1000

    @property
    def client_cpu_ms_per_op(self) -> float:
        return self.client_cpu_s / max(self.useful, 1) * 1000

    @property
    def requests_per_op(self) -> float:
        return self.requests / max(self.useful, 1)

    def as_dict(self) -> dict[str, Any]:
        document = asdict(self)
        document.update(useful_per_s=self.useful_per_s, hot_efficiency=self.hot_efficiency, server_cpu_per_1k=self.server_cpu_per_1k,
                        client_cpu_ms_per_op=self.client_cpu_ms_per_op, requests_per_op=self.requests_per_op)
        return document


def hot_keys_limit_per_s() -> float:
    """The most claim cycles a second the hot keys allow: each is held `CLAIM_WORK_S` a cycle."""
    return HOT_KEYS / CLAIM_WORK_S


def tasks_asked_per_s(size: SwarmSize) -> float:
    """The tasks a second the producers are asked to send (an eighth of each process's agents)."""
    return size.task_rate * max(1, size.agents // size.processes // 8) * size.processes


def ceiling_per_s(size: SwarmSize) -> float:
    """About the most useful operations a second the workload allows, whatever the peer.

    A claimer's draws go to a hot key `HOT_SHARE` of the time, so over a window its claim cycles
    are hot and cold in that proportion (the cold ones are rarely waited for), and the hot ones are
    at most `hot_keys_limit_per_s`: with perfect handoffs and no time lost between cycles, claim
    cycles come to that over `HOT_SHARE`. Tasks come to what the producers send."""
    return hot_keys_limit_per_s() / HOT_SHARE + tasks_asked_per_s(size)


# -- the peers' servers ---------------------------------------------------------------------------


class Target:
    """A peer's server: its process and what the agents need to reach it."""

    def __init__(self, peer: str, proc: Proc, config: dict[str, Any], data_dir: str | None) -> None:
        self.peer = peer
        self.proc = proc
        self.config = config
        self.data_dir = data_dir


def start_target(procs: Processes, peer: str, tools: dict[str, str | None]) -> Target:
    if peer in ("ours", "official"):
        server = start_runstate(procs, f"swarm-{peer}", fsync="always", data_root=data_root())
        scope_id = run_bounded(create_scope(server, "swarm"))
        mailbox_id = run_bounded(create_mailbox(server, "swarm-tasks"))
        config = {"url": server.base_url, "api_key": API_KEY, "space": SPACE, "scope_id": scope_id, "mailbox_id": mailbox_id}
        return Target(peer, server.proc, config, server.data_dir)
    if peer == "redis":
        redis = start_redis(procs, tools["redis-server"] or "redis-server", appendfsync_always=True, data_root=data_root())
        return Target(peer, redis.proc, {"url": redis.base_url}, redis.data_dir)
    if peer == "etcd":
        return start_etcd(procs, tools["etcd"] or "etcd")
    raise ValueError(f"unknown peer {peer!r}")


def start_etcd(procs: Processes, etcd: str) -> Target:
    """One etcd member with its defaults (fsync on every commit), on free ports (never 2379/2380)."""
    client, peer = (f"http://127.0.0.1:{free_etcd_port()}" for _ in range(2))
    data_dir = tempfile.mkdtemp(prefix="etcd-", dir=data_root())
    proc = procs.start("etcd", [
        etcd, "--name", "swarm", "--data-dir", data_dir,
        "--listen-client-urls", client, "--advertise-client-urls", client,
        "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
        "--initial-cluster", f"swarm={peer}", "--log-level", "warn",
    ], cpu=CPU_SERVER)
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(client + "/health", timeout=2) as response:
                if json.loads(response.read()).get("health") == "true":
                    break
        except OSError:
            pass
        if not proc.alive() or time.monotonic() > deadline:
            raise RuntimeError("etcd did not become healthy:\n" + "\n".join(proc.lines[-30:]))
        time.sleep(0.05)
    return Target("etcd", proc, {"endpoints": [client]}, data_dir)


def free_etcd_port() -> int:
    while True:
        port = free_port()
        if port not in (2379, 2380):
            return port


# -- one peer's run -------------------------------------------------------------------------------


def agent_command(peer: str) -> tuple[list[str], dict[str, str]]:
    """How a client process of `peer` is started: the official client runs under the base
    interpreter with only itself and this repository on its path (never our venv)."""
    if peer != "official":
        return [python(), "-m", "bench.swarm_agent"], {}
    from tests.servers import base_python, official_client_dir

    cache = RESULTS / ".official-client"
    cache.mkdir(parents=True, exist_ok=True)
    folder = official_client_dir(cache)
    return [base_python(), "-m", "bench.swarm_agent"], {"PYTHONPATH": f"{folder}{os.pathsep}{ROOT}", "PYTHONNOUSERSITE": "1"}


def run_peer(procs: Processes, peer: str, size: SwarmSize, tools: dict[str, str | None], seed: int = 1,
             on_window: Callable[[int, float], Any] | None = None) -> PeerResult:
    """One peer's run. `on_window(server_pid, window_s)` is called as the window begins (the
    profile leg starts py-spy there); what it returns is waited for after the window."""
    target = start_target(procs, peer, tools)
    occupancy = tempfile.NamedTemporaryFile(prefix="swarm-occupancy-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None, delete=False)
    agents_procs: list[Proc] = []
    try:
        occupancy.write(b"\0" * occupancy_bytes(size.processes, KEYS))
        occupancy.close()
        command, env = agent_command(peer)
        shares = [size.agents // size.processes + (1 if i < size.agents % size.processes else 0) for i in range(size.processes)]
        run_id = f"r{int(time.time() * 1000) % 10**9}"
        for process, agents in enumerate(shares):
            config = {
                "peer": peer, "process": process, "processes": size.processes, "agents": agents,
                "target": target.config, "keys": KEYS, "hot_keys": HOT_KEYS, "hot_share": HOT_SHARE,
                "claim_work_s": CLAIM_WORK_S, "task_work_s": TASK_WORK_S, "task_rate": size.task_rate,
                "hold_lease_s": HOLD_LEASE_S, "cycle_lease_s": CYCLE_LEASE_S, "acquire_timeout_s": ACQUIRE_TIMEOUT_S,
                "window_s": size.window_s, "seed": seed, "run_id": run_id, "occupancy": occupancy.name,
                "prefetch": PREFETCH,
            }
            agents_procs.append(procs.start(f"swarm-{peer}-{process}", command, cpu=CPU_LOAD, stdin=True,
                                            env={**env, "SWARM_CONFIG": json.dumps(config)}))
        for proc in agents_procs:
            wait_event(proc, "ready", READY_TIMEOUT_S)
        t0 = time.monotonic() + size.warmup_s
        for proc in agents_procs:
            proc.send(f"go {t0!r}")
        time.sleep(max(0.0, t0 - time.monotonic()))
        server_before = cpu_seconds(target.proc.pid)
        load = os.getloadavg()[0]
        watcher = on_window(target.proc.pid, size.window_s) if on_window is not None else None
        time.sleep(max(0.0, t0 + size.window_s - time.monotonic()))
        server_cpu = cpu_seconds(target.proc.pid) - server_before
        if watcher is not None and hasattr(watcher, "popen"):
            watcher.popen.wait(60)
        results = [wait_event(proc, "result", size.window_s + RESULT_GRACE_S) for proc in agents_procs]
    finally:
        for proc in agents_procs:
            procs.stop(proc)
        procs.stop(target.proc)
        os.unlink(occupancy.name)
        if target.data_dir:
            shutil.rmtree(target.data_dir, ignore_errors=True)
    requests = sum(r["requests"] for r in results)
    contended = [x for r in results for x in r["contended_ms"]]
    handoff = [x for r in results for x in r["handoff_ms"]]
    latency = [x for r in results for x in r["latency_ms"]]
    errors: dict[str, int] = {}
    for r in results:
        for name, count in r["errors"].items():
            errors[name] = errors.get(name, 0) + count
    return PeerResult(
        peer=peer, agents=size.agents, processes=size.processes, window_s=size.window_s,
        cycles=sum(r["cycles"] for r in results), hot_cycles=sum(r["hot_cycles"] for r in results), tasks=sum(r["tasks"] for r in results),
        produced=sum(r["produced"] for r in results), server_cpu_s=server_cpu,
        client_cpu_s=sum(r["cpu_s"] for r in results), requests=requests, contended=len(contended),
        contended_p50_ms=percentile(contended, 50), contended_p99_ms=percentile(contended, 99),
        handoffs=len(handoff), handoff_p50_ms=percentile(handoff, 50), handoff_p99_ms=percentile(handoff, 99),
        latency_p50_ms=percentile(latency, 50), latency_p99_ms=percentile(latency, 99),
        errors=errors, quoted=[q for r in results for q in r["quoted"]][:5], load_average=load,
    )


def wait_event(proc: Proc, event: str, timeout_s: float) -> dict[str, Any]:
    """The first JSON line of `proc` whose `event` is `event` (a `failed` line raises)."""
    deadline = time.monotonic() + timeout_s
    seen = 0
    while True:
        lines = proc.lines
        for line in lines[seen:]:
            if line.startswith("{"):
                document = json.loads(line)
                if document.get("event") == event:
                    return dict(document)
                if document.get("event") == "failed":
                    raise RuntimeError(f"{proc.name} failed: {document['error']}\n{document.get('trace', '')}")
        seen = len(lines)
        if not proc.alive() or time.monotonic() > deadline:
            time.sleep(0.2)
            tail = "\n".join(proc.lines[-30:])
            raise RuntimeError(f"{proc.name} printed no {event!r} line (exit {proc.popen.poll()}):\n{tail}")
        time.sleep(0.05)


# -- the report -----------------------------------------------------------------------------------


def tools_for(peers: list[str]) -> dict[str, str | None]:
    tools: dict[str, str | None] = {}
    if "redis" in peers:
        tools["redis-server"] = find_tool("redis-server", "redis-server")
    if "etcd" in peers:
        tools["etcd"] = shutil.which("etcd") or ("/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None) \
            or find_tool("etcd", "etcd-server")
    return tools


def missing(peer: str, tools: dict[str, str | None]) -> str | None:
    if peer == "redis" and not tools.get("redis-server"):
        return missing_tool_message("redis-server", "redis-server")
    if peer == "etcd" and not tools.get("etcd"):
        return missing_tool_message("etcd", "etcd-server")
    if peer == "redis":
        try:
            import redis  # noqa: F401
        except ImportError:
            return "redis-py missing: pip install -e '.[bench]' (make bench does)"
    return None


def figure(result: PeerResult) -> str:
    sent = f" of {n(result.produced / result.window_s)} sent" if result.produced else ""
    text = (f"{n(result.useful_per_s)} useful ops/s ({n(result.cycles / result.window_s)} cycles + "
            f"{n(result.tasks / result.window_s)} tasks{sent}); hot keys {n(result.hot_cycles / result.window_s)} cycles/s "
            f"(efficiency {result.hot_efficiency:.2f}); server {result.server_cpu_per_1k:.2f} CPU-s/1k ops; "
            f"client {result.client_cpu_ms_per_op:.2f} ms CPU/op; {result.requests_per_op:.2f} req/op; "
            f"contended acquire p50 {ms(result.contended_p50_ms)} p99 {ms(result.contended_p99_ms)} ({result.contended}); "
            f"handoff p50 {ms(result.handoff_p50_ms)} p99 {ms(result.handoff_p99_ms)} ({result.handoffs}); "
            f"task latency p50 {ms(result.latency_p50_ms)} p99 {ms(result.latency_p99_ms)}")
    errors = sum(result.errors.values())
    return text + (f"; {errors} errors" if errors else "")


def side_by_side(results: list[PeerResult]) -> str:
    """The swarm table: one line per peer, every column of the leg."""
    header = ("peer", "useful ops/s", "claim cycles/s", "hot keys' cycles/s (efficiency)", "tasks/s (sent)", "server CPU-s/1k ops",
              "client CPU ms/op", "req/op", "contended acquire p50 / p99", "handoff p50 / p99", "task latency p50 / p99", "errors")
    rows = [header]
    for r in results:
        rows.append((
            r.peer, n(r.useful_per_s), n(r.cycles / r.window_s), f"{n(r.hot_cycles / r.window_s)} ({r.hot_efficiency:.2f})",
            f"{n(r.tasks / r.window_s)} ({n(r.produced / r.window_s)})", f"{r.server_cpu_per_1k:.2f}",
            f"{r.client_cpu_ms_per_op:.2f}", f"{r.requests_per_op:.2f}",
            f"{ms(r.contended_p50_ms)} / {ms(r.contended_p99_ms)}", f"{ms(r.handoff_p50_ms)} / {ms(r.handoff_p99_ms)}",
            f"{ms(r.latency_p50_ms)} / {ms(r.latency_p99_ms)}",
            str(sum(r.errors.values())),
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["| " + " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def rows_of(results: dict[str, PeerResult], skipped: dict[str, str], size: SwarmSize) -> list[Row]:
    where = f"{size.agents} agents in {size.processes} processes"
    rows: list[Row] = []
    for peer in PEERS:
        if peer in skipped:
            rows.append(Row(f"Swarm: {LABELS[peer]}", skipped[peer], verdict=NA))
        elif peer in results:
            rows.append(Row(f"Swarm: {LABELS[peer]}, {where}", figure(results[peer]), verdict=INFO, data=results[peer].as_dict()))
    ours = results.get("ours")
    if ours is None:
        return rows
    ceiling = ceiling_per_s(size)
    rows.append(Row("Swarm: the workload's ceiling (hot keys / hold / hot share + tasks asked), ours against it",
                    f"ours {n(ours.useful_per_s)}; hot keys' efficiency {ours.hot_efficiency:.2f}",
                    reference=f"ceiling {n(ceiling)}", ratio=ours.useful_per_s / ceiling, verdict=INFO))
    for peer, target, what in (("redis", USEFUL_VS_REDIS, "Redis"), ("etcd", USEFUL_VS_ETCD, "etcd")):
        other = results.get(peer)
        if other is None or other.useful_per_s == 0:
            continue
        ratio = ours.useful_per_s / other.useful_per_s
        rows.append(Row(f"Swarm: useful ops/s, ours vs {what}", f"ours {n(ours.useful_per_s)}",
                        reference=f"{what} {n(other.useful_per_s)}", ratio=ratio, target=f">= {target:.1f}",
                        verdict=verdict_at_least(ratio, target)))
    redis_result = results.get("redis")
    if redis_result is not None and redis_result.client_cpu_ms_per_op > 0:
        ratio = ours.client_cpu_ms_per_op / redis_result.client_cpu_ms_per_op
        rows.append(Row("Swarm: client CPU per useful op, our SDK vs redis-py", f"ours {ours.client_cpu_ms_per_op:.2f} ms",
                        reference=f"redis-py {redis_result.client_cpu_ms_per_op:.2f} ms", ratio=ratio,
                        target=f"<= {CLIENT_CPU_VS_REDIS_PY:.1f}", verdict=verdict_at_most(ratio, CLIENT_CPU_VS_REDIS_PY)))
    return rows


def notes_of(results: dict[str, PeerResult], size: SwarmSize) -> list[str]:
    notes = [
        f"Swarm table ({size.agents} agents in {size.processes} client processes on one core, servers on another; "
        f"window {size.window_s:g} s after {size.warmup_s:g} s of warm-up; producers asked to send "
        f"{n(tasks_asked_per_s(size))} tasks/s):\n" + side_by_side([results[p] for p in PEERS if p in results])
    ]
    ceiling = ceiling_per_s(size)
    redis_result = results.get("redis")
    beside = (f"; against Redis's {n(redis_result.useful_per_s)}, no peer could do more than {ceiling / redis_result.useful_per_s:.2f} times it"
              if redis_result is not None and redis_result.useful_per_s > 0 else "")
    notes.append(f"The workload's ceiling: {HOT_KEYS} hot keys held {CLAIM_WORK_S * 1000:g} ms a cycle allow "
                 f"{n(hot_keys_limit_per_s())} claim cycles/s on them, and they get {HOT_SHARE:.0%} of the draws, so about "
                 f"{n(hot_keys_limit_per_s() / HOT_SHARE)} claim cycles/s in all, plus {n(tasks_asked_per_s(size))} tasks/s: "
                 f"about {n(ceiling)} useful ops/s with perfect handoffs{beside}.")
    for result in results.values():
        share = result.client_cpu_s / result.window_s
        if share > 0.85:
            notes.append(f"WARNING: the {result.peer} client processes used {share:.0%} of their core: "
                         f"its figure is bounded by the clients, not the server.")
        if result.errors:
            notes.append(f"{result.peer}: errors {result.errors}; first: {result.quoted[:2]}")
    return notes


def run(procs: Processes, size: SwarmSize, peers: list[str]) -> tuple[list[Row], list[str]]:
    tools = tools_for(peers)
    results: dict[str, PeerResult] = {}
    skipped: dict[str, str] = {}
    for peer in peers:
        reason = missing(peer, tools)
        if reason:
            skipped[peer] = reason
            continue
        print(f"bench: swarm through {peer} ...", flush=True)
        results[peer] = run_peer(procs, peer, size, tools)
    return rows_of(results, skipped, size), notes_of(results, size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the swarm benchmark (bench/README.md)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK.agents} agents in {QUICK.processes} processes, {QUICK.window_s:g} s")
    parser.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, out of {','.join(PEERS)}")
    parser.add_argument("--agents", type=int)
    parser.add_argument("--processes", type=int)
    parser.add_argument("--window", type=float, help="seconds measured")
    parser.add_argument("--task-rate", type=float, help="tasks per second per producer")
    parser.add_argument("--json", default=str(RESULTS / "swarm.json"))
    args = parser.parse_args(argv)
    size = QUICK if args.quick else FULL
    size = replace(size, **{k: v for k, v in (("agents", args.agents), ("processes", args.processes),
                                              ("window_s", args.window), ("task_rate", args.task_rate)) if v is not None})
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = set(peers) - set(PEERS)
    if unknown:
        parser.error(f"unknown peers: {', '.join(sorted(unknown))}")
    pin_self()
    started = time.time()
    with Processes() as procs:
        try:
            rows, notes = run(procs, size, peers)
        finally:
            procs.stop_all()
            remove_data_root()
    print()
    print(table(rows))
    for note in notes:
        print(f"- {note}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"size": asdict(size), "rows": [asdict(r) for r in rows], "notes": notes,
                                           "pinned": PINNED, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))}, indent=2))
    print(f"\nbench: swarm {time.time() - started:.0f} s; results in {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
