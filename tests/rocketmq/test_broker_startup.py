"""``dledger mq broker``'s settings: broker.conf read with RocketMQ's meaning of its keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from dledger.cli import build_parser
from dledger.rocketmq.broker.broker_startup import BrokerSettings, settings_from_args


def _settings(tmp_path: Path, conf: str, *flags: str) -> BrokerSettings:
    path = tmp_path / "broker.conf"
    path.write_text(conf)
    args = build_parser().parse_args(["mq", "broker", "-c", str(path), "--store-dir", str(tmp_path / "s"), *flags])
    return settings_from_args(args)


def test_listen_port_is_remotings_port_as_for_a_java_broker(tmp_path: Path) -> None:
    s = _settings(
        tmp_path,
        "# a Java broker's file\nbrokerName = broker-b\nlistenPort=20911\n"
        "haListenPort: 20912\nnamesrvAddr=127.0.0.1:9876\n",
    )
    assert (s.broker_name, s.remoting_port, s.listen_port) == ("broker-b", 20911, 10911)
    assert s.store["ha_listen_port"] == 20912
    assert s.namesrv_addr == "127.0.0.1:9876"


def test_flags_override_the_file(tmp_path: Path) -> None:
    s = _settings(
        tmp_path,
        "listenPort=20911\nbrokerRole=SLAVE\nbrokerId=2\n",
        "--remoting-port",
        "30911",
        "--role",
        "ASYNC_MASTER",
    )
    assert (s.remoting_port, s.store["broker_role"], s.broker_id) == (30911, "ASYNC_MASTER", 2)


@pytest.mark.parametrize(
    ("conf", "flags", "named"),
    [
        # Java's default listenPort beside the own protocol's default port.
        ("listenPort=10911\n", (), "--listen and remoting (listenPort) are both port 10911"),
        ("listenPort=10914\n", ("--listen", "127.0.0.1:10920"), "VIP channel (listenPort - 2) and HA (haListenPort)"),
        ("", ("--listen", "127.0.0.1:10912"), "--listen and HA (haListenPort) are both port 10912"),
    ],
)
def test_two_listeners_on_one_port_are_refused_before_any_binds(
    tmp_path: Path, conf: str, flags: tuple[str, ...], named: str
) -> None:
    with pytest.raises(SystemExit, match=named.replace("(", r"\(").replace(")", r"\)")):
        _settings(tmp_path, conf, *flags)


def test_separate_ports_pass(tmp_path: Path) -> None:
    s = _settings(tmp_path, "listenPort=10911\n", "--listen", "127.0.0.1:10915")
    assert (s.listen_host, s.listen_port, s.remoting_port) == ("127.0.0.1", 10915, 10911)


def test_pull_keys_of_broker_conf_reach_the_broker_and_its_store(tmp_path: Path) -> None:
    s = _settings(tmp_path, "")
    assert (s.slave_read_enable, s.auto_create_subscription_group) == (False, True)  # Java's defaults
    assert "access_message_in_memory_max_ratio" not in s.store
    s = _settings(
        tmp_path,
        "slaveReadEnable=true\nautoCreateSubscriptionGroup=false\naccessMessageInMemoryMaxRatio=10\n",
    )
    assert (s.slave_read_enable, s.auto_create_subscription_group) == (True, False)
    assert s.store["access_message_in_memory_max_ratio"] == 10 and not s.unsupported
    with pytest.raises(ValueError, match="slaveReadEnable"):
        _settings(tmp_path, "slaveReadEnable=yes\n")
