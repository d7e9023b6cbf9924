"""RocketMQ's TransactionalMessageCheckService (with TransactionalMessageServiceImpl.check and
DefaultTransactionalMessageCheckListener): every ``transactionCheckInterval`` the leader looks
at the half messages nobody ended and asks their producer group (CHECK_TRANSACTION_STATE,
oneway, to a producer of the group that sent a heartbeat) what became of each; the producer
answers END_TRANSACTION with ``fromTransactionCheck``.

As Java: a half message is done when an op message names its queue offset; one younger than
``transactionTimeOut`` (or its CHECK_IMMUNITY_TIME_IN_SECONDS) ends the round; before a check
the half message is put again with TRANSACTION_CHECK_TIMES + 1 (the check names the copy,
whose END_TRANSACTION then finds it); past ``transactionCheckMax`` checks it is moved to
TRANS_CHECK_MAX_TIME_TOPIC and never checked again. The progress through the half queue is
the consumer offset of CID_RMQ_SYS_TRANS, committed through the group's log like every offset,
so a new leader does not check again what its predecessor moved past. The op queue has its
progress too, CID_RMQ_SYS_TRANS's offset on RMQ_SYS_TRANS_OP_HALF_TOPIC (fillOpRemoveMap and
calculateOpOffset): an op message is done once it names a half message the walk has passed, and
the progress moves over the done ones in a row, so a round reads only the op messages after
it, never the whole queue. An op message naming a half message the walk has not reached (a
young one ended early) holds the progress until the walk passes that half message."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable

from dledger.codes import ResponseCode as DCode
from dledger.rocketmq.broker.broker_config import MessageServiceView
from dledger.rocketmq.broker.consumer_manager import ConsumerManager
from dledger.rocketmq.broker.transactional_message_bridge import HALF_TOPIC, OP_TOPIC, REMOVETAG
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.request_code import RequestCode
from dledger.rocketmq.store.encode import encode_one
from dledger.rocketmq.store.message import UNIQ_KEY, MessageConst, MessageExt, create_message_id
from dledger.rocketmq.store.message_accessor import renew_message
from dledger.rocketmq.store.records import decode_record
from dledger.rocketmq.store.status import PutMessageStatus
from dledger.rocketmq.wire import ConsumerOffsetRequest, MessageRequestCode, SendResponse

log = logging.getLogger(__name__)

# TransactionalMessageUtil.buildConsumerGroup(); TopicValidator.RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC.
CHECK_GROUP = "CID_RMQ_SYS_TRANS"
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"


class TransactionalMessageCheckService:
    def __init__(
        self,
        service: MessageServiceView,
        consumers: ConsumerManager,
        interval_ms: int,
        timeout_ms: int,
        check_max: int,
    ) -> None:
        self.service = service
        self.consumers = consumers
        self.interval_s = interval_ms / 1000.0
        self.timeout_ms = timeout_ms
        self.check_max = check_max
        # Op messages read, all rounds together (what the op queue's progress saves).
        self.op_reads = 0

    async def run(self, leading: Callable[[], bool]) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            if not leading():
                continue
            try:
                await self.check()
            except Exception:
                log.exception("transaction check round failed")

    def _read(self, topic: str, offset: int) -> MessageExt | None:
        store = self.service.store
        cq = store.consume_queues.get(topic, 0)
        unit = cq.get_unit(offset) if cq is not None else None
        if unit is None:
            return None
        data = store.commitlog.read(unit[0], unit[1])
        return decode_record(bytes(data), unit[0]) if data is not None else None

    def _op_messages(self, start: int) -> list[tuple[int, int | None]]:
        """The op queue from ``start``: (op offset, the half offset it names; None for one
        that names none)."""
        store = self.service.store
        out: list[tuple[int, int | None]] = []
        for off in range(max(start, store.min_offset_in_queue(OP_TOPIC, 0)), store.max_offset_in_queue(OP_TOPIC, 0)):
            op = self._read(OP_TOPIC, off)
            self.op_reads += 1
            half: int | None = None
            if op is not None and op.properties.get(MessageConst.PROPERTY_TAGS) == REMOVETAG:
                try:
                    half = int(op.body.decode("ascii"))
                except ValueError:
                    half = None
            out.append((off, half))
        return out

    async def _commit(self, topic: str, offset: int) -> bool:
        commit = ConsumerOffsetRequest(CHECK_GROUP, topic, 0, offset).to_wire()
        resp = await self.service.handle(MessageRequestCode.UPDATE_CONSUMER_OFFSET, commit, "check-service")
        return resp.code == DCode.SUCCESS

    async def check(self) -> int:
        """One round; the number of checks sent."""
        store = self.service.store
        end = store.max_offset_in_queue(HALF_TOPIC, 0)
        if end <= 0:
            return 0
        offsets = store.consumer_offsets
        start = max(int(offsets.query_offset(CHECK_GROUP, HALF_TOPIC, 0)), store.min_offset_in_queue(HALF_TOPIC, 0))
        op_start = max(int(offsets.query_offset(CHECK_GROUP, OP_TOPIC, 0)), store.min_offset_in_queue(OP_TOPIC, 0))
        # fillOpRemoveMap: an op message naming a half message behind the walk's start is done;
        # the others wait in ``remove`` (half offset -> op offset) until the walk passes them.
        done_ops: set[int] = set()
        remove: dict[int, int] = {}
        for op_off, half_off in await asyncio.to_thread(self._op_messages, op_start):
            if half_off is None or half_off < start:
                # Java leaves one with another tag undone for good (its progress stops there);
                # it names no half message, so it is done here.
                done_ops.add(op_off)
            else:
                remove[half_off] = op_off
        offset, sent = start, 0
        now = int(time.time() * 1000)
        while offset < end:
            ended_by = remove.pop(offset, None)
            if ended_by is not None:
                done_ops.add(ended_by)
                offset += 1
                continue
            half = await asyncio.to_thread(self._read, HALF_TOPIC, offset)
            if half is None:
                offset += 1
                continue
            times = int(half.properties.get(MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES) or 0)
            if times >= self.check_max:
                # resolveDiscardMsg: out of the half queue for good.
                await self.service.put_inner([renew_message(half, topic=CHECK_MAX_TIME_TOPIC)])
                offset += 1
                continue
            immunity = self.timeout_ms
            own = half.properties.get(MessageConst.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
            if own and own.isdigit():
                immunity = int(own) * 1000
            if now - half.born_timestamp < immunity:
                break  # the newer ones are younger still
            if not await self._check(half, times + 1):
                break  # the copy was not stored (not the leader any more): again next round
            sent += 1
            offset += 1
        if offset != start and not await self._commit(HALF_TOPIC, offset):
            # The op progress must never pass op messages of half messages the half progress
            # has not: they would be checked again, ended though they are.
            return sent
        # calculateOpOffset: over the done op messages in a row from the progress.
        op_next = op_start
        while op_next in done_ops:
            op_next += 1
        if op_next != op_start:
            await self._commit(OP_TOPIC, op_next)
        return sent

    async def _check(self, half: MessageExt, times: int) -> bool:
        """putBackHalfMsgQueue, then resolveHalfMsg (sendCheckMessage) for the copy."""
        # renewHalfMessageInner, the check count in it.
        copy = renew_message(half, set_properties={MessageConst.PROPERTY_TRANSACTION_CHECK_TIMES: str(times)})
        resp = await self.service.put_inner([copy])
        body = SendResponse.from_wire(resp.body) if resp.body else None
        if resp.code != DCode.SUCCESS or body is None or body.status != PutMessageStatus.PUT_OK:
            return False
        phys = int(body.phys_offsets[0]) + body.phys_add
        group = half.properties.get(MessageConst.PROPERTY_PRODUCER_GROUP, "")
        channel = next(
            (info.channel for info in self.consumers.producers.get(group, {}).values() if not info.channel.closed),
            None,
        )
        if channel is None:
            return True  # nobody to ask now: the copy is checked next round
        uniq = half.properties.get(UNIQ_KEY, "")
        header = {
            "tranStateTableOffset": str(body.queue_offset),
            "commitLogOffset": str(phys),
            "msgId": uniq,
            "transactionId": uniq,
            "offsetMsgId": create_message_id(self.service.store.preparer.store_host_raw, phys),
        }
        # MessageDecoder.encode of the copy as its real topic and queue.
        real = dataclasses.replace(
            copy,
            topic=half.properties.get(MessageConst.PROPERTY_REAL_TOPIC, half.topic),
            queue_id=int(half.properties.get(MessageConst.PROPERTY_REAL_QUEUE_ID, "0") or 0),
        )
        record = encode_one(self.service.store.preparer.prepare([real]), body.queue_offset, phys, now_ms())
        channel.send(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header, record, oneway=True))
        return True


def now_ms() -> int:
    return int(time.time() * 1000)


__all__ = ["CHECK_GROUP", "CHECK_MAX_TIME_TOPIC", "TransactionalMessageCheckService"]
