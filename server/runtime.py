"""The running server's parts, as the routes see them: kernel operations, limits, readiness.

`Runtime.run` is started in the application's nursery when the ASGI lifespan starts. It reports
started at once, so the listener opens and `/healthz` can answer 503 while the state is being
made ready; every other route answers 503 UNAVAILABLE until then.

With a data directory, making the state ready is a recovery of each partition
(`runstate.snapshots.open_data_dir`): snapshots and WALs are read in worker threads, each
partition's journal tasks start beside the kernel, and the recovery time and counts are logged. A
directory that cannot be used at all (another server holding it, a partition count it was not made
with, a damaged manifest) sets `fatal` and `stopped`: `serve` then shuts down and the command exits
non-zero with the message. A partition that cannot be recovered (damage before the end of its log)
does not stop the others: it refuses its spaces with the reason (file and offset) and is opened as
soon as its files are repaired.
"""

from __future__ import annotations

import logging
import socket
from typing import Any, Callable

import trio

from ..actors.clock import Clock
from ..actors.errors import NOT_FOUND, UNAUTHENTICATED, KernelError, quote
from ..actors.ids import IdSource
from ..actors.kernel import Kernel
from ..actors.journal import Journal
from ..actors.layout import Layout
from ..actors.state import KernelState
from ..actors.commands import RegisterKey
from ..actors.keys import digest, new_secret
from ..snapshots import RecoveryError, StoreLocked
from ..snapshots.datadir import DataDir, DataDirError, open_data_dir, public_reason
from ..snapshots.etcd import EtcdError
from ..snapshots.wal import RunBlocking
from . import cluster_view, wire
from .cluster import STANDBY, Cluster, ClusterError
from .cluster_metrics import EtcdLatency
from .config import ConfigError
from .admin import AdminCredential
from .durable import state_model
from .doors import Doors
from .errors import ApiError, recovering
from .history import History
from .http import Request
from .logs import event
from .metrics import MeteredDisk
from .settings import Settings
from .telemetry import Telemetry

__all__ = ["Runtime"]

# How often a partition that did not open looks whether its files were repaired.
REOPEN_POLL_S = 2.0
# How long a node of a cluster may take to join it (etcd reached, its partitions' logs read).
CLUSTER_OPEN_S = 60

log = logging.getLogger("runstate.server")

# Called once with (key, space) when the server made a key because none was configured.
NewKeyHandler = Callable[[str, str], None]


