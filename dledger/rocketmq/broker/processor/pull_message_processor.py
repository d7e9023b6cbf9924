"""RocketMQ's PullMessageProcessor over remoting: PULL_MESSAGE read and held (long polling) by
the member's pull path (``broker/pull_message_processor.py``), filtered by tag hash code as the
consume queue keeps it, the consumer's commit offset taken along, answered with the stored
records as the body and nextBeginOffset / minOffset / maxOffset / suggestWhichBrokerId.

The consumer group is checked first (SUBSCRIPTION_GROUP_NOT_EXIST for an unknown one when
``autoCreateSubscriptionGroup`` is off, NO_PERMISSION when its consumeEnable is off), and with
``slaveReadEnable`` on a consumer far behind is told to pull from a slave. Before all that, a
broker whose ``brokerPermission`` is not readable refuses every pull (NO_PERMISSION)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np

from dledger.codes import ResponseCode as DCode
from dledger.rocketmq.broker.broker_config import MessageServiceView
from dledger.rocketmq.broker.configuration import DEFAULT_BROKER_PERMISSION
from dledger.rocketmq.broker.subscription_group_manager import SubscriptionGroupManager
from dledger.rocketmq.broker.topic_config_manager import TopicConfigManager
from dledger.rocketmq.remoting.netty_remoting_server import Channel
from dledger.rocketmq.remoting.protocol.topic_route_data import MASTER_ID, PERM_READ
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.request_code import RequestCode
from dledger.rocketmq.remoting.response_code import ResponseCode
from dledger.rocketmq.store.index_file import java_string_hash
from dledger.rocketmq.store.status import GetMessageStatus
from dledger.rocketmq.wire import ConsumerOffsetRequest, MessageRequestCode, PullRequest, PullResponse

log = logging.getLogger(__name__)

# PullSysFlag
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
SUB_ALL = "*"


def tag_codes(subscription: str | None) -> set[int] | None:
    """FilterAPI.buildSubscriptionData: the hash codes of ``"TagA || TagB"``; None for all."""
    if not subscription or subscription.strip() == SUB_ALL:
        return None
    tags = [t.strip() for t in subscription.split("||") if t.strip()]
    return {java_string_hash(t) for t in tags} if tags else None


# GetMessageStatus -> the pull answer's code (PullMessageProcessor.processRequest).
_CODES = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


class PullMessageProcessor:
    def __init__(
        self,
        service: MessageServiceView,
        topics: TopicConfigManager,
        subscriptions: SubscriptionGroupManager,
        slave_read_enable: bool = False,
        broker_ip1: str = "",
    ) -> None:
        self.service = service
        self.broker_ip1 = broker_ip1
        # brokerPermission (UPDATE_BROKER_CONFIG changes it, and slaveReadEnable, while it runs).
        self.broker_permission = DEFAULT_BROKER_PERMISSION
        self.topics = topics
        self.subscriptions = subscriptions
        self.slave_read_enable = slave_read_enable
        # The offset commits pulls carry, running (held so that none is dropped half way).
        self._commits: set[asyncio.Task[Any]] = set()

    @staticmethod
    def parks(req: RemotingCommand) -> bool:
        """A pull the consumer lets the broker hold (PullRequestHoldService): it waits by design
        and holds no answer while it does, so it does not count against its connection's
        requests in flight (a push consumer holds one per queue on one connection)."""
        if req.code != RequestCode.PULL_MESSAGE:
            return False
        flag = (req.ext_fields or {}).get("sysFlag", "0")
        return flag.isdigit() and bool(int(flag) & FLAG_SUSPEND)

    async def process(self, req: RemotingCommand, ch: Channel) -> RemotingCommand | None:
        if not self.broker_permission & PERM_READ:
            return req.response(
                ResponseCode.NO_PERMISSION, f"the broker[{self.broker_ip1}] pulling message is forbidden"
            )
        group = req.ext_str("consumerGroup")
        topic = req.ext_str("topic")
        queue_id = req.ext_int("queueId")
        offset = req.ext_int("queueOffset")
        max_nums = req.ext_int("maxMsgNums")
        sys_flag = req.ext_int("sysFlag")
        commit_offset = req.ext_int("commitOffset", 0)
        suspend_ms = req.ext_int("suspendTimeoutMillis", 0)
        store = self.service.store
        # The group before the topic, as Java checks them (findSubscriptionGroupConfig makes an
        # unknown group when autoCreateSubscriptionGroup is on, and persists it: off the loop).
        sgc = self.subscriptions.table.get(group)
        if sgc is None:
            sgc = await asyncio.to_thread(self.subscriptions.find, group)
        if sgc is None:
            return req.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{group}] does not exist, "
                "\nSee http://rocketmq.apache.org/docs/faq/ for further details.",
            )
        if not sgc.consume_enable:
            return req.response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        tc = self.topics.select(topic)
        if tc is None and store.consume_queues.get(topic, queue_id) is None:
            return req.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist, apply first please!"
                "\nSee http://rocketmq.apache.org/docs/faq/ for further details.",
            )
        if tc is not None and not tc.perm & PERM_READ:
            return req.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        if tc is not None and not 0 <= queue_id < tc.read_queue_nums:
            return req.response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                f"[{tc.read_queue_nums}] consumer:[{ch.remote_addr}]",
            )
        if sys_flag & FLAG_COMMIT_OFFSET and commit_offset >= 0:
            # The consumer's progress, taken along (through the log, as every offset commit).
            commit = ConsumerOffsetRequest(group, topic, queue_id, commit_offset).to_wire()
            task = asyncio.get_running_loop().create_task(
                self.service.handle(MessageRequestCode.UPDATE_CONSUMER_OFFSET, commit, ch.remote_addr)
            )
            self._commits.add(task)
            task.add_done_callback(self._commits.discard)
        codes = tag_codes(req.ext_fields.get("subscription") if req.ext_fields else None)
        hold = suspend_ms if sys_flag & FLAG_SUSPEND else 0
        pull = PullRequest(topic, queue_id, max(offset, 0), max(max_nums, 1), max(hold, 0)).to_wire()
        resp = await self.service.handle(MessageRequestCode.PULL_MESSAGE, pull, ch.remote_addr)
        if resp.code != DCode.SUCCESS:
            return req.response(ResponseCode.SYSTEM_ERROR, resp.message or DCode(resp.code).name)
        got = PullResponse.from_wire(resp.body)
        status = GetMessageStatus(got.status)
        records = got.records
        next_offset = got.next_begin_offset
        if status == GetMessageStatus.FOUND and codes is not None:
            records, status = self._filter(topic, queue_id, offset, records, len(got.phys_offsets), codes)
        code = _CODES.get(status)
        if code is None:  # NO_MATCHED_LOGIC_QUEUE, NO_MESSAGE_IN_QUEUE
            code = ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
        # PullMessageProcessor's answer for where to pull next: with slaveReadEnable, a consumer
        # reading what the page cache has likely dropped goes to whichBrokerWhenConsumeSlowly and
        # one keeping up to the group's brokerId; without it (a slave's pulls too), the master.
        # (Java's PULL_RETRY_IMMEDIATELY for a slave is overwritten by the status's code.)
        suggest = MASTER_ID
        if self.slave_read_enable:
            slow = bool(got.phys_offsets) and store.suggest_pulling_from_slave(got.phys_offsets[-1])
            suggest = sgc.which_broker_when_consume_slowly if slow else sgc.broker_id
        ext = {
            "suggestWhichBrokerId": str(suggest),
            "nextBeginOffset": str(next_offset),
            "minOffset": str(got.min_offset),
            "maxOffset": str(got.max_offset),
        }
        return req.response(code, status.name, ext, records if code == ResponseCode.SUCCESS else b"")

    def _filter(
        self, topic: str, queue_id: int, offset: int, records: bytes, n: int, codes: set[int]
    ) -> tuple[bytes, GetMessageStatus]:
        """Keep the records whose consume-queue tags code is subscribed (as the Java broker
        filters on the queue's units, before it reads the commit log)."""
        cq = self.service.store.consume_queues.get(topic, queue_id)
        if cq is None:
            return records, GetMessageStatus.FOUND
        _phys, sizes, tags = cq.get_units(offset, n)
        k = min(len(sizes), n)
        keep = np.isin(tags[:k], np.fromiter(codes, dtype=np.int64))
        if keep.all():
            return records, GetMessageStatus.FOUND
        if not keep.any():
            return b"", GetMessageStatus.NO_MATCHED_MESSAGE
        ends = np.cumsum(sizes[:k].astype(np.int64))
        starts = ends - sizes[:k]
        mv = memoryview(records)
        return b"".join(
            mv[int(s) : int(e)] for s, e in zip(starts[keep], ends[keep], strict=True)
        ), GetMessageStatus.FOUND


__all__ = ["PullMessageProcessor", "tag_codes"]
