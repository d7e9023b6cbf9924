"""PULL_MESSAGE's subscription-group checks and its suggestWhichBrokerId, as the 4.9.4 broker:
real members on 127.0.0.1 (``accessMessageInMemoryMaxRatio`` 0, so that any pull that reads a
message is "far behind": even the last one lies its own size behind the log's end, as in Java).
The threshold itself is tested on a store in ``tests/rocketmq/test_suggest_pulling_from_slave.py``."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from dledger.config import DLedgerConfig
from dledger.config_check import ConfigError
from dledger.rocketmq.remoting import RemotingCommand, RequestCode, ResponseCode
from dledger.rocketmq.remoting.netty_remoting_client import NettyRemotingClient
from dledger.rocketmq.remoting.protocol.request_headers import pull_message
from dledger.rocketmq.remoting.remoting_serializable import decode as json_decode
from tests.rocketmq.remoting.processes import cluster, run
from tests.rocketmq.remoting.test_broker_remoting import QUEUES, _send

FAR_BEHIND = ["--access-message-in-memory-max-ratio", "0"]


def _pull(group: str, topic: str, offset: int, max_nums: int = 1) -> RemotingCommand:
    return pull_message(topic, 0, offset, group=group, max_nums=max_nums)


def _group(name: str, **fields: object) -> RemotingCommand:
    body = json.dumps({"groupName": name, **fields}).encode()
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)


async def _sent(c: NettyRemotingClient, addr: str, topic: str, body: bytes) -> RemotingCommand:
    """A send the member took (its port opens before it leads; under load it may take a while)."""
    deadline = time.monotonic() + 20
    while True:
        r = await _send(c, addr, topic, body, "TagA")
        if r.code == ResponseCode.SUCCESS or time.monotonic() > deadline:
            return r
        await asyncio.sleep(0.2)


async def _pulled(c: NettyRemotingClient, addr: str, group: str, topic: str, offset: int) -> RemotingCommand:
    """A pull that found its message (a follower's store may still be behind the leader's)."""
    deadline = time.monotonic() + 20
    while True:
        got = await c.invoke(addr, _pull(group, topic, offset), timeout=10)
        if got.code == ResponseCode.SUCCESS or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.2)


def test_with_slave_read_enable_a_consumer_far_behind_is_sent_to_the_slave_and_groups_are_checked(
    tmp_path: Path,
) -> None:
    extra = [*QUEUES, *FAR_BEHIND, "--slave-read-enable", "true", "--auto-create-subscription-group", "false"]
    with cluster(tmp_path, 1, extra) as (_ns, brokers):
        addr = brokers.addr("n0")

        async def scenario() -> None:
            c = NettyRemotingClient()
            try:
                for k in range(3):
                    r = await _sent(c, addr, "SlowTopic", b"m%d" % k)
                    assert r.code == ResponseCode.SUCCESS, r.remark
                # autoCreateSubscriptionGroup off: a group nobody made is refused, not made.
                got = await c.invoke(addr, _pull("Nobody", "SlowTopic", 0))
                assert got.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, got.remark
                assert got.remark and got.remark.startswith("subscription group [Nobody] does not exist")
                groups = await c.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
                assert "Nobody" not in json_decode(groups.body)["subscriptionGroupTable"]
                # A group whose consumption is off.
                assert (await c.invoke(addr, _group("Slow", consumeEnable=False))).code == ResponseCode.SUCCESS
                got = await c.invoke(addr, _pull("Slow", "SlowTopic", 0))
                assert (got.code, got.remark) == (ResponseCode.NO_PERMISSION, "subscription group no permission, Slow")
                assert not got.body
                # On again (whichBrokerWhenConsumeSlowly 1, Java's default): two messages behind
                # the commit log's end is far behind at ratio 0 -> the slave.
                assert (await c.invoke(addr, _group("Slow"))).code == ResponseCode.SUCCESS
                got = await c.invoke(addr, _pull("Slow", "SlowTopic", 0))
                assert got.code == ResponseCode.SUCCESS and got.ext_fields
                assert got.ext_fields["suggestWhichBrokerId"] == "1"
                # Keeping up (a pull past the end reads nothing): the group's brokerId, the master.
                got = await c.invoke(addr, _pull("Slow", "SlowTopic", 3))
                assert got.code == ResponseCode.PULL_NOT_FOUND and got.ext_fields
                assert got.ext_fields["suggestWhichBrokerId"] == "0"
                # Which slave is the group's to say.
                await c.invoke(addr, _group("Slow3", whichBrokerWhenConsumeSlowly=3))
                got = await c.invoke(addr, _pull("Slow3", "SlowTopic", 0))
                assert got.ext_fields and got.ext_fields["suggestWhichBrokerId"] == "3"
            finally:
                await c.close()

        run(scenario, timeout=90)


def test_without_slave_read_enable_every_pull_suggests_the_master_and_groups_are_made(tmp_path: Path) -> None:
    # Java's defaults (slaveReadEnable off, autoCreateSubscriptionGroup on); two members, so
    # that the follower (a slave) serves pulls too.
    with cluster(tmp_path, 2, [*QUEUES, *FAR_BEHIND]) as (_ns, brokers):

        async def scenario() -> None:
            c = NettyRemotingClient()
            try:
                sent = None
                deadline = time.monotonic() + 30
                while sent is None:
                    for m in brokers.ids:  # whichever leads takes the sends
                        for k in range(3):
                            r = await _send(c, brokers.addr(m), "FastTopic", b"m%d" % k, "TagA")
                            if r.code != ResponseCode.SUCCESS:
                                break
                        else:
                            sent = m
                            break
                    assert time.monotonic() < deadline, "no member took the sends"
                    await asyncio.sleep(0.3)
                for m in brokers.ids:
                    got = await _pulled(c, brokers.addr(m), "Made", "FastTopic", 0)
                    assert got.code == ResponseCode.SUCCESS, (m, got.remark)
                    assert got.ext_fields and got.ext_fields["suggestWhichBrokerId"] == "0", m
                groups = await c.invoke(
                    brokers.addr(sent), RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
                )
                assert "Made" in json_decode(groups.body)["subscriptionGroupTable"]
            finally:
                await c.close()

        run(scenario, timeout=90)


def test_a_ratio_out_of_range_is_refused_in_a_line() -> None:
    with pytest.raises(ConfigError, match="access_message_in_memory_max_ratio = 101"):
        DLedgerConfig(access_message_in_memory_max_ratio=101)
