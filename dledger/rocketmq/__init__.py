"""RocketMQ 4.9.4's message store, its members and its clients, in RocketMQ's module split.

``from dledger.rocketmq import MessageStore, Message, Producer, Consumer`` is the usual entry
point. The packages mirror RocketMQ's modules: ``store`` (rocketmq-store: DefaultMessageStore,
the commit logs, consume queues, index, dispatch), ``broker`` (rocketmq-broker: what a member
runs on a store) and ``client`` (rocketmq-client: producers and consumers); ``wire`` is the
request and response types the broker and the client share (RocketMQ's protocol headers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dledger.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from dledger.rocketmq.client.consumer import AsyncConsumer, Consumer, PullResult
    from dledger.rocketmq.client.producer import AsyncProducer, Producer
    from dledger.rocketmq.client.send_result import SendResult
    from dledger.rocketmq.store.arrow_reader import iter_message_batches, read_messages
    from dledger.rocketmq.store.config import MessageStoreConfig
    from dledger.rocketmq.store.message import Message, MessageConst, MessageExt, MessageSysFlag
    from dledger.rocketmq.store.message_store import MessageStore
    from dledger.rocketmq.store.status import (
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
    "iter_message_batches",
    "read_messages",
]

# Every name is imported when first used: `dledger mq --help` and the entry-level CLI import this
# package for its argument definitions and must not pay for numpy and the kernels (the store needs
# the compiled kernels; the message types and statuses do not).
_MODULE_OF = {
    "MessageStoreConfig": "store.config",
    "Message": "store.message",
    "MessageConst": "store.message",
    "MessageExt": "store.message",
    "MessageSysFlag": "store.message",
    "AppendMessageStatus": "store.status",
    "GetMessageResult": "store.status",
    "GetMessageStatus": "store.status",
    "PutMessageResult": "store.status",
    "PutMessageStatus": "store.status",
    "MessageStore": "store.message_store",
    "Producer": "client.producer",
    "AsyncProducer": "client.producer",
    "SendResult": "client.send_result",
    "Consumer": "client.consumer",
    "AsyncConsumer": "client.consumer",
    "PullResult": "client.consumer",
    "read_messages": "store.arrow_reader",
    "iter_message_batches": "store.arrow_reader",
}


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
