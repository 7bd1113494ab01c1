"""Legs that need mailboxes and tasks.

- Task lifecycle: each worker has its own scope (so its own queue) and runs submit -> long-poll recv
  (it gets the task it just submitted) -> complete with a result -> read the task until it shows
  the result. Tasks/s, and the requests/s of those four calls as a ratio to the HTTP ceiling driven
  by the same harness at the same concurrency.
- Wake-up: a receiver is parked in a long-poll recv; a sender sends one message. The time from the
  moment the send is written to the moment the receiver has the delivery, one sample at a time.
- Delivery takeover: a worker receives a delivery with a 5 s lease and never settles it; another
  worker waits in a long-poll recv on the same queue. The time from the first lease's
  `leaseExpiresAt` to the second worker having the delivery: the supervisor's expiry, the requeue
  and the wake-up, all server-side.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import orjson

from .client import Connection
from .harness import HarnessResult, drive, percentile, run_bounded
from .report import INFO, Row, ms, n, verdict_at_most
from .takeover import parse_ms
from .targets import Target, create_scope

if TYPE_CHECKING:
    from .run import Bench

LEASE_S = 5
WAIT_MS = 10_000


async def create_mailbox(target: Target, name: str) -> str:
    conn = await Connection(target.base_url, target.api_key).open()
    try:
        status, body, _ = await conn.post_json(f"/v1/spaces/{target.space}/mailboxes", {"name": name, "mode": "WORK"})
    finally:
        await conn.close()
    if status not in (200, 201):
        raise RuntimeError(f"creating mailbox {name} answered {status}: {body}")
    return body["id"]  # type: ignore[index]


def _check(status: int, body: bytes, what: str, ok: tuple[int, ...] = (200, 201)) -> None:
    if status not in ok:
        raise RuntimeError(f"{what} answered {status}: {body[:300]!r}")


class TaskSession:
    """One worker's task lifecycle, on its own scope, over one keep-alive connection."""

    def __init__(self, target: Target, mailbox_id: str, scope_id: str, worker: int) -> None:
        self.conn = Connection(target.base_url, target.api_key)
        space = f"/v1/spaces/{target.space}"
        self.space = space
        self.submit_path = f"{space}/tasks"
        self.recv_path = f"{space}/mailboxes/{mailbox_id}/recv"
        self.mailbox_id = mailbox_id
        self.scope_id = scope_id
        self.worker = worker
        self.count = 0
        self.recv_body = orjson.dumps({
            "scopeId": scope_id, "holder": f"bench-worker-{worker}", "holderSession": f"bench-session-{worker}",
            "leaseSeconds": 30, "waitMs": WAIT_MS,
        })

    async def open(self) -> "TaskSession":
        await self.conn.open()
        return self

    async def cycle(self) -> None:
        self.count += 1
        body = orjson.dumps({
            "scopeId": self.scope_id, "mailboxId": self.mailbox_id, "taskKey": f"w{self.worker}-t{self.count}",
            "input": {"n": self.count},
        })
        status, answer, _ = await self.conn.request("POST", self.submit_path, body)
        _check(status, answer, "submit")
        task_id = orjson.loads(answer)["taskId"]
        status, answer, _ = await self.conn.request("POST", self.recv_path, self.recv_body)
        _check(status, answer, "recv", (200,))
        delivery = orjson.loads(answer)
        message_id, token = delivery["message"]["id"], delivery["token"]
        status, answer, _ = await self.conn.request(
            "POST", f"{self.space}/messages/{message_id}/complete", orjson.dumps({"token": token, "result": {"ok": True}})
        )
        _check(status, answer, "complete")
        for _ in range(1000):
            status, answer, _ = await self.conn.request("GET", f"{self.space}/tasks/{task_id}")
            _check(status, answer, "task read", (200,))
            if orjson.loads(answer)["state"] == "SUCCEEDED":
                return
        raise RuntimeError(f"task {task_id} never showed its result")

    async def close(self) -> None:
        await self.conn.close()


