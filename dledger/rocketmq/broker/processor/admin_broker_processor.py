"""RocketMQ's AdminBrokerProcessor, the codes a 4.9.4 client and mqadmin send a broker: queue
offsets (GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP,
GET_EARLIEST_MSG_STORETIME), topics (UPDATE_AND_CREATE_TOPIC, DELETE_TOPIC_IN_BROKER,
GET_ALL_TOPIC_CONFIG), statistics (GET_BROKER_RUNTIME_INFO, GET_TOPIC_STATS_INFO,
GET_CONSUME_STATS), consumers (QUERY_TOPIC_CONSUME_BY_WHO, GET_CONSUMER_CONNECTION_LIST,
GET_ALL_CONSUMER_OFFSET, GET_CONSUMER_RUNNING_INFO forwarded to the client as Broker2Client),
the broker's properties (GET_BROKER_CONFIG, UPDATE_BROKER_CONFIG through ``Configuration``) and
orderly consumers' queue locks (LOCK_BATCH_MQ, UNLOCK_BATCH_MQ)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from dledger.codes import ResponseCode as DCode
from dledger.rocketmq.broker.broker_config import BrokerConfig, MessageServiceView
from dledger.rocketmq.broker.configuration import Configuration
from dledger.rocketmq.broker.consumer_manager import ConsumerManager
from dledger.rocketmq.broker.rebalance_lock_manager import MessageQueue, RebalanceLockManager
from dledger.rocketmq.broker.topic_config_manager import TopicConfigManager
from dledger.rocketmq.remoting import remoting_serializable
from dledger.rocketmq.remoting.language_code import LanguageCode
from dledger.rocketmq.remoting.netty_remoting_server import Channel
from dledger.rocketmq.remoting.protocol.register_broker_body import TopicConfig
from dledger.rocketmq.remoting.remoting_command import CURRENT_VERSION, RemotingCommand
from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException
from dledger.rocketmq.remoting.request_code import RequestCode
from dledger.rocketmq.remoting.response_code import ResponseCode
from dledger.rocketmq.wire import MessageRequestCode, QueueRequest

log = logging.getLogger(__name__)

# createResponseCommand(null)'s remark, which the Java broker leaves on some answers.
NOT_SET = "not set any response code"
# Broker2Client.callClient's invokeSync timeout (ms), and MQVersion.Version.V3_1_8_SNAPSHOT's
# ordinal: an older client cannot answer a forwarded request.
CALL_CLIENT_TIMEOUT_MS = 10000
V3_1_8_SNAPSHOT = 62


def _json(s: str) -> str:
    return remoting_serializable.encode(s).decode("utf-8")


def _offset_table(entries: list[tuple[str, str, int, dict[str, int]]], before: str = "") -> bytes:
    """``{"offsetTable":{MessageQueue:{...},...}}`` as fastjson writes a map keyed by objects
    (GET_TOPIC_STATS_INFO's TopicStatsTable, GET_CONSUME_STATS's ConsumeStats): not JSON, but
    what every RocketMQ client reads. Properties sorted, as fastjson; ``before`` the
    properties that sort before offsetTable."""
    items = [
        f'{{"brokerName":{_json(broker)},"queueId":{qid},"topic":{_json(topic)}}}:'
        + remoting_serializable.encode(dict(sorted(fields.items()))).decode("utf-8")
        for topic, broker, qid, fields in entries
    ]
    return ("{" + before + '"offsetTable":{' + ",".join(items) + "}}").encode("utf-8")


class AdminBrokerProcessor:
    def __init__(
        self,
        service: MessageServiceView,
        topics: TopicConfigManager,
        consumers: ConsumerManager,
        config: BrokerConfig,
        on_topic_created: Callable[[], None],
        configuration: Configuration | None = None,
        on_config_update: Callable[[dict[str, str]], None] = lambda changed: None,
    ) -> None:
        """``configuration``: the broker's properties (GET/UPDATE_BROKER_CONFIG);
        ``on_config_update`` takes the keys an update stored (to apply the runtime ones)."""
        self.service = service
        self.configuration = configuration
        self.on_config_update = on_config_update
        self.call_client_timeout_s = CALL_CLIENT_TIMEOUT_MS / 1000.0
        self.topics = topics
        self.consumers = consumers
        self.config = config
        self.on_topic_created = on_topic_created
        self.locks = RebalanceLockManager()
        self.boot_timestamp = int(time.time() * 1000)

    # -- offsets -----------------------------------------------------------------------------

    async def _queue_offset(self, code: int, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        q = QueueRequest(req.ext_str("topic"), req.ext_int("queueId"), req.ext_int("timestamp", 0))
        resp = await self.service.handle(code, q.to_wire(), ch.remote_addr)
        if resp.code != DCode.SUCCESS:
            return req.response(ResponseCode.SYSTEM_ERROR, resp.message or DCode(resp.code).name)
        return req.response(ext_fields={"offset": str(int(resp.body["offset"]))})

    async def get_max_offset(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        return await self._queue_offset(MessageRequestCode.GET_MAX_OFFSET, req, ch)

    async def get_min_offset(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        return await self._queue_offset(MessageRequestCode.GET_MIN_OFFSET, req, ch)

    async def search_offset_by_timestamp(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        return await self._queue_offset(MessageRequestCode.SEARCH_OFFSET_BY_TIMESTAMP, req, ch)

    def _store_time_at(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.service.store.consume_queues.get(topic, queue_id)
        unit = cq.get_unit(offset) if cq is not None else None
        if unit is None:
            return -1
        return int(self.service.store.store_timestamp_at(unit[0], unit[1]))

    async def get_earliest_msg_storetime(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        topic, qid = req.ext_str("topic"), req.ext_int("queueId")
        store = self.service.store
        ts = await asyncio.to_thread(self._store_time_at, topic, qid, store.min_offset_in_queue(topic, qid))
        return req.response(ext_fields={"timestamp": str(ts)})

    # -- topics ------------------------------------------------------------------------------

    async def update_and_create_topic(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        topic = req.ext_str("topic")
        if topic == self.config.cluster or not topic or len(topic) > 127:
            return req.response(ResponseCode.SYSTEM_ERROR, f"The specified topic[{topic}] is conflict or invalid.")
        read, write = req.ext_int("readQueueNums"), req.ext_int("writeQueueNums")
        if max(read, write) > self.config.queue_nums:
            # The store of a DLedger group has default_topic_queue_nums queues per topic.
            return req.response(
                ResponseCode.SYSTEM_ERROR,
                f"this broker serves at most {self.config.queue_nums} queues a topic (default_topic_queue_nums)",
            )
        tc = TopicConfig(
            topic,
            read,
            write,
            req.ext_int("perm"),
            (req.ext_fields or {}).get("topicFilterType") or "SINGLE_TAG",
            req.ext_int("topicSysFlag", 0),
            req.ext_bool("order"),
        )
        self.topics.update(tc)
        self.on_topic_created()
        return req.response(remark=NOT_SET)

    async def delete_topic_in_broker(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        self.topics.delete(req.ext_str("topic"))
        self.on_topic_created()
        return req.response(remark=NOT_SET)

    async def get_all_topic_config(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        return req.response(body=self.topics.encode().encode("utf-8"))

    # -- statistics --------------------------------------------------------------------------

    async def get_broker_runtime_info(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        store = self.service.store
        stats = self.service.metric_stats
        put = sum(stats.put_messages.values())
        got = sum(stats.pulled_messages.values())
        up = int(time.time() * 1000) - self.boot_timestamp
        s = up // 1000
        table: dict[str, Any] = {
            "brokerVersionDesc": "V4_9_4",
            "brokerVersion": str(CURRENT_VERSION),
            "msgPutTotalTodayNow": str(put),
            "msgGetTotalTodayNow": str(got),
            "msgPutTotalTodayMorning": "0",
            "msgGetTotalTodayMorning": "0",
            "msgPutTotalYesterdayMorning": "0",
            "msgGetTotalYesterdayMorning": "0",
            "putMessageTimesTotal": str(put),
            "putMessageSizeTotal": str(sum(stats.put_bytes.values())),
            "putMessageFailedTimes": str(sum(stats.put_refused.values())),
            "bootTimestamp": str(self.boot_timestamp),
            "runtime": f"[ {s // 86400} days, {s // 3600 % 24} hours, {s // 60 % 60} minutes, {s % 60} seconds ]",
            "commitLogMinOffset": str(store.min_phys_offset),
            "commitLogMaxOffset": str(store.committed_phys_offset),
            "dispatchBehindBytes": str(store.dispatch_behind_bytes()),
            "commitLogDiskRatio": f"{store.disk_used_ratio():.1f}",
            "consumeQueueDiskRatio": f"{store.disk_used_ratio():.1f}",
            "earliestMessageTimeStamp": "-1",
            "startAcceptSendRequestTimeStamp": "0",
            "pageCacheLockTimeMills": "0",
            "putTps": "0.0 0.0 ",
            "getTransferedTps": "0.0 0.0 ",
            "getFoundTps": "0.0 0.0 ",
            "getMissTps": "0.0 0.0 ",
            "getTotalTps": "0.0 0.0 0.0",
            "sendThreadPoolQueueSize": "0",
            "pullThreadPoolQueueSize": "0",
            "queryThreadPoolQueueSize": "0",
            "remainHowManyDataToFlush": "0 B",
        }
        return req.response(body=remoting_serializable.encode({"table": table}))

    def _last_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        return self._store_time_at(topic, queue_id, offset - 1) if offset > 0 else 0

    async def get_topic_stats_info(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        topic = req.ext_str("topic")
        tc = self.topics.select(topic)
        if tc is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = self.service.store

        def build() -> bytes:
            entries = []
            for qid in range(tc.write_queue_nums):
                mx, mn = store.max_offset_in_queue(topic, qid), store.min_offset_in_queue(topic, qid)
                last = self._last_timestamp(topic, qid, mx)
                entries.append(
                    (
                        topic,
                        self.config.broker_name,
                        qid,
                        {"lastUpdateTimestamp": last, "maxOffset": mx, "minOffset": mn},
                    )
                )
            return _offset_table(entries)

        return req.response(body=await asyncio.to_thread(build))

    async def get_consume_stats(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        group = req.ext_str("consumerGroup")
        only = (req.ext_fields or {}).get("topic") or None
        store = self.service.store
        offsets = store.consumer_offsets
        topics = {only} if only else offsets.which_topics_by_consumer(group)
        g = self.consumers.groups.get(group)
        if g is not None and not only:
            topics |= set(g.subscriptions)

        def build() -> bytes:
            entries = []
            for topic in sorted(topics):
                tc = self.topics.select(topic)
                if tc is None:
                    continue
                for qid in range(tc.write_queue_nums):
                    broker_off = store.max_offset_in_queue(topic, qid)
                    consumer_off = max(offsets.query_offset(group, topic, qid), 0)
                    last = self._last_timestamp(topic, qid, consumer_off)
                    fields = {"brokerOffset": broker_off, "consumerOffset": consumer_off, "lastTimestamp": last}
                    entries.append((topic, self.config.broker_name, qid, fields))
            return _offset_table(entries, '"consumeTps":0.0,')

        return req.response(body=await asyncio.to_thread(build))

    # -- consumers ---------------------------------------------------------------------------

    async def query_topic_consume_by_who(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        topic = req.ext_str("topic")
        groups = set(self.service.store.consumer_offsets.which_groups_by_topic(topic))
        groups |= {name for name, g in self.consumers.groups.items() if topic in g.subscriptions}
        return req.response(body=remoting_serializable.encode({"groupList": sorted(groups)}))

    async def get_consumer_connection_list(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        group = req.ext_str("consumerGroup")
        g = self.consumers.groups.get(group)
        if g is None:
            return req.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        conns = [
            {
                "clientAddr": info.channel.remote_addr,
                "clientId": cid,
                "language": LanguageCode(info.language).name
                if info.language in LanguageCode._value2member_map_
                else "OTHER",
                "version": info.version,
            }
            for cid, info in g.channels.items()
        ]
        body = {
            "connectionSet": conns,
            "consumeFromWhere": g.consume_from_where or None,
            "consumeType": g.consume_type or None,
            "messageModel": g.message_model or None,
            "subscriptionTable": g.subscriptions,
        }
        return req.response(body=remoting_serializable.encode_sorted(body))

    async def get_all_consumer_offset(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        table = self.service.store.consumer_offsets.offset_table
        return req.response(body=remoting_serializable.encode_fastjson({"offsetTable": table}, quote_int_keys=False))

    async def get_consumer_running_info(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        """getConsumerRunningInfo: the request forwarded to the client's own connection (the
        one its heartbeats came on) and the client's answer returned as it is."""
        return await self._call_consumer(
            RequestCode.GET_CONSUMER_RUNNING_INFO, req, req.ext_str("consumerGroup"), req.ext_str("clientId")
        )

    async def _call_consumer(self, code: int, req: RemotingCommand, group: str, client_id: str) -> RemotingCommand:
        """callConsumer with Broker2Client.callClient."""
        info = self.consumers.find_channel(group, client_id)
        if info is None or info.channel.closed:
            return req.response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        if info.version < V3_1_8_SNAPSHOT:
            return req.response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{client_id}> Version <{info.version}> too low to finish, please upgrade it to "
                "V3_1_8_SNAPSHOT",
            )
        forward = RemotingCommand.request(code, dict(req.ext_fields or {}), req.body)
        try:
            return await info.channel.invoke(forward, self.call_client_timeout_s)
        except TimeoutError as exc:
            return req.response(
                ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}> Timeout: {type(exc).__name__}"
            )
        except (ConnectionError, RuntimeError) as exc:
            return req.response(ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: {exc}")

    # -- the broker's properties -------------------------------------------------------------

    async def get_broker_config(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        """getBrokerConfig: every property as ``key=value`` lines, the data version (JSON) in
        the ``version`` header field."""
        if self.configuration is None:
            return req.response(ResponseCode.SYSTEM_ERROR, "this broker keeps no configuration")
        body = self.configuration.all_configs_format_string().encode("utf-8")
        version = remoting_serializable.encode(self.configuration.data_version.to_json()).decode("utf-8")
        return req.response(ext_fields={"version": version}, body=body)

    async def update_broker_config(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        """updateBrokerConfig: the body's properties stored (the keys the broker has; others
        left out, no error) and the runtime ones applied; no body: nothing to do."""
        if self.configuration is None:
            return req.response(ResponseCode.SYSTEM_ERROR, "this broker keeps no configuration")
        if req.body:
            # Here, not at the top: dledger.store loads numpy.
            from dledger.store.properties import parse_properties

            try:
                props = parse_properties(bytes(req.body).decode("utf-8"))
            except UnicodeDecodeError as exc:
                return req.response(ResponseCode.SYSTEM_ERROR, f"UnsupportedEncodingException {exc}")
            log.info("updateBrokerConfig from %s: %s", ch.remote_addr, props)
            try:
                changed = await asyncio.to_thread(self.configuration.update, props)
            except ValueError as exc:
                return req.response(ResponseCode.SYSTEM_ERROR, f"string2Properties error: {exc}")
            self.on_config_update(changed)
        return req.response()

    # -- orderly consumers' queue locks ------------------------------------------------------

    @staticmethod
    def _lock_body(req: RemotingCommand) -> tuple[str, str, list[MessageQueue]]:
        """LockBatchRequestBody / UnlockBatchRequestBody: consumerGroup, clientId, mqSet."""
        d = remoting_serializable.decode(req.body) if req.body else None
        if not isinstance(d, dict) or not isinstance(d.get("mqSet") or [], list):
            raise RemotingCommandException("the body must be a LockBatchRequestBody object")
        try:
            mqs = [(str(m["topic"]), str(m["brokerName"]), int(m["queueId"])) for m in d.get("mqSet") or []]
        except (KeyError, TypeError, ValueError):
            raise RemotingCommandException("mqSet: want objects with topic, brokerName and queueId") from None
        return str(d.get("consumerGroup") or ""), str(d.get("clientId") or ""), mqs

    async def lock_batch_mq(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        group, client_id, mqs = self._lock_body(req)
        got = self.locks.try_lock_batch(group, mqs, client_id)
        ok = [{"brokerName": b, "queueId": q, "topic": t} for t, b, q in got]
        return req.response(body=remoting_serializable.encode({"lockOKMQSet": ok}))

    async def unlock_batch_mq(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        group, client_id, mqs = self._lock_body(req)
        self.locks.unlock_batch(group, mqs, client_id)
        return req.response()

    async def get_unknown_cmd_response(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        """The broker's default processor (getUnknownCmdResponse): a code nothing serves. An
        answer like any processor's, so a oneway request gets none, as in Java."""
        return req.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {req.code} not supported")


__all__ = ["AdminBrokerProcessor"]
