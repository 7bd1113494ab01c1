"""The fault tests' workers and readers: official clients working a cluster through every node.

`Workload(nodes, clients, folder)` makes three spaces on three different partitions (a key each,
through the admin API), a run and a work queue in the first two, and starts:

- two workers on the official 0.2.0 client in each of the first two spaces (`worker_020.py`);
- two workers on the official 0.3.0 client in the third (`worker_030.py`);
- a reader per space that follows its event log through a node picked at random, keeping every
  event it is shown (the checker compares them with the final log).

Each worker writes a line per call into the folder. `finish()` stops them, then reads what the
cluster holds (`history.Final`) through the nodes: every run and task acknowledged, every space's
whole event log.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from ..servers import base_python
from .history import Final
from .nodes import ADMIN_KEY, ClusterNodes

__all__ = ["Workload", "Space"]

HERE = Path(__file__).resolve().parent
# Claim keys the 0.2.0 workers of a space contend for.
CLAIM_KEYS = ["alpha", "beta", "gamma", "delta"]
STOP_WAIT_S = 30.0


@dataclass
class Space:
    space: str
    partition: int
    api_key: str
    scope: str = ""
    mailbox: str = ""


class Workload:
    def __init__(self, nodes: ClusterNodes, clients: dict[str, Path], folder: Path, *, seed: int = 0) -> None:
        self.nodes = nodes
        self.clients = clients
        self.folder = folder
        self.seed = seed
        self.random = random.Random(seed)
        self.stop_file = folder / "stop"
        self.spaces: list[Space] = []
        self.workers: list[tuple[str, subprocess.Popen]] = []
        self.seen: dict[str, dict[int, dict]] = {}
        self.readers: list[threading.Thread] = []
        self.reading = True
        self.run_name = f"chaos-{seed}"
        self.started = time.time()

    # -- starting ---------------------------------------------------------------------------------

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._make_spaces()
        urls = [node.url for node in self.nodes.nodes]
        number = 0
        for space in self.spaces[:2]:
            for _ in range(2):
                self._start_worker(f"w{number}", "0.2.0", "worker_020.py", space, urls)
                number += 1
        for _ in range(2):
            self._start_worker(f"w{number}", "0.3.0", "worker_030.py", self.spaces[2], urls)
            number += 1
        for space in self.spaces:
            self.seen[space.space] = {}
            reader = threading.Thread(target=self._read_events, args=(space,), daemon=True)
            reader.start()
            self.readers.append(reader)

    def _make_spaces(self) -> None:
        taken: set[int] = set()
        candidate = 0
        while len(self.spaces) < 3:
            name = f"chaos-{candidate}"
            candidate += 1
            partition = self.nodes.layout.of(name)
            if partition in taken:
                continue
            taken.add(partition)
            made = self._call("POST", "/v1/admin/keys", ADMIN_KEY, {"spaces": [name], "name": f"chaos {name}"})
            self.spaces.append(Space(name, partition, made["key"]))
        for space in self.spaces[:2]:
            base = f"/v1/spaces/{space.space}"
            space.scope = self._call("POST", base + "/scopes", space.api_key, {"name": "chaos"})["id"]
            space.mailbox = self._call("POST", base + "/mailboxes", space.api_key, {"name": "work", "maxAttempts": 100})["id"]

    def _call(self, method: str, path: str, key: str, body: dict | None = None, attempts: int = 40) -> dict:
        """A call through a live node, tried again (with one Idempotency-Key) until it is answered."""
        headers = {"authorization": f"Bearer {key}", "idempotency-key": f"chaos-{self.random.getrandbits(64):x}"}
        last = ""
        for _ in range(attempts):
            live = self.nodes.live()
            if live:
                node = self.random.choice(live)
                try:
                    answer = httpx.request(method, node.url + path, json=body, headers=headers, timeout=10)
                except httpx.HTTPError as error:
                    last = repr(error)
                else:
                    if answer.status_code < 300:
                        return answer.json()
                    last = f"{answer.status_code} {answer.text[:300]}"
                    if answer.status_code != 503:
                        raise AssertionError(f"{method} {path} answered {last}")
            time.sleep(0.25)
        raise AssertionError(f"{method} {path} was not answered: {last}")

    def _start_worker(self, name: str, version: str, script: str, space: Space, urls: list[str]) -> None:
        args = {
            "name": name, "nodes": urls, "space": space.space, "api_key": space.api_key, "scope": space.scope,
            "mailbox": space.mailbox, "keys": CLAIM_KEYS, "run": self.run_name, "start": self.started,
            "seed": self.random.getrandbits(32),
            "out": str(self.folder / f"{name}.jsonl"), "stop": str(self.stop_file),
        }
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(self.clients[version]), "PYTHONNOUSERSITE": "1",
               "PYTHONUNBUFFERED": "1", "CHAOS_ARGS": json.dumps(args)}
        errors = open(self.folder / f"{name}.err", "w")
        process = subprocess.Popen([base_python(), str(HERE / script)], env=env, stdout=errors, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
        self.workers.append((name, process))

    # -- reading the event logs while it runs -----------------------------------------------------

    def _read_events(self, space: Space) -> None:
        seen = self.seen[space.space]
        cursor = 0
        with httpx.Client(headers={"authorization": f"Bearer {space.api_key}"}, timeout=5) as http:
            while self.reading:
                live = self.nodes.live()
                if not live:
                    time.sleep(0.2)
                    continue
                node = random.choice(live)
                try:
                    answer = http.get(f"{node.url}/v1/spaces/{space.space}/events", params={"cursor": cursor, "limit": 1000})
                except httpx.HTTPError:
                    time.sleep(0.1)
                    continue
                if answer.status_code != 200:
                    time.sleep(0.2)
                    continue
                page = answer.json()
                for event in page["events"]:
                    seen[int(event["eventId"].removeprefix("ev_"))] = event
                cursor = int(page.get("nextCursor") or cursor)
                if not page["events"]:
                    time.sleep(0.3)

    # -- finishing --------------------------------------------------------------------------------

    def finish(self) -> tuple[list[dict], Final]:
        """Stop the workers, and read back everything they were told was done."""
        self.stop_file.touch()
        deadline = time.monotonic() + STOP_WAIT_S
        for name, process in self.workers:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.reading = False
        for reader in self.readers:
            reader.join(10)
        broken = [(name, process.returncode) for name, process in self.workers if process.returncode not in (0, -9)]
        if broken:
            tails = {name: (self.folder / f"{name}.err").read_text()[-2000:] for name, _ in broken}
            raise AssertionError(f"worker(s) failed: {broken}: {tails}")
        calls = []
        for name, _ in self.workers:
            path = self.folder / f"{name}.jsonl"
            if path.exists():
                calls.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
        return calls, self._final(calls)

    def _final(self, calls: list[dict]) -> Final:
        final = Final(seen=self.seen)
        keys = {space.space: space.api_key for space in self.spaces}
        for call in calls:
            if call.get("ok", True) and call["op"] == "scope":
                answer = self._get(f"/v1/spaces/{call['space']}/scopes/{call['id']}", keys[call["space"]])
                final.scopes[call["id"]] = answer.status_code
            elif call.get("ok", True) and call["op"] == "submit":
                answer = self._get(f"/v1/spaces/{call['space']}/tasks/{call['task']}", keys[call["space"]])
                final.tasks[call["task"]] = answer.json() if answer.status_code == 200 else None
        for space in self.spaces:
            events: list[dict] = []
            cursor = 0
            while True:
                page = self._get(f"/v1/spaces/{space.space}/events?cursor={cursor}&limit=1000", space.api_key).json()
                events.extend(page["events"])
                if not page["events"]:
                    break
                cursor = int(page["nextCursor"])
            final.events[space.space] = events
        return final

    def _get(self, path: str, key: str) -> httpx.Response:
        """A read through a live node (another one if it does not answer); 200 and 404 are answers."""
        for _ in range(40):
            node = self.random.choice(self.nodes.live())
            try:
                answer = httpx.get(node.url + path, headers={"authorization": f"Bearer {key}"}, timeout=10)
            except httpx.HTTPError:
                time.sleep(0.25)
                continue
            if answer.status_code in (200, 404):
                return answer
            time.sleep(0.25)
        raise AssertionError(f"GET {path} was never answered")

    def close(self) -> None:
        self.stop_file.parent.mkdir(parents=True, exist_ok=True)
        self.stop_file.touch()
        self.reading = False
        for _, process in self.workers:
            if process.poll() is None:
                process.kill()
                process.wait()