class CeilingSession:
    """One claim-sized POST to the ceiling app: the harness's own requests/s reference."""

    def __init__(self, target: Target) -> None:
        self.conn = Connection(target.base_url)
        self.body = orjson.dumps({"key": "k", "scopeId": "sc_0123456789abcdef", "holder": "bench-worker",
                                  "holderSession": "bench-session", "leaseSeconds": 30})

    async def open(self) -> "CeilingSession":
        await self.conn.open()
        return self

    async def cycle(self) -> None:
        status, answer, _ = await self.conn.request("POST", "/v1/spaces/default/claims", self.body)
        _check(status, answer, "ceiling")

    async def close(self) -> None:
        await self.conn.close()


async def task_lifecycle(target: Target, ceiling: Target, connections: int, duration_s: float, warmup_s: float) -> tuple[HarnessResult, HarnessResult]:
    mailbox_id = await create_mailbox(target, f"bench-tasks-{connections}-{time.monotonic_ns()}")
    scopes = [await create_scope(target, f"tasks-{i}") for i in range(connections)]

    async def make(i: int) -> TaskSession:
        return await TaskSession(target, mailbox_id, scopes[i], i).open()

    async def make_ceiling(i: int) -> CeilingSession:
        return await CeilingSession(ceiling).open()

    base = await drive("ceiling", make_ceiling, concurrency=connections, duration_s=duration_s, warmup_s=warmup_s, server_pid=ceiling.pid)
    tasks = await drive(f"tasks {target.name}", make, concurrency=connections, duration_s=duration_s, warmup_s=warmup_s, server_pid=target.pid)
    return tasks, base


async def wake_up(target: Target, samples: int) -> dict:
    mailbox_id = await create_mailbox(target, f"bench-wake-{time.monotonic_ns()}")
    scope_id = await create_scope(target, "wake-up")
    space = f"/v1/spaces/{target.space}"
    receiver = await Connection(target.base_url, target.api_key).open()
    sender = await Connection(target.base_url, target.api_key).open()
    recv_body = orjson.dumps({"scopeId": scope_id, "holder": "receiver", "holderSession": "receiver-1", "leaseSeconds": 30, "waitMs": WAIT_MS})
    times: list[float] = []
    try:
        for i in range(samples):
            waiting = asyncio.create_task(receiver.request("POST", f"{space}/mailboxes/{mailbox_id}/recv", recv_body))
            await asyncio.sleep(0.02)  # let the recv reach the server and park
            sent_at = time.perf_counter()
            status, answer, _ = await sender.request("POST", f"{space}/mailboxes/{mailbox_id}/messages",
                                                     orjson.dumps({"scopeId": scope_id, "payload": {"i": i}}))
            _check(status, answer, "send")
            status, answer, _ = await asyncio.wait_for(waiting, 15)
            times.append((time.perf_counter() - sent_at) * 1000)
            _check(status, answer, "recv", (200,))
            delivery = orjson.loads(answer)
            status, answer, _ = await sender.request(
                "POST", f"{space}/messages/{delivery['message']['id']}/complete", orjson.dumps({"token": delivery["token"]}))
            _check(status, answer, "complete")
    finally:
        await receiver.close()
        await sender.close()
    return {"samples": len(times), "p50_ms": percentile(times, 50), "p99_ms": percentile(times, 99), "max_ms": max(times)}


