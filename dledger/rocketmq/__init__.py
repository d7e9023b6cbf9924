"""RocketMQ 4.9.4's message store (DefaultMessageStore) over the classic and the DLedger commit log.

``from dledger.rocketmq import MessageStore, Message`` is the usual entry point; the parts
(commit logs, dispatch, consume queues, index) are in their own modules with RocketMQ's names.
"""

from __future__ import annotations

from typing import Any

from dledger.rocketmq.config import MessageStoreConfig
from dledger.rocketmq.message import Message, MessageConst, MessageExt, MessageSysFlag
from dledger.rocketmq.status import (
    AppendMessageStatus,
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
)

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

# The clients of a message-store group (dledger.rocketmq.producer / .consumer), imported when used.
_CLIENTS = {
    "Producer": "producer",
    "AsyncProducer": "producer",
    "SendResult": "producer",
    "Consumer": "consumer",
    "AsyncConsumer": "consumer",
    "PullResult": "consumer",
}


def __getattr__(name: str) -> Any:
    # The store needs the compiled kernels; importing the message types must not.
    if name == "MessageStore":
        from dledger.rocketmq.store import MessageStore

        return MessageStore
    if name in _CLIENTS:
        import importlib

        return getattr(importlib.import_module(f"dledger.rocketmq.{_CLIENTS[name]}"), name)
    raise AttributeError(name)
