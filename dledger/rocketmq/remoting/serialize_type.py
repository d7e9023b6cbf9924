"""RocketMQ's SerializeType: how a command's header is written (the high byte of the second int32)."""

from __future__ import annotations

from enum import IntEnum


class SerializeType(IntEnum):
    """JSON (RemotingSerializable) or ROCKETMQ (RocketMQSerializable, binary)."""

    JSON = 0
    ROCKETMQ = 1


__all__ = ["SerializeType"]
