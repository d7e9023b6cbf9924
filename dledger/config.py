"""DLedgerConfig: DLedger's option names in snake_case, with DLedger 0.2.3's defaults.

Where we deviate from a DLedger default it is said next to the field, with the reason.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # tomllib joined the standard library in 3.11; tomli is the same parser
    import tomli as tomllib

MEMORY = "MEMORY"
FILE = "FILE"

GB = 1024 * 1024 * 1024
MB = 1024 * 1024


@dataclass(slots=True)
class DLedgerConfig:
    # identity
    group: str = "default"
    self_id: str = "n0"
    peers: str = "n0-127.0.0.1:20911"
    store_base_dir: str = "/tmp/dledgerstore"
    store_type: str = FILE
    data_store_path: str | None = None

    # replication
    peer_push_throttle_point: int = 300 * MB
    peer_push_quota: int = 20 * MB
    max_pending_requests_num: int = 10000
    max_wait_ack_time_ms: int = 2500
    max_push_time_out_ms: int = 1000
    # DLedger defaults to False; batch push is what makes replication fast, and the
    # replication issue asks for it on by default.
    is_enable_batch_push: bool = True
    # DLedger's 4 KiB batch carries four 1 KiB entries a push; 1 MiB lets one push frame carry
    # a client's whole batch (bench/test_bench_cluster.py: 1 KiB bodies 13k -> ~45k entries/s).
    max_batch_push_size: int = 1024 * 1024
    enable_push_to_follower: bool = True

    # election
    enable_leader_elector: bool = True
    # DLedger's default is 2000 ms: with max_heart_beat_leak 3 a dead leader goes unnoticed
    # for 6 s. 400 ms gives failover well under 3 s (bench/test_bench_cluster.py) for a
    # heartbeat per follower 2.5 times a second, which costs nothing measurable.
    heart_beat_time_interval_ms: int = 400
    max_heart_beat_leak: int = 3
    min_vote_interval_ms: int = 300
    max_vote_interval_ms: int = 1000
    preferred_leader_ids: str | None = None
    max_leadership_transfer_wait_index: int = 1000
    min_take_leadership_vote_interval_ms: int = 30
    max_take_leadership_vote_interval_ms: int = 100

    # retention and disk
    file_reserved_hours: int = 72
    delete_when: str = "04"
    disk_space_ratio_to_check_expired: float = 0.70
    disk_space_ratio_to_force_clean: float = 0.85
    enable_disk_force_clean: bool = True

    # ours: multiplies the intervals DLedger hard-codes (vote-round wait 2000 ms, compare/truncate
    # wait 3000 ms, leak checks 1000 ms...; see dledger.raft.timings). 0.5 halves the wait for a
    # vote round whose votes were lost, the long pole of a failover; the low-latency profile
    # in the README uses 0.1.
    raft_timing_scale: float = 0.5

    # storage
    flush_file_interval: int = 10
    check_point_interval: int = 3000
    mapped_file_size_for_entry_data: int = GB
    mapped_file_size_for_entry_index: int = 32 * 5 * 1024 * 1024
    # ours: an append returns only once it is on disk (fdatasync/msync) when True.
    sync: bool = False
    # ours: the largest body an append accepts (DLedger relies on its 4 MiB buffer).
    max_body_size: int = 4 * MB - 48
    # ours: how much of the data just behind the flushed position stays in the page cache;
    # older pages of the data files are handed back to the kernel (0: never). New appends then
    # land in recycled pages instead of fresh ones: 0.3 against 1.0-1.3 us of CPU per KiB
    # written on the test VM (README, "Page cache"). Tailing readers read from the kept window;
    # older reads come from disk, as they would once the kernel evicted them anyway.
    data_cache_window: int = 256 * MB

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
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> DLedgerConfig:
        """Build from a mapping; keys may be snake_case or DLedger's camelCase."""
        known = set(cls.field_names())
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            name = _snake(key)
            if name not in known:
                raise ValueError(f"unknown config option {key!r}")
            kwargs[name] = value
        return cls(**kwargs)

    @classmethod
    def from_toml(cls, path: str | Path) -> DLedgerConfig:
        with open(path, "rb") as f:
            return cls.from_dict(tomllib.load(f))

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> DLedgerConfig:
        return dataclasses.replace(self, **changes)


def _snake(name: str) -> str:
    out = []
    for ch in name.replace("-", "_"):
        if ch.isupper():
            out.append("_" + ch.lower())
        else:
            out.append(ch)
    return "".join(out).lstrip("_")


