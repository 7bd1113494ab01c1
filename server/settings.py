"""Server settings: where to listen, where to keep data, which key to accept, every limit."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..actors.limits import Limits
from ..snapshots.config import FSYNC_POLICIES, StoreConfig

_STORE = StoreConfig()

__all__ = ["Settings", "FSYNC_POLICIES"]


@dataclass
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    # None keeps everything in memory (nothing survives a restart).
    data_dir: str | None = None
    fsync: str = "always"
    # A bearer key to accept at start for `space_id` (RUNSTATE_SERVER_API_KEY / RUNSTATE_SERVER_SPACE_ID).
    api_key: str | None = None
    space_id: str = "default"
    limits: Limits = field(default_factory=Limits)
    # Fixed randomness for simulations and tests; None draws from the operating system.
    seed: int | None = None
    # Data partitions (`actors/layout.py`): fixed when a data directory (or a cluster) is made
    # (None: 1 for a new directory, 8 for a new cluster, else the count it was made with).
    partitions: int | None = None
    # A cluster on etcd (`cluster.py`): its members' client URLs, comma-separated (None: one node,
    # its journal on the local disk), the cluster's name (its keys' prefix), this node's id (stable
    # across its restarts; default: host name and port), the URL other nodes reach it by, the TTL
    # of its session with etcd, and how long a request waits for a partition's new leader.
    etcd: str | None = None
    cluster: str = "runstate"
    node_id: str | None = None
    advertise: str | None = None
    cluster_lease_s: int = 1
    cluster_forward_wait_s: float = 5.0
    # What the partitions' logs may hold in etcd, all together (each node snapshots a partition
    # once its copy holds this divided by the partitions past its last snapshot), and how often
    # the leaders trim their logs and etcd's history is compacted (docs/cluster.md, "etcd's size").
    cluster_log_bytes_max: int = 256 << 20
    cluster_trim_every_s: float = 10.0

    # Operating it (see `config.py` for the flags, variables and TOML names of each).
    # The credential of the admin endpoints; None: read or made in the data directory, or printed once.
    admin_key: str | None = None
    log_format: str = "json"
    log_level: str = "info"
    log_requests: str = "all"
    # /metrics without a key from any address, not only from loopback.
    metrics_public: bool = False
    shutdown_grace_s: float = 10.0
    # An idle keep-alive connection closes after this long (one whose client has gone closes at
    # once); the SDKs' pools drop idle connections after 5 s anyway.
    keep_alive_s: float = 15.0
    # Connections the kernel queues for accept. A backlog of 100 resets connections when a swarm of
    # agents connects at once.
    backlog: int = 1024
    # Slow clients. A request whose body has not all arrived this long after its headers gets 408
    # and the connection closes (a body that never ends holds nothing for long).
    body_timeout_s: float = 30.0
    # The longest silence from a client while its connection is open: while it sends its headers,
    # while it waits for an answer (a long poll holds up to 30 s with nothing sent), while the
    # server's answer waits for it to read, and while it idles between requests. Above the longest
    # long poll and above `keep_alive_s`, so that neither is cut short.
    read_timeout_s: float = 90.0
    # A request head (request line and headers) not complete this long after its first byte ends
    # its connection with 408: a slowloris's trickle of header lines holds no slot for long.
    header_timeout_s: float = 10.0
    expiry_storm_per_s: int = 1000
    # The doors (`doors.py`). Connections served at once; one more gets 503 and is closed. Keep it
    # below the open-files limit (`ulimit -n`) less what the journal needs.
    connections_max: int = 1000
    # Bytes of request bodies held across all requests in flight; past it, 503 with Retry-After.
    body_bytes_in_flight_max: int = 64 * 1024 * 1024
    # What one batch request's answer may hold (`routes/batch.py`): the deliveries its receives
    # lease together (a receive of many alone leases at most receive_count_max), and the bytes
    # those deliveries may reach at most (each payload_bytes_max of payload, and its fields).
    batch_deliveries_max: int = 100
    batch_answer_bytes_max: int = 16 * 1024 * 1024
    # TLS: the certificate chain and its private key (PEM files), both or neither. With them the
    # server speaks https itself (HTTP/1.1 over TLS 1.2+); without, plain http.
    certfile: str | None = None
    keyfile: str | None = None

    # The durable journal (with a data directory); defaults are the store's own.
    fsync_batch_ms: float = _STORE.batch_interval_ms
    snapshot_every_records: int = _STORE.snapshot_every_records
    snapshot_every_s: float = _STORE.snapshot_every_s
    snapshots_kept: int = _STORE.snapshots_kept
    fsync_slow_ms: float = _STORE.fsync_slow_ms
    # History (`server/history.py`, docs/history.md): a day of it by default.
    history_retention_s: float = 86_400.0
    history_checkpoint_every_records: int = _STORE.history_checkpoint_every_records

    def store_config(self) -> StoreConfig:
        return StoreConfig(
            fsync=self.fsync,
            batch_interval_ms=self.fsync_batch_ms,
            snapshot_every_records=self.snapshot_every_records,
            snapshot_every_s=self.snapshot_every_s,
            snapshots_kept=self.snapshots_kept,
            fsync_slow_ms=self.fsync_slow_ms,
            history_retention_s=self.history_retention_s,
            history_checkpoint_every_records=self.history_checkpoint_every_records,
        )