async def delivery_takeover(target: Target, keys: int) -> dict:
    mailbox_id = await create_mailbox(target, f"bench-takeover-{time.monotonic_ns()}")
    space = f"/v1/spaces/{target.space}"

    async def one(i: int) -> float:
        await asyncio.sleep(i * 0.05)
        scope_id = await create_scope(target, f"takeover-{i}")
        first = await Connection(target.base_url, target.api_key).open()
        second = await Connection(target.base_url, target.api_key).open()
        try:
            status, answer, _ = await first.request("POST", f"{space}/mailboxes/{mailbox_id}/messages",
                                                    orjson.dumps({"scopeId": scope_id, "payload": {"i": i}}))
            _check(status, answer, "send")
            body = {"scopeId": scope_id, "holder": "first", "holderSession": "first-1", "leaseSeconds": LEASE_S}
            status, answer, _ = await first.request("POST", f"{space}/mailboxes/{mailbox_id}/recv", orjson.dumps(body))
            _check(status, answer, "first recv", (200,))
            expires_ms = parse_ms(orjson.loads(answer)["leaseExpiresAt"])
            # The second worker parks well before the lease ends.
            await asyncio.sleep(max(0.0, (expires_ms - time.time() * 1000) / 1000 - 1.0))
            body = {**body, "holder": "second", "holderSession": "second-1", "waitMs": WAIT_MS}
            status, answer, _ = await second.request("POST", f"{space}/mailboxes/{mailbox_id}/recv", orjson.dumps(body))
            took = time.time() * 1000 - expires_ms
            _check(status, answer, "second recv", (200,))
            return took
        finally:
            await first.close()
            await second.close()

    samples = list(await asyncio.gather(*(one(i) for i in range(keys))))
    return {"samples": len(samples), "p50_ms": percentile(samples, 50), "p99_ms": percentile(samples, 99),
            "max_ms": max(samples), "all_ms": [round(s, 2) for s in samples]}


def run(bench: "Bench") -> list[Row]:
    from .run import TAKEOVER_MS, WAKEUP_P50_MS

    label, server, _ = bench.claim_targets[0]
    rows: list[Row] = []
    mode = bench.mode
    # The quick run measures the first server only (--fsync batch).
    targets = bench.claim_targets if mode.name == "full" else bench.claim_targets[:1]
    for target_label, target, _ in targets:
        for connections in (1, 16):
            tasks, base = run_bounded(task_lifecycle(target, bench.ceiling, connections, mode.harness_s, mode.warmup_s))
            bench.note_harness(tasks)
            bench.note_harness(base)
            rps = tasks.cycles_per_s * 4
            rows.append(Row(
                f"Task lifecycle {target_label}, {connections} conn (harness)",
                f"{n(tasks.cycles_per_s)} tasks/s = {n(rps)} req/s, p50 {ms(tasks.p50_ms)}, p99 {ms(tasks.p99_ms)} per task",
                reference=f"ceiling {n(base.cycles_per_s)} req/s (harness)",
                ratio=rps / base.cycles_per_s,
                verdict=INFO,
                data={"tasks": tasks.as_dict(), "ceiling": base.as_dict()},
            ))
    # The wake-up waits for the lease's record to be durable, so it is measured under every fsync
    # policy: `always` (the default) fsyncs at once, `batch` first waits out its interval.
    for target_label, target, _ in bench.claim_targets:
        wake = run_bounded(wake_up(target, mode.wake_samples))
        rows.append(Row(
            f"Wake-up: send to a waiting recv, {target_label}",
            f"p50 {ms(wake['p50_ms'])}, p99 {ms(wake['p99_ms'])} ({wake['samples']} sends)",
            target=f"p50 <= {WAKEUP_P50_MS:g} ms",
            verdict=verdict_at_most(wake["p50_ms"], WAKEUP_P50_MS),
            data=wake,
        ))
    takeover = run_bounded(delivery_takeover(server, mode.takeover_keys))
    rows.append(Row(
        f"Takeover of a delivery, {label} (waiting long-poll recv)",
        f"p50 {ms(takeover['p50_ms'])}, p99 {ms(takeover['p99_ms'])} after expiry ({takeover['samples']} leases)",
        target=f"<= {TAKEOVER_MS:.0f} ms (p99)",
        verdict=verdict_at_most(takeover["p99_ms"], TAKEOVER_MS),
        data=takeover,
    ))
    return rows
