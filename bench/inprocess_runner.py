"""Run an in-process leg (bench/inprocess.py) in a fresh process on the load core and read its JSON."""

from __future__ import annotations

import json
import os

from .procs import CPU_LOAD, ROOT, Processes, python


def run(procs: Processes, args: list[str], timeout_s: float = 300) -> dict:
    # BENCH_SERVER_PYTHON (see targets.py) measures another checkout's kernel with this bench.
    interpreter = os.environ.get("BENCH_SERVER_PYTHON") or python()
    env = {"PYTHONPATH": str(ROOT)}
    proc = procs.start(f"inprocess {args[0]}", [interpreter, "-m", "bench.inprocess", *args], cpu=CPU_LOAD, env=env)
    try:
        proc.popen.wait(timeout_s)
    finally:
        procs.stop(proc)
    line = next((l for l in proc.lines if l.startswith("BENCH_JSON ")), None)
    if proc.popen.returncode != 0 or line is None:
        raise RuntimeError(f"bench.inprocess {' '.join(args)} failed ({proc.popen.returncode}):\n" + "\n".join(proc.lines[-30:]))
    return json.loads(line.split(" ", 1)[1])
