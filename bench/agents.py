"""Connected agents per node: `python -m bench.agents [--agents 1000,5000,10000] [--processes K]`.

Agent swarms are many slow clients, most of them idle: each holds a lease and renews it. This leg
puts N agents on one `runstate serve` (`--fsync batch`, a fresh data directory, as the claim-cycle
legs run it), each on its own keep-alive HTTP/1.1 connection, each holding one claim (lease 30 s)
renewed every 10 s (a third of it) through the route the SDK renews one claim with (`POST
.../claims/{key}/renew`), the N renewals spread evenly over the 10 s; nothing else. For each N, on a
fresh server: the server's RSS growth per agent over the idle server, its CPU per second of steady
state (% of a core), renewal latency p50/p99 (measured by the agents, one clock), its file
descriptors and trio tasks (`runstate_trio_tasks` on /metrics), and the load generators' own CPU:
a generator near 100 % of its core makes the latency its own.

The load generators are K processes (`--generator`, below) of raw asyncio streams and a minimal
HTTP/1.1 writer, all on the load core; the server alone on the other. 10,000 connections need more
descriptors than a shell's usual limit: the bench raises RLIMIT_NOFILE (soft, and hard when run as
root) for itself and the processes it starts, and the server's `connections_max` to N + 100.
With `--profile`, the server is under `py-spy record` during the window of the largest N.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import orjson

LEASE_S = 30
RENEW_EVERY_S = 10.0  # a third of the lease
CONNECT_AT_ONCE = 64
CONNECT_S = 2.0
CONNECT_TRIES = 20  # connections a generator opens at once (the server's backlog is 1,024)
NOFILE = 65536
AGENT_COUNTS = (1000, 5000, 10000)


# -- the load generator (one process of many) -----------------------------------------------------

class _Agent:
    __slots__ = ("index", "key", "token", "reader", "writer")

    def __init__(self, index: int) -> None:
        self.index = index
        self.key = f"agent-{index}"
        self.token = ""
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None


class _Generator:
    def __init__(self, args: argparse.Namespace) -> None:
        parts = urlsplit(args.url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.head = f"host: {self.host}:{self.port}\r\nauthorization: Bearer {args.api_key}\r\ncontent-type: application/json\r\n"
        self.base = f"/v1/spaces/{args.space}/claims"
        self.scope = args.scope
        self.total = args.total
        self.epoch = args.epoch  # CLOCK_MONOTONIC, shared by every generator: agent i renews at epoch + i/N * every + k * every
        self.agents = [_Agent(i) for i in range(args.first, args.first + args.count)]
        self.samples: list[tuple[float, float]] = []  # (sent at, seconds to the answer)
        self.errors = 0
        self.last_error = ""

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A new connection, tried again as a client would: a connection refused, or not accepted
        within CONNECT_S (a SYN dropped while the server's accept queue is full waits for the
        kernel's retry, 1 s, 3 s, 7 s...)."""
        for attempt in range(CONNECT_TRIES):
            try:
                return await asyncio.wait_for(asyncio.open_connection(self.host, self.port), CONNECT_S)
            except (OSError, asyncio.TimeoutError) as error:
                self.errors += 1
                self.last_error = f"connecting: {error!r}"
                await asyncio.sleep(0.1 * (attempt + 1))
        raise ConnectionError(f"no connection after {CONNECT_TRIES} tries: {self.last_error}")

    async def request(self, agent: _Agent, path: str, body: bytes) -> tuple[int, bytes]:
        if agent.writer is None:
            agent.reader, agent.writer = await self.connect()
        assert agent.reader is not None
        agent.writer.write(b"POST %s HTTP/1.1\r\n%scontent-length: %d\r\n\r\n%s" % (path.encode(), self.head.encode(), len(body), body))
        head = await agent.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        at = head.lower().find(b"content-length:")
        length = int(head[at + 15:head.index(b"\r\n", at)]) if at >= 0 else 0
        payload = await agent.reader.readexactly(length) if length else b""
        if b"connection: close" in head.lower():
            agent.writer.close()
            agent.writer = agent.reader = None
        return status, payload

    async def acquire(self, agent: _Agent, gate: asyncio.Semaphore) -> None:
        async with gate:
            body = orjson.dumps({"key": agent.key, "scopeId": self.scope, "holder": agent.key, "holderSession": agent.key, "leaseSeconds": LEASE_S})
            status, payload = await self.request(agent, self.base, body)
            if status != 200:
                raise RuntimeError(f"acquire of {agent.key} answered {status}: {payload[:200]!r}")
            agent.token = orjson.loads(payload)["token"]

    async def renew_forever(self, agent: _Agent) -> None:
        phase = self.epoch + agent.index / self.total * RENEW_EVERY_S
        now = time.monotonic()
        due = phase + (math.floor((now - phase) / RENEW_EVERY_S) + 1) * RENEW_EVERY_S  # the first slot after now
        path = f"{self.base}/{agent.key}/renew"
        body = b'{"token":"%s","leaseSeconds":%d}' % (agent.token.encode(), LEASE_S)
        while True:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            sent = time.monotonic()
            try:
                status, payload = await self.request(agent, path, body)
                if status != 200:
                    self.errors += 1
                    self.last_error = f"{status}: {payload[:200]!r}"
            except (OSError, asyncio.IncompleteReadError) as error:
                self.errors += 1
                self.last_error = repr(error)
                if agent.writer is not None:
                    agent.writer.close()
                agent.writer = agent.reader = None
            self.samples.append((sent, time.monotonic() - sent))
            due += RENEW_EVERY_S

    async def live(self, agent: _Agent, gate: asyncio.Semaphore, ready: list[int]) -> None:
        """One agent: connect, take its claim, then renew it on its schedule (from its first slot
        after the claim: an agent idle past the server's keep-alive while the others connect
        would find its connection closed)."""
        try:
            await self.acquire(agent, gate)
        except Exception as error:
            print(f"agents: failed {error!r}", flush=True)
            raise
        ready[0] -= 1
        if not ready[0]:
            print("agents: ready", flush=True)
        await self.renew_forever(agent)

    async def run(self) -> None:
        gate = asyncio.Semaphore(CONNECT_AT_ONCE)
        ready = [len(self.agents)]
        renewing = [asyncio.create_task(self.live(agent, gate, ready)) for agent in self.agents]
        lines: asyncio.Queue[str] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        threading.Thread(target=_read_stdin, args=(loop, lines), daemon=True).start()
        while True:
            line = await lines.get()
            if not line:  # the bench went away
                break
            began, ended = (float(x) for x in line.split())
            kept = [round(latency * 1e6) for sent, latency in self.samples if began <= sent < ended]
            print("agents: report " + json.dumps({"latencies_us": kept, "errors": self.errors, "last_error": self.last_error}), flush=True)
        for task in renewing:
            task.cancel()


