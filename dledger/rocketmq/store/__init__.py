"""RocketMQ 4.9.4's message store (rocketmq-store), embeddable: no network, no broker.

One module per RocketMQ class, named after it: ``message_store`` (DefaultMessageStore),
``commitlog`` (CommitLog, MappedFileQueue), ``dledger_commitlog`` (DLedgerCommitLog),
``mapped_file`` (MappedFile), ``consume_queue`` (ConsumeQueue), ``consume_queue_table`` (the
store's consumeQueueTable), ``index_file`` (IndexFile, IndexService), ``dispatch``
(ReputMessageService), ``checkpoint`` (StoreCheckpoint), ``consumer_offset``
(ConsumerOffsetManager), ``encode`` and ``batch_preparer`` (the append callback's record
encoding), ``message`` (Message, MessageExt, MessageConst), ``status`` (PutMessageStatus and
friends), ``topic_validator`` (TopicValidator). Nothing here imports ``dledger.net``, the node
server or the broker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dledger.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from dledger.rocketmq.store.config import MessageStoreConfig
    from dledger.rocketmq.store.message import Message, MessageExt
    from dledger.rocketmq.store.message_store import MessageStore

__all__ = ["Message", "MessageExt", "MessageStore", "MessageStoreConfig"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "MessageStoreConfig": "config",
        "Message": "message",
        "MessageExt": "message",
        "MessageStore": "message_store",
    },
)
