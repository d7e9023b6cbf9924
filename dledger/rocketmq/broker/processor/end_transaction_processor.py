"""RocketMQ's EndTransactionProcessor: END_TRANSACTION (oneway from a 4.9.4 producer, after
its local transaction, or answering the broker's check-back, ``transactional_message_check_service``)
commits a half message (the real message is put, then an op message marks the half one done)
or rolls it back (only the op message)."""

from __future__ import annotations

from collections.abc import Callable

from dledger.codes import ResponseCode as DCode
from dledger.net.transport import Response
from dledger.rocketmq.broker.broker_config import MessageServiceView
from dledger.rocketmq.broker.processor.query_message_processor import look_message_by_offset
from dledger.rocketmq.broker.topic_config_manager import TopicConfigManager
from dledger.rocketmq.broker.transactional_message_bridge import OP_TOPIC, end_message_transaction, op_message
from dledger.rocketmq.remoting.netty_remoting_server import Channel
from dledger.rocketmq.remoting.protocol.topic_route_data import PERM_READ, PERM_WRITE
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.response_code import ResponseCode
from dledger.rocketmq.store.message import Message, MessageConst, MessageSysFlag
from dledger.rocketmq.store.status import PutMessageStatus
from dledger.rocketmq.wire import SendResponse

# sendFinalMessage: these put statuses count as success.
_FINAL_OK = {
    PutMessageStatus.PUT_OK,
    PutMessageStatus.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
}


class EndTransactionProcessor:
    def __init__(
        self, service: MessageServiceView, topics: TopicConfigManager, on_topic_created: Callable[[], None]
    ) -> None:
        self.service = service
        self.topics = topics
        self.on_topic_created = on_topic_created

    async def process(self, req: RemotingCommand, ch: Channel) -> RemotingCommand | None:
        tran = req.ext_int("commitOrRollback")
        if tran not in (MessageSysFlag.TRANSACTION_COMMIT_TYPE, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE):
            return None  # TRANSACTION_NOT_TYPE (unknown state) and the rest: no answer, as Java
        offset = req.ext_int("commitLogOffset")
        half = await look_message_by_offset(self.service, offset)
        if half is None:
            return req.response(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
        # checkPrepareMessage (the commit-log offset is the one the message was read at).
        if half.properties.get(MessageConst.PROPERTY_PRODUCER_GROUP) != req.ext_str("producerGroup"):
            return req.response(ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        if half.queue_offset != req.ext_int("tranStateTableOffset"):
            return req.response(ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong")
        if MessageConst.PROPERTY_REAL_TOPIC not in half.properties:
            return req.response(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
        if tran == MessageSysFlag.TRANSACTION_COMMIT_TYPE:
            final = end_message_transaction(half, tran, offset)
            resp = await self.service.put_inner([final])
            answer = self._answer(req, resp)
            if answer.code != ResponseCode.SUCCESS:
                return answer
        # deletePrepareMessage: the op message; its failure leaves the answer as it is (Java
        # only logs it), the check-back would see the half message again.
        await self._put_op(op_message(half))
        return req.response()

    async def _put_op(self, op: Message) -> None:
        if self.topics.select(OP_TOPIC) is None:
            self.topics.create_in_send_back(OP_TOPIC, 1, PERM_READ | PERM_WRITE)
            self.on_topic_created()
        await self.service.put_inner([op])

    @staticmethod
    def _answer(req: RemotingCommand, resp: Response) -> RemotingCommand:
        if resp.code in (DCode.NOT_LEADER, DCode.LEADER_NOT_READY):
            # A Java slave answers END_TRANSACTION so.
            return req.response(ResponseCode.SLAVE_NOT_AVAILABLE)
        body = SendResponse.from_wire(resp.body) if resp.body else SendResponse(PutMessageStatus.UNKNOWN_ERROR)
        status = PutMessageStatus(body.status)
        if status in _FINAL_OK and resp.code == DCode.SUCCESS:
            return req.response()
        if status in (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED):
            return req.response(ResponseCode.MESSAGE_ILLEGAL, body.reason or status.name)
        if status == PutMessageStatus.SERVICE_NOT_AVAILABLE:
            return req.response(ResponseCode.SERVICE_NOT_AVAILABLE, "Service not available now.")
        return req.response(ResponseCode.SYSTEM_ERROR, body.reason or resp.message or "UNKNOWN_ERROR")


__all__ = ["EndTransactionProcessor"]