def _read_stdin(loop: asyncio.AbstractEventLoop, lines: "asyncio.Queue[str]") -> None:
    for line in sys.stdin:
        loop.call_soon_threadsafe(lines.put_nowait, line.strip())
    loop.call_soon_threadsafe(lines.put_nowait, "")


def generator_main(args: argparse.Namespace) -> int:
    asyncio.run(_Generator(args).run())
    return 0


# -- the leg --------------------------------------------------------------------------------------

@dataclass
class AgentsResult:
    agents: int
    processes: int
    window_s: float
    idle_rss: int
    rss: int
    server_cpu: float  # share of one core over the window
    renewals_per_s: float
    p50_ms: float
    p99_ms: float
    fds: int
    tasks: int | None
    generator_cpu: float  # the generators together, share of one core
    errors: int
    load_before: float
    load_after: float
    last_error: str = ""
    server_wait: float | None = None  # share of the window the event loop's thread waited for its core

    @property
    def rss_per_agent(self) -> float:
        return (self.rss - self.idle_rss) / self.agents

    def figure(self) -> str:
        tasks = "-" if self.tasks is None else f"{self.tasks:,}"
        return (f"{self.rss_per_agent / 1024:.1f} KiB RSS/agent (RSS {self.rss / 2**20:.0f} MiB, idle {self.idle_rss / 2**20:.0f}); "
                f"server CPU {self.server_cpu:.1%} of a core at {self.renewals_per_s:,.0f} renewals/s "
                f"({self.server_cpu / max(self.renewals_per_s, 1e-9) * 1e3:.2f} ms/renewal); renewal p50 {self.p50_ms:.2f} ms, "
                f"p99 {self.p99_ms:.2f} ms; {self.fds:,} fds, {tasks} trio tasks; generators {self.generator_cpu:.0%} of a core "
                f"({self.processes} processes); errors {self.errors}; load {self.load_before:.1f} -> {self.load_after:.1f}"
                + ("" if self.server_wait is None else f"; the server's loop waited for its core {self.server_wait:.1%} of the window"))

    def as_dict(self) -> dict:
        return {**self.__dict__, "rss_per_agent": self.rss_per_agent}


