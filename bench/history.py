"""History: the time to show a past point of a space with 1M records of history.

    .venv/bin/python -m bench.history --records 1000000          # the whole leg, as bench/run.py runs it
    .venv/bin/python -m bench.history write DIR --records 1000000  # only the history

`write` runs the kernel in process on a data directory as `runstate serve` keeps one (fsync off,
the default 24 h of history and checkpoints every 50,000 records, snapshots in a child process),
and drives one space with a swarm's mix until its partition's journal holds N records: 64 callers,
each a claim cycle (acquire, release) on one of 1,000 keys, every fifth cycle a task (submit,
receive, complete), every change with an Idempotency-Key as the SDKs send one (so the stored
answers, kept 24 h, grow the state as they would). Then a `runstate serve` process is started on
the directory and past points are read through HTTP (`GET /v1/spaces/bench/history/scopes/{run}/claims?at=...`):
the points a checkpoint is furthest from (just before each one), points at random, and points by
time; each read is a fresh rebuild (the server keeps only the last point). It prints the figures
and one line `BENCH_JSON {...}` for bench/run.py.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

import httpx
import orjson
import trio

SPACE = "bench"
CALLERS = 64
KEYS = 1000
API_KEY = "rs_bench_history_key_0123456789"


def report(document: dict) -> None:
    sys.stdout.write("BENCH_JSON " + orjson.dumps(document).decode() + "\n")
    sys.stdout.flush()


async def _write(data_dir: str, records: int, idempotent: bool, task_every: int) -> dict:
    from runstate.actors import Clock, IdSource, Kernel, Limits
    from runstate.actors import commands as c
    from runstate.actors.errors import KernelError
    from runstate.actors.kernel import Idem
    from runstate.actors.deliveries import DeliveryView
    from runstate.actors.layout import Layout
    from runstate.server.durable import state_model
    from runstate.snapshots.datadir import open_data_dir
    from runstate.snapshots.store import StoreConfig

    limits = Limits()  # the server's, which replays the history
    clock = Clock()
    config = StoreConfig(fsync="off", history_retention_s=86_400, history_checkpoint_every_records=50_000)
    data = await open_data_dir(data_dir, model=state_model(limits), clock=clock, config=config)
    kernel = Kernel.partitioned(
        {n: s.state for n, s in data.stores.items()}, {n: s.journal for n, s in data.stores.items()},
        layout=Layout(data.partitions), limits=limits, clock=clock, ids=IdSource(7),
    )
    journal = kernel.partition_of(SPACE).journal
    counter = iter(range(1 << 62))

    async def run(command_class: type, body: dict, params: dict | None = None) -> dict:
        command = kernel.parse(command_class, body, {"space": SPACE, **(params or {})})
        if not idempotent:
            return await kernel.submit(command)
        key = f"idem-{next(counter)}"
        idem = Idem(SPACE, key, hashlib.blake2b(key.encode(), digest_size=16).hexdigest())
        return await kernel.submit(command, idem=idem)

    began, began_ms = time.perf_counter(), clock.now_ms()
    async with trio.open_nursery() as nursery:
        await nursery.start(kernel.run)
        for number, store in data.stores.items():
            await nursery.start(store.run, kernel.partitions[number])
        run_id = (await run(c.CreateScope, {"name": "history"})).id  # (a ScopeView)
        mailbox_id = (await run(c.CreateMailbox, {"name": "work"})).id
        async def caller(i: int) -> None:
            rng = random.Random(i)
            cycle = 0
            while journal.durable_lsn < records:
                cycle += 1
                key = f"company:{rng.randrange(KEYS)}"
                try:
                    taken = await run(c.AcquireClaim, {"scopeId": run_id, "key": key, "holder": f"agent-{i}", "holderSession": f"s-{i}", "leaseSeconds": 60})
                except KernelError:  # CLAIM_HELD: another caller has it now
                    continue
                await run(c.ReleaseClaim, {"token": taken.token}, {"key": key})
                if task_every and cycle % task_every == 0:
                    await run(c.SubmitTask, {"scopeId": run_id, "mailboxId": mailbox_id, "taskKey": f"t-{i}-{cycle}", "input": {"n": cycle}})
                    got = await run(c.Receive, {"scopeId": run_id, "holder": f"agent-{i}", "holderSession": f"s-{i}", "leaseSeconds": 30}, {"mailbox_id": mailbox_id})
                    if isinstance(got, DeliveryView):  # (not EMPTY: nothing was there to deliver)
                        await run(c.CompleteDelivery, {"token": got.token, "result": {"ok": True}}, {"message_id": got.message.id})

        async with trio.open_nursery() as callers:  # each stops once the journal holds the records
            for i in range(CALLERS):
                callers.start_soon(caller, i)
        written_s, ended_ms = time.perf_counter() - began, clock.now_ms()
        store = data.stores[kernel.layout.of(SPACE)]
        while journal.durable_lsn - store.snapshot_lsn >= store.checkpoint_every_records:
            await trio.sleep(0.5)  # the last checkpoint due, taken
        nursery.cancel_scope.cancel()
    entries = store.snapshot_entries
    data.close()
    return {"records": journal.durable_lsn, "write_s": written_s, "run": run_id, "snapshot_entries": entries,
            "from_ms": began_ms, "to_ms": ended_ms,
            "checkpoint_every_records": store.checkpoint_every_records}


def write(data_dir: str, records: int, idempotent: bool = False, task_every: int = 0) -> dict:
    return {**trio.run(_write, data_dir, records, idempotent, task_every), "idempotent": idempotent, "task_every": task_every}


def _points(data_dir: str, partition: int) -> list[tuple[int, int]]:
    """(LSN, time) of every snapshot of the space's partition, oldest first."""
    from runstate.snapshots.datadir import partition_dir
    from runstate.snapshots.recovery import snapshot_dir
    from runstate.snapshots.snapshot import list_snapshots, snapshot_point

    return [snapshot_point(path) for _, path in list_snapshots(snapshot_dir(partition_dir(data_dir, partition)))]  # type: ignore[misc]


