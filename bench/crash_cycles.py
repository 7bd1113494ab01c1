"""A longer kill -9 run against the real server than the test suite's 20 cycles.

    .venv/bin/python bench/crash_cycles.py --cycles 200 --seed 7

Each cycle: start `runstate serve` on a data directory (fsync policy rotating always, batch, off),
drive six concurrent HTTP clients, SIGKILL the server at a random moment, check the directory
against everything acknowledged (tests/durability/crashloop.py says what is checked). Prints a
summary; exits non-zero on the first violation.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import trio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from runstate.server.durable import state_model  # noqa: E402
from runstate.snapshots.check import check  # noqa: E402
from tests.durability.crashloop import run_cycles  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--data-dir", default=None, help="default: a new temporary directory")
    args = parser.parse_args()
    data = args.data_dir or tempfile.mkdtemp(prefix="runstate-crash-")
    log = os.path.join(os.path.dirname(data.rstrip("/")) or ".", os.path.basename(data.rstrip("/")) + ".log")
    started = time.perf_counter()
    acked = trio.run(run_cycles, data, args.cycles, args.seed, log, args.clients, (0.1, 1.5))
    took = time.perf_counter() - started
    report = check(data, state_model())
    print(f"{args.cycles} kill -9 cycles in {took:.1f} s (seed {args.seed}, {args.clients} clients)")
    print(f"acknowledged changes checked: {acked.changes}; claims renewed after a restart: {acked.renewed_after_restart}")
    print(f"scopes: {len(acked.scopes)} ({len(acked.ended)} ended), keys with generations: {len(acked.generation_max)}")
    print(report.format())
    print(f"server log: {log}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
