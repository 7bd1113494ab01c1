"""Run an in-process leg (bench/inprocess.py) in a fresh process on the load core and read its JSON."""

from __future__ import annotations

import json

from .procs import CPU_LOAD, Processes, python


def run(procs: Processes, args: list[str], timeout_s: float = 300) -> dict:
    proc = procs.start(f"inprocess {args[0]}", [python(), "-m", "bench.inprocess", *args], cpu=CPU_LOAD)
    try:
        proc.popen.wait(timeout_s)
    finally:
        procs.stop(proc)
    line = next((l for l in proc.lines if l.startswith("BENCH_JSON ")), None)
    if proc.popen.returncode != 0 or line is None:
        raise RuntimeError(f"bench.inprocess {' '.join(args)} failed ({proc.popen.returncode}):\n" + "\n".join(proc.lines[-30:]))
    return json.loads(line.split(" ", 1)[1])
