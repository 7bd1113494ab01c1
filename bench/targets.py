"""The servers a run measures: the HTTP ceiling, `runstate serve` and `redis-server`."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .client import Connection
from .procs import CPU_SERVER, Proc, Processes, free_port, python

API_KEY = "bench-key"
SPACE = "default"


@dataclass
class Target:
    name: str
    base_url: str
    proc: Proc
    api_key: str = API_KEY
    space: str = SPACE
    data_dir: str | None = None
    notes: dict = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid


def start_ceiling(procs: Processes) -> Target:
    proc = procs.start(
        "ceiling",
        [python(), "-m", "bench.ceiling_app", "--host", "127.0.0.1", "--port", "0"],
        cpu=CPU_SERVER,
        pattern=r"ceiling: serving on (http://\S+)",
    )
    base_url = proc.wait_ready()
    return Target("ceiling", base_url, proc)


def start_runstate(
    procs: Processes, name: str, *, fsync: str | None = None, data_root: str | None = None, env: dict[str, str] | None = None
) -> Target:
    """`runstate serve` on a random port; with `fsync`, on a fresh data directory under `data_root`."""
    # BENCH_SERVER_PYTHON measures the server of another checkout (its venv's interpreter) with this
    # bench, e.g. an older release against this one.
    server_python = os.environ.get("BENCH_SERVER_PYTHON") or python()
    args = [server_python, "-m", "runstate.server.cli", "serve", "--host", "127.0.0.1", "--port", "0"]
    data_dir = None
    if fsync is not None:
        data_dir = tempfile.mkdtemp(prefix=f"{name}-", dir=data_root)
        args += ["--data-dir", data_dir, "--fsync", fsync]
    proc = procs.start(
        name,
        args,
        cpu=CPU_SERVER,
        env={"RUNSTATE_SERVER_API_KEY": API_KEY, "RUNSTATE_SERVER_SPACE_ID": SPACE, **(env or {})},
        pattern=r"runstate: serving on (http://\S+)",
    )
    base_url = proc.wait_ready()
    target = Target(name, base_url, proc, data_dir=data_dir)
    asyncio.run(wait_healthy(target))
    return target


async def wait_healthy(target: Target, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            conn = await Connection(target.base_url).open()
            try:
                status, _ = await conn.get("/healthz")
            finally:
                await conn.close()
            if status == 200:
                return
        except OSError:
            pass
        if not target.proc.alive():
            break
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{target.name} did not become healthy:\n" + "\n".join(target.proc.lines[-30:]))


def journal_on_disk(target: Target) -> bool:
    """Whether the server wrote anything into its data directory (its journal is on disk)."""
    if not target.data_dir:
        return False
    for _, _, files in os.walk(target.data_dir):
        if files:
            return True
    return False


async def create_scope(target: Target, name: str = "bench") -> str:
    conn = await Connection(target.base_url, target.api_key).open()
    try:
        status, body, _ = await conn.post_json(f"/v1/spaces/{target.space}/scopes", {"name": name})
    finally:
        await conn.close()
    if status not in (200, 201):
        raise RuntimeError(f"creating a scope on {target.name} answered {status}: {body}")
    return body["id"]  # type: ignore[index]


async def create_capacity(target: Target, name: str = "bench") -> dict[str, str]:
    """A scope, a permit pool of 10,000 units (more than any leg holds at once) and a mailbox."""
    conn = await Connection(target.base_url, target.api_key).open()
    base = f"/v1/spaces/{target.space}"
    made: dict[str, str] = {"pool": f"{name}-slots"}
    try:
        for key, path, body, field in (
            ("scope_id", "/scopes", {"name": name}, "id"),
            ("permit_id", "/permits", {"name": made["pool"], "units": 10_000}, "id"),
            ("mailbox_id", "/mailboxes", {"name": f"{name}-admit"}, "id"),
        ):
            status, answer, _ = await conn.post_json(base + path, body)
            if status not in (200, 201):
                raise RuntimeError(f"POST {path} on {target.name} answered {status}: {answer}")
            made[key] = answer[field]  # type: ignore[index]
    finally:
        await conn.close()
    return made


def start_redis(procs: Processes, redis_server: str, *, appendfsync_always: bool, data_root: str | None = None) -> Target:
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="redis-", dir=data_root)
    args = [
        redis_server,
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--save", "",
        "--dir", workdir,
        "--protected-mode", "yes",
    ]
    if appendfsync_always:
        args += ["--appendonly", "yes", "--appendfsync", "always"]
    else:
        args += ["--appendonly", "no"]
    name = "redis-aof-always" if appendfsync_always else "redis"
    proc = procs.start(name, args, cpu=CPU_SERVER, pattern=r"(Ready to accept connections)")
    proc.wait_ready()
    return Target(name, f"redis://127.0.0.1:{port}/0", proc, data_dir=workdir)


_data_root: str | None = None


def data_root() -> str:
    """A fresh directory for this run's data directories, removed with `remove_data_root()`.

    It is made on the disk the repository is on (not a tmpfs, where fsync costs nothing), under
    bench/results/, or under `BENCH_DATA_DIR` when that is set.
    """
    global _data_root
    if _data_root is None or not os.path.isdir(_data_root):
        base = os.environ.get("BENCH_DATA_DIR") or str(Path(__file__).resolve().parent / "results")
        os.makedirs(base, exist_ok=True)
        _data_root = tempfile.mkdtemp(prefix="data-", dir=base)
    return _data_root


def remove_data_root() -> None:
    global _data_root
    if _data_root is not None:
        shutil.rmtree(_data_root, ignore_errors=True)
        _data_root = None
