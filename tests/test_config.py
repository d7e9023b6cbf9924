"""DLedgerConfig from mappings and TOML files."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dledger.config import DLedgerConfig


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
