"""RocketMQ's RegisterBrokerBody (the body of REGISTER_BROKER) with its
TopicConfigSerializeWrapper, TopicConfig and DataVersion, as fastjson writes and reads them."""

from __future__ import annotations

import struct
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
    def decode(body: bytes | memoryview, compressed: bool = False) -> RegisterBrokerBody:
        if compressed:
            return RegisterBrokerBody.decode_compressed(body)
        d = remoting_serializable.decode(body)
        w = d.get("topicConfigSerializeWrapper") or {}
        return RegisterBrokerBody(
            {k: TopicConfig.from_json(v) for k, v in (w.get("topicConfigTable") or {}).items()},
            DataVersion.from_json(w.get("dataVersion")),
            [str(s) for s in d.get("filterServerList") or []],
        )

    @staticmethod
    def decode_compressed(body: bytes | memoryview) -> RegisterBrokerBody:
        """``RegisterBrokerBody.encode(true)`` (a broker's ``compressedRegister``): zlib-deflated
        int32 BE length-prefixed pieces: the DataVersion's JSON, the topic count, each topic as
        TopicConfig.encode (``name read write perm filterType``: no sys flag, no order, as
        Java loses them too), the filter server list's JSON."""
        try:
            raw = zlib.decompress(body)
        except zlib.error as exc:
            raise ValueError(f"compressed RegisterBrokerBody does not inflate: {exc}") from None
        pos = 0

        def piece() -> bytes:
            nonlocal pos
            (n,) = _INT.unpack_from(raw, pos)
            if n < 0 or pos + 4 + n > len(raw):
                raise ValueError(f"compressed RegisterBrokerBody: a length {n} at {pos} runs past its end")
            pos += 4 + n
            return raw[pos - n : pos]

        try:
            version = DataVersion.from_json(remoting_serializable.decode(piece()))
            (count,) = _INT.unpack_from(raw, pos)
            pos += 4
            table: dict[str, TopicConfig] = {}
            for _ in range(count):
                fields = piece().decode("utf-8").split(" ")
                if len(fields) != 5:
                    raise ValueError(f"compressed RegisterBrokerBody: topic config {' '.join(fields)[:80]!r}")
                name, read, write, perm, ftype = fields
                table[name] = TopicConfig(name, int(read), int(write), int(perm), ftype)
            servers = remoting_serializable.decode(piece()) or []
        except struct.error:
            raise ValueError("compressed RegisterBrokerBody is cut short") from None
        return RegisterBrokerBody(table, version, [str(s) for s in servers])


_INT = struct.Struct(">i")

__all__ = ["DataVersion", "RegisterBrokerBody", "TopicConfig", "crc32"]
