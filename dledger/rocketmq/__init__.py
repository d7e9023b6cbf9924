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
    "GetMessageResult",
    "GetMessageStatus",
    "Message",
    "MessageConst",
    "MessageExt",
    "MessageStore",
    "MessageStoreConfig",
    "MessageSysFlag",
    "PutMessageResult",
    "PutMessageStatus",
]


def __getattr__(name: str) -> Any:
    # The store needs the compiled kernels; importing the message types must not.
    if name == "MessageStore":
        from dledger.rocketmq.store import MessageStore

        return MessageStore
    raise AttributeError(name)
