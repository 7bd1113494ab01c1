"""History on a cluster: the time to show a past point of a space with 1M records of history,
asked through each node of a three-node cluster.

    .venv/bin/python -m bench.history_cluster --records 1000000

Three etcd members and three `runstate serve` nodes, started as the cluster legs start them
(bench/cluster.py: the tuned etcd timing, `--cluster-lease-s 1`, four partitions, each node with
its own data directory and the default history settings: 24 h kept, a checkpoint every 50,000
records). The history is written into the `default` space through the cluster over HTTP: real
claim cycles on 1,000 keys, in batch requests (`POST /v1/spaces/default/batch`) sent to the
partition's leader over several connections, each connection on its own keys: one request
releases every key the previous one took (with its token) and takes each again (a release, then
an acquire of one key run in that order in a batch), so every operation is one record of the
partition's log, committed to etcd and applied by both standbys. It stops once the partition's
log (`leaderLsn` of `GET /v1/cluster`) holds N records.

Then every node is asked for past points (`GET /v1/spaces/default/history/scopes/{run}/claims?at=...`),
the leader of the partition and the two standbys, the same points on each: just before each of
the node's own checkpoints (the points furthest from a snapshot: each node snapshots its copy at
its own points), points at random, and points by time. Each read is a fresh rebuild (a node keeps
only the last point, and the points differ from one read to the next); a standby first brings its
copy to the end of the log (docs/history.md). It prints the figures per node and one line
`BENCH_JSON {...}` for bench/run.py.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio

from .history import report

SPACE = "default"
KEYS = 1000
CONNECTIONS = 4
LEASE_S = 60
SAMPLES = 8


async def _write(urls: list[str], api_key: str, run: str, records: int, connections: int) -> dict:
    """Claim cycles in batches on `connections` connections to the partition's leader, until its
    log holds `records` records; the operations acknowledged and refused, and the batch requests.

    A leader change on the way (a session lapsed on a loaded machine) is waited out: a batch
    answered 503, or lost with its connection, is sent again to the leader named then; what it
    had done already is refused the second time (a release with a spent token, an acquire of a
    key now held) and counted, and a key held under a token the writer lost is left alone until
    its lease has ended, then taken again."""
    counts: dict = {"operations": 0, "refused": 0, "requests": 0, "resent": 0, "refusals": {}}
    done = trio.Event()
    headers = {"authorization": f"Bearer {api_key}"}
    per_connection = KEYS // connections
    leader = {"url": ""}

    async def cluster_map(http: httpx.AsyncClient) -> dict:
        for url in urls:
            try:
                answer = await http.get(url + "/v1/cluster")
            except httpx.HTTPError:
                continue
            if answer.status_code == 200:
                for entry in answer.json()["map"]:
                    if entry["partition"] == partition:
                        return entry  # type: ignore[no-any-return]
        raise RuntimeError("no node answered GET /v1/cluster")

    async def find_leader(http: httpx.AsyncClient) -> None:
        deadline = trio.current_time() + 120
        while trio.current_time() < deadline:
            entry = await cluster_map(http)
            if entry["leader"] is not None and entry["leader"]["url"]:
                leader["url"] = entry["leader"]["url"]
                return
            await trio.sleep(0.2)
        raise RuntimeError(f"partition {partition} had no leader for 120 s")

    async def watch(http: httpx.AsyncClient) -> None:
        while int((await cluster_map(http))["leaderLsn"] or 0) < records:
            await trio.sleep(0.5)
        done.set()

    async def send(http: httpx.AsyncClient, operations: list[dict]) -> list[dict]:
        """One batch, to the leader, sent again (after a new look for the leader) until answered 200."""
        failures = 0
        while True:
            try:
                answer = await http.post(leader["url"] + f"/v1/spaces/{SPACE}/batch", json={"operations": operations})
                if answer.status_code == 200:
                    return answer.json()["results"]  # type: ignore[no-any-return]
                if answer.status_code != 503:
                    raise RuntimeError(f"a batch answered {answer.status_code}: {answer.text[:500]}")
            except httpx.TransportError:
                pass
            failures += 1
            counts["resent"] += 1
            if failures > 100:
                raise RuntimeError("a batch was refused 100 times in a row")
            await trio.sleep(0.3)
            await find_leader(http)

    async def writer(number: int, http: httpx.AsyncClient) -> None:
        keys = [f"company:{number * per_connection + i}" for i in range(per_connection)]
        tokens: dict[str, str] = {}
        holder = {"holder": f"agent-{number}", "holderSession": f"s-{number}", "leaseSeconds": LEASE_S}
        held_until: dict[str, float] = {}  # keys held under a token lost in a leader change
        while not done.is_set():
            now = trio.current_time()
            operations = [{"path": f"/claims/{key}/release", "body": {"token": token}} for key, token in tokens.items()]
            operations += [{"path": "/claims", "body": {"scopeId": run, "key": key, **holder}} for key in keys
                           if held_until.get(key, 0) <= now]
            if not operations:  # every key of this connection held under a lost token: wait for the first lease to end
                await trio.sleep_until(min(held_until.values()))
                continue
            results = await send(http, operations)
            counts["requests"] += 1
            tokens = {}
            for operation, result in zip(operations, results):
                if result["status"] >= 300:
                    counts["refused"] += 1
                    code = result.get("error", {}).get("code", str(result["status"]))
                    counts["refusals"][code] = counts["refusals"].get(code, 0) + 1
                    if operation["path"] == "/claims" and code == "CLAIM_HELD":
                        held_until[operation["body"]["key"]] = trio.current_time() + LEASE_S + 1
                    continue
                counts["operations"] += 1
                if operation["path"] == "/claims":
                    tokens[operation["body"]["key"]] = result["body"]["token"]

    from runstate.actors.layout import Layout

    async with httpx.AsyncClient(headers=headers, timeout=120) as probe:
        partitions = (await probe.get(urls[0] + "/v1/cluster")).json()["partitions"]
        partition = Layout(partitions).of(SPACE)
        await find_leader(probe)
        clients = [httpx.AsyncClient(headers=headers, timeout=120) for _ in range(connections)]
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch, probe)
                for number, http in enumerate(clients):
                    nursery.start_soon(writer, number, http)
        finally:
            for http in clients:
                await http.aclose()
        entry = await cluster_map(probe)
    changes = {kind: entry[kind] for kind in ("failovers", "handoffs", "takeovers")}
    return {**counts, "records": int(entry["leaderLsn"]), "partition": partition, "leader_changes": changes}

def _points(data_dir: str, partition: int) -> list[tuple[int, int]]:
    """(LSN, time) of every snapshot a node keeps of the partition, oldest first."""
    from runstate.snapshots.datadir import partition_dir
    from runstate.snapshots.recovery import snapshot_dir
    from runstate.snapshots.snapshot import list_snapshots, snapshot_point

    found = [snapshot_point(path) for _, path in list_snapshots(snapshot_dir(partition_dir(data_dir, partition)))]
    return [point for point in found if point is not None]


def _settle(nodes: list, partition: int, every: int, timeout_s: float = 300) -> None:  # type: ignore[type-arg]
    """Wait until every node has applied the whole log and taken the checkpoint due (as the
    one-node leg waits for its last one), or `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        behind = []
        for node in nodes:
            with node.client() as http:
                entry = next(e for e in http.get("/v1/cluster").json()["map"] if e["partition"] == partition)
            if entry["leaderLsn"] is None or entry["appliedLsn"] < entry["leaderLsn"] or entry["leaderLsn"] - entry["snapshotLsn"] >= every:
                behind.append(node.name)
        if not behind:
            return
        time.sleep(0.5)
    print(f"bench: {', '.join(behind)} still behind the log or a checkpoint after {timeout_s:.0f} s; measuring anyway", flush=True)


def run(records: int, samples: int, connections: int, say=print) -> dict:  # type: ignore[no-untyped-def]
    from runstate.actors.timestamps import format_ms
    from tests.cluster.nodes import API_KEY

    from .cluster import cluster
    from .procs import cpu_seconds
    from .targets import data_root

    with tempfile.TemporaryDirectory(prefix="bench-history-cluster-", dir=data_root()) as root, cluster(3, Path(root)) as made:
        first = made.nodes.leader_of(SPACE)
        with first.client() as http:
            made_run = http.post(f"/v1/spaces/{SPACE}/scopes", json={"name": "history"})
            made_run.raise_for_status()
            run_id = made_run.json()["id"]
            every = http.get(f"/v1/spaces/{SPACE}/history").json()["kept"]
        from_ms, began = int(time.time() * 1000), time.perf_counter()
        urls = [node.url for node in made.nodes.live()]
        written = trio.run(_write, urls, API_KEY, run_id, records, connections)
        write_s, to_ms = time.perf_counter() - began, int(time.time() * 1000)
        partition = written["partition"]
        say(f"bench: wrote {written['records']:,} records through the partition's leader in {write_s:.1f} s "
            f"({written['operations']:,} operations in {written['requests']:,} batches; {written['refused']} refused "
            f"{written['refusals']}; {written['resent']} batches sent again; leader changes {written['leader_changes']})")
        checkpoint_every = int(every.get("checkpointEveryRecords") or 50_000)
        _settle(made.nodes.live(), partition, checkpoint_every)
        leader = made.nodes.leader_of(SPACE)  # (it may have changed while the history was written)
        nodes = [leader, *(node for node in made.nodes.live() if node is not leader)]
        last_lsn = written["records"]
        rng = random.Random(11)
        checkpoints = {node.name: _points(str(node.data_dir), partition) for node in nodes}
        # Every node is asked the same points but those before its own checkpoints, which differ.
        worst = {name: ([lsn - 1 for lsn, _ in points[1:]] + [last_lsn])[-samples:] for name, points in checkpoints.items()}
        shared = {"at random": [f"lsn:{lsn}" for lsn in sorted(rng.randrange(1, last_lsn) for _ in range(samples))],
                  "by time": [format_ms(ms) for ms in sorted(rng.randrange(from_ms, to_ms) for _ in range(samples))]}
        path = f"/v1/spaces/{SPACE}/history/scopes/{run_id}/claims"
        measured: dict[str, dict[str, list[dict]]] = {node.name: {} for node in nodes}
        clients = {node.name: node.client(timeout_s=120) for node in nodes}
        try:
            for name in ("before a checkpoint", *shared):
                for index in range(samples):
                    order = nodes[index % 3:] + nodes[:index % 3]  # each node first in turn
                    for node in order:
                        points = [f"lsn:{lsn}" for lsn in worst[node.name]] if name == "before a checkpoint" else shared[name]
                        if index >= len(points):
                            continue
                        pid = node.process.proc.pid
                        start, start_cpu = time.perf_counter(), cpu_seconds(pid)
                        answer = clients[node.name].get(path, params={"at": points[index], "limit": 1000})
                        seconds, cpu = time.perf_counter() - start, cpu_seconds(pid) - start_cpu
                        if answer.status_code != 200:  # not shown: counted, and the row says so
                            say(f"bench: {node.name} answered {answer.status_code} for {points[index]}: {answer.text[:300]}")
                            measured[node.name].setdefault(name, []).append({
                                "at": points[index], "s": seconds, "cpu_s": cpu, "status": answer.status_code})
                            continue
                        as_of = answer.json()["asOf"]
                        measured[node.name].setdefault(name, []).append({
                            "at": points[index], "lsn": as_of["lsn"], "s": seconds, "cpu_s": cpu,
                            "replayed": as_of["recordsReplayed"], "snapshot_lsn": as_of["snapshotLsn"]})
            kept = {node.name: clients[node.name].get(f"/v1/spaces/{SPACE}/history").json()["kept"] for node in nodes}
        finally:
            for http in clients.values():
                http.close()
    figures = {}
    for node in nodes:
        role = "leader" if node is leader else "standby"
        for name, reads in measured[node.name].items():
            seconds = [read["s"] for read in reads]
            cpu = [read["cpu_s"] for read in reads]
            replayed = [read["replayed"] for read in reads if "replayed" in read] or [0]
            figures[f"{node.name} ({role}), {name}"] = {
                "node": node.name, "role": role, "points": len(reads), "p50_s": statistics.median(seconds), "max_s": max(seconds),
                "failed": sum(1 for read in reads if "status" in read),
                "cpu_p50_s": statistics.median(cpu), "cpu_max_s": max(cpu),
                "replayed_p50": statistics.median(replayed), "replayed_max": max(replayed), "reads": reads}
    return {"records": last_lsn, "write_s": write_s, "connections": connections, "written": written,
            "checkpoint_every_records": checkpoint_every, "checkpoints": {name: len(points) for name, points in checkpoints.items()},
            "disk_bytes": {name: value["diskBytes"] for name, value in kept.items()},
            "max_s": max(figure["max_s"] for figure in figures.values()),
            "failed": sum(figure["failed"] for figure in figures.values()), "figures": figures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=SAMPLES)
    parser.add_argument("--connections", type=int, default=CONNECTIONS)
    args = parser.parse_args(argv)
    result = run(args.records, args.samples, args.connections)
    for name, figure in result["figures"].items():
        print(f"a past point through {name}: p50 {figure['p50_s']:.2f} s, max {figure['max_s']:.2f} s over {figure['points']}; "
              f"server CPU p50 {figure['cpu_p50_s']:.2f} s, max {figure['cpu_max_s']:.2f} s "
              f"(records replayed p50 {figure['replayed_p50']:,.0f}, max {figure['replayed_max']:,})"
              + (f"; {figure['failed']} not shown (see above)" if figure["failed"] else ""), flush=True)
    print(f"max over every node and point: {result['max_s']:.2f} s; snapshots kept per node "
          f"{result['checkpoints']}; history on disk per node "
          f"{ {name: f'{size / 2**20:.0f} MiB' for name, size in result['disk_bytes'].items()} }", flush=True)
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