def raise_nofile(wanted: int = NOFILE) -> int:
    """Raise this process's descriptor limit (inherited by what it starts); the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted and os.geteuid() == 0:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
            return wanted
        except (ValueError, OSError):
            pass
    soft = hard if hard == resource.RLIM_INFINITY else max(soft, min(wanted, hard))
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _metric(url: str, name: str) -> float | None:
    import httpx

    try:
        text = httpx.get(url + "/metrics", timeout=10).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def _run_queue_wait_s(pid: int) -> float | None:
    """Seconds the process's main thread (the server's event loop) has been runnable but waiting for a
    CPU (`/proc/PID/schedstat`, Linux with schedstats): a loop held up by other processes on its core."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def _percentile(ordered: list[int], q: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] / 1000


def measure(agents: int, processes: int, window_s: float, *, profile_to: str | None = None, say=print) -> AgentsResult:  # type: ignore[no-untyped-def]
    from .procs import CPU_LOAD, Processes, cpu_seconds, python, rss_bytes
    from .targets import create_scope, data_root, start_runstate

    limit = raise_nofile()
    if limit < agents + 1000:
        raise RuntimeError(f"the descriptor limit is {limit}: {agents} agents need about {agents + 1000} (run as root, or raise ulimit -n)")
    load_before = os.getloadavg()[0]
    with Processes() as procs:
        server = start_runstate(procs, f"agents-{agents}", fsync="batch", data_root=data_root(),
                                env={"RUNSTATE_CONNECTIONS_MAX": str(agents + 100)})
        scope = asyncio.run(create_scope(server))
        time.sleep(1)
        idle_rss = rss_bytes(server.pid)
        epoch = time.monotonic() + 1
        per, extra = divmod(agents, processes)
        generators = []
        first = 0
        for number in range(processes):
            count = per + (1 if number < extra else 0)
            generators.append(procs.start(
                f"agents-gen-{number}",
                [python(), "-m", "bench.agents", "--generator", "--url", server.base_url, "--api-key", server.api_key,
                 "--space", server.space, "--scope", scope, "--first", str(first), "--count", str(count),
                 "--total", str(agents), "--epoch", repr(epoch)],
                cpu=CPU_LOAD, stdin=True, pattern=r"agents: (ready)"))
            first += count
        began = time.monotonic()
        for proc in generators:
            proc.wait_ready(timeout_s=300)
        say(f"bench: {agents} agents connected and holding a claim in {time.monotonic() - began:.1f} s; settling one renewal round")
        time.sleep(RENEW_EVERY_S + 2)  # every agent renewed once on its own schedule
        spy = None
        if profile_to is not None:
            py_spy = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")
            assert py_spy is not None, "py-spy not found: pip install -e '.[bench]'"
            spy = subprocess.Popen([py_spy, "record", "--pid", str(server.pid), "--rate", "100", "--duration", str(int(window_s)),
                                    "--format", "raw", "--output", profile_to],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            time.sleep(1)
        server_cpu0 = cpu_seconds(server.pid)
        gen_cpu0 = sum(cpu_seconds(proc.pid) for proc in generators)
        wait0 = _run_queue_wait_s(server.pid)
        window_began = time.monotonic()
        time.sleep(window_s)
        window_ended = time.monotonic()
        elapsed = window_ended - window_began
        server_cpu = (cpu_seconds(server.pid) - server_cpu0) / elapsed
        gen_cpu = (sum(cpu_seconds(proc.pid) for proc in generators) - gen_cpu0) / elapsed
        wait1 = _run_queue_wait_s(server.pid)
        server_wait = None if wait0 is None or wait1 is None else (wait1 - wait0) / elapsed
        rss = rss_bytes(server.pid)
        fds = len(os.listdir(f"/proc/{server.pid}/fd"))
        tasks = _metric(server.base_url, "runstate_trio_tasks")
        if spy is not None:
            spy.wait(60)
        latencies: list[int] = []
        errors = 0
        last_error = ""
        for proc in generators:
            mark = len(proc.lines)
            proc.send(f"{window_began!r} {window_ended!r}")
            deadline = time.monotonic() + 60
            report = None
            while report is None and time.monotonic() < deadline:
                report = next((line for line in proc.lines[mark:] if line.startswith("agents: report ")), None)
                time.sleep(0.05)
            if report is None:
                raise RuntimeError(f"{proc.name} sent no report:\n" + "\n".join(proc.lines[-20:]))
            document = json.loads(report[len("agents: report "):])
            latencies += document["latencies_us"]
            errors += document["errors"]
            last_error = document["last_error"] or last_error
        latencies.sort()
        if errors:
            said = [line for line in server.proc.lines if '"runstate.access"' not in line]
            say("bench: the server said (not its access log):\n" + "\n".join(said[-8:]))
    return AgentsResult(
        agents=agents, processes=processes, window_s=elapsed, idle_rss=idle_rss, rss=rss, server_cpu=server_cpu,
        renewals_per_s=len(latencies) / elapsed, p50_ms=_percentile(latencies, 50), p99_ms=_percentile(latencies, 99),
        fds=fds, tasks=None if tasks is None else int(tasks), generator_cpu=gen_cpu, errors=errors,
        load_before=load_before, load_after=os.getloadavg()[0], last_error=last_error, server_wait=server_wait,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default=",".join(str(n) for n in AGENT_COUNTS), help="comma-separated agent counts")
    parser.add_argument("--processes", type=int, default=4, help="load generator processes")
    parser.add_argument("--window", type=float, default=30.0, help="seconds of steady state measured (after one renewal round)")
    parser.add_argument("--profile", metavar="FILE", help="py-spy the server (raw stacks to FILE) during the largest count's window")
    parser.add_argument("--generator", action="store_true", help=argparse.SUPPRESS)
    for name in ("--url", "--api-key", "--space", "--scope"):
        parser.add_argument(name, help=argparse.SUPPRESS)
    for name in ("--first", "--count", "--total"):
        parser.add_argument(name, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--epoch", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.generator:
        return generator_main(args)
    from .procs import RESULTS, pin_self

    pin_self()
    counts = [int(n) for n in args.agents.split(",") if n.strip()]
    results = []
    for count in counts:
        result = measure(count, args.processes, args.window, profile_to=args.profile if count == max(counts) else None)
        print(f"{count:>6} agents: {result.figure()}", flush=True)
        if result.last_error:
            print(f"        last error: {result.last_error}", flush=True)
        results.append(result.as_dict())
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "agents.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