class Runtime:
    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock | None = None,
        on_new_key: NewKeyHandler | None = None,
        telemetry: Telemetry | None = None,
        on_admin_key: Callable[[str], None] | None = None,
        run_blocking: RunBlocking | None = None,
    ) -> None:
        self.settings = settings
        self.limits = settings.limits
        # How the data directory's blocking IO runs: None, in worker threads (and snapshots in a
        # child process); `snapshots.wal.inline`, on the loop itself, for a server in virtual time
        # (`runstate.testing`), whose mock clock would jump while a thread or a child ran.
        self._run_blocking = run_blocking
        self.ready = False
        # Set with `ready`: `serve` says where it serves, and the keys to export, only then.
        self.became_ready = trio.Event()
        self._clock = clock
        self._on_new_key = on_new_key
        # The kernel once the state is open, else None; the routes read `kernel`, which refuses until then.
        self.kernel_if_open: Kernel | None = None
        # The open data directory (with a store per partition), or None: the state is in memory.
        self.data: DataDir | None = None
        # This node's part in a cluster (`--etcd`), or None: one node.
        self.cluster: Cluster | None = None
        self._nursery_for_stores: trio.Nursery | None = None
        # Set when the state could not be made ready; `stopped` tells `serve` to shut down.
        self.fatal: BaseException | None = None
        self.stopped = trio.Event()
        # Operating it: metrics and request lines, the admin credential, shutdown in progress.
        self.telemetry = telemetry or Telemetry()
        self.telemetry.metrics.state.runtime = self
        self.admin = AdminCredential()
        self._on_admin_key = on_admin_key
        self.draining = False
        # Connections and request bodies held (see `doors`), bounded by the settings.
        self.doors = Doors.of(settings)
        self.doors.key_known = lambda secret: self.ready and self.key_is_known(secret)
        # Reads of a space at a past point (`history.py`), from the partitions' folders.
        self.history = History(self)

    @property
    def kernel(self) -> Kernel:
        """The kernel, for a route: until the state is open, the request is refused with 503 (as
        `http.respond` refuses every route before `ready`; see `services.py`)."""
        kernel = self.kernel_if_open
        if kernel is None:
            raise recovering()
        return kernel

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        clock = self._clock or Clock()
        if self.settings.etcd:
            await self._run_cluster(clock, self.settings.etcd)
            return
        data = None
        data_dir = self.settings.data_dir
        if data_dir:
            try:
                data = self.data = await self._open_data_dir(clock, data_dir)
            except (RecoveryError, StoreLocked, DataDirError, OSError) as error:
                log.critical("cannot start on %s: %s", data_dir, error)
                self.fatal = error
                self.stopped.set()
                return
        else:
            log.warning("no data directory: the state is kept in memory only and is lost at exit")
        try:
            async with trio.open_nursery() as nursery:
                await self._serve(nursery, clock, data)
        finally:
            if data is not None:
                data.close()

    async def _open_data_dir(self, clock: Clock, data_dir: str) -> DataDir:
        """Open the data directory: every partition recovered (those that cannot be are refused)."""
        return await open_data_dir(
            data_dir, model=state_model(self.limits), clock=clock, partitions=self.settings.partitions, **self._store_options(),
        )

    async def _serve(self, nursery: trio.Nursery, clock: Clock, data: DataDir | None) -> None:
        """Start the kernel (and each partition's store) in `nursery`, then declare the server ready."""
        ids = IdSource(self.settings.seed)
        if data is not None:
            layout = Layout(data.partitions)
            states = {number: store.state for number, store in data.stores.items()}
            journals: dict[int, Journal] = {}
            for number, store in data.stores.items():
                assert store.journal is not None, "an open store has its journal"
                journals[number] = store.journal
            kernel = Kernel.partitioned(
                states, journals, layout=layout, limits=self.limits, clock=clock, ids=ids, refusals=data.refusals,
                keep_reply=wire.encode,
            )
        else:
            layout = Layout(self.settings.partitions or 1)
            kernel = Kernel.partitioned({}, layout=layout, limits=self.limits, clock=clock, ids=ids, keep_reply=wire.encode)
        await nursery.start(kernel.run)
        self._nursery_for_stores = nursery
        if data is not None:
            for number, store in data.stores.items():
                store.on_snapshot = self.telemetry.metrics.journal.snapshot
                await nursery.start(store.run, kernel.partitions[number])
            for number in list(data.refusals):
                nursery.start_soon(self._reopen_when_repaired, kernel, data, number)
        self.kernel_if_open = kernel
        await self._configure_keys()
        self.ready = True
        self.became_ready.set()
        event(log, "ready", "ready", spaces=len(kernel.keys.spaces()), keys=len(kernel.keys), partitions=kernel.layout.count)

    # -- a node of a cluster -----------------------------------------------------------------------

    async def _run_cluster(self, clock: Clock, etcd: str) -> None:
        """Join the cluster on etcd: every partition followed from this node's copy, led where won."""
        settings = self.settings
        assert settings.data_dir, "a node of a cluster keeps a data directory (the settings refuse one without)"
        cluster = self.cluster = Cluster(
            endpoints=[url.strip().rstrip("/") for url in etcd.split(",")],
            name=settings.cluster, node_id=self.node_id(), advertise=self.advertise(),
            data_dir=settings.data_dir, partitions=settings.partitions, lease_s=settings.cluster_lease_s,
            log_bytes_max=settings.cluster_log_bytes_max, trim_every_s=settings.cluster_trim_every_s,
            model=state_model(self.limits), clock=clock, **self._store_options(),
        )
        cluster.etcd.on_attempt = EtcdLatency(self.telemetry.metrics.registry)
        try:
            with trio.fail_after(CLUSTER_OPEN_S):
                states = await cluster.open()
        except (ClusterError, EtcdError, RecoveryError, StoreLocked, DataDirError, OSError, trio.TooSlowError) as error:
            log.critical("cannot join cluster %s: %s", settings.cluster, error)
            cluster.close()
            self.fatal = error
            self.stopped.set()
            return
        layout = cluster.layout
        assert layout is not None
        kernel = Kernel.partitioned(
            states, {}, layout=layout, limits=self.limits, clock=clock, ids=IdSource(self.settings.seed), keep_reply=wire.encode,
        )
        for partition in kernel.partitions:  # each is served where this node wins it (`Cluster`)
            partition.follow(STANDBY)
        cluster.on_lead = self._on_lead
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(kernel.run)
                self.kernel_if_open = kernel
                await nursery.start(cluster.run, kernel)
                self.admin.prepare(settings.admin_key, settings.data_dir, self._on_admin_key)
                self.ready = True
                self.became_ready.set()
                event(log, "ready", "ready", cluster=settings.cluster, node=cluster.node_id, partitions=layout.count)
        finally:
            cluster.close()

    async def _on_lead(self, number: int) -> None:
        """This node now leads partition `number`: the system partition's leader registers the keys
        the nodes were started with, as a single node does at its start."""
        if number == 0:
            await self._configure_api_key()

    def node_id(self) -> str:
        return self.settings.node_id or f"{socket.gethostname()}-{self.settings.port}"

    def advertise(self) -> str:
        if self.settings.advertise:
            return self.settings.advertise
        if not self.settings.port:
            raise ConfigError("a node of a cluster on port 0 must say how other nodes reach it: give --advertise")
        host = self.settings.host if self.settings.host not in ("0.0.0.0", "::") else socket.gethostname()
        return f"http://{host}:{self.settings.port}"

    async def _configure_keys(self) -> None:
        self.admin.prepare(self.settings.admin_key, self.settings.data_dir, self._on_admin_key)
        await self._configure_api_key()

    async def _configure_api_key(self) -> None:
        settings = self.settings
        refusal = self.keys_refusal()
        if refusal is not None:  # (done once it opens: `_reopen_when_repaired`)
            log.error("the API keys' partition (0) does not serve, so no API key is registered or made until it does: %s", refusal)
            return
        if settings.api_key:
            try:
                await self._register_key(settings.api_key, settings.space_id, "RUNSTATE_SERVER_API_KEY")
            except KernelError as error:  # revoked through the admin API: it stays revoked
                log.warning("the configured API key (api_key) is not accepted: %s", error.message)
        elif not len(self.kernel.keys):
            secret = new_secret()
            await self._register_key(secret, settings.space_id, "generated at first start")
            if self._on_new_key is not None:
                self._on_new_key(secret, settings.space_id)

    async def _register_key(self, secret: str, space: str, name: str) -> dict[str, Any]:
        kernel = self.kernel
        command = RegisterKey(key_digest=digest(secret), spaces=frozenset({space}), name=name, key_id=kernel.draw("ak_"))
        command.check(kernel.limits)
        reply: dict[str, Any] = await kernel.submit(command)
        return reply

    def authorize(self, request: Request, space: str, *, operator: bool = False) -> str:
        """The space, if the request's key opens it: 401 for a bad key, 404 for another space.

        The admin key reads (GET) every space the server knows, for `runstate inspect`, and
        performs the operator's actions there (`operator`: cancelling a run or a task, a forced
        claim release, requeuing or deleting dead letters, purging a mailbox); it does no other
        work inside a space: any other write with it is 403 FORBIDDEN (the key is valid, the
        action is not allowed), not 401. An API key with the viewer role reads its spaces and
        gets the same 403 for every change (`actors/keys.py`).
        """
        secret = request.bearer()
        key = self.kernel.keys.active(secret)
        if key is None:
            refusal = self.keys_refusal()
            if refusal is not None and not self.admin.matches(secret):
                raise ApiError("UNAVAILABLE", f"the API keys cannot be checked: partition 0: {refusal}", headers={"retry-after": "1"})
            if self.admin.matches(secret):
                if request.method == "GET" or operator:
                    return self._known_space(space)
                raise ApiError(
                    "FORBIDDEN",
                    "the admin key reads inside a space and performs the operator's actions there (cancel a run or "
                    "a task, force-release a claim, requeue or delete dead letters, purge a mailbox); other changes "
                    "need an API key issued for the space",
                )
            raise ApiError(UNAUTHENTICATED, "the API key is not valid")
        spaces = key.spaces
        if space not in spaces:
            # 404 whether `space` exists or not (a key learns nothing of other spaces), but saying
            # which spaces this key opens: the usual cause is a key of another space.
            opened = ", ".join(quote(name) for name in sorted(spaces)[:10]) + (", ..." if len(spaces) > 10 else "")
            raise ApiError(
                NOT_FOUND,
                f"space {quote(space)} not found for this API key, which opens {opened}: use a key made for "
                f"{quote(space)} (runstate keys create --space {space}), or that space's id",
            )
        if key.reads_only and request.method != "GET":  # (every change is a POST or a PUT; every read a GET)
            raise ApiError(
                "FORBIDDEN",
                f"this API key ({key.id}) has the viewer role: it reads space {quote(space)} and changes nothing there; "
                f"a change needs a key with the editor role (runstate keys create --space {space})",
            )
        return space

    def caller(self, request: Request) -> str:
        """Who sends the request, as an operator's action records it: "admin" for the admin key,
        else the API key's id. (Called after `authorize`, so the key is one of the two.)"""
        secret = request.bearer()
        key = self.kernel.keys.active(secret)
        if key is not None:
            return key.id
        assert self.admin.matches(secret), "caller() is asked after authorize()"
        return "admin"

    def journal_refusal(self) -> str | None:
        """Why some partition refuses every change now (it could not be opened, or a write or
        fsync failed), or None while every one takes them.

        The store probes the disk and repairs itself once it works again; until then reads go on
        and `/healthz` says not ready, so a load balancer sends changes elsewhere.
        """
        kernel = self.kernel_if_open
        if kernel is None:
            return None
        if self.cluster is not None:
            return cluster_view.readiness(self.cluster)
        reasons = []
        for partition in kernel.partitions:
            failure = partition.journal.failure
            if partition.refusal is not None:
                reasons.append(f"partition {partition.number}: {partition.refusal}")
            elif failure is not None:  # (what failed; the log says which file)
                reasons.append(f"partition {partition.number}: the journal refuses changes: {public_reason(failure)}")
        if not reasons:
            return None
        if len(kernel.partitions) == 1:
            return reasons[0].partition(": ")[2]
        return "; ".join(reasons)

    def key_is_known(self, secret: str) -> bool:
        """Whether `secret` is any key of this server (an API key or the admin key), from the headers
        alone. While the keys cannot be read, any key may be one: `authorize` answers 503."""
        return bool(self.kernel.keys.spaces_for(secret)) or self.admin.matches(secret) or self.keys_refusal() is not None

    def keys_refusal(self) -> str | None:
        """Why the API keys cannot be read now (the system partition, which holds them, could not
        be opened), else None."""
        kernel = self.kernel_if_open
        if kernel is None:
            return None
        system = kernel.partitions[0]
        return system.refusal if system.refusal is not None and not system.readable else None

    # -- operating it ------------------------------------------------------------------------------

    def _store_options(self) -> dict[str, Any]:
        """The journal's settings, with a disk that times WAL writes and fsyncs for the metrics."""
        config = self.settings.store_config()
        journal_metrics = self.telemetry.metrics.journal
        disk = MeteredDisk(journal_metrics, config.fsync_slow_ms)
        if self._run_blocking is not None:
            return {"config": config, "disk": disk, "run_blocking": self._run_blocking}
        return {"config": config, "disk": disk}

    async def _reopen_when_repaired(self, kernel: Kernel, data: DataDir, number: int) -> None:
        """Try partition `number` again each time its files change (an operator repaired them), or
        while its disk failed (full: freeing space changes none of its files), at most every
        `REOPEN_POLL_S`; once it opens, it serves like the others."""
        tried = data.files_of(number)
        run_blocking = data.run_blocking or trio.to_thread.run_sync
        while True:
            await trio.sleep(REOPEN_POLL_S)
            files = await run_blocking(data.files_of, number)
            if files == tried and number not in data.disk_failures:
                continue
            tried = files
            try:
                store = await data.reopen(number)
            except (RecoveryError, OSError) as error:
                what = "its journal cannot be recovered" if isinstance(error, RecoveryError) else "it cannot begin its journal"
                kernel.partitions[number].refuse(data.refused(number, what, error))
                log.error("partition %d still does not serve: %s", number, error)
                continue
            state, journal = store.state, store.journal
            assert isinstance(state, KernelState) and journal is not None, "a reopened store holds the kernel's state and its journal"
            partition = await kernel.reopen(number, state, journal)
            store.on_snapshot = self.telemetry.metrics.journal.snapshot
            assert self._nursery_for_stores is not None
            await self._nursery_for_stores.start(store.run, partition)
            if number == 0:  # the keys can be read again: the configured one is registered now
                await self._configure_api_key()
            return

    async def flush(self) -> None:
        """At shutdown, after the drain: everything recorded made durable, then a final snapshot."""
        kernel = self.kernel
        lsns = {}
        for partition in kernel.partitions:
            journal = partition.journal
            done = trio.Event()
            journal.after(journal.appended_lsn, lambda error: done.set())
            await done.wait()
            lsns[partition.number] = journal.durable_lsn  # what is recorded, not what was refused
            if journal.failure is not None and partition.refusal is None:  # (not one a cluster's node gave up)
                log.error("partition %d: the journal could not write (%s): what it holds up to LSN %d is recorded; "
                          "the changes refused after it are not", partition.number, journal.failure, journal.durable_lsn)
        event(log, "journal_flushed", "journal flushed", partitions={str(number): last for number, last in lsns.items()})
        data = self.data
        if data is not None:  # each partition that changed since its start, side by side
            async with trio.open_nursery() as snapshots:
                for number, store in data.stores.items():
                    journal = kernel.partitions[number].journal
                    if journal.failure is None and journal.durable_lsn > store.booted_lsn:
                        snapshots.start_soon(store.snapshot)

    def authorize_admin(self, request: Request) -> None:
        """Let the request through only with the admin key: 401 without a valid key, 403 with an API key."""
        secret = request.bearer()
        if self.admin.matches(secret):
            return
        if self.ready and self.kernel.keys.spaces_for(secret):
            raise ApiError("FORBIDDEN", "this needs the admin key; an API key opens only its spaces")
        raise ApiError(UNAUTHENTICATED, "the admin key is not valid")

    def _known_space(self, space: str) -> str:
        """`space` if it holds anything or a key opens it; reading it must not make it."""
        kernel = self.kernel
        if not kernel.space_known(space) and space not in kernel.keys.spaces():
            raise ApiError(NOT_FOUND, f"space {quote(space)} not found")
        return space
