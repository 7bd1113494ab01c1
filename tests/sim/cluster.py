"""The simulated server: incarnations that crash and recover, and the network the SDK reaches them by.

One `Cluster` is one server machine over time. Each incarnation is the real server stack (the
`Runtime` that `runstate serve` runs: recovery by `open_store`, the WAL writer with group commit,
snapshots, the kernel, `serve_http` and the routes), started in the simulation's own trio run under
`MockClock`, with its blocking IO run inline so the clock cannot jump while a file is written. The
only differences from production are the `SimDisk` under the journal (so a crash can lose what was
not fsynced) and small segment and snapshot sizes (so rollovers and snapshots happen often).

`crash()` ends an incarnation at once: a power cut (`SimFs.power_cut`, optionally tearing the
unsynced tail), a killed process (`SimFs.kill`), or a cut in the middle of the next WAL write.
Everything the incarnation was doing is cancelled; requests in flight get no answer (the SDK sees
a broken connection and retries with the same idempotency key). `restart()` starts the next
incarnation on what the disk kept: the same recovery code the server runs at every start.

`SimTransport` is the SDK's transport seam: a request runs as a task *inside the incarnation* (so
a crash cancels it, as a dead process would), the caller waits for its answer with the SDK's
timeout, and a caller that gives up disconnects (a long poll is then withdrawn). It can also lose
a reply after the server sent it, so that the idempotency replay path is exercised.
"""

from __future__ import annotations

import os
import random
from typing import Any, Callable, Mapping

import trio

from runstate.actors import Clock, Limits
from runstate.actors.layout import Layout
from runstate.server.http import serve_http
from runstate.server.routes import ROUTER
from runstate.server.runtime import Runtime
from runstate.server.settings import Settings
from runstate.snapshots import RecoveryError
from runstate.snapshots.datadir import DataDir, DataDirError, Manifest, make_data_dir, partition_dir
from runstate.snapshots.recovery import snapshot_dir, wal_dir
from runstate.snapshots.store import StoreConfig
from runstate.transport import TransportError

from .disk import SimFs

__all__ = ["Cluster", "SimTransport", "T0_MS", "API_KEY", "SPACE", "NEIGHBOR_KEY", "now_ms"]

T0_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z: wall time at virtual time 0
API_KEY = "rs_sim_key"
SPACE = "sim"
# The key of the space a seed with several partitions also runs, in another partition than SPACE's.
NEIGHBOR_KEY = "rs_sim_neighbor_key"


def neighbor_space(partitions: int) -> str | None:
    """A space in another partition than SPACE's (None with one partition)."""
    if partitions < 2:
        return None
    layout = Layout(partitions)
    return next(f"sim-{n}" for n in range(1000) if layout.of(f"sim-{n}") != layout.of(SPACE))


def now_ms() -> int:
    """The simulation's wall time: the same function of trio's clock as the server's `Clock`."""
    return round(trio.current_time() * 1000 + T0_MS)  # the server's own sum, rounded alike (`Clock.now_ms`)


def sim_clock() -> Clock:
    return Clock.at_trio_zero(T0_MS)  # wall = T0 + virtual seconds, in every incarnation alike


class SimRuntime(Runtime):
    """`Runtime` with the data directory opened on the simulated disk, IO inline (virtual time)."""

    def __init__(self, settings: Settings, *, fs: SimFs, store_config: StoreConfig, neighbor: str | None) -> None:
        super().__init__(settings, clock=sim_clock())
        self.fs = fs
        self.store_config = store_config
        self.neighbor = neighbor

    async def _configure_keys(self) -> None:
        await super()._configure_keys()
        if self.neighbor is not None and not self.key_is_known(NEIGHBOR_KEY):
            await self._register_key(NEIGHBOR_KEY, self.neighbor, "the neighbor space")

    def _store_options(self) -> dict:
        return {"config": self.store_config, "disk": self.fs.disk(), "run_blocking": self.fs.run_blocking}

    async def _open_data_dir(self, clock: Clock, data_dir: str) -> DataDir:
        try:
            data = await super()._open_data_dir(clock, data_dir)
        except (RecoveryError, DataDirError):
            raise
        except Exception as error:  # not a refusal the decision table makes: a bug in recovery
            raise RecoveryError(data_dir, 0, f"recovery raised {type(error).__name__}: {error!r}") from error
        if data.refusals:  # the simulation's faults never leave a journal that cannot be recovered
            data.close()
            number, reason = next(iter(data.refusals.items()))
            raise RecoveryError(data_dir, 0, f"partition {number} refused: {reason}")
        return data


