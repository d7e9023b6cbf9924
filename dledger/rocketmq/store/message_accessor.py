"""The one way a stored message is put again with new properties (RocketMQ's MessageAccessor
and the builders that use it: ScheduleMessageService.messageTimeup,
TransactionalMessageBridge.renewHalfMessageInner): the body, flag, sys flag, born time and host,
reconsume times and properties carried over, ``WAIT=false`` (the re-put is the broker's own, no
producer waits on it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dledger.rocketmq.store.message import Message, MessageConst, MessageExt


def renew_message(
    m: MessageExt,
    *,
    topic: str | None = None,
    queue_id: int | None = None,
    drop: Iterable[str] = (),
    set_properties: Mapping[str, str] | None = None,
) -> Message:
    """``m`` as a new put: to ``topic`` / ``queue_id`` (default its own), without the
    properties ``drop`` names, with ``set_properties`` set."""
    props = dict(m.properties)
    for key in drop:
        props.pop(key, None)
    if set_properties:
        props.update(set_properties)
    props[MessageConst.PROPERTY_WAIT_STORE_MSG_OK] = "false"
    return Message(
        m.topic if topic is None else topic,
        m.body,
        queue_id=m.queue_id if queue_id is None else queue_id,
        flag=m.flag,
        properties=props,
        sys_flag=m.sys_flag,
        born_timestamp=m.born_timestamp,
        born_host=m.born_host,
        reconsume_times=m.reconsume_times,
    )


__all__ = ["renew_message"]
