"""RocketMQ's RegisterBrokerBody (the body of REGISTER_BROKER) with its
TopicConfigSerializeWrapper, TopicConfig and DataVersion, as fastjson writes and reads them."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

from dledger.rocketmq.remoting import remoting_serializable
from dledger.rocketmq.remoting.protocol.topic_route_data import PERM_READ, PERM_WRITE


def crc32(data: bytes | memoryview) -> int:
    """UtilAll.crc32: the CRC32 with its top bit cleared; a registration's ``bodyCrc32``."""
    return zlib.crc32(data) & 0x7FFFFFFF


@dataclass(slots=True)
class DataVersion:
    """Changes when the broker's topics change; the name server takes a registration's topics
    only when it differs from the last one (or on a first registration)."""

    timestamp: int = 0
    counter: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @staticmethod
    def from_json(d: dict[str, Any] | None) -> DataVersion:
        d = d or {}
        return DataVersion(int(d.get("timestamp", 0)), int(d.get("counter", 0)))


@dataclass(slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> TopicConfig:
        return TopicConfig(
            str(d["topicName"]),
            int(d.get("readQueueNums", 16)),
            int(d.get("writeQueueNums", 16)),
            int(d.get("perm", PERM_READ | PERM_WRITE)),
            str(d.get("topicFilterType", "SINGLE_TAG")),
            int(d.get("topicSysFlag", 0)),
            bool(d.get("order", False)),
        )


@dataclass(slots=True)
class RegisterBrokerBody:
    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)
    filter_server_list: list[str] = field(default_factory=list)

    def encode(self) -> bytes:
        return remoting_serializable.encode(
            {
                "filterServerList": self.filter_server_list,
                "topicConfigSerializeWrapper": {
                    "dataVersion": self.data_version.to_json(),
                    "topicConfigTable": {k: v.to_json() for k, v in self.topic_config_table.items()},
                },
            }
        )

    @staticmethod
    def decode(body: bytes | memoryview) -> RegisterBrokerBody:
        d = remoting_serializable.decode(body)
        w = d.get("topicConfigSerializeWrapper") or {}
        return RegisterBrokerBody(
            {k: TopicConfig.from_json(v) for k, v in (w.get("topicConfigTable") or {}).items()},
            DataVersion.from_json(w.get("dataVersion")),
            [str(s) for s in d.get("filterServerList") or []],
        )


__all__ = ["DataVersion", "RegisterBrokerBody", "TopicConfig", "crc32"]
