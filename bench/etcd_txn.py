"""etcd's CPU per journal transaction, against the records in it and the bytes of each record.

    .venv/bin/python -m bench.etcd_txn [--txns 200] [--rounds 3] [--records 1,4,16,64] [--sizes 115,230,460]

Three real etcd members on free ports (the tests' `EtcdCluster`: `--pre-vote`, the tuned timing),
and this process as a partition's leader: it takes the leader key, then sends the journal's own
transaction (`EtcdJournal._send`'s: the fence on the leader key's create revision and the log key's
absence, one put of the batch's frames under the next log key, the two reads on failure) through
the server's `EtcdClient`, one at a time as a leader does, `--txns` of each shape, while
`--watchers` watches (the two standbys') read the log, each from its own client. A shape is a
number of records and a size of each record (a frame: 24 bytes of header and the record's JSON; a
claim cycle writes two of about 230 bytes, so a direct cycle's transaction holds about 15 of them).
Each round takes every shape once, in an order that turns round by round, and prints for each the
CPU (user + system, `/proc/<pid>/stat`) of the three members together and of this process (the
leader's side and the watchers') per transaction, and the transactions per second. What it tells: whether etcd's share of a cycle goes
with the bytes it is given (then a more compact record would cut it) or with the transactions
(then only fewer transactions would).
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
from pathlib import Path
from typing import Awaitable, Callable

import trio

from runstate.snapshots.etcd import Compare, EtcdClient, Op
from runstate.snapshots.etcd_journal import PartitionKeys

from .procs import cpu_seconds


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _shape(etcd: EtcdClient, keys: PartitionKeys, epoch: int, first_lsn: int, records: int, size: int,
                 txns: int, members: list[int]) -> tuple[float, float, float]:
    """Members' CPU per transaction, this process's, and transactions per second, for `txns`
    transactions of `records` records of `size` bytes each, from log key `first_lsn` on."""
    value = os.urandom(records * size)
    etcd_before, own_before, began = sum(cpu_seconds(pid) for pid in members), _own_cpu(), trio.current_time()
    for number in range(txns):
        log_key = keys.log(first_lsn + number * records)
        fence = [Compare.create_revision(keys.leader, "==", epoch), Compare.absent(log_key)]
        result = await etcd.txn(fence, [Op.put(log_key, value)], [Op.get(keys.leader), Op.get(log_key)], repeatable=True)
        if not result.succeeded:
            raise RuntimeError(f"the fence refused the transaction at {log_key}")
    elapsed = trio.current_time() - began
    etcd_cpu = sum(cpu_seconds(pid) for pid in members) - etcd_before
    return etcd_cpu / txns, (_own_cpu() - own_before) / txns, txns / elapsed


async def run(endpoints: list[str], members: list[int], args: argparse.Namespace) -> None:
    shapes = [(records, size) for records in args.records for size in args.sizes]
    results: dict[tuple[int, int], list[tuple[float, float, float]]] = {shape: [] for shape in shapes}
    keys = PartitionKeys("/rs/bench/", 1)
    async with EtcdClient(endpoints) as etcd, trio.open_nursery() as nursery:
        for number in range(args.watchers):
            await nursery.start(_watch, endpoints[number % len(endpoints):] + endpoints[:number % len(endpoints)], keys)
        await etcd.put(keys.leader, b"bench")
        leader = await etcd.get(keys.leader)
        assert leader is not None
        lsn = 1
        for round_number in range(args.rounds):
            turn = round_number % len(shapes)
            order = shapes[turn:] + shapes[:turn]
            if round_number % 2:
                order.reverse()
            for records, size in order:
                figures = await _shape(etcd, keys, leader.create_revision, lsn, records, size, args.txns, members)
                lsn += records * args.txns
                results[(records, size)].append(figures)
                print(f"round {round_number + 1}: {records:3d} records x {size:4d} B: etcd {figures[0] * 1e3:.3f} ms/txn, "
                      f"this process {figures[1] * 1e3:.3f} ms/txn, {figures[2]:,.0f} txn/s; "
                      f"load {open('/proc/loadavg').read().split()[0]}", flush=True)
        nursery.cancel_scope.cancel()
    print("\nrecords x bytes | etcd CPU ms/txn (rounds) | median | per record | this process ms/txn (median)")
    for records, size in shapes:
        runs = results[(records, size)]
        etcd_ms = sorted(figure[0] * 1e3 for figure in runs)
        own_ms = sorted(figure[1] * 1e3 for figure in runs)
        median = etcd_ms[len(etcd_ms) // 2]
        print(f"{records:3d} x {size:4d} | {', '.join(f'{ms:.3f}' for ms in etcd_ms)} | {median:.3f} | "
              f"{median / records:.3f} | {own_ms[len(own_ms) // 2]:.3f}")


async def _watch(endpoints: list[str], keys: PartitionKeys, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """A standby's watch of the partition's log: every batch read, nothing applied."""
    async with EtcdClient(endpoints) as etcd, etcd.watch(keys.log_prefix, prefix=True) as watch:
        task_status.started()
        async for _ in watch:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--txns", type=int, default=200, help="transactions of each shape per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--watchers", type=int, default=2, help="watches of the log, each on a client of its own "
                        "(the standbys'; their CPU is this process's)")
    parser.add_argument("--records", type=lambda text: [int(n) for n in text.split(",")], default=[1, 4, 16, 64])
    parser.add_argument("--sizes", type=lambda text: [int(n) for n in text.split(",")], default=[115, 230, 460],
                        help="bytes of each record's frame")
    args = parser.parse_args(argv)
    on_three_members(run, args, "bench-etcd-txn-")
    return 0


def on_three_members(run: Callable[[list[str], list[int], argparse.Namespace], Awaitable[None]],
                     args: argparse.Namespace, prefix: str) -> None:
    """`run(endpoints, member pids, args)` against three fresh etcd members, the load average
    printed before and after."""
    from tests.etcd import EtcdCluster

    print(f"load average at the start: {open('/proc/loadavg').read().strip()}")
    with tempfile.TemporaryDirectory(prefix=prefix) as root, EtcdCluster(3, root=Path(root)) as cluster:
        members = [member.proc.pid for member in cluster.members if member.proc is not None]
        trio.run(run, cluster.endpoints, members, args)
    print(f"load average at the end: {open('/proc/loadavg').read().strip()}")


if __name__ == "__main__":
    raise SystemExit(main())
