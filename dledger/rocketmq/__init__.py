"""RocketMQ 4.9.4's message store (DefaultMessageStore) over the classic and the DLedger commit log.

``from dledger.rocketmq import MessageStore, Message`` is the usual entry point; the parts
(commit logs, dispatch, consume queues, index) are in their own modules with RocketMQ's names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dledger.rocketmq.config import MessageStoreConfig
    from dledger.rocketmq.consumer import AsyncConsumer, Consumer, PullResult
    from dledger.rocketmq.message import Message, MessageConst, MessageExt, MessageSysFlag
    from dledger.rocketmq.producer import AsyncProducer, Producer, SendResult
    from dledger.rocketmq.status import (
        AppendMessageStatus,
        GetMessageResult,
        GetMessageStatus,
        PutMessageResult,
        PutMessageStatus,
    )
    from dledger.rocketmq.store import MessageStore

__all__ = [
    "AppendMessageStatus",
    "AsyncConsumer",
    "AsyncProducer",
    "Consumer",
    "GetMessageResult",
    "GetMessageStatus",
    "Message",
    "MessageConst",
    "MessageExt",
    "MessageStore",
    "MessageStoreConfig",
    "MessageSysFlag",
    "Producer",
    "PullResult",
    "PutMessageResult",
    "PutMessageStatus",
    "SendResult",
]

# Every name is imported when first used: `dledger mq --help` and the entry-level CLI import this
# package for its argument definitions and must not pay for numpy and the kernels (the store needs
# the compiled kernels; the message types and statuses do not).
_MODULE_OF = {
    "MessageStoreConfig": "config",
    "Message": "message",
    "MessageConst": "message",
    "MessageExt": "message",
    "MessageSysFlag": "message",
    "AppendMessageStatus": "status",
    "GetMessageResult": "status",
    "GetMessageStatus": "status",
    "PutMessageResult": "status",
    "PutMessageStatus": "status",
    "MessageStore": "store",
    "Producer": "producer",
    "AsyncProducer": "producer",
    "SendResult": "producer",
    "Consumer": "consumer",
    "AsyncConsumer": "consumer",
    "PullResult": "consumer",
}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'dledger.rocketmq' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"dledger.rocketmq.{module}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)
