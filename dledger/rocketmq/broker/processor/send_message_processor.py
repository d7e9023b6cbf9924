"""RocketMQ's SendMessageProcessor over remoting: SEND_MESSAGE, SEND_MESSAGE_V2 (the header
with one-letter names) and SEND_BATCH_MESSAGE (``MessageDecoder.encodeMessages`` bodies), put
through the member's send path (``broker/send_message_processor.py``: the same checks, one
kernel call for a batch), answered with the offset message ids, queue id and queue offset."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from dledger.codes import ResponseCode as DCode
from dledger.rocketmq.broker.broker_config import BrokerConfig, MessageServiceView
from dledger.rocketmq.broker.topic_config_manager import RETRY_GROUP_TOPIC_PREFIX, TopicConfigManager
from dledger.rocketmq.remoting.netty_remoting_server import Channel
from dledger.rocketmq.remoting.protocol.message_batch import decode_messages
from dledger.rocketmq.remoting.protocol.topic_route_data import PERM_WRITE
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException
from dledger.rocketmq.remoting.request_code import RequestCode
from dledger.rocketmq.remoting.response_code import ResponseCode
from dledger.rocketmq.store.message import create_message_id
from dledger.rocketmq.store.status import PutMessageStatus
from dledger.rocketmq.wire import MessageRequestCode, SendRequest, SendResponse

log = logging.getLogger(__name__)

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
    ) -> None:
        self.service = service
        self.topics = topics
        self.config = config
        self.store_host_raw = store_host_raw
        self._host_hex = create_message_id(store_host_raw, 0)[:-16]
        self.on_topic_created = on_topic_created

    async def process(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        h = header_v1(req)
        topic = h.get("topic") or ""
        if not topic:
            raise RemotingCommandException("the custom field <topic> is null")
        tc = self.topics.select(topic)
        if tc is None:
            # msgCheck: created from the default topic on its first send, or a retry topic.
            queue_nums = _int(h, "defaultTopicQueueNums", 4)
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                tc = self.topics.create_in_send_back(topic, 1, 6)
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
        )
        wire = send.to_wire()
        if req.code == RequestCode.SEND_BATCH_MESSAGE or h.get("batch") == "true":
            # The batch's own properties (WAIT) and CLUSTER follow each message's, as the Java
            # broker's MessageExtBatch encoder writes them; one kernel pass, no object a message.
            tail = ("\x02" + cluster + ("\x02" + props if props else "")).encode("utf-8")
            batch = decode_messages(req.body, tail)
            wire["flag"] = batch.flag
            wire["raw"], wire["sizes"] = batch.bodies, batch.body_sizes.tobytes()
            wire["props_raw"], wire["props_sizes"] = batch.properties, batch.properties_sizes.tobytes()
        else:
            text = _strip_wait(props)
            one = ((text + "\x02") if text else "").encode("utf-8") + cluster.encode("utf-8")
            wire["raw"], wire["sizes"] = req.body, np.asarray([len(req.body)], dtype=np.uint32).tobytes()
            wire["props_raw"], wire["props_sizes"] = one, np.asarray([len(one)], dtype=np.uint32).tobytes()
        resp = await self.service.handle(MessageRequestCode.SEND_BATCH_MESSAGE, wire, ch.remote_addr)
        body = SendResponse.from_wire(resp.body) if resp.body else SendResponse(PutMessageStatus.UNKNOWN_ERROR)
        if resp.code in (DCode.NOT_LEADER, DCode.LEADER_NOT_READY):
            return req.response(ResponseCode.SERVICE_NOT_AVAILABLE, f"service not available now: {resp.message or ''}")
        if body.status == PutMessageStatus.PUT_OK and resp.code == DCode.SUCCESS:
            phys = (np.asarray(body.phys_offsets, dtype=np.int64) + body.phys_add).tolist()
            # createMessageId: the store host's bytes then the offset, upper-case hex (the host
            # part once, not once a message).
            msg_ids = ",".join(f"{self._host_hex}{p:016X}" for p in phys)
            return req.response(
                ext_fields={
                    "msgId": msg_ids,
                    "queueId": str(body.queue_id),
                    "queueOffset": str(body.queue_offset),
                    "TRACE_ON": "true",
                    "MSG_REGION": "DefaultRegion",
                }
            )
        code = _PUT_CODES.get(PutMessageStatus(body.status), ResponseCode.SYSTEM_ERROR)
        reason = body.reason or resp.message or PutMessageStatus(body.status).name
        if code == ResponseCode.MESSAGE_ILLEGAL:
            reason = f"the message is illegal, maybe msg body or properties length not matched. {reason}"
        return req.response(code, reason)


def _int(h: dict[str, str], name: str, default: int) -> int:
    v = h.get(name)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise RemotingCommandException(f"the custom field <{name}> is not a number: {v[:40]!r}") from None


__all__ = ["SendMessageProcessor", "header_v1"]
