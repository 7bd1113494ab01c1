"""Hot keys near their limit: `python -m bench.hotkeys [--shapes 8/4/50,64/16/20,256/64/5] [--window S]`.

A key held for `h` seconds changes hands at most `1/h` times a second, so `k` keys held `h`
each allow at most `k/h` claim cycles a second. Handoff efficiency is the claim cycles per second
a peer reaches over that limit: what is lost is the time a key is held by nobody although an
agent wants it (the release's answer, the next holder's wake-up and its acquire's answer).

Per shape (agents / keys / hold ms), each agent is given one key (agent i -> key i % keys, so
every key has agents/keys contenders) and loops: acquire it, waiting while it is held; hold it
`h`; release it. Through our SDK (`runstate serve --fsync always`; one client per process, a
`with_holder()` view per agent, `claim(key).acquire(wait=True)`: the server parks the request
until the key is free) and, in the same run, through redis-py's asyncio `Lock` (as the swarm's
redis peer uses it: blocking, a try every 0.1 s, its default; `redis-server --appendonly yes
--appendfsync always`). Each peer on a fresh server on the server core, the agents' processes on
the load core. Cycles are counted when a release is answered inside the window.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

SHAPES = ((8, 4, 50), (64, 16, 20), (256, 64, 5))  # agents, keys, hold ms
LEASE_S = 10
ACQUIRE_TIMEOUT_S = 60
REDIS_CONNECTIONS_MAX = 1024


# -- one client process ---------------------------------------------------------------------------

async def _agents_main(config: dict[str, Any]) -> dict[str, Any]:
    import anyio

    first, count, keys, hold_s = config["first"], config["count"], config["keys"], config["hold_ms"] / 1000
    began, ended, stop_at = config["window_begins"], config["window_ends"], config["window_ends"] + 0.5
    counted = [0]
    errors: list[str] = []
    # With `--trace`, each cycle's moments (key, acquire sent, held, release sent, release answered)
    # and its agent.
    tracing = bool(config.get("trace_path"))
    trace: list[tuple[str, float, float, float, float, int]] = []
    if config["peer"] == "ours":
        from runstate import AsyncRunstate

        target = config["target"]
        shared = AsyncRunstate(api_key=target["api_key"], space_id=target["space"], base_url=target["url"], holder=f"hot-{first}")
        scopes = [shared.with_holder(f"hot-{first + i}").scope(target["scope_id"]) for i in range(count)]

        async def cycle(agent: int, key: str) -> None:
            sent = time.monotonic()
            lease = await scopes[agent].claim(key).acquire(lease_seconds=LEASE_S, wait=True, timeout_ms=ACQUIRE_TIMEOUT_S * 1000)
            held = time.monotonic()
            await anyio.sleep(hold_s)
            releasing = time.monotonic()
            await lease.release()
            if tracing:
                trace.append((key, sent, held, releasing, time.monotonic(), first + agent))

        close = shared.aclose
    else:
        import redis.asyncio as aioredis

        redis = aioredis.Redis.from_url(config["target"]["url"], max_connections=REDIS_CONNECTIONS_MAX)
        await redis.ping()

        async def cycle(agent: int, key: str) -> None:
            lock = redis.lock(f"hot:{key}", timeout=LEASE_S, blocking=True, blocking_timeout=ACQUIRE_TIMEOUT_S)
            sent = time.monotonic()
            if not await lock.acquire():
                raise TimeoutError(f"no lock on {key} after {ACQUIRE_TIMEOUT_S} s")
            held = time.monotonic()
            await anyio.sleep(hold_s)
            releasing = time.monotonic()
            await lock.release()
            if tracing:
                trace.append((key, sent, held, releasing, time.monotonic(), first + agent))

        close = redis.aclose

    async def agent(index: int) -> None:
        key = f"hot-{(first + index) % keys}"
        while time.monotonic() < stop_at:
            try:
                await cycle(index, key)
            except Exception as error:  # counted and quoted, never dropped
                errors.append(repr(error)[:300])
                await anyio.sleep(0.1)
                continue
            if began <= time.monotonic() < ended:
                counted[0] += 1

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(agent, index)
    await close()
    if tracing:
        with open(config["trace_path"], "w") as file:
            json.dump([cycle for cycle in trace if began <= cycle[4] < ended], file)
    return {"cycles": counted[0], "errors": len(errors), "error": errors[-1] if errors else ""}


def agents_main() -> int:
    import anyio

    config = json.loads(os.environ["HOTKEYS_CONFIG"])
    cpu0 = time.process_time()
    result = anyio.run(_agents_main, config, backend="asyncio")
    print("hotkeys: " + json.dumps({**result, "cpu_s": time.process_time() - cpu0}), flush=True)
    return 0


# -- the leg --------------------------------------------------------------------------------------

@dataclass
class HotResult:
    peer: str
    agents: int
    keys: int
    hold_ms: int
    window_s: float
    cycles: int
    server_cpu: float  # share of a core over the window
    client_cpu_s: float  # the client processes' CPU over the whole run
    errors: int
    error: str
    trace: str = ""  # with `--trace`: the handoff's links, per cycle (`trace_line`)

    @property
    def limit_per_s(self) -> float:
        return self.keys / (self.hold_ms / 1000)

    @property
    def per_s(self) -> float:
        return self.cycles / self.window_s

    @property
    def efficiency(self) -> float:
        return self.per_s / self.limit_per_s


def run_shape(procs: Any, peer: str, agents: int, keys: int, hold_ms: int, window_s: float, warmup_s: float,
              redis_server: str | None, fsync: str = "always", trace: bool = False) -> HotResult:
    from .harness import run_bounded
    from .procs import CPU_LOAD, RESULTS, cpu_seconds, python
    from .targets import API_KEY, SPACE, create_scope, data_root, start_redis, start_runstate

    if peer == "ours":
        server = start_runstate(procs, "hot-ours", fsync=fsync, data_root=data_root())
        target = {"url": server.base_url, "api_key": API_KEY, "space": SPACE, "scope_id": run_bounded(create_scope(server, "hot"))}
    else:
        server = start_redis(procs, redis_server or "redis-server", appendfsync_always=True, data_root=data_root())
        target = {"url": server.base_url}
    processes = max(1, min(4, agents // 32))
    start = time.monotonic() + 2.0  # the processes' start-up
    window = (start + warmup_s, start + warmup_s + window_s)
    per, extra = divmod(agents, processes)
    clients, first = [], 0
    trace_paths = []
    if trace:
        RESULTS.mkdir(parents=True, exist_ok=True)
    for number in range(processes):
        count = per + (1 if number < extra else 0)
        config = {"peer": peer, "target": target, "first": first, "count": count, "keys": keys, "hold_ms": hold_ms,
                  "window_begins": window[0], "window_ends": window[1]}
        if trace:
            trace_paths.append(str(RESULTS / f"hotkeys-trace-{peer}-{number}.json"))
            config["trace_path"] = trace_paths[-1]
        clients.append(procs.start(f"hot-{peer}-{number}", [python(), "-m", "bench.hotkeys", "--agents-process"],
                                   cpu=CPU_LOAD, env={"HOTKEYS_CONFIG": json.dumps(config)}))
        first += count
    scrape = trace and peer == "ours"
    time.sleep(max(0.0, window[0] - time.monotonic()))
    cpu0 = cpu_seconds(server.pid)
    metrics0 = read_metrics(server.base_url) if scrape else {}
    time.sleep(max(0.0, window[1] - time.monotonic()))
    server_cpu = (cpu_seconds(server.pid) - cpu0) / window_s
    metrics1 = read_metrics(server.base_url) if scrape else {}
    cycles = errors = 0
    client_cpu = 0.0
    error = ""
    for proc in clients:
        proc.popen.wait(ACQUIRE_TIMEOUT_S + 30)
        time.sleep(0.1)
        line = next((line for line in proc.lines if line.startswith("hotkeys: ")), None)
        if line is None:
            raise RuntimeError(f"{proc.name} reported nothing:\n" + "\n".join(proc.lines[-20:]))
        report = json.loads(line[len("hotkeys: "):])
        cycles += report["cycles"]
        errors += report["errors"]
        client_cpu += report["cpu_s"]
        error = report["error"] or error
        procs.stop(proc)
    procs.stop(server.proc)
    traced = ""
    if trace:
        moments: list[list[Any]] = []
        for path in trace_paths:
            with open(path) as file:
                moments += json.load(file)
            os.unlink(path)
        traced = trace_line(moments, hold_ms, {name: metrics1[name] - metrics0.get(name, 0.0) for name in metrics1})
    return HotResult(peer, agents, keys, hold_ms, window_s, cycles, server_cpu, client_cpu, errors, error, traced)


# -- the trace (`--trace`) ------------------------------------------------------------------------

# What a handoff costs the server, read from its /metrics at both ends of the window.
_COUNTED = {
    "runstate_wal_fsync_seconds_count": "fsyncs",
    "runstate_wal_fsync_seconds_sum": "fsync_s",
    "runstate_wal_append_seconds_count": "commits",
    "runstate_kernel_turns_total": "turns",
}


def read_metrics(url: str) -> dict[str, float]:
    """The counters a handoff is counted by: fsyncs (and their time), group commits, kernel turns,
    and per route the requests answered and their time from arrival to answer."""
    import httpx

    values: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        base, _, labels = name.partition("{")
        if base in _COUNTED:
            values[_COUNTED[base]] = values.get(_COUNTED[base], 0.0) + float(value)
        elif base in ("runstate_http_request_duration_seconds_count", "runstate_http_request_duration_seconds_sum"):
            route = next((part.split("=", 1)[1].strip('"') for part in labels.rstrip("}").split(",") if part.startswith("route=")), "?")
            what = "requests" if base.endswith("_count") else "request_s"
            values[f"{what} {route}"] = values.get(f"{what} {route}", 0.0) + float(value)
    return values


def _p(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def trace_line(moments: list[list[Any]], hold_ms: int, counted: dict[str, float]) -> str:
    """The links of a handoff, from the agents' moments (one clock, `CLOCK_MONOTONIC`, for every
    process) and the server's counters over the window.

    For two cycles of one key in a row, the second's acquire sent before the first's release
    began (another agent was waiting): `handoff` is from the release sent to the waiter holding
    the key, beside `release` (the release sent to its answer, on the releasing agent's side).
    Otherwise the next holder asked only after the release began: the releasing agent taking its
    key again, or a poll that came after (counted apart). `overshoot` is how much longer than
    `hold_ms` a holder kept the key (its sleep's lateness).
    """
    by_key: dict[str, list[list[Any]]] = {}
    for moment in moments:
        by_key.setdefault(moment[0], []).append(moment)
    handoffs: list[float] = []
    answered_after: list[float] = []
    idle = again = 0
    for cycles in by_key.values():
        cycles.sort(key=lambda cycle: cycle[2])
        for before, after in zip(cycles, cycles[1:]):
            if after[1] < before[3]:
                handoffs.append((after[2] - before[3]) * 1000)
                answered_after.append((after[2] - before[4]) * 1000)
            else:
                idle += 1
                again += after[5] == before[5]
    releases = [(cycle[4] - cycle[3]) * 1000 for cycle in moments]
    overshoot = [(cycle[3] - cycle[2]) * 1000 - hold_ms for cycle in moments]
    n = max(1, len(moments))
    per = {name: value / n for name, value in counted.items()}
    parts = [
        f"{len(moments)} cycles traced; handoff p50 {_p(handoffs, 0.5):.2f} ms, p90 {_p(handoffs, 0.9):.2f} ms"
        f" (mean {sum(handoffs) / max(1, len(handoffs)):.2f});"
        f" release sent -> answered p50 {_p(releases, 0.5):.2f} ms, p90 {_p(releases, 0.9):.2f};"
        f" waiter held - release answered p50 {_p(answered_after, 0.5):+.2f} ms;"
        f" hold overshoot p50 {_p(overshoot, 0.5):.2f} ms, p90 {_p(overshoot, 0.9):.2f};"
        f" {idle} of {idle + len(handoffs)} next holders asked after the release began ({again} the same agent again)",
    ]
    if counted:
        fsync_ms = counted.get("fsync_s", 0.0) / max(1.0, counted.get("fsyncs", 0.0)) * 1000
        routes = sorted((name[len("requests "):], value) for name, value in counted.items() if name.startswith("requests ") and value)
        route_text = ", ".join(
            f"{route} {value / n:.2f} ({counted.get('request_s ' + route, 0.0) / value * 1000:.2f} ms)" for route, value in routes
        )
        parts.append(
            f"per cycle (server): {per.get('fsyncs', 0.0):.2f} fsyncs (mean {fsync_ms:.2f} ms), {per.get('commits', 0.0):.2f} group"
            f" commits, {per.get('turns', 0.0):.2f} turns; requests per cycle (mean arrival -> answer): {route_text}"
        )
    return "\n    ".join(parts)


def measure(shapes: list[tuple[int, int, int]], window_s: float, warmup_s: float, say=print, fsync: str = "always",  # type: ignore[no-untyped-def]
            peers: tuple[str, ...] = ("ours", "redis"), trace: bool = False) -> list[tuple[HotResult, ...]]:
    from .procs import Processes, find_tool

    redis_server = find_tool("redis-server", "redis-server")
    if redis_server is None:
        raise RuntimeError("redis-server not found: apt-get install -y redis-server")
    rows = []
    with Processes() as procs:
        for agents, keys, hold_ms in shapes:
            pair = tuple(run_shape(procs, peer, agents, keys, hold_ms, window_s, warmup_s, redis_server, fsync, trace) for peer in peers)
            rows.append(pair)
            say(line_of(*pair) if len(pair) == 2 else f"{agents}/{keys}/{hold_ms} ms, {pair[0].peer} --fsync {fsync}: {pair[0].per_s:,.0f}/s = {pair[0].efficiency:.2f} (server {pair[0].server_cpu:.0%})")
            for result in pair:
                if result.trace:
                    say(f"  {result.peer}: {result.trace}")
    return rows  # type: ignore[return-value]


def line_of(ours: HotResult, redis: HotResult) -> str:
    def one(r: HotResult) -> str:
        errors = f", {r.errors} errors ({r.error})" if r.errors else ""
        return f"{r.per_s:,.0f}/s = {r.efficiency:.2f} (server {r.server_cpu:.0%} of a core{errors})"

    return (f"{ours.agents} agents / {ours.keys} keys / {ours.hold_ms} ms (limit {ours.limit_per_s:,.0f}/s): ours {one(ours)}; "
            f"redis {one(redis)}; ours/redis {ours.per_s / max(redis.per_s, 1e-9):.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(f"{a}/{k}/{h}" for a, k, h in SHAPES), help="agents/keys/hold_ms, comma-separated")
    parser.add_argument("--window", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--fsync", default="always", choices=("always", "batch", "off"), help="our server's --fsync")
    parser.add_argument("--peers", default="ours,redis", help="ours,redis (either alone)")
    parser.add_argument("--trace", action="store_true", help="time each handoff's links, and count the server's fsyncs, commits, turns and requests per cycle")
    parser.add_argument("--agents-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.agents_process:
        return agents_main()
    from .procs import RESULTS, pin_self

    pin_self()
    shapes = [tuple(int(x) for x in shape.split("/")) for shape in args.shapes.split(",") if shape.strip()]
    print(f"bench: hot keys, load average {os.getloadavg()[0]:.1f}", flush=True)
    rows = measure(shapes, args.window, args.warmup, fsync=args.fsync, peers=tuple(args.peers.split(",")), trace=args.trace)  # type: ignore[arg-type]
    print(f"bench: load average {os.getloadavg()[0]:.1f} at the end", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "hotkeys.json").write_text(json.dumps([[r.__dict__ for r in pair] for pair in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
