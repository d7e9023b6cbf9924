"""QueryMessageProcessor (QUERY_MESSAGE, VIEW_MESSAGE_BY_ID) and AdminBrokerProcessor's queue
offsets (GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP) on a message store: what a
DLedger-group member and a classic broker answer alike."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from dledger.codes import ResponseCode
from dledger.net.transport import Response
from dledger.rocketmq.wire import MessageRequestCode, QueryMessageRequest, QueueRequest

if TYPE_CHECKING:
    from dledger.rocketmq.store.message_store import MessageStore

QUEUE_OFFSET_CODES = (
    MessageRequestCode.GET_MAX_OFFSET,
    MessageRequestCode.GET_MIN_OFFSET,
    MessageRequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
)
QUERY_CODES = (MessageRequestCode.QUERY_MESSAGE, MessageRequestCode.VIEW_MESSAGE_BY_ID)


async def queue_offset(store: MessageStore, code: MessageRequestCode, body: dict[str, Any]) -> Response:
    """A queue's max or min offset, or the offset nearest a store time (a binary search, in a thread)."""
    q = QueueRequest.from_wire(body)
    if code == MessageRequestCode.GET_MAX_OFFSET:
        off = store.max_offset_in_queue(q.topic, q.queue_id)
    elif code == MessageRequestCode.GET_MIN_OFFSET:
        off = store.min_offset_in_queue(q.topic, q.queue_id)
    else:
        off = await asyncio.to_thread(store.offset_for_timestamp, q.topic, q.queue_id, q.timestamp)
    return Response(ResponseCode.SUCCESS, {"offset": off})


async def query_message(store: MessageStore, code: MessageRequestCode, body: dict[str, Any]) -> Response:
    """The records of the messages with a key (or of one offset message id), in a thread."""
    return await asyncio.to_thread(_query, store, code, QueryMessageRequest.from_wire(body))


def _query(store: MessageStore, code: MessageRequestCode, req: QueryMessageRequest) -> Response:
    if code == MessageRequestCode.VIEW_MESSAGE_BY_ID:
        msgs = [m for m in [store.view_by_msg_id(req.msg_id)] if m is not None]
    else:
        msgs = store.query_by_key(req.topic, req.key, req.max_num, req.begin_ts, req.end_ts)
    records = []
    for m in msgs:
        data = store.commitlog.read(m.phys_offset, m.size)
        if data is not None:
            records.append(data)
    return Response(ResponseCode.SUCCESS, {"records": records, "phys": [m.phys_offset for m in msgs]})


def route_info(queue_nums: int, max_message_size: int, role: dict[str, Any]) -> Response:
    """GET_ROUTEINFO_BY_TOPIC as a member answers it: the topic's queues, the largest record or
    batch it takes, and who it is (its role body)."""
    return Response(ResponseCode.SUCCESS, {"queue_nums": queue_nums, "max_message_size": max_message_size, **role})
