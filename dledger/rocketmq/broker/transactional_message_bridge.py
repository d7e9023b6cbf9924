"""RocketMQ's TransactionalMessageBridge (and TransactionalMessageUtil): a transaction's half
message goes to RMQ_SYS_TRANS_HALF_TOPIC (queue 0) with its own topic and queue in REAL_TOPIC
and REAL_QID, so no consumer of its topic sees it; END_TRANSACTION's commit puts the real
message, and commit or rollback writes an op message ("d", the half message's queue offset)
to RMQ_SYS_TRANS_OP_HALF_TOPIC, which marks the half message done for the check-back."""

from __future__ import annotations

import dataclasses

from dledger.rocketmq.store.message import (
    UNIQ_KEY,
    Message,
    MessageConst,
    MessageExt,
    MessageSysFlag,
    create_uniq_id,
    decode_properties,
)

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
REMOVETAG = "d"


def is_prepared(properties: str) -> bool:
    """Boolean.parseBoolean of the send's TRAN_MSG property."""
    if MessageConst.PROPERTY_TRANSACTION_PREPARED + "\x01" not in properties:
        return False  # every ordinary send: no parse
    value = decode_properties(properties).get(MessageConst.PROPERTY_TRANSACTION_PREPARED)
    return value is not None and value.lower() == "true"


def parse_half_message_inner(m: Message) -> Message:
    props = dict(m.properties)
    props[MessageConst.PROPERTY_REAL_TOPIC] = m.topic
    props[MessageConst.PROPERTY_REAL_QUEUE_ID] = str(m.queue_id)
    return dataclasses.replace(
        m,
        topic=HALF_TOPIC,
        queue_id=0,
        properties=props,
        sys_flag=MessageSysFlag.reset_transaction_value(m.sys_flag, MessageSysFlag.TRANSACTION_NOT_TYPE),
    )


def end_message_transaction(half: MessageExt, tran_type: int, commit_log_offset: int) -> Message:
    """EndTransactionProcessor.endMessageTransaction: the real message of a committed half
    message. Its stored properties are the half message's string as it is (Java computes it
    before it clears REAL_TOPIC, REAL_QID and TRAN_MSG from the map, so they stay)."""
    return Message(
        half.properties[MessageConst.PROPERTY_REAL_TOPIC],
        half.body,
        queue_id=int(half.properties[MessageConst.PROPERTY_REAL_QUEUE_ID]),
        flag=half.flag,
        properties=dict(half.properties),
        sys_flag=MessageSysFlag.reset_transaction_value(half.sys_flag, tran_type),
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        reconsume_times=half.reconsume_times,
        prepared_offset=commit_log_offset,
    )


def op_message(half: MessageExt) -> Message:
    """addRemoveTagInTransactionOp: tag "d", the half message's queue offset as the body, in
    the op topic's queue of the half message's queue."""
    return Message(
        OP_TOPIC,
        str(half.queue_offset).encode("utf-8"),
        queue_id=half.queue_id,
        properties={MessageConst.PROPERTY_TAGS: REMOVETAG, UNIQ_KEY: create_uniq_id()},
    )


__all__ = ["HALF_TOPIC", "OP_TOPIC", "REMOVETAG", "end_message_transaction", "is_prepared", "op_message"]
