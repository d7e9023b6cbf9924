"""RocketMQ's TopicRouteData with its QueueData and BrokerData: a name server's answer to
GET_ROUTEINFO_BY_TOPIC, and ClusterInfo, its answer to GET_BROKER_CLUSTER_INFO. JSON as
fastjson writes them: properties sorted, null ones left out, brokerAddrs keyed by broker id."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dledger.rocketmq.remoting import remoting_serializable

MASTER_ID = 0  # MixAll.MASTER_ID

# PermName
PERM_INHERIT = 1
PERM_READ = 4
PERM_WRITE = 2


@dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> QueueData:
        return QueueData(
            str(d["brokerName"]),
            int(d.get("readQueueNums", 0)),
            int(d.get("writeQueueNums", 0)),
            int(d.get("perm", 0)),
            int(d.get("topicSysFlag", 0)),
        )


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"brokerAddrs": dict(self.broker_addrs), "brokerName": self.broker_name, "cluster": self.cluster}

    @staticmethod
    def from_json(d: dict[str, Any]) -> BrokerData:
        addrs = {int(k): str(v) for k, v in (d.get("brokerAddrs") or {}).items()}
        return BrokerData(str(d.get("cluster", "")), str(d["brokerName"]), addrs)

    def select_broker_addr(self) -> str | None:
        """The master's address, or any slave's (BrokerData.selectBrokerAddr)."""
        return self.broker_addrs.get(MASTER_ID) or next(iter(self.broker_addrs.values()), None)


@dataclass(slots=True)
class TopicRouteData:
    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None

    def encode(self, *, quote_int_keys: bool = True) -> bytes:
        return remoting_serializable.encode_fastjson(
            {
                "brokerDatas": [b.to_json() for b in self.broker_datas],
                "filterServerTable": self.filter_server_table,
                "orderTopicConf": self.order_topic_conf,
                "queueDatas": [q.to_json() for q in self.queue_datas],
            },
            quote_int_keys=quote_int_keys,
        )

    @staticmethod
    def decode(body: bytes | memoryview) -> TopicRouteData:
        d = remoting_serializable.decode(body)
        return TopicRouteData(
            [QueueData.from_json(q) for q in d.get("queueDatas") or []],
            [BrokerData.from_json(b) for b in d.get("brokerDatas") or []],
            dict(d.get("filterServerTable") or {}),
            d.get("orderTopicConf"),
        )


@dataclass(slots=True)
class ClusterInfo:
    broker_addr_table: dict[str, BrokerData]
    cluster_addr_table: dict[str, set[str]]

    def encode(self) -> bytes:
        # ClusterInfo.encode(): plain fastjson, broker ids as bare keys.
        return remoting_serializable.encode_fastjson(
            {
                "brokerAddrTable": {k: v.to_json() for k, v in self.broker_addr_table.items()},
                "clusterAddrTable": {k: sorted(v) for k, v in self.cluster_addr_table.items()},
            },
            quote_int_keys=False,
        )

    @staticmethod
    def decode(body: bytes | memoryview) -> ClusterInfo:
        d = remoting_serializable.decode(body)
        return ClusterInfo(
            {k: BrokerData.from_json(v) for k, v in (d.get("brokerAddrTable") or {}).items()},
            {k: set(v) for k, v in (d.get("clusterAddrTable") or {}).items()},
        )


__all__ = [
    "MASTER_ID",
    "PERM_INHERIT",
    "PERM_READ",
    "PERM_WRITE",
    "BrokerData",
    "ClusterInfo",
    "QueueData",
    "TopicRouteData",
]
