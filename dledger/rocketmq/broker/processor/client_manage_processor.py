"""RocketMQ's ClientManageProcessor: HEART_BEAT (a client's producer and consumer groups; a
consumer group gets its retry topic), UNREGISTER_CLIENT and CHECK_CLIENT_CONFIG."""

from __future__ import annotations

from collections.abc import Callable

from dledger.rocketmq.broker.consumer_manager import ConsumerManager
from dledger.rocketmq.broker.processor.send_message_processor import RETRY_QUEUE_NUMS
from dledger.rocketmq.broker.topic_config_manager import RETRY_GROUP_TOPIC_PREFIX, TopicConfigManager
from dledger.rocketmq.remoting import remoting_serializable
from dledger.rocketmq.remoting.netty_remoting_server import Channel
from dledger.rocketmq.remoting.protocol.topic_route_data import PERM_READ, PERM_WRITE
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException


class ClientManageProcessor:
    def __init__(
        self, consumers: ConsumerManager, topics: TopicConfigManager, on_topic_created: Callable[[], None]
    ) -> None:
        self.consumers = consumers
        self.topics = topics
        self.on_topic_created = on_topic_created

    async def heart_beat(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        data = remoting_serializable.decode(req.body) if req.body else {}
        if not isinstance(data, dict):
            raise RemotingCommandException("HeartbeatData must be an object")
        for cd in data.get("consumerDataSet") or []:
            group = str(cd.get("groupName", ""))
            retry = RETRY_GROUP_TOPIC_PREFIX + group
            if group and self.topics.select(retry) is None:
                # autoCreateSubscriptionGroup: the group's retry topic, made on its first heartbeat.
                self.topics.create_in_send_back(retry, RETRY_QUEUE_NUMS, PERM_READ | PERM_WRITE)
                self.on_topic_created()
        for group in self.consumers.heartbeat(data, ch, req.language, req.version):
            self.consumers.notify_ids_changed(group)
        return req.response()

    async def unregister_client(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        ext = req.ext_fields or {}
        changed = self.consumers.unregister(
            ext.get("clientID", ""), ext.get("consumerGroup") or None, ext.get("producerGroup") or None
        )
        for group in changed:
            self.consumers.notify_ids_changed(group)
        return req.response(ext_fields={})

    async def check_client_config(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        return req.response()


__all__ = ["ClientManageProcessor"]
