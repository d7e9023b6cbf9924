"""DLedgerConfig from mappings and TOML files."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.config_check import ConfigError, is_it_time_to_do
from dledger.rocketmq.store.config import MessageStoreConfig


def test_camel_and_snake_case_keys(tmp_path: Path) -> None:
    path = tmp_path / "n0.toml"
    path.write_text('group = "g"\nselfId = "n1"\nmax_wait_ack_time_ms = 7\n')
    cfg = DLedgerConfig.from_toml(path)
    assert (cfg.group, cfg.self_id, cfg.max_wait_ack_time_ms) == ("g", "n1", 7)


def test_unknown_options_are_refused() -> None:
    with pytest.raises(ValueError, match="nope"):
        DLedgerConfig.from_dict({"nope": 1})


@pytest.mark.parametrize("key", ["enable_push_to_follower", "enablePushToFollower"])
def test_an_option_nothing_reads_is_ignored_with_a_warning(key: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="dledger.config"):
        cfg = DLedgerConfig.from_dict({key: False, "group": "g"})
    assert cfg == DLedgerConfig(group="g")
    assert key in caplog.text


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"heartBeatTimeIntervalMs": "x"}, "heart_beat_time_interval_ms"),
        ({"max_wait_ack_time_ms": 0}, "max_wait_ack_time_ms"),
        ({"maxMessageSize": -5}, "max_message_size"),
        ({"defaultTopicQueueNums": 0}, "default_topic_queue_nums"),
        ({"messageIndexEnable": "yes"}, "message_index_enable"),
        ({"sync": 1}, "sync"),
        ({"store_type": "DISK"}, "store_type"),
        ({"flushDiskType": "SYNCFLUSH"}, "flush_disk_type"),
        ({"disk_space_ratio_to_force_clean": 85}, "disk_space_ratio_to_force_clean"),
        ({"raft_timing_scale": 0}, "raft_timing_scale"),
        ({"min_vote_interval_ms": 2000}, "min_vote_interval_ms"),
        ({"metrics_port": 70000}, "metrics_port"),
        ({"deleteWhen": "4am"}, "delete_when"),
        ({"peers": None}, "peers"),
    ],
)
def test_values_that_cannot_work_are_refused_naming_the_option(values: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named) as caught:
        DLedgerConfig.from_dict(values)
    # A ValueError to Python callers, UNEXPECTED_ARGUMENT to the command line.
    assert isinstance(caught.value, ValueError) and caught.value.code == ResponseCode.UNEXPECTED_ARGUMENT


def test_values_that_work_pass() -> None:
    cfg = DLedgerConfig.from_dict(
        {"max_pending_requests_num": 0, "disk_space_ratio_to_force_clean": 1, "metrics_port": 0, "delete_when": "99"}
    )
    assert cfg.disk_space_ratio_to_force_clean == 1 and cfg.max_pending_requests_num == 0
    assert DLedgerConfig(raft_timing_scale=1).raft_timing_scale == 1  # an int where a float is asked


def test_a_bad_file_names_itself(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("group = [\n")
    with pytest.raises(ConfigError, match=r"bad\.toml"):
        DLedgerConfig.from_toml(bad)
    with pytest.raises(ConfigError, match=r"missing\.toml"):
        DLedgerConfig.from_toml(tmp_path / "missing.toml")
    bad.write_text("maxVoteIntervalMs = 10\n")
    with pytest.raises(ConfigError, match=r"bad\.toml.*max_vote_interval_ms"):
        DLedgerConfig.from_toml(bad)


def _epoch_at_local_hour(hour: int) -> float:
    return time.mktime((2026, 11, 28, hour, 30, 0, 0, 0, -1))


def test_delete_when_hours_read_as_rocketmq_reads_them() -> None:
    # UtilAll.isItTimeToDo parses each hour as an integer: "4" is 04:00-04:59 as "04" is.
    for when in ("4", "04", "16;4", " 04 ;16"):
        assert is_it_time_to_do(when, _epoch_at_local_hour(4)), when
        assert not is_it_time_to_do(when, _epoch_at_local_hour(5)), when
    assert not any(is_it_time_to_do("99", _epoch_at_local_hour(h)) for h in range(24))
    assert not any(is_it_time_to_do("", _epoch_at_local_hour(h)) for h in range(24))


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"mappedFileSizeCommitLog": 0}, "mapped_file_size_commit_log"),
        ({"maxMessageSize": "4M"}, "max_message_size"),
        ({"flushDiskType": "sync"}, "flush_disk_type"),
        ({"brokerRole": "MASTER"}, "broker_role"),
        ({"diskMaxUsedSpaceRatio": 0}, "disk_max_used_space_ratio"),
        ({"messageDelayLevel": "1s 5x"}, "message_delay_level"),
        ({"topic_queue_nums": {"T": 0}}, "topic_queue_nums"),
        ({"enableDLegerCommitLog": True, "dLegerSelfId": "alpha"}, "dledger_self_id"),
        ({"storePathRootDir": 7}, "store_path_root_dir"),
    ],
)
def test_message_store_values_that_cannot_work_are_refused(values: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        MessageStoreConfig.from_dict(values)


def test_consume_queue_files_hold_whole_units() -> None:
    # MessageStoreConfig.getMappedFileSizeConsumeQueue rounds up to a whole 20-byte unit.
    assert MessageStoreConfig(mapped_file_size_consume_queue=1001).mapped_file_size_consume_queue == 1020
    assert MessageStoreConfig(mapped_file_size_consume_queue=1000).mapped_file_size_consume_queue == 1000
