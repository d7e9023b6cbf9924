"""The remoting side of a member's broker (RocketMQ's BrokerController: its remotingServer on
``listenPort`` and fastRemotingServer, the VIP channel, on ``listenPort - 2``; its processors;
registerBrokerAll every 30 s with each name server).

A member of a DLedger group registers as the master (brokerId 0) while it leads and as a slave
(its self id's number + 1) otherwise, as Java's DLedgerRoleChangeHandler makes it; a role change
registers at once, so that clients find the new leader without waiting for the period. A
classic broker registers as its role says (brokerId 0 master, its ``brokerId`` a slave, with its
HA address).

While it is not the master it runs SlaveSynchronize: every 10 s (after 3 s) the topics,
subscription groups (and a classic slave's consumer and delay offsets) from the master's VIP
channel, the master's address being what the name server answered the registration with.

The requests go to the member's message service (``MessageService.handle``): the same checks, log
and answers as the project's own protocol on ``--listen``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dledger.rocketmq.broker.broker_config import BrokerConfig, MessageServiceView
from dledger.rocketmq.broker.broker_fast_failure import BrokerFastFailure, is_os_page_cache_busy
from dledger.rocketmq.broker.broker_outer_api import BrokerOuterAPI
from dledger.rocketmq.broker.configuration import (
    DEFAULT_BROKER_PERMISSION,
    RUNTIME_KEYS,
    Configuration,
    apply_runtime,
)
from dledger.rocketmq.broker.consumer_manager import ConsumerManager
from dledger.rocketmq.broker.processor.admin_broker_processor import AdminBrokerProcessor
from dledger.rocketmq.broker.processor.client_manage_processor import ClientManageProcessor
from dledger.rocketmq.broker.processor.consumer_manage_processor import ConsumerManageProcessor
from dledger.rocketmq.broker.processor.end_transaction_processor import EndTransactionProcessor
from dledger.rocketmq.broker.processor.metadata_processor import MetadataProcessor
from dledger.rocketmq.broker.processor.pull_message_processor import PullMessageProcessor
from dledger.rocketmq.broker.processor.query_message_processor import QueryMessageProcessor
from dledger.rocketmq.broker.processor.send_message_processor import SendMessageProcessor
from dledger.rocketmq.broker.slave_synchronize import SlaveSynchronize
from dledger.rocketmq.broker.subscription_group_manager import SubscriptionGroupManager
from dledger.rocketmq.broker.topic_config_manager import TopicConfigManager
from dledger.rocketmq.broker.transactional_message_check_service import TransactionalMessageCheckService
from dledger.rocketmq.remoting import remoting_serializable
from dledger.rocketmq.remoting.netty_remoting_server import Channel, NettyRemotingServer, Processor, RequestPool
from dledger.rocketmq.remoting.protocol.register_broker_body import DataVersion, TopicConfig
from dledger.rocketmq.remoting.protocol.topic_route_data import MASTER_ID, PERM_READ, PERM_WRITE
from dledger.rocketmq.remoting.remoting_command import CURRENT_VERSION, RemotingCommand
from dledger.rocketmq.remoting.request_code import RequestCode

if TYPE_CHECKING:
    from dledger.rocketmq.store.consumer_offset import ConsumerOffsetManager

log = logging.getLogger(__name__)

# BrokerConfig's queue capacities of the executors whose size is not configurable here.
QUERY_THREAD_POOL_QUEUE_CAPACITY = 20000
HEARTBEAT_THREAD_POOL_QUEUE_CAPACITY = 50000
CLIENT_MANAGER_THREAD_POOL_QUEUE_CAPACITY = 1000000
CONSUMER_MANAGER_THREAD_POOL_QUEUE_CAPACITY = 1000000
END_TRANSACTION_POOL_QUEUE_CAPACITY = 100000


class BrokerRemoting:
    def __init__(
        self,
        service: MessageServiceView,
        config: BrokerConfig,
        bind_host: str,
        store_host_raw: bytes,
        *,
        topics: TopicConfigManager,
        subscriptions: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager | None = None,
        delay_table: Callable[[], dict[int, int] | None] = lambda: None,
        delay_sink: Callable[[dict[int, int]], None] | None = None,
        config_path: Path | None = None,
        file_properties: dict[str, str] | None = None,
        store_properties: dict[str, str] | None = None,
    ) -> None:
        """``offsets``/``delay_sink``: where a slave puts its master's consumer and delay offsets
        (a classic broker; a DLedger member's come through its log); ``delay_table`` what a
        master answers GET_ALL_DELAY_OFFSET with. ``config_path``/``file_properties``: the
        broker.conf it runs from and what it holds (UPDATE_BROKER_CONFIG writes it again);
        ``store_properties`` the store's options (listed by GET_BROKER_CONFIG, set or not).
        ``topics``/``subscriptions``: the broker's own TopicConfigManager and
        SubscriptionGroupManager, which it keeps without remoting too (broker_controller's
        load_metadata)."""
        self.service = service
        self.config = config
        self.configuration = Configuration(
            {
                **(store_properties or {}),
                **(file_properties or {}),
                **self._properties(config),
                # A runtime key the file holds is what the broker starts with (brokerPermission
                # is not among its options).
                **{k: v for k, v in (file_properties or {}).items() if k in RUNTIME_KEYS},
            },
            config_path,
            set(file_properties or ()),
        )
        # brokerPermission: the topics' permission in registrations when not read-write.
        self.broker_permission = DEFAULT_BROKER_PERMISSION
        self.bind_host = bind_host
        self.leading = False
        self.topics = topics
        self.subscriptions = subscriptions
        self.consumers = ConsumerManager()
        self.outer = BrokerOuterAPI(list(config.namesrv_addrs))
        self.slave_synchronize = SlaveSynchronize(
            self.outer.client,
            self.topics,
            self.subscriptions,
            offsets,
            delay_sink,
            period_s=config.sync_period_s,
            delay_s=config.sync_delay_s,
        )
        self.slave_synchronize.self_addr = config.broker_addr
        self._sync_task: asyncio.Task[None] | None = None
        self._register_now = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        send = SendMessageProcessor(
            service, self.topics, config, store_host_raw, self.topics_changed, self.subscriptions
        )
        pull = PullMessageProcessor(
            service, self.topics, self.subscriptions, config.slave_read_enable, config.broker_ip1
        )
        client = ClientManageProcessor(self.consumers, self.topics, self.topics_changed)
        consumer = ConsumerManageProcessor(service, self.consumers)
        query = QueryMessageProcessor(service)
        end_tx = EndTransactionProcessor(service, self.topics, self.topics_changed)
        self.tx_check = TransactionalMessageCheckService(
            service,
            self.consumers,
            config.transaction_check_interval_ms,
            config.transaction_timeout_ms,
            config.transaction_check_max,
        )
        self.admin = admin = AdminBrokerProcessor(
            service,
            self.topics,
            self.consumers,
            config,
            self.topics_changed,
            self.configuration,
            self.config_updated,
        )
        # The keys a broker takes while it runs (UPDATE_BROKER_CONFIG), and at start from its file.
        self._runtime_setters: dict[str, Callable[[bool | int], None]] = {
            "brokerPermission": self._set_broker_permission,
            "slaveReadEnable": lambda v: setattr(pull, "slave_read_enable", bool(v)),
            "autoCreateTopicEnable": lambda v: setattr(self.topics, "auto_create", bool(v)),
            "autoCreateSubscriptionGroup": lambda v: setattr(self.subscriptions, "auto_create", bool(v)),
            "brokerFastFailureEnable": lambda v: setattr(self.fast_failure, "enable", bool(v)),
            "osPageCacheBusyTimeOutMills": lambda v: setattr(
                self.fast_failure, "os_page_cache_busy_time_out_mills", int(v)
            ),
        }
        self._permission_holders: list[SendMessageProcessor | PullMessageProcessor] = [send, pull]
        meta = MetadataProcessor(self.subscriptions, delay_table)
        self._heart_beat = client.heart_beat
        R = RequestCode
        self.processors: dict[int, Processor] = {
            R.SEND_MESSAGE: send.process,
            R.SEND_MESSAGE_V2: send.process,
            R.SEND_BATCH_MESSAGE: send.process,
            R.CONSUMER_SEND_MSG_BACK: send.consumer_send_msg_back,
            R.END_TRANSACTION: end_tx.process,
            R.PULL_MESSAGE: pull.process,
            R.HEART_BEAT: self.heart_beat,
            R.UNREGISTER_CLIENT: client.unregister_client,
            R.CHECK_CLIENT_CONFIG: client.check_client_config,
            R.GET_CONSUMER_LIST_BY_GROUP: consumer.get_consumer_list_by_group,
            R.QUERY_CONSUMER_OFFSET: consumer.query_consumer_offset,
            R.UPDATE_CONSUMER_OFFSET: consumer.update_consumer_offset,
            R.QUERY_MESSAGE: query.query_message,
            R.VIEW_MESSAGE_BY_ID: query.view_message_by_id,
            R.GET_MAX_OFFSET: admin.get_max_offset,
            R.GET_MIN_OFFSET: admin.get_min_offset,
            R.SEARCH_OFFSET_BY_TIMESTAMP: admin.search_offset_by_timestamp,
            R.GET_EARLIEST_MSG_STORETIME: admin.get_earliest_msg_storetime,
            R.UPDATE_AND_CREATE_TOPIC: admin.update_and_create_topic,
            R.DELETE_TOPIC_IN_BROKER: admin.delete_topic_in_broker,
            R.GET_ALL_TOPIC_CONFIG: admin.get_all_topic_config,
            R.GET_BROKER_RUNTIME_INFO: admin.get_broker_runtime_info,
            R.GET_TOPIC_STATS_INFO: admin.get_topic_stats_info,
            R.GET_CONSUME_STATS: admin.get_consume_stats,
            R.QUERY_TOPIC_CONSUME_BY_WHO: admin.query_topic_consume_by_who,
            R.GET_CONSUMER_CONNECTION_LIST: admin.get_consumer_connection_list,
            R.GET_ALL_CONSUMER_OFFSET: admin.get_all_consumer_offset,
            R.GET_ALL_DELAY_OFFSET: meta.get_all_delay_offset,
            R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: meta.get_all_subscription_group,
            R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: meta.update_and_create_subscription_group,
            R.DELETE_SUBSCRIPTIONGROUP: meta.delete_subscription_group,
            R.GET_BROKER_CONFIG: admin.get_broker_config,
            R.UPDATE_BROKER_CONFIG: admin.update_broker_config,
            R.GET_CONSUMER_RUNNING_INFO: admin.get_consumer_running_info,
            R.LOCK_BATCH_MQ: admin.lock_batch_mq,
            R.UNLOCK_BATCH_MQ: admin.unlock_batch_mq,
        }
        # BrokerController.registerProcessor's executors, by their queue capacities (the admin
        # executor's queue is unbounded): shared by both servers, as in Java.
        send_pool = RequestPool("send", config.send_thread_pool_queue_capacity)
        pull_pool = RequestPool("pull", config.pull_thread_pool_queue_capacity)
        query_pool = RequestPool("query", QUERY_THREAD_POOL_QUEUE_CAPACITY)
        heartbeat_pool = RequestPool("heartbeat", HEARTBEAT_THREAD_POOL_QUEUE_CAPACITY)
        client_pool = RequestPool("clientManage", CLIENT_MANAGER_THREAD_POOL_QUEUE_CAPACITY)
        consumer_pool = RequestPool("consumerManage", CONSUMER_MANAGER_THREAD_POOL_QUEUE_CAPACITY)
        end_tx_pool = RequestPool("endTransaction", END_TRANSACTION_POOL_QUEUE_CAPACITY)
        pools: dict[int, RequestPool] = {
            R.SEND_MESSAGE: send_pool,
            R.SEND_MESSAGE_V2: send_pool,
            R.SEND_BATCH_MESSAGE: send_pool,
            R.CONSUMER_SEND_MSG_BACK: send_pool,
            R.PULL_MESSAGE: pull_pool,
            R.QUERY_MESSAGE: query_pool,
            R.VIEW_MESSAGE_BY_ID: query_pool,
            R.HEART_BEAT: heartbeat_pool,
            R.UNREGISTER_CLIENT: client_pool,
            R.CHECK_CLIENT_CONFIG: client_pool,
            R.GET_CONSUMER_LIST_BY_GROUP: consumer_pool,
            R.QUERY_CONSUMER_OFFSET: consumer_pool,
            R.UPDATE_CONSUMER_OFFSET: consumer_pool,
            R.END_TRANSACTION: end_tx_pool,
        }
        self.servers = [
            NettyRemotingServer(
                bind_host,
                port,
                self.processors,
                response_version=CURRENT_VERSION,
                on_channel_close=self._closed,
                default_processor=admin.get_unknown_cmd_response,
                pools=pools,
                parks=PullMessageProcessor.parks,
            )
            for port in (config.listen_port, config.vip_port)
        ]
        self.fast_failure = BrokerFastFailure(
            self.servers,
            config.fast_failure,
            send=send_pool,
            pull=pull_pool,
            heartbeat=heartbeat_pool,
            end_transaction=end_tx_pool,
            is_os_page_cache_busy=self._os_page_cache_busy,
        )
        apply_runtime(
            {k: self.configuration.all_configs[k] for k in RUNTIME_KEYS if k in self.configuration.all_configs},
            self._runtime_setters,
        )

    @property
    def broker_id(self) -> int:
        return MASTER_ID if self.leading else self.config.slave_id

    @staticmethod
    def _properties(c: BrokerConfig) -> dict[str, str]:
        """The broker's properties under RocketMQ's names, as GET_BROKER_CONFIG lists them."""

        def b(v: bool) -> str:
            return "true" if v else "false"

        return {
            "brokerClusterName": c.cluster,
            "brokerName": c.broker_name,
            "brokerIP1": c.broker_ip1,
            "brokerId": str(c.slave_id),
            "listenPort": str(c.listen_port),
            "namesrvAddr": ";".join(c.namesrv_addrs),
            "defaultTopicQueueNums": str(c.queue_nums),
            "registerNameServerPeriod": str(int(c.register_period_s * 1000)),
            "brokerPermission": str(DEFAULT_BROKER_PERMISSION),
            "autoCreateTopicEnable": b(c.auto_create_topic_enable),
            "autoCreateSubscriptionGroup": b(c.auto_create_subscription_group),
            "slaveReadEnable": b(c.slave_read_enable),
            "transactionCheckInterval": str(c.transaction_check_interval_ms),
            "transactionTimeOut": str(c.transaction_timeout_ms),
            "transactionCheckMax": str(c.transaction_check_max),
            "brokerFastFailureEnable": b(c.fast_failure.broker_fast_failure_enable),
            "waitTimeMillsInSendQueue": str(c.fast_failure.wait_time_mills_in_send_queue),
            "waitTimeMillsInPullQueue": str(c.fast_failure.wait_time_mills_in_pull_queue),
            "waitTimeMillsInHeartbeatQueue": str(c.fast_failure.wait_time_mills_in_heartbeat_queue),
            "waitTimeMillsInTransactionQueue": str(c.fast_failure.wait_time_mills_in_transaction_queue),
            "osPageCacheBusyTimeOutMills": str(c.fast_failure.os_page_cache_busy_time_out_mills),
        }

    def _os_page_cache_busy(self) -> bool:
        """The store's isOSPageCacheBusy (classic and DLedger commit logs keep the begin time in
        their put lock), against the broker's osPageCacheBusyTimeOutMills of the moment."""
        return is_os_page_cache_busy(
            self.service.store.commitlog.put_lock, self.fast_failure.os_page_cache_busy_time_out_mills
        )

    def _set_broker_permission(self, perm: bool | int) -> None:
        self.broker_permission = int(perm)
        for p in self._permission_holders:
            p.broker_permission = int(perm)

    def config_updated(self, changed: dict[str, str]) -> None:
        """UPDATE_BROKER_CONFIG stored ``changed``: the runtime keys take effect now; a new
        brokerPermission moves the topics' data version and registers at once (as Java's
        updateBrokerConfig), so the name servers' routes carry it."""
        apply_runtime(changed, self._runtime_setters)
        if "brokerPermission" in changed:
            self.topics.data_version = DataVersion(int(time.time() * 1000), self.topics.data_version.counter + 1)
            self._register_now.set()

    def _note_broker_id(self) -> None:
        self.configuration.all_configs["brokerId"] = str(self.broker_id)

    async def start(self) -> None:
        self._note_broker_id()
        for s in self.servers:
            await s.start()
        self.fast_failure.start()
        self.topics.adopt(sorted({t for t, _q, _cq in self.service.store.consume_queues}))
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._register_loop()))
        self._tasks.append(loop.create_task(self._scan_clients()))
        self._handle_slave_synchronize()
        self._tasks.append(loop.create_task(self.tx_check.run(lambda: self.leading)))
        log.info(
            "remoting on %s:%d (VIP %d) as %s of %s",
            self.bind_host,
            self.config.listen_port,
            self.config.vip_port,
            self.config.broker_name,
            self.config.cluster,
        )

    def on_role_change(self, leading: bool) -> None:
        if leading != self.leading:
            self.leading = leading
            self._note_broker_id()
            if leading:
                # Serve what the predecessor created: the topics its queues hold.
                self.topics.adopt(sorted({t for t, _q, _cq in self.service.store.consume_queues}))
            self._register_now.set()
            if self._tasks:  # started
                self._handle_slave_synchronize()

    def _handle_slave_synchronize(self) -> None:
        """handleSlaveSynchronize: a slave syncs its master's metadata; a master does not."""
        if self._sync_task is not None:
            self._sync_task.cancel()
            self._sync_task = None
        if not self.leading:
            self._sync_task = asyncio.get_running_loop().create_task(self.slave_synchronize.run())
        else:
            self.slave_synchronize.master_addr = None

    async def heart_beat(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        """ClientManageProcessor.heartBeat's findSubscriptionGroupConfig: a consumer group is
        made (autoCreateSubscriptionGroup) on its first heartbeat."""
        data = remoting_serializable.decode(req.body) if req.body else {}
        if isinstance(data, dict):
            for cd in data.get("consumerDataSet") or []:
                if isinstance(cd, dict) and cd.get("groupName"):
                    await asyncio.to_thread(self.subscriptions.find, str(cd["groupName"]))
        return await self._heart_beat(req, ch)

    def topics_changed(self) -> None:
        """A topic was made or changed: the name servers hear of it now (registerIncrementBrokerData)."""
        self._register_now.set()

    def _closed(self, ch: Channel) -> None:
        for group in self.consumers.channel_closed(ch):
            self.consumers.notify_ids_changed(group)

    async def register_broker_all(self) -> None:
        if not self.outer.namesrv_addrs:
            return
        c = self.config
        table = dict(self.topics.table)
        perm = self.broker_permission
        if not (perm & PERM_READ and perm & PERM_WRITE):
            # registerBrokerAll: a broker not both readable and writable gives every topic its
            # own permission, so clients send (and pull) elsewhere.
            table = {
                name: TopicConfig(name, tc.read_queue_nums, tc.write_queue_nums, perm) for name, tc in table.items()
            }
        # A slave's topics are not read by the name server (only a master's): sent all the same.
        answers = await self.outer.register_broker_all(
            c.cluster,
            c.broker_addr,
            c.broker_name,
            self.broker_id,
            c.ha_server_addr,
            table,
            self.topics.data_version,
        )
        for resp in answers:
            # RegisterBrokerResult: a slave learns its master's address (for SlaveSynchronize).
            if resp is not None and resp.code == 0 and not self.leading:
                master = (resp.ext_fields or {}).get("masterAddr")
                if master:
                    self.slave_synchronize.master_addr = master
                break

    async def _register_loop(self) -> None:
        while True:
            self._register_now.clear()
            try:
                await self.register_broker_all()
            except Exception:
                log.exception("registration with the name servers failed")
            period = self.config.register_period_s
            if not self.leading and self.slave_synchronize.master_addr is None:
                # A slave that registered before its master learns the master's address from
                # the next answer: asked again at the sync period, not 30 s later.
                period = min(period, self.config.sync_period_s)
            try:
                await asyncio.wait_for(self._register_now.wait(), period)
            except asyncio.TimeoutError:
                pass

    async def _scan_clients(self) -> None:
        while True:
            await asyncio.sleep(10.0)
            self.consumers.scan_not_active()

    async def close(self) -> None:
        if self._sync_task is not None:
            self._tasks.append(self._sync_task)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.fast_failure.shutdown()
        if self.outer.namesrv_addrs:
            c = self.config
            try:
                await asyncio.wait_for(
                    self.outer.unregister_broker_all(c.cluster, c.broker_addr, c.broker_name, self.broker_id), 5.0
                )
            except asyncio.TimeoutError:
                pass
        for s in self.servers:
            await s.close()
        await self.outer.close()


__all__ = ["BrokerRemoting"]