def measure(data_dir: str, written: dict, samples: int) -> dict:
    from runstate.actors.deliveries import DeliveryView
    from runstate.actors.layout import Layout
    from runstate.actors.timestamps import format_ms
    from runstate.snapshots.datadir import read_manifest
    from tests.servers import ServerProcess

    from .procs import cpu_seconds

    manifest = read_manifest(data_dir)
    assert manifest is not None
    partition = Layout(manifest.partitions).of(SPACE)
    checkpoints = _points(data_dir, partition)
    last_lsn = written["records"]
    rng = random.Random(11)
    worst = [lsn - 1 for lsn, _ in checkpoints[1:]] + [last_lsn]  # the furthest from the snapshot before
    chosen = {"before a checkpoint": worst[-samples:], "at random": sorted(rng.randrange(1, last_lsn) for _ in range(samples))}
    times = sorted(rng.randrange(written["from_ms"], written["to_ms"]) for _ in range(samples))
    figures: dict[str, dict] = {}
    env = {"RUNSTATE_ADMIN_KEY": "rs_bench_admin_key_0123456789"}
    with ServerProcess("--data-dir", data_dir, "--log-requests", "off", api_key=API_KEY, space_id=SPACE, env=env) as server:
        with httpx.Client(base_url=server.base_url, headers={"authorization": f"Bearer {API_KEY}"}, timeout=120) as http:
            path = f"/v1/spaces/{SPACE}/history/scopes/{written['run']}/claims"
            pid = server.proc.pid  # type: ignore[union-attr]
            for name, points in [*chosen.items(), ("by time", times)]:
                seconds, cpu, replayed = [], [], []
                for point in points:
                    at = format_ms(point) if name == "by time" else f"lsn:{point}"
                    began, began_cpu = time.perf_counter(), cpu_seconds(pid)
                    answer = http.get(path, params={"at": at, "limit": 1000})
                    seconds.append(time.perf_counter() - began)
                    cpu.append(cpu_seconds(pid) - began_cpu)
                    answer.raise_for_status()
                    replayed.append(answer.json()["asOf"]["recordsReplayed"])
                figures[name] = {"p50_s": statistics.median(seconds), "max_s": max(seconds), "points": len(points),
                                 "cpu_p50_s": statistics.median(cpu), "cpu_max_s": max(cpu),
                                 "replayed_max": max(replayed), "replayed_p50": statistics.median(replayed)}
            kept = http.get(f"/v1/spaces/{SPACE}/history").json()["kept"]
    return {**written, "checkpoints": len(checkpoints), "disk_bytes": kept["diskBytes"], "figures": figures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", nargs="?", choices=("all", "write"), default="all")
    parser.add_argument("data_dir", nargs="?", default=None)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--task-every", type=int, default=0, help="a task (submit, receive, complete) every N claim cycles of a caller")
    parser.add_argument("--idempotency-keys", action="store_true",
                        help="every change with an Idempotency-Key: the state then holds a day of stored answers")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="history-", dir=os.environ.get("BENCH_DATA_DIR"))
    try:
        written = write(data_dir, args.records, args.idempotency_keys, args.task_every)
        print(f"wrote {written['records']:,} records in {written['write_s']:.1f} s; the newest snapshot holds "
              f"{written['snapshot_entries']:,} entries", flush=True)
        if args.what == "write":
            return 0
        result = measure(data_dir, written, args.samples)
        for name, figure in result["figures"].items():
            print(f"a past point, {name}: p50 {figure['p50_s']:.2f} s, max {figure['max_s']:.2f} s over {figure['points']}; "
                  f"server CPU p50 {figure['cpu_p50_s']:.2f} s, max {figure['cpu_max_s']:.2f} s "
                  f"(records replayed p50 {figure['replayed_p50']:,.0f}, max {figure['replayed_max']:,})", flush=True)
        print(f"{result['checkpoints']} snapshots kept, {result['disk_bytes'] / 2**20:.0f} MiB of history on disk", flush=True)
        report(result)
    finally:
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