class Incarnation:
    def __init__(self, number: int, runtime: SimRuntime) -> None:
        self.number = number
        self.runtime = runtime
        self.scope = trio.CancelScope()
        self.nursery: trio.Nursery | None = None
        self.alive = True
        self.finished = trio.Event()  # its tasks are all gone (its files closed, its lock released)

    @property
    def serving(self) -> bool:
        return self.alive and self.runtime.ready and self.nursery is not None


class Cluster:
    def __init__(
        self,
        seed: int,
        data_dir: str,
        rng: random.Random,
        *,
        fsync: str,
        limits: Limits,
        partitions: int = 1,
        on_failure: Callable[[str, str], None],
        trace: Callable[[str], None],
    ) -> None:
        self.seed = seed
        self.data_dir = data_dir
        self.rng = rng
        self.fsync = fsync
        self.limits = limits
        self.fail = on_failure
        self.trace = trace
        # The directory is made once, as the first start makes it (its manifest never changes
        # after that); what power cuts and kills act on is each partition's journal and snapshots.
        self.partitions = partitions
        self.neighbor = neighbor_space(partitions)
        make_data_dir(data_dir, Manifest(partitions))
        folders = [folder(partition_dir(data_dir, n)) for n in range(partitions + 1) for folder in (wal_dir, snapshot_dir)]
        self.fs = SimFs(folders, random.Random(rng.random()))
        self.fs.on_power_cut = self._power_went
        self.store_config = StoreConfig(
            fsync=fsync,
            segment_bytes_max=16 * 1024,
            snapshot_every_records=rng.choice([500, 1500, 5000]),
            snapshot_every_s=120.0,
            snapshot_process=False,
        )
        self.current: Incarnation | None = None
        self._last: Incarnation | None = None
        self.incarnations = 0
        self.crashes = 0
        self.recoveries: list[Any] = []
        self._nursery: trio.Nursery | None = None
        self.on_recovered: Callable[[Any], None] | None = None

    # -- lifetime -------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    async def start(self) -> bool:
        """Start the next incarnation on what the disk holds; False if recovery refused to start.

        An incarnation that loses power while it recovers (its own writes can be torn too) is
        followed by another, as an operator would restart it.
        """
        assert self._nursery is not None
        while True:
            if self._last is not None:
                await self._last.finished.wait()
            self.incarnations += 1
            settings = Settings(
                api_key=API_KEY, space_id=SPACE, seed=self.seed * 1000 + self.incarnations, limits=self.limits,
                data_dir=self.data_dir,
            )
            runtime = SimRuntime(settings, fs=self.fs, store_config=self.store_config, neighbor=self.neighbor)
            incarnation = self._last = Incarnation(self.incarnations, runtime)
            await self._nursery.start(self._host, incarnation)
            while incarnation.alive and not runtime.ready and not runtime.stopped.is_set():
                await trio.sleep(0.001)
            if runtime.fatal is not None:
                self.fail("recovery", f"incarnation {incarnation.number} refused to start: {runtime.fatal}")
                self._retire(incarnation)
                return False
            if incarnation.alive:
                break
        self.current = incarnation
        if runtime.data is not None:
            for number, report in runtime.data.reports().items():
                self.recoveries.append(report)
                self.trace(
                    f"server {incarnation.number} partition {number} up: snapshot LSN {report.snapshot_lsn}, "
                    f"{report.records} records replayed, {report.expired} expired, {report.graced} graced, "
                    f"repairs {len(report.repairs)}"
                )
        return True

    async def _host(self, incarnation: Incarnation, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            with incarnation.scope:
                async with trio.open_nursery() as nursery:
                    incarnation.nursery = nursery
                    await nursery.start(incarnation.runtime.run)
                    task_status.started()
                    await trio.sleep_forever()
        finally:
            incarnation.finished.set()

    def crash(self, how: str) -> None:
        """End the current incarnation now: `power` (lose what was not fsynced), `torn` (also keep
        random prefixes of unsynced writes), `kill` (a killed process: keep what was written)."""
        incarnation = self.current
        self.fs.tear_next_write = False
        if incarnation is None or not incarnation.alive:
            return
        if how == "kill":
            self.fs.kill()
        else:
            self.fs.power_cut(tear=how == "torn")
        self._end(incarnation, how)

    def fail_disk(self, space: str | None) -> None:
        """Make the disk under `space`'s partition fail every write and fsync (None: work again)."""
        if space is None:
            self.fs.failing_under = None
            return
        number = Layout(self.partitions).of(space)
        self.fs.failing_under = os.path.abspath(partition_dir(self.data_dir, number))
        self.trace(f"the disk of partition {number} fails")

    def crash_in_next_write(self) -> None:
        """Arm a power cut inside the next WAL write (a torn batch)."""
        self.fs.tear_next_write = True

    def _power_went(self) -> None:
        incarnation = self._last  # the running one, or one still starting (recovery writes too)
        if incarnation is not None and incarnation.alive:
            self._end(incarnation, "mid-write")

    def _check_snapshots(self, incarnation: Incarnation) -> None:
        """A snapshot refused for anything but the disk failing is a bug: the durable log replays."""
        data = incarnation.runtime.data
        for number, store in ({} if data is None else data.stores).items():
            if store.snapshot_refusals:
                self.fail("snapshot", f"incarnation {incarnation.number} partition {number}: snapshot {store.snapshot_refusals[0]}")

    def _end(self, incarnation: Incarnation, how: str) -> None:
        self._check_snapshots(incarnation)
        self.crashes += 1
        incarnation.alive = False
        incarnation.scope.cancel()
        self.current = None
        self.trace(f"server {incarnation.number} crashed ({how})")

    async def stop(self) -> None:
        self.fs.tear_next_write = False
        if self._last is not None:
            self._retire(self._last)
        self.current = None

    def _retire(self, incarnation: Incarnation) -> None:
        """The process exits (not a crash): its files close, nothing else happens to the disk."""
        self._check_snapshots(incarnation)
        if self.fs.current is not None:
            self.fs.current.die()
        incarnation.alive = False
        incarnation.scope.cancel()

    # -- what the checks read -------------------------------------------------------------------

    @property
    def kernel(self) -> Any:
        return None if self.current is None else self.current.runtime.kernel


async def _exchange(
    incarnation: Incarnation, method: str, path: str, headers: Mapping[str, str], body: bytes | None, gone: trio.Event
) -> tuple[int, dict[str, str], bytes]:
    """One ASGI exchange with the incarnation's router; `gone` set = the client disconnected."""
    raw_path, _, query = path.partition("?")
    header_list = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    scope = {
        "type": "http",
        "method": method,
        "path": raw_path,
        "raw_path": raw_path.encode("ascii"),
        "query_string": query.encode("ascii"),
        "headers": header_list,
        "client": ("127.0.0.1", 40000),
    }
    sent = False
    status = 0
    response_headers: dict[str, str] = {}
    chunks: list[bytes] = []

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body or b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            response_headers.update((k.decode("latin-1"), v.decode("latin-1")) for k, v in message["headers"])
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await serve_http(incarnation.runtime, ROUTER, scope, receive, send)
    return status, response_headers, b"".join(chunks)


class SimTransport:
    """The SDK's transport to whichever incarnation is up (or none: connection refused)."""

    def __init__(self, cluster: Cluster, rng: random.Random, *, reply_loss_p: float) -> None:
        self.cluster = cluster
        self.rng = rng
        self.reply_loss_p = reply_loss_p
        self.exchanges = 0
        self.lost_replies = 0

    async def send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Any:
        incarnation = self.cluster.current
        if incarnation is None or not incarnation.serving:
            await trio.sleep(0)
            raise TransportError("connection refused: the server is down")
        box: dict[str, Any] = {}
        done = trio.Event()
        gone = trio.Event()

        async def serve_one() -> None:
            try:
                box["answer"] = await _exchange(incarnation, method, path, headers, body, gone)
            except Exception as error:  # serve_http answers every error itself: this is a bug
                self.cluster.fail("server", f"{method} {path} raised {type(error).__name__}: {error}")
            finally:
                done.set()

        assert incarnation.nursery is not None
        incarnation.nursery.start_soon(serve_one)
        try:
            with trio.move_on_after(timeout_s):
                await done.wait()
        finally:
            gone.set()
        self.exchanges += 1
        answer = box.get("answer")
        if answer is None:
            raise TransportError(f"{method} {path}: no answer (connection reset or timed out)")
        status = answer[0]
        if status >= 500 and status != 503:
            self.cluster.fail("server", f"{method} {path} answered {status}: {answer[2][:300]!r}")
        if status < 500 and self.reply_loss_p and self.rng.random() < self.reply_loss_p:
            self.lost_replies += 1
            raise TransportError(f"{method} {path}: the reply was lost")
        return answer
