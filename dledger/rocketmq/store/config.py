"""MessageStoreConfig: RocketMQ 4.9.4's option names in snake_case, with its defaults.

Options of ours (not in RocketMQ) say so next to them.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dledger.config import snake_case
from dledger.config_check import ConfigError, at_least, check_types, delete_hours, one_of

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"

ASYNC_MASTER = "ASYNC_MASTER"
SYNC_MASTER = "SYNC_MASTER"
SLAVE = "SLAVE"

CQ_STORE_UNIT_SIZE = 20

_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

# RocketMQ spells the DLedger options "dLeger..."; these are their snake_case names here.
_ALIASES = {
    "enableDLegerCommitLog": "enable_dledger_commit_log",
    "dLegerGroup": "dledger_group",
    "dLegerPeers": "dledger_peers",
    "dLegerSelfId": "dledger_self_id",
    "storePathDLedgerCommitLog": "store_path_dledger_commit_log",
    "isEnableBatchPush": "is_enable_batch_push",
}


# Options that must be 1 or more: sizes, counts and intervals.
_POSITIVE = (
    "mapped_file_size_commit_log",
    "mapped_file_size_consume_queue",
    "sync_flush_timeout",
    "flush_interval_commit_log",
    "flush_interval_consume_queue",
    "flush_consumer_offset_interval",
    "flush_delay_offset_interval",
    "clean_resource_interval",
    "max_message_size",
    "max_transfer_bytes_on_message_in_memory",
    "max_transfer_count_on_message_in_memory",
    "default_query_max_num",
    "max_msgs_num_batch",
    "max_hash_slot_num",
    "max_index_num",
    "ha_send_heartbeat_interval",
    "ha_housekeeping_interval",
    "ha_transfer_batch_size",
    "ha_slave_fallbehind_max",
)


@dataclass(slots=True)
class MessageStoreConfig:
    store_path_root_dir: str = ""
    store_path_commit_log: str | None = None  # default <root>/commitlog
    store_path_dledger_commit_log: str | None = None  # default <root>
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300000 * CQ_STORE_UNIT_SIZE

    # flush
    flush_disk_type: str = ASYNC_FLUSH
    sync_flush_timeout: int = 5000
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    flush_commit_log_timed: bool = True
    flush_interval_consume_queue: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000
    # BrokerConfig.flushConsumerOffsetInterval: config/consumerOffset.json is written this often
    # (ms) when offsets changed, and before retention deletes commit-log files.
    flush_consumer_offset_interval: int = 5000
    # flushDelayOffsetInterval: config/delayOffset.json is written this often (ms) when the
    # delayed-message delivery moved, and at shutdown.
    flush_delay_offset_interval: int = 10_000

    # retention
    clean_resource_interval: int = 10_000
    delete_commit_log_files_interval: int = 100
    delete_consume_queue_files_interval: int = 100
    destroy_maped_file_interval_forcibly: int = 120_000
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    file_reserved_time: int = 72
    clean_file_forcibly_enable: bool = True

    # messages
    max_message_size: int = 1024 * 1024 * 4
    check_crc_on_recover: bool = True
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    duplication_enable: bool = False

    # reads
    max_transfer_bytes_on_message_in_memory: int = 1024 * 256
    max_transfer_count_on_message_in_memory: int = 32
    default_query_max_num: int = 32
    max_msgs_num_batch: int = 64
    # A pull reading further behind the commit log's end than this percentage of the machine's
    # memory is told to go to a slave (getMessage's suggestPullingFromSlave), with the broker's
    # slaveReadEnable on: those pages are likely gone from the master's page cache.
    access_message_in_memory_max_ratio: int = 40

    # index
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 5_000_000 * 4
    message_index_safe: bool = False

    # role
    broker_role: str = ASYNC_MASTER

    # classic HA (store/ha/): the master listens on ha_listen_port, a slave connects to
    # ha_master_address ("host:port"; none: it waits to be told, as RocketMQ's slave waits for
    # the name server). Intervals in ms, sizes in bytes.
    ha_listen_port: int = 10912  # 0: any free port (tests)
    ha_master_address: str | None = None
    ha_send_heartbeat_interval: int = 5000
    ha_housekeeping_interval: int = 20_000
    ha_transfer_batch_size: int = 32 * 1024
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024

    # DLedger
    enable_dledger_commit_log: bool = False
    dledger_group: str = "default"
    dledger_peers: str = "n0-127.0.0.1:40911"
    dledger_self_id: str = "n0"
    preferred_leader_id: str | None = None
    is_enable_batch_push: bool = False

    # ours: the store host written into records and msgIds (the broker's brokerIP1 and listen
    # port in RocketMQ); empty means this host's address and port 10911.
    store_host: str = ""
    # ours: the write queue count of topics that have one; a put to a queue id at or past it is
    # refused (the broker's topic config check). Topics not listed take any non-negative id.
    topic_queue_nums: dict[str, int] = field(default_factory=dict)
    # ours: give a message without UNIQ_KEY one, as MessageClientIDSetter does in the producer.
    create_uniq_key: bool = True
    # ours: max seconds a DLedger-mode store waits after becoming leader for its ledger end to
    # be committed and dispatch to catch up before it takes writes.
    dledger_leader_ready_timeout: float = 60.0
    # ours: DLedgerConfig options of the DLedger store beyond those derived from this config
    # (as DLedgerCommitLog builds its DLedgerConfig), e.g. a group member's flush interval and page-cache window.
    dledger_store_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_types(self)
        at_least(self, 1, _POSITIVE)
        at_least(self, 0, ("file_reserved_time",))
        one_of(self, "flush_disk_type", (ASYNC_FLUSH, SYNC_FLUSH))
        one_of(self, "broker_role", (ASYNC_MASTER, SYNC_MASTER, SLAVE))
        if not 0 < self.disk_max_used_space_ratio <= 100:
            raise ConfigError(f"disk_max_used_space_ratio = {self.disk_max_used_space_ratio}: want a percentage, 1-100")
        if not 0 <= (r := self.access_message_in_memory_max_ratio) <= 100:
            raise ConfigError(f"access_message_in_memory_max_ratio = {r}: want a percentage, 0-100")
        delete_hours(self.delete_when)
        try:
            self.delay_level_table()
        except ValueError as exc:
            raise ConfigError(f"message_delay_level: {exc}") from exc
        for topic, nums in self.topic_queue_nums.items():
            if not (isinstance(nums, int) and nums >= 1):
                raise ConfigError(f"topic_queue_nums[{topic!r}] = {nums!r}: want 1 or more")
        if self.enable_dledger_commit_log and not re.fullmatch(r"[A-Za-z]\d+", self.dledger_self_id):
            # DLedgerCommitLog takes the number after the id's first letter as its id.
            raise ConfigError(f"dledger_self_id = {self.dledger_self_id!r}: want a letter and a number (n0)")
        # MessageStoreConfig.getMappedFileSizeConsumeQueue: a whole number of 20-byte units.
        units = -(-self.mapped_file_size_consume_queue // CQ_STORE_UNIT_SIZE)
        self.mapped_file_size_consume_queue = units * CQ_STORE_UNIT_SIZE

    # -- derived ----------------------------------------------------------------------

    @property
    def commit_log_path(self) -> Path:
        return Path(self.store_path_commit_log or Path(self.store_path_root_dir) / "commitlog")

    @property
    def dledger_path(self) -> Path:
        base = Path(self.store_path_dledger_commit_log or self.store_path_root_dir)
        return base / f"dledger-{self.dledger_self_id}"

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type == SYNC_FLUSH

    def delay_level_table(self) -> dict[int, int]:
        """parseDelayLevel: level (1-based) -> delay in milliseconds."""
        table: dict[int, int] = {}
        for i, word in enumerate(self.message_delay_level.split()):
            m = re.fullmatch(r"(\d+)([smhd])", word)
            if m is None:
                raise ValueError(f"bad delay level {word!r} in {self.message_delay_level!r}")
            table[i + 1] = int(m.group(1)) * _UNIT_MS[m.group(2)]
        return table

    @property
    def max_delay_level(self) -> int:
        return len(self.message_delay_level.split())

    @property
    def dledger_id(self) -> int:
        """DLedgerCommitLog.id: the number after the first character of the self id, plus one."""
        return int(self.dledger_self_id[1:]) + 1

    # -- construction -----------------------------------------------------------------

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> MessageStoreConfig:
        """Build from a mapping; keys may be snake_case or RocketMQ's camelCase
        (``mappedFileSizeCommitLog``, ``enableDLegerCommitLog``...)."""
        known = set(cls.field_names())
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            name = _ALIASES.get(key) or snake_case(key)
            if name not in known:
                raise ConfigError(f"unknown message store option {key!r}")
            kwargs[name] = value
        return cls(**kwargs)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> MessageStoreConfig:
        return dataclasses.replace(self, **changes)


def store_properties(cfg: MessageStoreConfig) -> dict[str, str]:
    """The store's options under broker.conf's names, as GET_BROKER_CONFIG lists them (Java's
    Configuration holds every MessageStoreConfig property, set in the file or not)."""
    java = {v: k for k, v in _ALIASES.items()}
    out: dict[str, str] = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if f.name in ("store_host", "topic_queue_nums") or not isinstance(value, str | int | float):
            continue  # not broker.conf keys here (None: unset)
        head, *rest = f.name.split("_")
        key = java.get(f.name) or head + "".join(w.capitalize() for w in rest)
        out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out
