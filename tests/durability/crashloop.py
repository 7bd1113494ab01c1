"""Kill -9 cycles against the real server: the engine of `test_wal_crash.py` and `bench/crash_cycles.py`.

Each cycle starts `runstate serve` on a free port over one data directory, lets several HTTP
clients create and end scopes and acquire, renew and release claims, kills the server with SIGKILL
at a random moment, and then reads the directory (read-only, as `runstate check` does) to check:

- every acknowledged change is there: an acknowledged scope exists, an acknowledged acquire is
  still the key's holder (same generation and token) unless something later took over, an
  acknowledged release is not the holder any more;
- generations only grow: a key's generation never falls below one already acknowledged, and every
  acquire after a restart gets a greater generation than any acknowledged before;
- nothing terminal changed: an acknowledged cancel or complete stays exactly that.

At the start of each cycle, the claims acquired in the previous cycle (alive at the crash) are
renewed with their tokens and must succeed: the grace period at work.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import httpx
import trio

from runstate.server.durable import state_model
from runstate.actors.layout import Layout
from runstate.snapshots.datadir import load_partition, read_manifest

from ..servers import SERVING

API_KEY = "rs_crash_test_key"
SPACE = "default"
POLICIES = ("always", "batch", "off")


@dataclass
class Acked:
    """What the server acknowledged, across all cycles."""

    scopes: set[str] = field(default_factory=set)
    ended: dict[str, str] = field(default_factory=dict)  # scope -> CANCELLED / COMPLETED
    holders: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)  # (scope, key) -> (gen, token)
    released: set[str] = field(default_factory=set)  # tokens
    generation_max: dict[tuple[str, str], int] = field(default_factory=dict)
    this_cycle: list[tuple[str, str, str]] = field(default_factory=list)  # (scope, key, token)
    changes: int = 0
    renewed_after_restart: int = 0


class Server:
    """`runstate serve --port 0` over the data directory, its output appended to `log_path`.

    The port is the one the server bound, read from the line it prints: a port chosen here and
    handed to it could be taken by another process meanwhile, whose /healthz would then answer
    for it."""

    def __init__(self, data_dir: str, fsync: str, log_path: str) -> None:
        self.base = ""
        self._log_path = log_path
        self._log_from = os.path.getsize(log_path) if os.path.exists(log_path) else 0  # this start's lines come after
        env = dict(os.environ, RUNSTATE_SERVER_API_KEY=API_KEY, RUNSTATE_SERVER_SPACE_ID=SPACE, PYTHONUNBUFFERED="1")
        self._log = open(log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-c", "import sys; from runstate._cli import main; sys.exit(main())",
             "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", data_dir, "--fsync", fsync],
            stdout=self._log, stderr=subprocess.STDOUT, env=env,
        )

    def _told_base(self) -> str:
        with open(self._log_path, "rb") as log:
            log.seek(self._log_from)
            match = SERVING.search(log.read().decode("utf-8", "replace"))
        return match.group(1) if match else ""

    async def wait_ready(self, client: httpx.AsyncClient, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}")
            self.base = self.base or self._told_base()
            if self.base:
                try:
                    if (await client.get(f"{self.base}/healthz")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            await trio.sleep(0.02)
        raise RuntimeError("the server did not become ready")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self._log.close()


async def _post(client: httpx.AsyncClient, base: str, path: str, body: dict | None = None) -> httpx.Response:
    return await client.post(
        f"{base}/v1/spaces/{SPACE}{path}",
        json=body,
        headers={"authorization": f"Bearer {API_KEY}", "idempotency-key": os.urandom(12).hex()},
    )


async def _client(client: httpx.AsyncClient, base: str, acked: Acked, rng: random.Random, number: int) -> None:
    held: list[tuple[str, str, str]] = []
    while True:
        live = sorted(acked.scopes - set(acked.ended))
        roll = rng.random()
        if roll < 0.1 or not live:
            response = await _post(client, base, "/scopes", {"name": f"c{number}"})
            if response.status_code == 201:
                acked.scopes.add(response.json()["id"])
                acked.changes += 1
        elif roll < 0.6:
            scope, key = rng.choice(live), f"k{rng.randrange(8)}"
            response = await _post(client, base, "/claims", {
                "key": key, "scopeId": scope, "holder": f"c{number}", "holderSession": "s", "leaseSeconds": 30,
            })
            if response.status_code == 200:
                grant = response.json()
                generation = grant["generation"]
                previous = acked.generation_max.get((scope, key), 0)
                assert generation > previous, f"generation {generation} after {previous} for {key}"
                acked.generation_max[(scope, key)] = generation
                acked.holders[(scope, key)] = (generation, grant["token"])
                held.append((scope, key, grant["token"]))
                acked.this_cycle.append((scope, key, grant["token"]))
                acked.changes += 1
        elif roll < 0.75 and held:
            scope, key, token = rng.choice(held)
            response = await _post(client, base, f"/claims/{key}/renew", {"token": token})
            acked.changes += response.status_code == 200
        elif roll < 0.95 and held:
            scope, key, token = held.pop(rng.randrange(len(held)))
            response = await _post(client, base, f"/claims/{key}/release", {"token": token})
            if response.status_code == 200:
                acked.released.add(token)
                acked.changes += 1
        elif len(live) > 3:
            scope = rng.choice(live)
            end = rng.choice(["cancel", "complete"])
            response = await _post(client, base, f"/scopes/{scope}/{end}")
            if response.status_code == 200:
                state = response.json()["storedState"]
                assert acked.ended.get(scope, state) == state, f"scope {scope} ended twice, differently"
                acked.ended[scope] = state
                acked.changes += 1


async def _renew_survivors(client: httpx.AsyncClient, base: str, acked: Acked, survivors: list) -> None:
    """Claims that held at the crash (per the directory) had 30 s leases: their tokens must renew."""
    for scope, key, token in survivors:
        response = await _post(client, base, f"/claims/{key}/renew", {"token": token})
        assert response.status_code == 200, f"renewing {key} after a restart: {response.status_code} {response.text}"
        acked.renewed_after_restart += 1


def verify(data_dir: str, acked: Acked) -> list[tuple[str, str, str]]:
    """Read the directory as a start would (without repairing) and check every acknowledged change.

    Returns the claims acquired in the last cycle that still held at the crash. (A scope ended by a
    request whose answer the kill cut off is ended on disk: its claims are gone, rightly.)
    """
    manifest = read_manifest(data_dir)
    assert manifest is not None
    state = load_partition(data_dir, state_model(), Layout(manifest.partitions).of(SPACE)).state
    space = state.space(SPACE)
    for scope_id in acked.scopes:
        assert scope_id in space.scopes, f"acknowledged scope {scope_id} is missing"
    for scope_id, end in acked.ended.items():
        assert space.scopes.get(scope_id).stored_state == end, f"scope {scope_id} is no longer {end}"
    ended = {s.id for s in space.scopes.all() if s.stored_state != "ACTIVE"}
    for (scope_id, key), (generation, token) in acked.holders.items():
        if any(a in ended for a in space.scopes.subtree(scope_id)) or _ended_above(space, scope_id):
            continue  # an ended scope forgets its claims
        claim = space.claims.get(scope_id, key)
        assert claim is not None and claim.generation >= generation, f"claim {key}: generation went back"
        if claim.generation == generation:
            if token in acked.released:
                assert claim.token != token, f"acknowledged release of {key} was lost"
            else:
                assert claim.token in (token, None), f"claim {key} changed hands without a new generation"
    return [
        (scope_id, key, token)
        for scope_id, key, token in acked.this_cycle
        if (claim := space.claims.by_token(token)) is not None and claim.key == key
    ]


def _ended_above(space, scope_id: str) -> bool:
    node = space.scopes.get(scope_id)
    while node is not None:
        if node.stored_state != "ACTIVE":
            return True
        node = space.scopes.get(node.parent_id) if node.parent_id else None
    return False


async def run_cycles(data_dir: str, cycles: int, seed: int, log_path: str, clients: int = 6,
                     run_s: tuple[float, float] = (0.1, 0.6)) -> Acked:
    rng = random.Random(seed)
    acked = Acked()
    limits = httpx.Limits(max_connections=clients * 2)
    survivors: list[tuple[str, str, str]] = []
    for cycle in range(cycles):
        server = Server(data_dir, POLICIES[cycle % len(POLICIES)], log_path)
        acked.this_cycle = []
        try:
            async with httpx.AsyncClient(timeout=10, limits=limits) as client:
                await server.wait_ready(client)
                await _renew_survivors(client, server.base, acked, survivors)
                async with trio.open_nursery() as nursery:
                    for number in range(clients):
                        nursery.start_soon(_guarded, client, server.base, acked, random.Random(rng.random()), number)
                    await trio.sleep(rng.uniform(*run_s))
                    server.kill()  # kill -9 while the clients are mid-request
                    await trio.sleep(0.05)
                    nursery.cancel_scope.cancel()
        finally:
            if server.process.poll() is None:
                server.kill()
        survivors = verify(data_dir, acked)
    return acked


async def _guarded(client, base, acked, rng, number) -> None:  # type: ignore[no-untyped-def]
    try:
        await _client(client, base, acked, rng, number)
    except httpx.HTTPError:
        pass  # the server died under this request: its outcome is unknown, and not acknowledged
