"""DLedgerConfig: DLedger's option names in snake_case, with DLedger 0.2.3's defaults.

Where we deviate from a DLedger default it is said next to the field, with the reason.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dledger.config_check import ConfigError, at_least, check_types, delete_hours, one_of, ratio

if sys.version_info >= (3, 11):
    import tomllib
else:  # tomllib joined the standard library in 3.11; tomli is the same parser
    import tomli as tomllib

log = logging.getLogger(__name__)

MEMORY = "MEMORY"
FILE = "FILE"

GB = 1024 * 1024 * 1024
MB = 1024 * 1024


def _opt(default: Any, help: str) -> Any:
    """A field with its one-line meaning, which ``dledger server --help`` shows."""
    return field(default=default, metadata={"help": help})


@dataclass(slots=True)
class DLedgerConfig:
    # identity
    group: str = _opt("default", "name of the Raft group (every member of a group uses the same)")
    self_id: str = _opt("n0", "this member's id; must be one of the ids in --peers")
    peers: str = _opt("n0-127.0.0.1:20911", 'every member of the group, "n0-host:port;n1-host:port;..."')
    store_base_dir: str = _opt("/tmp/dledgerstore", "base directory; files go to <store-dir>/dledger-<id>/")
    store_type: str = _opt(FILE, "FILE (segment files on disk) or MEMORY (nothing kept across restarts)")
    data_store_path: str | None = _opt(None, "data segment directory (unset: <store-dir>/dledger-<id>/data)")

    # replication
    peer_push_throttle_point: int = _opt(300 * MB, "bytes a follower may lag before the leader throttles its pushes")
    peer_push_quota: int = _opt(20 * MB, "bytes per second pushed to a lagging follower once throttled")
    max_pending_requests_num: int = _opt(10000, "appends awaiting quorum before LEADER_PENDING_FULL (503)")
    max_wait_ack_time_ms: int = _opt(2500, "ms an append waits for a quorum before WAIT_QUORUM_ACK_TIMEOUT (502)")
    max_push_time_out_ms: int = _opt(1000, "ms before an unanswered push to a follower is resent")
    # DLedger defaults to False; batch push is what makes replication fast (many entries per
    # push frame, one copy each side).
    is_enable_batch_push: bool = _opt(True, "push many entries per message (DLedger's default: false)")
    # DLedger's 4 KiB batch carries four 1 KiB entries a push. A push carries what was appended
    # since the last one, up to this; each costs the leader and a follower a fixed share (the
    # request, its answer, a flush and commit step), so under a batching producer larger pushes
    # cost less an entry: 4 MiB against 1 MiB, 5-20 % more entries/s and messages/s on
    # 127.0.0.1; larger ones helped entries a little and messages not (docs/performance.md).
    max_batch_push_size: int = _opt(4 * 1024 * 1024, "most bytes of entries in one push (DLedger's default: 4096)")

    # election
    enable_leader_elector: bool = _opt(True, "take part in elections (false: never stand, never time out)")
    # DLedger's default is 2000 ms: with max_heart_beat_leak 3 a dead leader goes unnoticed
    # for 6 s. 400 ms notices it five times sooner, for a small heartbeat per follower a few
    # times a second (failover times: bench/test_bench_cluster.py, docs/performance.md).
    heart_beat_time_interval_ms: int = _opt(400, "ms between the leader's heartbeats (DLedger's default: 2000)")
    max_heart_beat_leak: int = _opt(3, "heartbeat intervals a follower waits without one before it stands")
    min_vote_interval_ms: int = _opt(300, "least ms between a candidate's vote rounds")
    max_vote_interval_ms: int = _opt(1000, "most ms between a candidate's vote rounds")
    preferred_leader_ids: str | None = _opt(None, '"n1;n2": the leader hands leadership to the first one live')
    max_leadership_transfer_wait_index: int = _opt(1000, "entries a transferee may lag; more: FALL_BEHIND_TOO_MUCH")
    # DLedger's leadershipTransferWaitTimeout: the transferee first waits to hold every entry
    # the leader had when it asked.
    leadership_transfer_wait_timeout: int = _opt(1000, "ms a transferee waits to catch up before it stands")
    min_take_leadership_vote_interval_ms: int = _opt(30, "least ms before a transferee's vote round")
    max_take_leadership_vote_interval_ms: int = _opt(100, "most ms before a transferee's vote round")

    # retention and disk
    file_reserved_hours: int = _opt(72, "hours a data segment is kept once full")
    delete_when: str = _opt("04", 'hours of the day ("04;16") when expired segments are deleted')
    disk_space_ratio_to_check_expired: float = _opt(0.70, "disk use ratio above which expired segments go at once")
    disk_space_ratio_to_force_clean: float = _opt(0.85, "disk use ratio above which the oldest segments go")
    enable_disk_force_clean: bool = _opt(True, "delete the oldest segments when the disk is nearly full")

    # ours: multiplies the intervals DLedger hard-codes (vote-round wait 2000 ms, compare/truncate
    # wait 3000 ms, leak checks 1000 ms...; see dledger.raft.timings). 0.5 halves the wait for a
    # vote round whose votes were lost, the long pole of a failover; the low-latency profile
    # (docs/configuration.md) uses 0.1.
    raft_timing_scale: float = _opt(0.5, "multiplies DLedger's fixed waits (vote round, compare, leak checks)")

    # storage
    flush_file_interval: int = _opt(10, "ms between the store service's flushes")
    check_point_interval: int = _opt(3000, "ms between checkpoint writes (endIndex, committedIndex)")
    mapped_file_size_for_entry_data: int = _opt(GB, "bytes of a data segment file")
    mapped_file_size_for_entry_index: int = _opt(32 * 5 * 1024 * 1024, "bytes of an index segment file")
    # ours: an append returns only once it is on disk (fdatasync/msync) when True.
    sync: bool = _opt(False, "acknowledge an append only once it is on disk")
    # ours: the largest body an append accepts (DLedger relies on its 4 MiB buffer).
    max_body_size: int = _opt(4 * MB - 48, "largest body an append accepts, in bytes")
    # ours: how much of the data just behind the flushed position stays in the page cache;
    # older pages of the data files are handed back to the kernel (0: never). New appends then
    # land in recycled pages instead of fresh ones, which the kernel must first zero and fault
    # in (docs/performance.md has the cost). Tailing readers read from the kept window;
    # older reads come from disk, as they would once the kernel evicted them anyway.
    data_cache_window: int = _opt(256 * MB, "bytes behind the flushed position kept in the page cache (0: all)")

    # ours: operations
    metrics_port: int | None = _opt(None, "port of the Prometheus /metrics endpoint (0 or unset: off)")

    # The RocketMQ message store on this group (docs/message-service.md); RocketMQ's names.
    message_store: bool = _opt(False, "run RocketMQ's message store on this group (RocketMQ's enableDLegerCommitLog)")
    store_path_root_dir: str | None = _opt(None, "message store root (RocketMQ's storePathRootDir; unset: --store-dir)")
    mapped_file_size_commit_log: int | None = _opt(
        None, "bytes of a commit-log (data) file in message-store mode (unset: --mapped-file-size-for-entry-data)"
    )
    max_message_size: int = _opt(4 * MB, "largest message record in message-store mode (RocketMQ's maxMessageSize)")
    flush_disk_type: str = _opt("ASYNC_FLUSH", "ASYNC_FLUSH or SYNC_FLUSH (every put msynced before its answer)")
    default_topic_queue_nums: int = _opt(8, "write queues of every topic; a put to a queue id past them is refused")
    message_index_enable: bool = _opt(True, "build the key index (RocketMQ's messageIndexEnable)")
    # RocketMQ's remoting protocol for its own clients, name servers and mqadmin (docs/remoting.md).
    listen_port: int | None = _opt(
        None, "remoting port for RocketMQ clients (listenPort; VIP channel at -2; unset: off)"
    )
    namesrv_addr: str | None = _opt(None, 'name servers to register with every 30 s: "host:port;host:port"')
    broker_name: str | None = _opt(None, "brokerName this group registers as (unset: the group's name)")
    broker_cluster_name: str = _opt("DefaultCluster", "brokerClusterName this member registers under")
    broker_ip1: str | None = _opt(None, "address clients reach this member at (brokerIP1; unset: the listen host)")
    register_name_server_period: int = _opt(30000, "ms between registrations with the name servers (10000-60000)")
    auto_create_topic_enable: bool = _opt(True, "create a topic on its first send from TBW102 (autoCreateTopicEnable)")
    slave_sync_period: int = _opt(
        10000, "ms between a non-leader's syncs of the leader's topics and groups (SlaveSynchronize; Java 10000)"
    )
    transaction_check_interval: int = _opt(
        60000, "ms between checks of unended half messages (transactionCheckInterval)"
    )
    transaction_timeout: int = _opt(6000, "ms a half message waits before its first check (transactionTimeOut)")
    transaction_check_max: int = _opt(15, "checks of a half message before it is dropped (transactionCheckMax)")
    slave_read_enable: bool = _opt(
        False, "send a consumer far behind to a follower (slaveReadEnable; access_message_in_memory_max_ratio)"
    )
    access_message_in_memory_max_ratio: int = _opt(
        40, "a pull further behind the log's end than this % of the machine's memory is told to go to a slave"
    )
    auto_create_subscription_group: bool = _opt(
        True, "make a consumer group on its first heartbeat or pull (autoCreateSubscriptionGroup)"
    )
    send_thread_pool_queue_capacity: int = _opt(
        10000, "remoting sends that may wait for their commit at once; more are answered SYSTEM_BUSY"
    )
    pull_thread_pool_queue_capacity: int = _opt(
        100000, "remoting pulls that may be held at once; more are answered SYSTEM_BUSY"
    )

    def __post_init__(self) -> None:
        check_types(self)
        at_least(self, 1, _POSITIVE)
        at_least(self, 0, _NOT_NEGATIVE)
        one_of(self, "store_type", (FILE, MEMORY))
        one_of(self, "flush_disk_type", ("ASYNC_FLUSH", "SYNC_FLUSH"))
        ratio(self, ("disk_space_ratio_to_check_expired", "disk_space_ratio_to_force_clean"))
        if self.raft_timing_scale <= 0:
            raise ConfigError(f"raft_timing_scale = {self.raft_timing_scale!r}: want more than 0")
        for low, high in (
            ("min_vote_interval_ms", "max_vote_interval_ms"),
            ("min_take_leadership_vote_interval_ms", "max_take_leadership_vote_interval_ms"),
        ):
            if getattr(self, high) < getattr(self, low):
                raise ConfigError(f"{high} = {getattr(self, high)} is below {low} = {getattr(self, low)}")
        if self.listen_port is not None and not 2 < self.listen_port <= 65535:
            raise ConfigError(f"listen_port = {self.listen_port}: want a port, 3-65535 (the VIP channel is port - 2)")
        if not 10000 <= self.register_name_server_period <= 60000:
            raise ConfigError(f"register_name_server_period = {self.register_name_server_period}: want 10000-60000 ms")
        for name in ("transaction_check_interval", "transaction_timeout", "transaction_check_max"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} = {getattr(self, name)}: want 1 or more")
        if not 0 <= (r := self.access_message_in_memory_max_ratio) <= 100:
            raise ConfigError(f"access_message_in_memory_max_ratio = {r}: want a percentage, 0-100")
        if self.metrics_port is not None and self.metrics_port > 65535:
            raise ConfigError(f"metrics_port = {self.metrics_port}: want a port, 0-65535")
        delete_hours(self.delete_when)

    @property
    def default_path(self) -> str:
        """``<store_base_dir>/dledger-<self_id>``, as DLedgerConfig.getDefaultPath."""
        return str(Path(self.store_base_dir) / f"dledger-{self.self_id}")

    @property
    def data_path(self) -> str:
        return self.data_store_path or str(Path(self.default_path) / "data")

    @property
    def index_path(self) -> str:
        return str(Path(self.default_path) / "index")

    @property
    def disk_full_ratio(self) -> float:
        return min(self.disk_space_ratio_to_force_clean + 0.05, 0.95)

    @classmethod
    def help_of(cls, name: str) -> str:
        """The one-line meaning of option ``name``."""
        return str(next(f for f in dataclasses.fields(cls) if f.name == name).metadata.get("help", ""))

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> DLedgerConfig:
        """Build from a mapping; keys may be snake_case or DLedger's camelCase."""
        known = set(cls.field_names())
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            name = _ALIASES.get(key) or snake_case(key)
            if name in _IGNORED:
                log.warning("config option %r is ignored: %s", key, _IGNORED[name])
                continue
            if name not in known:
                raise ConfigError(f"unknown config option {key!r}")
            kwargs[name] = value
        return cls(**kwargs)

    @classmethod
    def from_toml(cls, path: str | Path) -> DLedgerConfig:
        try:
            with open(path, "rb") as f:
                values = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"config file {str(path)!r}: {exc}") from exc
        try:
            return cls.from_dict(values)
        except ConfigError as exc:
            raise ConfigError(f"config file {str(path)!r}: {exc.message}") from exc

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> DLedgerConfig:
        return dataclasses.replace(self, **changes)


