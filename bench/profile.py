"""Where a claim cycle's time goes: `make profile` (python -m bench.profile [--seconds S]).

Runs `runstate serve` (on a data directory with `--fsync batch`) under `py-spy record` while wrk
drives the claim cycle at 16 connections, then writes under bench/results/:

- `profile-claim-cycle.speedscope.json`: open it at speedscope.app (or any speedscope viewer);
- `profile-claim-cycle.folded`: the same stacks in the folded format of flamegraph.pl / inferno;
- `profile-claim-cycle.txt`: own time by package, and the top functions by own time and by
  cumulative time;
- the same three for the kernel alone (`profile-kernel-claims.*`): the in-process claim-cycle leg
  (bench/inprocess.py kernel) under py-spy, no HTTP.

Idle samples (the event loop waiting in epoll) are left out by py-spy, so the percentages are of
the time the server was busy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

from .harness import run_bounded
from .procs import CPU_LOAD, RESULTS, Processes, find_tool, missing_tool_message, pin_self
from .targets import create_scope, data_root, remove_data_root, start_runstate
from .wrk import run_wrk

NAME = "profile-claim-cycle"
KERNEL_NAME = "profile-kernel-claims"
SWARM_NAME = "profile-swarm"
PTRACE_HINT = "py-spy failed (it needs ptrace: run as root or with CAP_SYS_PTRACE)"


def summarize(speedscope: dict, top: int = 30, operations: int = 0) -> str:
    """Own time by package and the top functions, for the busiest thread (the event loop).

    Other threads (trio's worker threads, which run the journal's writes and fsyncs) are listed
    with their share of the samples only: their waits would drown the event loop's figures.
    With `operations` (useful operations done while sampled), each line also says how many
    microseconds of the event loop's busy time that is per operation.
    """
    frames = speedscope["shared"]["frames"]
    profiles = sorted(speedscope["profiles"], key=lambda p: -sum(p["weights"]))
    everything = sum(sum(p["weights"]) for p in profiles) or 1.0
    lines = ["Samples by thread:"]
    lines += [f"  {100 * sum(p['weights']) / everything:5.1f}%  {p['name']}" for p in profiles]
    loop = profiles[0]
    own: Counter[str] = Counter()
    cumulative: Counter[str] = Counter()
    total = 0.0
    for stack, weight in zip(loop["samples"], loop["weights"]):
        total += weight
        names = [_name(frames[i]) for i in stack]
        if names:
            own[names[-1]] += weight
        for name in set(names):
            cumulative[name] += weight
    total = total or 1.0
    packages: Counter[str] = Counter()
    for name, weight in own.items():
        packages[_package(name)] += weight
    lines += ["", f"In {loop['name']}: {len(loop['samples'])} samples, {total:.1f} s busy (idle time excluded)"]

    def share(weight: float) -> str:
        if not operations:
            return f"{100 * weight / total:5.1f}%"
        return f"{100 * weight / total:5.1f}% {weight / operations * 1e6:7.1f} us/op"

    if operations:
        lines += [f"{operations:,} useful operations while sampled: {total / operations * 1e6:,.0f} us of the loop's busy time each"]
    lines += ["", "Own time by package:"]
    lines += [f"  {share(w)}  {name}" for name, w in packages.most_common()]
    lines += ["", f"Top {top} functions by own time:"]
    lines += [f"  {share(w)}  {name}" for name, w in own.most_common(top)]
    lines += ["", f"Top {top} functions by cumulative time (own time plus callees):"]
    lines += [f"  {share(w)}  {name}" for name, w in cumulative.most_common(top)]
    return "\n".join(lines) + "\n"


def folded(speedscope: dict) -> str:
    frames = speedscope["shared"]["frames"]
    stacks: Counter[str] = Counter()
    for profile in speedscope["profiles"]:
        for stack, weight in zip(profile["samples"], profile["weights"]):
            stacks[";".join(_name(frames[i]) for i in stack)] += 1
    return "".join(f"{stack} {count}\n" for stack, count in stacks.most_common())


_LIBRARY = re.compile(r"/lib/python3\.\d+/(site-packages/)?")
# Our packages, in this checkout or another one (BENCH_SERVER_PYTHON).
_OURS = re.compile(r"/(server|actors|snapshots|sdk|bench)/(\w+/)*\w+\.py$")

_PACKAGES = (
    ("server/", "runstate server (server/)"),
    ("actors/", "runstate kernel (actors/)"),
    ("snapshots/", "runstate journal (snapshots/)"),
    ("trio/", "trio"),
    ("hypercorn/", "hypercorn"),
    ("h11/", "h11"),
    ("quart", "quart / quart-trio"),
    ("outcome", "trio (outcome)"),
)


def _package(name: str) -> str:
    path = name.rpartition("(")[2]
    for prefix, label in _PACKAGES:
        if path.startswith(prefix):
            return label
    return "standard library and other"


def _name(frame: dict) -> str:
    """`function (path)`, with the path shortened to the package (the line is left out, so one
    function is one entry however many of its lines were sampled)."""
    path = frame.get("file") or "?"
    library = _LIBRARY.search(path)
    ours = _OURS.search(path)
    if library:
        path = path[library.end():]
    elif ours:
        path = path[ours.start() + 1:]
    return f"{frame.get('name', '?')} ({path})"


def write_outputs(name: str, speedscope_path: Path, header: str, operations: int = 0) -> str:
    speedscope = json.loads(speedscope_path.read_text())
    (RESULTS / f"{name}.folded").write_text(folded(speedscope))
    summary = header + summarize(speedscope, operations=operations)
    (RESULTS / f"{name}.txt").write_text(summary)
    print(summary)
    print(f"profile: wrote {speedscope_path}, {RESULTS / (name + '.folded')} and {RESULTS / (name + '.txt')}\n")
    return summary


def profile_server(py_spy: str, args: argparse.Namespace) -> int:
    wrk = find_tool("wrk", "wrk")
    if wrk is None:
        print(missing_tool_message("wrk", "wrk"), file=sys.stderr)
        return 2
    out = RESULTS / f"{NAME}.speedscope.json"
    try:
        with Processes() as procs:
            server = start_runstate(procs, "profiled", fsync="batch", data_root=data_root())
            scope_id = run_bounded(create_scope(server, "profile"))
            print(f"profile: claim cycle, --fsync batch, {args.connections} conn, {args.seconds:g} s", flush=True)
            spy = procs.start(
                "py-spy",
                [py_spy, "record", "--pid", str(server.pid), "--rate", str(args.rate), "--duration", str(int(args.seconds)),
                 "--format", "speedscope", "--output", str(out)],
                cpu=CPU_LOAD,
            )
            time.sleep(1)  # let py-spy attach before the load starts
            result = run_wrk(procs, wrk, server.base_url, "claim_cycle.lua", [server.space, scope_id, server.api_key],
                             connections=args.connections, duration_s=args.seconds, server_pid=server.pid)
            spy.popen.wait(60)
            if spy.popen.returncode != 0 or not out.exists():
                print(PTRACE_HINT + "\n" + "\n".join(spy.lines[-20:]), file=sys.stderr)
                return 1
    finally:
        remove_data_root()
    write_outputs(NAME, out, (
        f"Claim cycle (--fsync batch) under wrk, {args.connections} connections, {args.seconds:g} s: "
        f"{result.rps:,.0f} req/s while sampled at {args.rate} Hz (py-spy), "
        f"server CPU {result.server_cpu:.0%} of a core.\n"
    ))
    return 0


def profile_kernel(py_spy: str, args: argparse.Namespace) -> int:
    """The kernel-alone leg (claim cycles through the kernel's commands, no HTTP) under py-spy."""
    out = RESULTS / f"{KERNEL_NAME}.speedscope.json"
    print(f"profile: kernel alone, claim cycles, {args.seconds:g} s", flush=True)
    with Processes() as procs:
        spy = procs.start(
            "py-spy",
            [py_spy, "record", "--rate", str(args.rate), "--format", "speedscope", "--output", str(out), "--",
             sys.executable, "-m", "bench.inprocess", "kernel", "--seconds", str(args.seconds), "--warmup", "0.5"],
            cpu=CPU_LOAD,
        )
        spy.popen.wait(args.seconds + 120)
        line = next((l for l in spy.lines if l.startswith("BENCH_JSON ")), None)
        if spy.popen.returncode != 0 or not out.exists() or line is None:
            print(PTRACE_HINT + "\n" + "\n".join(spy.lines[-20:]), file=sys.stderr)
            return 1
    result = json.loads(line.split(" ", 1)[1])
    write_outputs(KERNEL_NAME, out, (
        f"Kernel alone: {result['callers']} callers, {result['per_s']:,.0f} claim cycles/s at "
        f"{result['cpu']:.0%} of a core while sampled at {args.rate} Hz (py-spy; warm-up and start included).\n"
    ))
    return 0


def profile_swarm(py_spy: str, args: argparse.Namespace) -> int:
    """The swarm leg (our SDK, `bench/swarm.py`, the quick size unless `--full`) with the server
    under py-spy for its measured window: where the server's time goes per useful operation."""
    from .swarm import FULL, QUICK, run_peer

    size = FULL if args.full else QUICK
    out = RESULTS / f"{SWARM_NAME}.speedscope.json"
    spies: list = []
    print(f"profile: swarm through our SDK, {size.agents} agents in {size.processes} processes, {size.window_s:g} s", flush=True)

    def start_spy(pid: int, window_s: float) -> object:
        spy = procs.start(
            "py-spy",
            [py_spy, "record", "--pid", str(pid), "--rate", str(args.rate), "--duration", str(int(window_s)),
             "--format", "speedscope", "--output", str(out)],
            cpu=CPU_LOAD,
        )
        spies.append(spy)
        return spy

    try:
        with Processes() as procs:
            result = run_peer(procs, "ours", size, {}, on_window=start_spy)
    finally:
        remove_data_root()
    if not spies or spies[0].popen.returncode != 0 or not out.exists():
        print(PTRACE_HINT + ("\n" + "\n".join(spies[0].lines[-20:]) if spies else ""), file=sys.stderr)
        return 1
    write_outputs(SWARM_NAME, out, (
        f"Swarm (our SDK, {size.agents} agents in {size.processes} processes), {size.window_s:g} s window: "
        f"{result.useful_per_s:,.0f} useful ops/s ({result.cycles / result.window_s:,.0f} claim cycles + "
        f"{result.tasks / result.window_s:,.0f} tasks), server {result.server_cpu_per_1k:.2f} CPU-s per 1,000 ops, "
        f"{result.requests_per_op:.2f} requests per op, sampled at {args.rate} Hz (py-spy).\n"
    ), operations=result.useful)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", default="server,kernel,swarm",
                        help="server (claim cycle under wrk), kernel (kernel alone), swarm (the swarm leg), comma-separated")
    parser.add_argument("--full", action="store_true", help="the swarm at make bench's size (256 agents) instead of the quick one")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    args = parser.parse_args(argv)
    pin_self()
    py_spy = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")
    if py_spy is None:
        print("py-spy not found: pip install -e '.[bench]' (make profile does)", file=sys.stderr)
        return 2
    RESULTS.mkdir(parents=True, exist_ok=True)
    status = 0
    what = {w.strip() for w in args.what.split(",")}
    if "server" in what:
        status = profile_server(py_spy, args) or status
    if "kernel" in what:
        status = profile_kernel(py_spy, args) or status
    if "swarm" in what:
        status = profile_swarm(py_spy, args) or status
    return status


if __name__ == "__main__":
    sys.exit(main())
