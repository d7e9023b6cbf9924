"""RocketMQ's SendMessageProcessor over remoting: SEND_MESSAGE, SEND_MESSAGE_V2 (the header
with one-letter names) and SEND_BATCH_MESSAGE (``MessageDecoder.encodeMessages`` bodies), put
through the member's send path (``broker/send_message_processor.py``: the same checks, one
kernel call for a batch), answered with the offset message ids, queue id and queue offset."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

import numpy as np

from dledger._ext import load as _load_ext
from dledger.codes import ResponseCode as DCode
from dledger.net.transport import Response
from dledger.packed import PackedBodies
from dledger.rocketmq.broker.broker_config import BrokerConfig, MessageServiceView
from dledger.rocketmq.broker.configuration import DEFAULT_BROKER_PERMISSION
from dledger.rocketmq.broker.processor.query_message_processor import look_message_by_offset
from dledger.rocketmq.broker.send_message_processor import (
    DLQ_NUMS_PER_GROUP,
    MAX_RECONSUME_TIMES,
    dlq_topic,
    peer_host,
)
from dledger.rocketmq.broker.subscription_group_manager import SubscriptionGroupManager
from dledger.rocketmq.broker.topic_config_manager import RETRY_GROUP_TOPIC_PREFIX, TopicConfigManager
from dledger.rocketmq.broker.transactional_message_bridge import is_prepared, parse_half_message_inner
from dledger.rocketmq.remoting.netty_remoting_server import Channel
from dledger.rocketmq.remoting.protocol.message_batch import decode_messages
from dledger.rocketmq.remoting.protocol.topic_route_data import PERM_READ, PERM_WRITE
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException
from dledger.rocketmq.remoting.request_code import RequestCode
from dledger.rocketmq.remoting.response_code import ResponseCode
from dledger.rocketmq.store.message import (
    PROPERTY_DELAY,
    Message,
    MessageConst,
    create_message_id,
    decode_properties,
    encode_properties,
    format_host,
)
from dledger.rocketmq.store.status import STORED_PUT_STATUSES, PutMessageStatus
from dledger.rocketmq.wire import MessageRequestCode, SendRequest, SendResponse

log = logging.getLogger(__name__)
K = _load_ext("remoting")

# SendMessageRequestHeaderV2's one-letter names.
_V2_NAMES = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
}
# SubscriptionGroupConfig's defaults (retryQueueNums, retryMaxTimes).
RETRY_QUEUE_NUMS = 1
RETRY_MAX_TIMES = MAX_RECONSUME_TIMES
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_CLUSTER = "CLUSTER"

# handlePutMessageResult: PutMessageStatus -> (response code, remark).
_PUT_CODES = {
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutMessageStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
}
# handlePutMessageResult's own remark for a status, where the cause stays in the broker's log
# (DLedgerCommitLog gives OS_PAGECACHE_BUSY for a quorum wait that ran out or a full pending
# queue; producers retry SYSTEM_ERROR elsewhere).
_PUT_REMARKS = {
    PutMessageStatus.OS_PAGECACHE_BUSY: "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
}


def header_v1(req: RemotingCommand) -> dict[str, str]:
    """The send header with its full names, whichever version the request used."""
    ext = req.ext_fields or {}
    if req.code == RequestCode.SEND_MESSAGE:
        return dict(ext)
    return {_V2_NAMES.get(k, k): v for k, v in ext.items()}


def _strip_wait(props: str) -> str:
    return "\x02".join(p for p in props.split("\x02") if p and not p.startswith(PROPERTY_WAIT_STORE_MSG_OK + "\x01"))


class SendMessageProcessor:
    def __init__(
        self,
        service: MessageServiceView,
        topics: TopicConfigManager,
        config: BrokerConfig,
        store_host_raw: bytes,
        on_topic_created: Callable[[], None],
        subscriptions: SubscriptionGroupManager | None = None,
    ) -> None:
        self.service = service
        self.topics = topics
        self.config = config
        self.store_host_raw = store_host_raw
        self._host_hex = create_message_id(store_host_raw, 0)[:-16]
        self._host_hex_raw = self._host_hex.encode("ascii")
        self.on_topic_created = on_topic_created
        # findSubscriptionGroupConfig; None: every group has SubscriptionGroupConfig's defaults.
        self.subscriptions = subscriptions
        # brokerPermission (UPDATE_BROKER_CONFIG changes it while the broker runs).
        self.broker_permission = DEFAULT_BROKER_PERMISSION

    def _forbidden(self, req: RemotingCommand) -> RemotingCommand:
        return req.response(
            ResponseCode.NO_PERMISSION, f"the broker[{self.config.broker_ip1}] sending message is forbidden"
        )

    async def process(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        h = header_v1(req)
        topic = h.get("topic") or ""
        if not topic:
            raise RemotingCommandException("the custom field <topic> is null")
        tc = self.topics.select(topic)
        # msgCheck: a broker that is not writable refuses only an order topic's sends (the
        # others' clients leave it, as its registration gives every topic its permission).
        if not self.broker_permission & PERM_WRITE and tc is not None and tc.order:
            return self._forbidden(req)
        if tc is None:
            # msgCheck: created from the default topic on its first send, or a retry topic.
            queue_nums = _int(h, "defaultTopicQueueNums", 4)
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                tc = self.topics.create_in_send_back(topic, RETRY_QUEUE_NUMS, PERM_READ | PERM_WRITE)
            else:
                tc = self.topics.create_in_send(topic, h.get("defaultTopic") or "", queue_nums, _int(h, "sysFlag", 0))
            if tc is None:
                return req.response(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{topic}] not exist, apply first please!"
                    "\nSee http://rocketmq.apache.org/docs/faq/ for further details.",
                )
            self.on_topic_created()
        if not tc.perm & PERM_WRITE:
            return req.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        queue_id = _int(h, "queueId", 0)
        if queue_id < 0:
            queue_id = 0  # Java picks a random queue; the client always names one
        if queue_id >= tc.write_queue_nums:
            return req.response(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, {tc} Producer: {ch.remote_addr}",
            )
        props = h.get("properties") or ""
        cluster = f"{PROPERTY_CLUSTER}\x01{self.config.cluster}"
        if req.code != RequestCode.SEND_BATCH_MESSAGE and h.get("batch") != "true" and is_prepared(props):
            return await self._prepare_message(req, h, topic, queue_id, props + "\x02" + cluster, ch)
        send = SendRequest(
            topic,
            queue_id,
            [],
            [],
            _int(h, "flag", 0),
            _int(h, "sysFlag", 0),
            _int(h, "bornTimestamp", 0),
            None,
            reconsume_times=_int(h, "reconsumeTimes", 0),
            max_reconsume_times=_int(h, "maxReconsumeTimes", MAX_RECONSUME_TIMES),
        )
        if dlq_topic(send) is not None:
            # handleRetryAndDLQ: the store's send path moves it; the DLQ topic is served here.
            self._dlq_topic_config(send)
        bodies, packed_props = self._packed(req, h, props, cluster, send)
        resp = await self._put_packed(send, bodies, packed_props, ch.remote_addr)
        body = SendResponse.from_wire(resp.body) if resp.body else SendResponse(PutMessageStatus.UNKNOWN_ERROR)
        unavailable = self._unavailable(req, resp)
        if unavailable is not None:
            return unavailable
        stored = body.status == PutMessageStatus.PUT_OK or (
            body.status in STORED_PUT_STATUSES and len(body.phys_offsets) > 0
        )
        if stored and resp.code == DCode.SUCCESS:
            # handlePutMessageResult's sendOK: a flush or slave wait that ran out still stored
            # the message, so its answer code goes with the ids and offset (and no remark).
            return req.response(
                _PUT_CODES.get(PutMessageStatus(body.status), ResponseCode.SUCCESS),
                ext_fields={
                    "msgId": K.offset_msg_ids(
                        self._host_hex_raw, np.asarray(body.phys_offsets, dtype=np.int64), body.phys_add
                    ),
                    "queueId": str(body.queue_id),
                    "queueOffset": str(body.queue_offset),
                    "TRACE_ON": "true",
                    "MSG_REGION": "DefaultRegion",
                },
            )
        status = PutMessageStatus(body.status)
        code = _PUT_CODES.get(status, ResponseCode.SYSTEM_ERROR)
        reason = _PUT_REMARKS.get(status) or body.reason or resp.message or status.name
        if code == ResponseCode.MESSAGE_ILLEGAL:
            reason = f"the message is illegal, maybe msg body or properties length not matched. {reason}"
        return req.response(code, reason)

    @staticmethod
    def _packed(
        req: RemotingCommand, h: dict[str, str], props: str, cluster: str, send: SendRequest
    ) -> tuple[PackedBodies, PackedBodies]:
        """The request's bodies and properties strings, packed (and the batch's flag set)."""
        if req.code == RequestCode.SEND_BATCH_MESSAGE or h.get("batch") == "true":
            # The batch's own properties (WAIT) and CLUSTER follow each message's, as the Java
            # broker's MessageExtBatch encoder writes them; one kernel pass, no object a message.
            tail = ("\x02" + cluster + ("\x02" + props if props else "")).encode("utf-8")
            batch = decode_messages(req.body, tail)
            send.flag = batch.flag
            return (
                PackedBodies(batch.bodies, batch.body_offsets),
                PackedBodies(batch.properties, batch.properties_offsets),
            )
        text = _strip_wait(props)
        one = ((text + "\x02") if text else "").encode("utf-8") + cluster.encode("utf-8")
        return (
            PackedBodies(req.body, np.array([0, len(req.body)], dtype=np.int64)),
            PackedBodies(one, np.array([0, len(one)], dtype=np.int64)),
        )

    async def _put_packed(self, send: SendRequest, bodies: PackedBodies, props: PackedBodies, peer: str) -> Response:
        send_packed = getattr(self.service, "send_packed", None)
        if send_packed is not None:  # a member's service: no wire dict made and read back
            resp: Response = await send_packed(send, bodies, props, peer)
            return resp
        # The classic broker's: its handle takes the wire dict.
        wire = send.to_wire()
        wire["raw"], wire["sizes"] = bodies.raw, np.diff(bodies.offsets).astype(np.uint32).tobytes()
        wire["props_raw"], wire["props_sizes"] = props.raw, np.diff(props.offsets).astype(np.uint32).tobytes()
        return await self.service.handle(MessageRequestCode.SEND_BATCH_MESSAGE, wire, peer)

    async def _prepare_message(
        self, req: RemotingCommand, h: dict[str, str], topic: str, queue_id: int, props: str, ch: Channel
    ) -> RemotingCommand:
        """A transaction's half message (TransactionalMessageServiceImpl.asyncPrepareMessage):
        stored in RMQ_SYS_TRANS_HALF_TOPIC, its topic and queue in REAL_TOPIC / REAL_QID, out
        of the consumers' sight until END_TRANSACTION commits it."""
        half = parse_half_message_inner(
            Message(
                topic,
                bytes(req.body or b""),
                queue_id=queue_id,
                flag=_int(h, "flag", 0),
                # WAIT stays: parseHalfMessageInner rewrites the string from the map, where
                # Java put WAIT back (the committed message keeps it too).
                properties=decode_properties(props),
                sys_flag=_int(h, "sysFlag", 0),
                born_timestamp=_int(h, "bornTimestamp", 0),
                born_host=peer_host(ch.remote_addr),
                reconsume_times=_int(h, "reconsumeTimes", 0),
            )
        )
        if self.topics.select(half.topic) is None:
            self.topics.create_in_send_back(half.topic, 1, PERM_READ | PERM_WRITE)
            self.on_topic_created()
        resp = await self.service.put_inner([half])
        unavailable = self._unavailable(req, resp)
        if unavailable is not None:
            return unavailable
        body = SendResponse.from_wire(resp.body) if resp.body else SendResponse(PutMessageStatus.UNKNOWN_ERROR)
        if body.status == PutMessageStatus.PUT_OK and resp.code == DCode.SUCCESS:
            phys = int(body.phys_offsets[0]) + body.phys_add
            return req.response(
                ext_fields={
                    "msgId": f"{self._host_hex}{phys:016X}",
                    "queueId": str(queue_id),
                    "queueOffset": str(body.queue_offset),
                    "TRACE_ON": "true",
                    "MSG_REGION": "DefaultRegion",
                }
            )
        status = PutMessageStatus(body.status)
        code = _PUT_CODES.get(status, ResponseCode.SYSTEM_ERROR)
        return req.response(code, _PUT_REMARKS.get(status) or body.reason or resp.message or status.name)

    @staticmethod
    def _unavailable(req: RemotingCommand, resp: Response) -> RemotingCommand | None:
        if resp.code in (DCode.NOT_LEADER, DCode.LEADER_NOT_READY):
            return req.response(ResponseCode.SERVICE_NOT_AVAILABLE, f"service not available now: {resp.message or ''}")
        return None

    def _dlq_topic_config(self, send: SendRequest) -> None:
        dead = dlq_topic(send)
        if dead is not None and self.topics.select(dead) is None:
            self.topics.create_in_send_back(dead, DLQ_NUMS_PER_GROUP, PERM_READ | PERM_WRITE)
            self.on_topic_created()

    async def consumer_send_msg_back(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        """asyncConsumerSendMsgBack: a message the consumer group failed to consume goes to
        ``%RETRY%<group>`` with a delay level (3 + its reconsume count unless the request names
        one), or, consumed maxReconsumeTimes times already (or delayLevel < 0), to
        ``%DLQ%<group>``. The DLQ rule is the store's send path's (``dlq_topic``) for both."""
        offset = req.ext_int("offset")
        group = req.ext_str("group")
        delay_level = req.ext_int("delayLevel")
        ext = req.ext_fields or {}
        retry_queue_nums, max_times = RETRY_QUEUE_NUMS, RETRY_MAX_TIMES
        if self.subscriptions is not None:
            sgc = self.subscriptions.find(group)  # made here when autoCreateSubscriptionGroup
            if sgc is None:
                return req.response(
                    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                    f"subscription group not exist, {group} \nSee http://rocketmq.apache.org/docs/faq/ "
                    "for further details.",
                )
            retry_queue_nums, max_times = sgc.retry_queue_nums, sgc.retry_max_times
        if not self.broker_permission & PERM_WRITE:
            return self._forbidden(req)
        if retry_queue_nums <= 0:
            return req.response()  # the group takes no retries: dropped, as Java
        if ext.get("maxReconsumeTimes"):
            max_times = req.ext_int("maxReconsumeTimes")  # the consumer's own, over the group's
        retry = RETRY_GROUP_TOPIC_PREFIX + group
        tc = self.topics.select(retry)
        if tc is None:
            tc = self.topics.create_in_send_back(retry, retry_queue_nums, PERM_READ | PERM_WRITE)
            self.on_topic_created()
        if not tc.perm & PERM_WRITE:
            return req.response(ResponseCode.NO_PERMISSION, f"the topic[{retry}] sending message is forbidden")
        msg = await look_message_by_offset(self.service, offset)
        if msg is None:
            return req.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")
        props = dict(msg.properties)
        props.setdefault(MessageConst.PROPERTY_RETRY_TOPIC, msg.topic)
        props[MessageConst.PROPERTY_WAIT_STORE_MSG_OK] = "false"
        if not delay_level:
            delay_level = 3 + msg.reconsume_times
        # The DLQ path drops it (setDelayTimeLevel(0)).
        props[PROPERTY_DELAY] = str(delay_level)
        if not props.get(MessageConst.PROPERTY_ORIGIN_MESSAGE_ID):
            props[MessageConst.PROPERTY_ORIGIN_MESSAGE_ID] = msg.msg_id
        # Java sends it to the DLQ when the stored count reached the maximum; the new message
        # carries the count + 1, which reaches maximum + 1 then. delayLevel < 0: at once.
        send = SendRequest(
            retry,
            random.randrange(99999999) % tc.write_queue_nums,
            [msg.body],
            [encode_properties(props).encode("utf-8")],
            msg.flag,
            msg.sys_flag,
            msg.born_timestamp,
            format_host(msg.born_host) if msg.born_host else None,
            reconsume_times=msg.reconsume_times + 1,
            max_reconsume_times=max_times + 1 if delay_level >= 0 else 0,
        )
        self._dlq_topic_config(send)
        resp = await self.service.handle(MessageRequestCode.SEND_BATCH_MESSAGE, send.to_wire(), ch.remote_addr)
        unavailable = self._unavailable(req, resp)
        if unavailable is not None:
            return unavailable
        body = SendResponse.from_wire(resp.body) if resp.body else SendResponse(PutMessageStatus.UNKNOWN_ERROR)
        if body.status == PutMessageStatus.PUT_OK and resp.code == DCode.SUCCESS:
            return req.response()
        return req.response(ResponseCode.SYSTEM_ERROR, PutMessageStatus(body.status).name)


def offset_msg_ids(host_hex: str, phys: np.ndarray, add: int = 0) -> str:
    """createMessageId of each offset ``phys[k] + add``, comma-joined (SEND_BATCH_MESSAGE's
    msgId): the store host's upper-case hex then the offset's 16 digits (a kernel, one string)."""
    return K.offset_msg_ids(host_hex.encode("ascii"), np.ascontiguousarray(phys, dtype=np.int64), add)


def _int(h: dict[str, str], name: str, default: int) -> int:
    v = h.get(name)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise RemotingCommandException(f"the custom field <{name}> is not a number: {v[:40]!r}") from None


__all__ = ["SendMessageProcessor", "header_v1"]
