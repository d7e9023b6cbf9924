"""SlaveSynchronize against a master that answers as a Java 4.9.4 broker does: the four codes
asked on the master's VIP channel (port - 2), fastjson's bodies (bare integer keys in the offset
tables) taken into the slave's managers and files, the data version rule."""

from __future__ import annotations

import asyncio
from pathlib import Path

from dledger.rocketmq.broker.slave_synchronize import SlaveSynchronize
from dledger.rocketmq.broker.subscription_group_manager import SubscriptionGroupManager
from dledger.rocketmq.broker.topic_config_manager import TopicConfigManager
from dledger.rocketmq.remoting.netty_remoting_client import NettyRemotingClient
from dledger.rocketmq.remoting.netty_remoting_server import Channel, NettyRemotingServer
from dledger.rocketmq.remoting.protocol.register_broker_body import DataVersion, TopicConfig
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.request_code import RequestCode
from dledger.rocketmq.store.consumer_offset import ConsumerOffsetManager
from dledger.rocketmq.store.delay_offset import load_delay_offsets, persist_delay_offsets
from dledger.testing import consecutive_free_ports

# What a Java master's AdminBrokerProcessor answers (fastjson, compact; properties sorted).
TOPICS = (
    '{"dataVersion":{"counter":%d,"timestamp":1700000000000},"topicConfigTable":{"JavaTopic":{"order":false,'
    '"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"JavaTopic","topicSysFlag":0,'
    '"writeQueueNums":4}}}'
)
OFFSETS = '{"offsetTable":{"JavaTopic@javaGroup":{0:5,1:3}}}'
DELAY = '{"offsetTable":{1:12,2:11}}'
GROUPS = (
    '{"dataVersion":{"counter":2,"timestamp":1700000000001},"subscriptionGroupTable":{"javaGroup":{"brokerId":0,'
    '"consumeBroadcastEnable":true,"consumeEnable":true,"consumeFromMinEnable":true,"groupName":"javaGroup",'
    '"notifyConsumerIdsChangedEnable":true,"retryMaxTimes":7,"retryQueueNums":1,"whichBrokerWhenConsumeSlowly":1}}}'
)


def test_our_slave_takes_a_java_masters_metadata_from_its_vip_channel(tmp_path: Path) -> None:
    config = tmp_path / "config"
    topics = TopicConfigManager(config / "topics.json", 8, True, "DefaultCluster", "broker-a")
    groups = SubscriptionGroupManager(config / "subscriptionGroup.json")
    offsets = ConsumerOffsetManager(config)
    asked: list[int] = []
    version = {"counter": 1}

    async def answer(req: RemotingCommand, ch: Channel) -> RemotingCommand:
        asked.append(req.code)
        bodies: dict[int, str] = {
            RequestCode.GET_ALL_TOPIC_CONFIG: TOPICS % version["counter"],
            RequestCode.GET_ALL_CONSUMER_OFFSET: OFFSETS,
            RequestCode.GET_ALL_DELAY_OFFSET: DELAY,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: GROUPS,
        }
        return req.response(body=bodies[req.code].encode())

    async def scenario() -> None:
        base = consecutive_free_ports(3)  # VIP base, then the master's listen port base + 2
        codes = (
            RequestCode.GET_ALL_TOPIC_CONFIG,
            RequestCode.GET_ALL_CONSUMER_OFFSET,
            RequestCode.GET_ALL_DELAY_OFFSET,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        )
        vip = NettyRemotingServer("127.0.0.1", base, dict.fromkeys(codes, answer))
        await vip.start()
        client = NettyRemotingClient()
        try:
            sync = SlaveSynchronize(
                client, topics, groups, offsets, lambda t: persist_delay_offsets(config, t), period_s=0.1, delay_s=0
            )
            sync.master_addr = f"127.0.0.1:{base + 2}"
            await sync.sync_all()
            assert asked == list(codes)  # Java's order, all on the VIP channel
            assert topics.select("JavaTopic") == TopicConfig("JavaTopic", 4, 4, 6)
            assert topics.data_version == DataVersion(1700000000000, 1)
            assert set(topics.table) == {"JavaTopic"}  # the master's table, not ours plus it
            assert offsets.query_offsets("javaGroup", "JavaTopic") == {0: 5, 1: 3}
            assert load_delay_offsets(config) == {1: 12, 2: 11}
            assert groups.table["javaGroup"].retry_max_times == 7
            assert groups.data_version == DataVersion(1700000000001, 2)
            # The files, as the slave's own (a Java broker restarted on it reads them).
            assert TopicConfigManager(config / "topics.json", 8, False, "c", "b").select("JavaTopic") is not None
            assert SubscriptionGroupManager(config / "subscriptionGroup.json").table["javaGroup"].retry_max_times == 7
            # Same data version: not rewritten. A new one: taken.
            inode = (config / "topics.json").stat().st_ino
            await sync.sync_all()
            assert (config / "topics.json").stat().st_ino == inode
            version["counter"] = 2
            await sync.sync_all()
            assert (config / "topics.json").stat().st_ino != inode
            assert topics.data_version == DataVersion(1700000000000, 2)
        finally:
            await client.close()
            await vip.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))
