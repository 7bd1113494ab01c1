"""`runstate cluster status`: a cluster's nodes, partitions, leaders and how far behind each standby is.

It asks one node (`--url`, else RUNSTATE_BASE_URL) for `GET /v1/cluster`, with the admin key if it
has one (as `runstate keys` finds it), else RUNSTATE_API_KEY: any valid key may read the map.
What the node answers is its own view, taken at one moment: the leaders as its watch on etcd last
saw them (the map and each node's LEADS both come from them, so they agree), and for every node
the LSNs it last published (every 2 s), from which each standby's lag is counted. FAILOVERS counts
the leader changes the asked node saw after a leader was lost; HANDOFFS those after a leader gave
the partition over (a node joining or stopping, the partitions spreading).

    runstate cluster status --url http://10.0.0.5:8080
    runstate cluster status --json

Exit status as the other admin commands: 0 done, 1 refused or unreachable, 2 a usage error.
A server that is one node (no `--etcd`) answers the same shape: one node leading every partition.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from .admin_cli import CommandError, Credential, _admin_key, _common, _print_json, _request, _sub, print_table

__all__ = ["add_commands", "status"]


def add_commands(commands: Any) -> None:
    cluster = _sub(commands, "cluster", "look at a cluster: its nodes, partitions, leaders and standby lag",
                   "  runstate cluster status\n  runstate cluster status --url http://10.0.0.5:8080 --json", [])
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    _sub(actions, "status", "the nodes, the partitions, who leads each and how far behind each standby is",
         "  runstate cluster status\n  runstate cluster status --json", [_common(admin_only=True)])


def status(args: argparse.Namespace) -> None:
    secret = _admin_key(args, required=False)
    if secret is None and os.environ.get("RUNSTATE_API_KEY"):
        secret = Credential(os.environ["RUNSTATE_API_KEY"], "RUNSTATE_API_KEY", admin=False)
    if secret is None:
        raise CommandError("cluster status needs a key: RUNSTATE_API_KEY or the admin key (RUNSTATE_ADMIN_KEY or --data-dir)", 2)
    data = _request(args, "GET", "/v1/cluster", secret)
    if args.json:
        _print_json(data)
        return
    nodes = data.get("nodes") or []
    head = f"cluster {data['cluster']}" if data.get("cluster") else "a single node (not a cluster)"
    print(f"{head}: {data['partitions']} data partition(s) and the system partition, {len(nodes)} node(s); asked {data['node']}\n")
    print_table(nodes, [("NODE", "node"), ("URL", "url"), ("LEADS", _leads)])
    print()
    print_table(data.get("map") or [], [
        ("PARTITION", "partition"), ("LEADER", lambda row: (row.get("leader") or {}).get("node") or "NONE"),
        ("EPOCH", lambda row: (row.get("leader") or {}).get("epoch")), ("LSN", "leaderLsn"), ("FAILOVERS", "failovers"),
        ("HANDOFFS", lambda row: row.get("handoffs", 0)), ("STANDBYS (node:records behind)", _standbys),
    ])


def _leads(row: dict) -> str:
    """The partitions a node leads, as the map says (one view: a partition is never under two nodes);
    a node that left the live nodes while its keys last is marked so."""
    led = ",".join(str(number) for number in row.get("leads") or ()) or "-"
    return led if row.get("live", True) else f"{led} (gone)"


def _standbys(row: dict) -> str:
    found = [f"{s['node']}:{'?' if s.get('lagRecords') is None else s['lagRecords']}" for s in row.get("standbys") or []]
    return " ".join(found) or "-"
