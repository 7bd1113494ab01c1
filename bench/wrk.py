"""Throughput with wrk: one thread on the load core, Lua scripts under bench/lua/."""

from __future__ import annotations

import json
import resource
import time
from dataclasses import dataclass
from pathlib import Path

from .procs import CPU_LOAD, Processes, cpu_seconds

LUA = Path(__file__).resolve().parent / "lua"


@dataclass
class WrkResult:
    script: str
    connections: int
    duration_s: float
    requests: int
    errors: int
    rps: float
    p50_ms: float
    p99_ms: float
    counters: dict
    wrk_cpu: float  # share of one core the load generator used
    server_cpu: float  # share of one core the server used

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def run_wrk(
    procs: Processes,
    wrk: str,
    url: str,
    script: str,
    args: list[str],
    *,
    connections: int,
    duration_s: float,
    server_pid: int,
) -> WrkResult:
    command = [
        wrk,
        "-t1",
        f"-c{connections}",
        f"-d{duration_s:g}s",
        "--timeout", "10s",
        "-s", str(LUA / script),
        url,
        "--",
        *args,
    ]
    before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before = cpu_seconds(server_pid)
    started = time.monotonic()
    proc = procs.start(f"wrk {script}", command, cpu=CPU_LOAD)
    try:
        proc.popen.wait(duration_s + 60)
    finally:
        server_after = cpu_seconds(server_pid)
        elapsed = time.monotonic() - started
        procs.stop(proc)
    after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    wrk_cpu_s = (after_children.ru_utime + after_children.ru_stime) - (before_children.ru_utime + before_children.ru_stime)
    line = next((l for l in proc.lines if l.startswith("BENCH_JSON ")), None)
    if proc.popen.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({proc.popen.returncode}):\n" + "\n".join(proc.lines[-30:]))
    data = json.loads(line.split(" ", 1)[1])
    duration = data["duration_us"] / 1e6
    errors = sum(v for k, v in data.items() if k.startswith("errors_"))
    standard = {"requests", "duration_us", "bytes", "latency_mean_us", "latency_max_us"}
    counters = {k: v for k, v in data.items() if k not in standard and not k.startswith(("errors_", "latency_p"))}
    return WrkResult(
        script=script,
        connections=connections,
        duration_s=duration,
        requests=data["requests"],
        errors=errors,
        rps=data["requests"] / duration,
        p50_ms=data["latency_p50_us"] / 1000,
        p99_ms=data["latency_p99_us"] / 1000,
        counters=counters,
        wrk_cpu=wrk_cpu_s / elapsed,
        server_cpu=(server_after - server_before) / elapsed,
    )
