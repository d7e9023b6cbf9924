"""RocketMQ's ConsumerManager: the consumers of each group as their heartbeats say (client id,
connection, subscriptions). When a group's members change, every member is told
(NOTIFY_CONSUMER_IDS_CHANGED, oneway), so that they rebalance; a closed connection takes its
clients with it."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from dledger.rocketmq.remoting.netty_remoting_server import Channel
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.request_code import RequestCode

log = logging.getLogger(__name__)

# ClientHousekeepingService: a client silent this long is dropped.
CHANNEL_EXPIRED_TIMEOUT_S = 120.0


@dataclass(slots=True)
class ClientChannelInfo:
    client_id: str
    channel: Channel
    language: int
    version: int
    last_update: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = ""
    message_model: str = ""
    consume_from_where: str = ""
    channels: dict[str, ClientChannelInfo] = field(default_factory=dict)  # by client id
    subscriptions: dict[str, dict[str, Any]] = field(default_factory=dict)  # by topic


class ConsumerManager:
    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}
        self.producers: dict[str, dict[str, ClientChannelInfo]] = {}

    def heartbeat(self, data: dict[str, Any], channel: Channel, language: int, version: int) -> list[str]:
        """A HEART_BEAT's HeartbeatData: the groups whose member set changed."""
        client_id = str(data.get("clientID", ""))
        changed = []
        for cd in data.get("consumerDataSet") or []:
            name = str(cd.get("groupName", ""))
            if not name:
                continue
            g = self.groups.setdefault(name, ConsumerGroupInfo(name))
            g.consume_type = str(cd.get("consumeType", ""))
            g.message_model = str(cd.get("messageModel", ""))
            g.consume_from_where = str(cd.get("consumeFromWhere", ""))
            old = g.channels.get(client_id)
            if old is None or old.channel is not channel:
                changed.append(name)
            g.channels[client_id] = ClientChannelInfo(client_id, channel, language, version)
            for sd in cd.get("subscriptionDataSet") or []:
                g.subscriptions[str(sd.get("topic", ""))] = sd
        for pd in data.get("producerDataSet") or []:
            name = str(pd.get("groupName", ""))
            self.producers.setdefault(name, {})[client_id] = ClientChannelInfo(client_id, channel, language, version)
        return changed

    def unregister(self, client_id: str, consumer_group: str | None, producer_group: str | None) -> list[str]:
        changed = []
        if consumer_group:
            g = self.groups.get(consumer_group)
            if g is not None and g.channels.pop(client_id, None) is not None:
                changed.append(consumer_group)
                if not g.channels:
                    del self.groups[consumer_group]
        if producer_group:
            self.producers.get(producer_group, {}).pop(client_id, None)
        return changed

    def channel_closed(self, channel: Channel) -> list[str]:
        changed = []
        for name in list(self.groups):
            g = self.groups[name]
            gone = [cid for cid, info in g.channels.items() if info.channel is channel]
            for cid in gone:
                del g.channels[cid]
            if gone:
                changed.append(name)
                if not g.channels:
                    del self.groups[name]
        for clients in self.producers.values():
            for cid in [c for c, info in clients.items() if info.channel is channel]:
                del clients[cid]
        return changed

    def scan_not_active(self) -> None:
        now = time.monotonic()
        for g in list(self.groups.values()):
            for cid in [c for c, i in g.channels.items() if i.last_update + CHANNEL_EXPIRED_TIMEOUT_S < now]:
                g.channels.pop(cid).channel.close()

    def find_channel(self, group: str, client_id: str) -> ClientChannelInfo | None:
        g = self.groups.get(group)
        return g.channels.get(client_id) if g is not None else None

    def client_ids(self, group: str) -> list[str]:
        g = self.groups.get(group)
        return list(g.channels) if g is not None else []

    def notify_ids_changed(self, group: str) -> None:
        """Broker2Client.notifyConsumerIdsChanged: every member of the group, oneway."""
        g = self.groups.get(group)
        if g is None:
            return
        for info in g.channels.values():
            cmd = RemotingCommand.request(
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}, oneway=True
            )
            try:
                info.channel.send(cmd)
            except (ConnectionError, RuntimeError) as exc:
                log.debug("notify %s: %s", info.client_id, exc)


__all__ = ["ClientChannelInfo", "ConsumerGroupInfo", "ConsumerManager"]
