"""The ext fields of the requests a 4.9.4 client sends most: SendMessageRequestHeaderV2 (the
header with one-letter names, as SendMessageRequestHeaderV2.createSendMessageRequestHeaderV2
writes it) and PullMessageRequestHeader."""

from __future__ import annotations

import time

from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.request_code import RequestCode
from dledger.rocketmq.remoting.serialize_type import SerializeType

# PullSysFlag: FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION.
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4


def send_message_header_v2(
    topic: str,
    queue_id: int,
    *,
    group: str = "PG",
    properties: str = "WAIT\x01true",
    queue_nums: int = 4,
    sys_flag: int = 0,
    reconsume_times: int = 0,
    max_reconsume_times: int | None = None,
    batch: bool = False,
) -> dict[str, str]:
    ext = {
        "a": group,
        "b": topic,
        "c": "TBW102",
        "d": str(queue_nums),
        "e": str(queue_id),
        "f": str(sys_flag),
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": properties,
        "j": str(reconsume_times),
        "k": "false",
        "m": "true" if batch else "false",
    }
    if max_reconsume_times is not None:
        ext["l"] = str(max_reconsume_times)
    return ext


def pull_message(
    topic: str,
    queue_id: int,
    offset: int = 0,
    *,
    group: str = "CG",
    max_nums: int = 32,
    suspend_ms: int = 0,
    subscription: str = "*",
    expression_type: str | None = "TAG",
    serialize_type: SerializeType = SerializeType.JSON,
) -> RemotingCommand:
    """A PULL_MESSAGE request (suspended ``suspend_ms`` when not 0: long polling)."""
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": str(max_nums),
        "sysFlag": str(FLAG_SUBSCRIPTION | (FLAG_SUSPEND if suspend_ms else 0)),
        "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend_ms),
        "subscription": subscription,
        "subVersion": "0",
    }
    if expression_type is not None:
        ext["expressionType"] = expression_type
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, ext, serialize_type=serialize_type)


__all__ = ["pull_message", "send_message_header_v2"]
