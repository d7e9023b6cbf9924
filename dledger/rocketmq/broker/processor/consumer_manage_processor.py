"""RocketMQ's ConsumerManageProcessor: GET_CONSUMER_LIST_BY_GROUP, QUERY_CONSUMER_OFFSET and
UPDATE_CONSUMER_OFFSET (through the member's log, as every offset commit of a group)."""

from __future__ import annotations

from dledger.codes import ResponseCode as DCode
from dledger.rocketmq.broker.broker_config import MessageServiceView
from dledger.rocketmq.broker.consumer_manager import ConsumerManager
from dledger.rocketmq.remoting import remoting_serializable
from dledger.rocketmq.remoting.netty_remoting_server import Channel
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.response_code import ResponseCode
from dledger.rocketmq.wire import ConsumerOffsetRequest, MessageRequestCode


class ConsumerManageProcessor:
    def __init__(self, service: MessageServiceView, consumers: ConsumerManager) -> None:
        self.service = service
        self.consumers = consumers

    async def get_consumer_list_by_group(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        group = req.ext_str("consumerGroup")
        ids = self.consumers.client_ids(group)
        if not ids:
            return req.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}", {})
        return req.response(ext_fields={}, body=remoting_serializable.encode({"consumerIdList": ids}))

    async def query_consumer_offset(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        group, topic, qid = req.ext_str("consumerGroup"), req.ext_str("topic"), req.ext_int("queueId")
        q = ConsumerOffsetRequest(group, topic, qid).to_wire()
        resp = await self.service.handle(MessageRequestCode.QUERY_CONSUMER_OFFSET, q, ch.remote_addr)
        if resp.code != DCode.SUCCESS:
            return req.response(ResponseCode.SYSTEM_ERROR, resp.message or DCode(resp.code).name)
        offset = int(resp.body.get("offset", -1))
        if offset >= 0:
            return req.response(ext_fields={"offset": str(offset)})
        # No commit yet: 0 for a queue that still holds its first message, else not found
        # (the client then starts where its consumeFromWhere says).
        if self.service.store.min_offset_in_queue(topic, qid) <= 0:
            return req.response(ext_fields={"offset": "0"})
        return req.response(
            ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first", {}
        )

    async def update_consumer_offset(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        u = ConsumerOffsetRequest(
            req.ext_str("consumerGroup"), req.ext_str("topic"), req.ext_int("queueId"), req.ext_int("commitOffset")
        ).to_wire()
        resp = await self.service.handle(MessageRequestCode.UPDATE_CONSUMER_OFFSET, u, ch.remote_addr)
        if resp.code != DCode.SUCCESS:
            code = ResponseCode.SERVICE_NOT_AVAILABLE if resp.code == DCode.NOT_LEADER else ResponseCode.SYSTEM_ERROR
            return req.response(code, resp.message or DCode(resp.code).name)
        return req.response(ext_fields={})


__all__ = ["ConsumerManageProcessor"]
