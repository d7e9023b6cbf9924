"""RocketMQ's QueryMessageProcessor: QUERY_MESSAGE (by key, from the index) and
VIEW_MESSAGE_BY_ID (by commit-log offset); the stored records as the body."""

from __future__ import annotations

import asyncio

from dledger.rocketmq.broker.broker_config import MessageServiceView
from dledger.rocketmq.remoting.netty_remoting_server import Channel
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.response_code import ResponseCode
from dledger.rocketmq.store.message import MessageExt
from dledger.rocketmq.store.records import decode_record


async def look_message_by_offset(service: MessageServiceView, offset: int) -> MessageExt | None:
    """MessageStore.lookMessageByOffset: the message whose record is at commit-log ``offset``
    (what a message id and a pulled message's commitLogOffset name), or None."""
    store = service.store

    def read() -> MessageExt | None:
        size = store.commitlog.record_size_at(offset)
        data = store.commitlog.read(offset, size) if size > 0 else None
        return decode_record(bytes(data), offset) if data is not None else None

    return await asyncio.to_thread(read) if offset >= 0 else None


class QueryMessageProcessor:
    def __init__(self, service: MessageServiceView) -> None:
        self.service = service

    async def query_message(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        topic, key = req.ext_str("topic"), req.ext_str("key")
        max_num = req.ext_int("maxNum")
        begin, end = req.ext_int("beginTimestamp"), req.ext_int("endTimestamp")
        store = self.service.store

        def read() -> list[bytes]:
            out = []
            for phys in store.query_offsets_by_key(topic, key, max_num, begin, end):
                size = store.commitlog.record_size_at(phys)
                data = store.commitlog.read(phys, size) if size > 0 else None
                if data is not None:
                    out.append(bytes(data))
            return out

        records = await asyncio.to_thread(read)
        ext = {"indexLastUpdateTimestamp": "0", "indexLastUpdatePhyoffset": "0"}
        if not records:
            return req.response(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", ext)
        return req.response(ext_fields=ext, body=b"".join(records))

    async def view_message_by_id(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        phys = req.ext_int("offset")
        store = self.service.store

        def read() -> bytes | None:
            size = store.commitlog.record_size_at(phys)
            data = store.commitlog.read(phys, size) if size > 0 else None
            return bytes(data) if data is not None else None

        data = await asyncio.to_thread(read)
        if data is None:
            return req.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {phys}")
        return req.response(body=data)


__all__ = ["QueryMessageProcessor", "look_message_by_offset"]
