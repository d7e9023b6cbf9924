"""RocketMQ's RouteInfoManager: the name server's tables of clusters, brokers, topics' queues
and live brokers, as REGISTER_BROKER fills them and GET_ROUTEINFO_BY_TOPIC reads them.

A broker stays in the tables while it registers: 120 s without a registration
(BROKER_CHANNEL_EXPIRED_TIME), or its connection closing (BrokerHousekeepingService), and it is
gone, with the topics only it served. Everything runs on the name server's event loop, so the
tables need no lock.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from dledger.rocketmq.remoting.protocol.register_broker_body import DataVersion, TopicConfig
from dledger.rocketmq.remoting.protocol.topic_route_data import (
    MASTER_ID,
    PERM_READ,
    PERM_WRITE,
    BrokerData,
    ClusterInfo,
    QueueData,
    TopicRouteData,
)

log = logging.getLogger(__name__)

BROKER_CHANNEL_EXPIRED_TIME = 120.0  # seconds


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update: float  # time.monotonic()
    data_version: DataVersion
    channel: Any
    ha_server_addr: str


@dataclass(slots=True)
class RegisterBrokerResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None


class RouteInfoManager:
    def __init__(self, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}

    def register_broker(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_config_table: dict[str, TopicConfig] | None,
        data_version: DataVersion,
        filter_server_list: list[str] | None,
        channel: Any,
    ) -> RegisterBrokerResult:
        result = RegisterBrokerResult()
        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)
        bd = self.broker_addr_table.get(broker_name)
        first = bd is None
        if bd is None:
            bd = self.broker_addr_table[broker_name] = BrokerData(cluster_name, broker_name, {})
        # The same address under another id (a slave became master): that entry goes.
        for bid in [b for b, a in bd.broker_addrs.items() if a == broker_addr and b != broker_id]:
            del bd.broker_addrs[bid]
        old = bd.broker_addrs.get(broker_id)
        bd.broker_addrs[broker_id] = broker_addr
        first = first or old is None
        if topic_config_table is not None and broker_id == MASTER_ID:
            if self.is_broker_topic_config_changed(broker_addr, data_version) or first:
                for tc in topic_config_table.values():
                    self._create_and_update_queue_data(broker_name, tc)
        prev = self.broker_live_table.get(broker_addr)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(self.clock(), data_version, channel, ha_server_addr)
        if prev is None:
            log.info("new broker registered, %s HAServer: %s", broker_addr, ha_server_addr)
        if filter_server_list is not None:
            if filter_server_list:
                self.filter_server_table[broker_addr] = filter_server_list
            else:
                self.filter_server_table.pop(broker_addr, None)
        if broker_id != MASTER_ID:
            master = bd.broker_addrs.get(MASTER_ID)
            if master is not None:
                live = self.broker_live_table.get(master)
                if live is not None:
                    result.ha_server_addr = live.ha_server_addr
                    result.master_addr = master
        return result

    def is_broker_topic_config_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        prev = self.query_broker_topic_config(broker_addr)
        return prev is None or prev != data_version

    def query_broker_topic_config(self, broker_addr: str) -> DataVersion | None:
        live = self.broker_live_table.get(broker_addr)
        return None if live is None else live.data_version

    def update_broker_info_update_timestamp(self, broker_addr: str) -> None:
        live = self.broker_live_table.get(broker_addr)
        if live is not None:
            live.last_update = self.clock()

    def _create_and_update_queue_data(self, broker_name: str, tc: TopicConfig) -> None:
        qd = QueueData(broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)
        self.topic_queue_table.setdefault(tc.topic_name, {})[broker_name] = qd

    def operate_write_perm(self, broker_name: str, wipe: bool) -> int:
        """WIPE_WRITE_PERM_OF_BROKER / ADD_WRITE_PERM_OF_BROKER: the topics changed."""
        n = 0
        for qmap in self.topic_queue_table.values():
            qd = qmap.get(broker_name)
            if qd is not None:
                qd.perm = qd.perm & ~PERM_WRITE if wipe else PERM_READ | PERM_WRITE
                n += 1
        return n

    def unregister_broker(self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        bd = self.broker_addr_table.get(broker_name)
        if bd is not None:
            bd.broker_addrs.pop(broker_id, None)
            if not bd.broker_addrs:
                del self.broker_addr_table[broker_name]
                names = self.cluster_addr_table.get(cluster_name)
                if names is not None:
                    names.discard(broker_name)
                    if not names:
                        del self.cluster_addr_table[cluster_name]
                self._remove_topic_by_broker_name(broker_name)

    def _remove_topic_by_broker_name(self, broker_name: str) -> None:
        for topic in list(self.topic_queue_table):
            qmap = self.topic_queue_table[topic]
            qmap.pop(broker_name, None)
            if not qmap:
                del self.topic_queue_table[topic]

    def delete_topic(self, topic: str, cluster_name: str | None = None) -> None:
        if cluster_name is None:
            self.topic_queue_table.pop(topic, None)
            return
        qmap = self.topic_queue_table.get(topic)
        if qmap is None:
            return
        for name in self.cluster_addr_table.get(cluster_name, set()):
            qmap.pop(name, None)
        if not qmap:
            del self.topic_queue_table[topic]

    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        qmap = self.topic_queue_table.get(topic)
        if not qmap:
            return None
        brokers = []
        filters: dict[str, list[str]] = {}
        for name in qmap:
            bd = self.broker_addr_table.get(name)
            if bd is None:
                continue
            clone = BrokerData(bd.cluster, bd.broker_name, dict(bd.broker_addrs))
            brokers.append(clone)
            for addr in clone.broker_addrs.values():
                fs = self.filter_server_table.get(addr)
                if fs is not None:
                    filters[addr] = fs
        if not brokers:
            return None
        return TopicRouteData(
            [
                QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag)
                for q in qmap.values()
            ],
            brokers,
            filters,
        )

    def get_all_cluster_info(self) -> ClusterInfo:
        return ClusterInfo(self.broker_addr_table, self.cluster_addr_table)

    def get_all_topic_list(self) -> list[str]:
        return list(self.topic_queue_table)

    def get_topics_by_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_addr_table.get(cluster, set())
        return [t for t, qmap in self.topic_queue_table.items() if names & qmap.keys()]

    def get_system_topic_list(self) -> tuple[list[str], str | None]:
        """The cluster and broker names (each a topic of its own) and one broker's address."""
        topics: list[str] = []
        addr = None
        for cluster, names in self.cluster_addr_table.items():
            topics.append(cluster)
            topics.extend(names)
        for bd in self.broker_addr_table.values():
            if bd.broker_addrs:
                addr = next(iter(bd.broker_addrs.values()))
                break
        return topics, addr

    def topics_by_sys_flag(self, want: Any) -> list[str]:
        return [t for t, qmap in self.topic_queue_table.items() if any(want(q.topic_sys_flag) for q in qmap.values())]

    def scan_not_active_broker(self) -> int:
        """Brokers silent for BROKER_CHANNEL_EXPIRED_TIME: their connection closed, their
        entries gone."""
        now = self.clock()
        dead = [a for a, live in self.broker_live_table.items() if live.last_update + BROKER_CHANNEL_EXPIRED_TIME < now]
        for addr in dead:
            live = self.broker_live_table.pop(addr)
            log.warning("the broker channel expired, %s %.0fs", addr, BROKER_CHANNEL_EXPIRED_TIME)
            if live.channel is not None and hasattr(live.channel, "close"):
                live.channel.close()
            self.on_channel_destroy(addr, None)
        return len(dead)

    def on_channel_destroy(self, remote_addr: str, channel: Any) -> None:
        """A broker's connection closed (or its registration expired): the broker is gone."""
        found = None
        if channel is not None:
            for addr, live in self.broker_live_table.items():
                if live.channel is channel:
                    found = addr
                    break
            if found is None:
                return  # not a broker's connection (a client's)
        else:
            found = remote_addr
        self.broker_live_table.pop(found, None)
        self.filter_server_table.pop(found, None)
        name_found = None
        for bname in list(self.broker_addr_table):
            bd = self.broker_addr_table[bname]
            for bid, addr in list(bd.broker_addrs.items()):
                if addr == found:
                    name_found = bname
                    del bd.broker_addrs[bid]
                    break
            if name_found is not None:
                if not bd.broker_addrs:
                    del self.broker_addr_table[bname]
                    for cluster in list(self.cluster_addr_table):
                        names = self.cluster_addr_table[cluster]
                        if bname in names:
                            names.discard(bname)
                            if not names:
                                del self.cluster_addr_table[cluster]
                            break
                    self._remove_topic_by_broker_name(bname)
                break


__all__ = ["BROKER_CHANNEL_EXPIRED_TIME", "BrokerLiveInfo", "RegisterBrokerResult", "RouteInfoManager"]