# Options that must be 1 or more (counts, sizes, intervals) and 0 or more; unset ones pass.
_POSITIVE = (
    "slave_sync_period",
    "send_thread_pool_queue_capacity",
    "pull_thread_pool_queue_capacity",
    "peer_push_throttle_point",
    "peer_push_quota",
    "max_wait_ack_time_ms",
    "max_push_time_out_ms",
    "max_batch_push_size",
    "heart_beat_time_interval_ms",
    "max_heart_beat_leak",
    "min_vote_interval_ms",
    "flush_file_interval",
    "check_point_interval",
    "mapped_file_size_for_entry_data",
    "mapped_file_size_for_entry_index",
    "max_body_size",
    "mapped_file_size_commit_log",
    "max_message_size",
    "default_topic_queue_nums",
)
_NOT_NEGATIVE = (
    "max_pending_requests_num",
    "max_leadership_transfer_wait_index",
    "leadership_transfer_wait_timeout",
    "min_take_leadership_vote_interval_ms",
    "file_reserved_hours",
    "data_cache_window",
    "metrics_port",
)

# Options older config files may hold that nothing reads any more: accepted, with a warning.
_IGNORED = {
    "enable_push_to_follower": "DLedger's switch was never read here; the leader always pushes to its followers",
}

# RocketMQ spells its DLedger switch "enableDLegerCommitLog".
_ALIASES = {
    "enableDLegerCommitLog": "message_store",
    "enable_dleger_commit_log": "message_store",
    "brokerIP1": "broker_ip1",
    "transactionTimeOut": "transaction_timeout",
}


def snake_case(name: str) -> str:
    """``mappedFileSizeCommitLog`` or ``mapped-file-size`` -> ``mapped_file_size...``."""
    out = []
    for ch in name.replace("-", "_"):
        if ch.isupper():
            out.append("_" + ch.lower())
        else:
            out.append(ch)
    return "".join(out).lstrip("_")
