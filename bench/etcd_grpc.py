"""etcd's CPU per journal transaction, sent through its JSON gateway against sent over gRPC.

    .venv/bin/python -m bench.etcd_grpc [--txns 300] [--rounds 3] [--records 1,15,64] [--size 230]

Three real etcd members on free ports (the tests' `EtcdCluster`), and this process as a
partition's leader, as in `bench.etcd_txn`: the journal's own transaction (the fence on the leader
key's create revision and the log key's absence, one put of the batch's frames, the two reads on
failure), one at a time, `--txns` of each shape, through two `EtcdClient`s side by side: one whose
`txn` goes through the members' JSON gateway (`grpc=False`: JSON and base64 here, jsonpb in the
member, then a second, loopback gRPC call inside it) and one whose `txn` goes over gRPC (HTTP/2,
protobuf). Each round sends every shape through both, the order of the two turning round by
round (A B, B A, ...), and prints the CPU (user + system, `/proc/<pid>/stat`) of the three members
together and of this process per transaction, and the transactions per second. No watcher runs:
the members' CPU is what the leader's transactions cost them. The medians over the rounds and the
ratio gRPC / gateway (etcd's, this process's, and both together) close the run.
"""

from __future__ import annotations

import argparse

import trio

from runstate.snapshots.etcd import EtcdClient
from runstate.snapshots.etcd_journal import PartitionKeys

from .etcd_txn import _shape, on_three_members

WAYS = ("gateway", "grpc")


def _load() -> str:
    with open("/proc/loadavg") as file:
        return file.read().split()[0]


async def run(endpoints: list[str], members: list[int], args: argparse.Namespace) -> None:
    results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    keys = PartitionKeys("/rs/bench/", 1)
    async with EtcdClient(endpoints, grpc=False) as gateway, EtcdClient(endpoints, grpc=True) as grpc:
        clients = {"gateway": gateway, "grpc": grpc}
        await gateway.put(keys.leader, b"bench")
        leader = await gateway.get(keys.leader)
        assert leader is not None
        for number, client in enumerate(clients.values()):  # (connections made before anything is counted)
            await _shape(client, keys, leader.create_revision, 1 + number, 1, args.size, 1, members)
        lsn = 1_000
        for round_number in range(args.rounds):
            for records in args.records:
                order = WAYS if (round_number + records) % 2 == 0 else WAYS[::-1]
                for way in order:
                    figures = await _shape(clients[way], keys, leader.create_revision, lsn, records, args.size, args.txns, members)
                    lsn += records * args.txns
                    results.setdefault((way, records), []).append(figures)
                    print(f"round {round_number + 1}: {records:3d} records x {args.size} B via {way:7s}: "
                          f"etcd {figures[0] * 1e3:.3f} ms/txn, this process {figures[1] * 1e3:.3f} ms/txn, "
                          f"{figures[2]:,.0f} txn/s; load {_load()}", flush=True)
    print("\nrecords | way     | etcd CPU ms/txn (rounds)  | median | this process ms/txn (median) | txn/s (median)")
    for records in args.records:
        medians = {}
        for way in WAYS:
            runs = results[(way, records)]
            etcd_ms = sorted(figure[0] * 1e3 for figure in runs)
            own_ms = sorted(figure[1] * 1e3 for figure in runs)
            rates = sorted(figure[2] for figure in runs)
            medians[way] = (etcd_ms[len(etcd_ms) // 2], own_ms[len(own_ms) // 2])
            print(f"{records:7d} | {way:7s} | {', '.join(f'{ms:.3f}' for ms in etcd_ms):25s} | {medians[way][0]:.3f} | "
                  f"{medians[way][1]:.3f} | {rates[len(rates) // 2]:,.0f}")
        together = {way: sum(medians[way]) for way in WAYS}
        print(f"{records:7d} | grpc/gateway: etcd {medians['grpc'][0] / medians['gateway'][0]:.2f}x, "
              f"this process {medians['grpc'][1] / medians['gateway'][1]:.2f}x, both together "
              f"{together['grpc']:.3f} / {together['gateway']:.3f} ms = {together['grpc'] / together['gateway']:.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--txns", type=int, default=300, help="transactions of each shape and way per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=lambda text: [int(n) for n in text.split(",")], default=[1, 15, 64],
                        help="records in each transaction (a direct claim cycle's holds about 15)")
    parser.add_argument("--size", type=int, default=230, help="bytes of each record's frame")
    args = parser.parse_args(argv)
    on_three_members(run, args, "bench-etcd-grpc-")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
