"""BrokerController of a classic broker: one master or slave of a RocketMQ 4.9 master/slave pair.

It opens the store (classic commit log) with its role, runs the HAService (the master serves
slaves on ``ha_listen_port``; a slave follows ``ha_master_address``) and answers the message
requests of the project's transport on ``listen``, as a DLedger-group member does:

- Puts go to the master (SendMessageProcessor's checks, then the commit log). A SLAVE refuses
  them with SERVICE_NOT_AVAILABLE (and NOT_LEADER, so a client asks the next broker). An
  ASYNC_MASTER answers once the records are written (flushed first under SYNC_FLUSH); a
  SYNC_MASTER once a slave acknowledged past them (GroupTransferService): FLUSH_SLAVE_TIMEOUT
  after ``sync_flush_timeout``, SLAVE_NOT_AVAILABLE at once when no slave is connected or the
  best is ``ha_slave_fallbehind_max`` behind.
- Reads (pulls, offsets, queries) are served by both. A read the client wants from the master
  (``leader_only``) is sent on to it by a slave whose HA link is up; while its link is down (the
  master unreachable) the slave serves it, as RocketMQ's consumers read from a slave then.
- Consumer offsets are committed to the master (``config/consumerOffset.json``); a slave copies
  them every 10 s (SlaveSynchronize). The committing group goes into
  ``config/subscriptionGroup.json`` (with Java's seven built-in groups; autoCreateSubscriptionGroup).
- With ``remoting_port`` (``--remoting-port``, Java's listenPort) it speaks RocketMQ's remoting
  there and on ``remoting_port - 2`` (the VIP channel), registers every 30 s with each name server
  (brokerId 0 as a master, its ``broker_id`` as a slave, its HA address), and a slave syncs
  topics, subscription groups, consumer and delay offsets from its master's VIP channel
  (BrokerRemoting, shared with the DLedger member).
- Topics: with remoting or without, ``config/topics.json`` (TopicConfigManager, Java's format and
  built-in topics) holds every topic a put on ``listen`` named, with this broker's queue count,
  written when the topic is first put to, so a Java broker restarted on the directory serves it;
  ``config/subscriptionGroup.json`` (SubscriptionGroupManager) likewise every committing group.
  Both are set up by ``load_metadata``, which the DLedger member calls too.
- Delayed messages are delivered by the master (the store's ScheduleMessageService, run with this
  broker's put), their progress in ``config/delayOffset.json`` in Java's format (read at start too).
- Role switch without restart (``change_to_master``/``change_to_slave``, or the
  UPDATE_BROKER_CONFIG request with ``brokerRole`` and ``haMasterAddress``: ``dledger mq role``).
- Clients find the broker as a group member: METADATA answers role LEADER (a master) or
  FOLLOWER (a slave), the group being the broker name.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dledger._ext import load as _load_ext
from dledger.api import MetadataResponse
from dledger.codes import RequestCode, ResponseCode
from dledger.errors import DLedgerError
from dledger.net.transport import Request, Response, RpcServer
from dledger.peers import parse_addr
from dledger.rocketmq.broker.broker_config import BrokerConfig
from dledger.rocketmq.broker.broker_remoting import BrokerRemoting
from dledger.rocketmq.broker.pull_message_processor import PullMessageProcessor
from dledger.rocketmq.broker.query_message_processor import (
    QUERY_CODES,
    QUEUE_OFFSET_CODES,
    query_message,
    queue_offset,
    route_info,
)
from dledger.rocketmq.broker.send_message_processor import (
    PackedSend,
    SendMessagePreparer,
    _packed,
    _parse_host,
    _peer_host,
    _stem_properties,
)
from dledger.rocketmq.broker.service_metrics import MessageStats
from dledger.rocketmq.broker.slave_synchronize import SYNC_DELAY_S, SYNC_PERIOD_S, TransportOffsetSynchronize
from dledger.rocketmq.broker.subscription_group_manager import FILE_NAME as SUBSCRIPTION_GROUP_FILE
from dledger.rocketmq.broker.subscription_group_manager import SubscriptionGroupManager
from dledger.rocketmq.broker.topic_config_manager import FILE_NAME as TOPICS_FILE
from dledger.rocketmq.broker.topic_config_manager import TopicConfigManager
from dledger.rocketmq.store.config import ASYNC_MASTER, SLAVE, SYNC_MASTER, MessageStoreConfig, store_properties
from dledger.rocketmq.store.consumer_offset import TOPIC_GROUP_SEPARATOR
from dledger.rocketmq.store.encode import IllegalMessage, PreparedBatch
from dledger.rocketmq.store.ha.group_transfer_service import GroupCommitRequest
from dledger.rocketmq.store.ha.ha_service import HAService
from dledger.rocketmq.store.message import RMQ_SYS_SCHEDULE_TOPIC, Message, format_host
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.schedule_message_service import DELAY_OFFSET_GROUP, call_on_loop
from dledger.rocketmq.store.status import AppendMessageStatus, PutMessageStatus
from dledger.rocketmq.store.topic_validator import validate_group
from dledger.rocketmq.wire import (
    MESSAGE_REQUEST_CODES,
    ConsumerOffsetRequest,
    MessageRequestCode,
    PullRequest,
    SendRequest,
    SendResponse,
)

log = logging.getLogger(__name__)
K = _load_ext("message")
# MessageConst.PROPERTY_WAIT_STORE_MSG_OK false, as a properties string holds it.
_WAIT_FALSE = b"WAIT\x01false"

DEFAULT_QUEUE_NUMS = 4  # BrokerConfig.defaultTopicQueueNums
# The put statuses of a message that is in the commit log (its topic now exists).
_WRITTEN = (
    PutMessageStatus.PUT_OK,
    PutMessageStatus.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
)
# How often held pulls look whether dispatch moved (the reput thread runs on its own).
ARRIVAL_POLL_S = 0.005


def load_metadata(
    store: MessageStore,
    queue_nums: int,
    auto_create_topic: bool,
    auto_create_group: bool,
    cluster: str,
    broker_name: str,
) -> tuple[TopicConfigManager, SubscriptionGroupManager]:
    """BrokerController.initialize's loads of the store's ``config/topics.json`` and
    ``config/subscriptionGroup.json``, for a classic broker and a DLedger member alike, with
    remoting or without (BrokerRemoting takes these two): the files' entries (or their
    ``.bak``), Java's built-in topics and groups, and the topics the store holds queues of
    and the groups it holds consumer offsets of (written back when one was new). Blocking:
    file reads and writes."""
    config_dir = store.root / "config"
    topics = TopicConfigManager(config_dir / TOPICS_FILE, queue_nums, auto_create_topic, cluster, broker_name)
    subscriptions = SubscriptionGroupManager(config_dir / SUBSCRIPTION_GROUP_FILE, auto_create_group)
    adopt_store_metadata(store, topics, subscriptions)
    return topics, subscriptions


def adopt_store_metadata(
    store: MessageStore, topics: TopicConfigManager, subscriptions: SubscriptionGroupManager
) -> None:
    """The topics the store holds queues of and the groups it holds offsets of, into the two
    files (at a start, and where a member takes over: what its predecessor made). Blocking;
    safe beside dispatch (each table's keys are copied at once, under the GIL)."""
    topics.adopt(store.consume_queues.topics())
    sep = TOPIC_GROUP_SEPARATOR
    subscriptions.adopt(sorted({k.rpartition(sep)[2] for k in list(store.consumer_offsets.offset_table)}))


async def note_put_topic(
    topics: TopicConfigManager | None, topic: object, resp: Response, remoting: BrokerRemoting | None
) -> None:
    """A put on ``listen`` made its topic: into topics.json (createTopicInSendMessageMethod
    persists it at once), and the name servers hear of it when remoting is on."""
    if topics is None or not isinstance(topic, str) or topic in topics.table:
        return
    if resp.code != ResponseCode.SUCCESS or resp.body.get("status") not in _WRITTEN:
        return
    if await asyncio.to_thread(topics.adopt, [topic]) and remoting is not None:
        remoting.topics_changed()


async def note_commit_group(subscriptions: SubscriptionGroupManager | None, group: str) -> None:
    """A consumer committed an offset on ``listen``: its group into subscriptionGroup.json, as
    Java's heartbeat and pull make it (findSubscriptionGroupConfig: autoCreateSubscriptionGroup,
    or a CID_RMQ_SYS_ group); the project's protocol has no heartbeat, a commit names the group."""
    if subscriptions is not None and group not in subscriptions.table:
        await asyncio.to_thread(subscriptions.find, group)


class BrokerController:
    """A classic broker (see the module docstring). ``listen`` is ``host:port`` (port 0: any)."""

    def __init__(
        self,
        store_config: MessageStoreConfig,
        listen: str = "127.0.0.1:10911",
        *,
        broker_name: str = "broker-a",
        queue_nums: int = DEFAULT_QUEUE_NUMS,
        master_addr: str | None = None,
        remoting_port: int | None = None,
        namesrv_addr: str | None = None,
        cluster: str = "DefaultCluster",
        broker_id: int | None = None,
        sync_period_s: float = SYNC_PERIOD_S,
        slave_read_enable: bool = False,
        auto_create_subscription_group: bool = True,
        config_path: Path | None = None,
        config_properties: dict[str, str] | None = None,
    ) -> None:
        """``config_path``/``config_properties``: the broker.conf this broker runs from and its
        keys (GET_BROKER_CONFIG lists them; UPDATE_BROKER_CONFIG rewrites the file)."""
        self.listen_host, self.listen_port = parse_addr(listen)
        if remoting_port is not None and not 2 < remoting_port <= 65535:
            raise ValueError(f"remoting port {remoting_port}: want 3-65535 (the VIP channel is port - 2)")
        self.remoting_port = remoting_port
        self.namesrv_addrs = tuple(a.strip() for a in (namesrv_addr or "").split(";") if a.strip())
        self.cluster = cluster
        self.broker_id = broker_id
        self.sync_period_s = sync_period_s
        self.slave_read_enable = slave_read_enable
        self.auto_create_subscription_group = auto_create_subscription_group
        self.config_path = config_path
        self.config_properties = dict(config_properties or {})
        self.remoting: BrokerRemoting | None = None
        if not store_config.store_host:
            # With remoting on, records carry brokerIP1:listenPort, as the Java broker's do.
            host = self.listen_host if self.listen_host not in ("", "0.0.0.0", "::") else "127.0.0.1"
            store_config = store_config.replace(
                store_host=listen if remoting_port is None else f"{host}:{remoting_port}"
            )
        self.store_config = store_config
        self.broker_name = broker_name
        self.queue_nums = queue_nums
        self.store: MessageStore | None = None
        self.topics: TopicConfigManager | None = None
        self.subscriptions: SubscriptionGroupManager | None = None
        self.ha: HAService | None = None
        self.server: RpcServer | None = None
        self.metric_stats = MessageStats()
        self._arrivals: asyncio.Task[None] | None = None
        # A slave's master's client address, for metadata sync (RocketMQ learns it from the name
        # server): given, or by RocketMQ's port convention the master's HA port - 1.
        self.master_addr = master_addr
        self._sync_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def role(self) -> str:
        return self.store_config.broker_role

    @property
    def is_master(self) -> bool:
        return self.role != SLAVE

    @property
    def address(self) -> str:
        assert self.server is not None
        return f"{self.listen_host}:{self.server.port}"

    @property
    def member_id(self) -> str:
        """The id clients know this broker by: its address (``a peer without an id``)."""
        return self.address

    async def start(self) -> None:
        root = self.store_config.store_path_root_dir
        # The store's ScheduleMessageService is started below, with this broker's put.
        self.store = await asyncio.to_thread(MessageStore, root, self.store_config, schedule=False)
        store = self.store
        if store.mode != "classic":
            store.close()
            raise DLedgerError(
                ResponseCode.UNEXPECTED_ARGUMENT, f"{root} holds a DLedger commit log, not a classic one"
            )
        # With remoting or without (BrokerRemoting takes these): topics.json, subscriptionGroup.json.
        self.topics, self.subscriptions = await asyncio.to_thread(
            load_metadata,
            store,
            self.queue_nums,
            self._auto_create_topic,
            self.auto_create_subscription_group,
            self.cluster,
            self.broker_name,
        )
        self.sends = SendMessagePreparer(store, self.store_config, self.queue_nums)
        self.pulls = PullMessageProcessor(
            store, store.commitlog.read_lock, self.queue_nums, self.metric_stats, self._role_body
        )
        try:
            self.ha = HAService(store, self.store_config, host=self.listen_host)
            self.ha.start()
            self.server = RpcServer(self._handle, self.listen_host, self.listen_port)
            await self.server.start()
        except BaseException:
            # A port in use: the store closes cleanly (no abort file for the next start to mend).
            if self.ha is not None:
                await asyncio.to_thread(self.ha.shutdown)
            await asyncio.to_thread(store.close)
            raise
        self._arrivals = asyncio.get_running_loop().create_task(self._watch_arrivals())
        self.slave_synchronize = TransportOffsetSynchronize(store.consumer_offsets, self.address)
        if self.remoting_port is not None:
            await self._start_remoting()
        self._handle_slave_synchronize()
        # Delayed messages: delivered while this broker is a master (handleScheduleMessageService)
        # by the store's ScheduleMessageService, through this broker's put (a SYNC_MASTER's waits
        # for its slave), their progress in config/delayOffset.json in Java's format.
        self._loop = asyncio.get_running_loop()
        assert store.schedule is not None
        self.schedule = store.schedule
        self.schedule.start(self._schedule_put, self._schedule_commit, self._takes_puts)
        self._seed_delay_offsets()
        log.info(
            "classic broker %s (%s) serves on %s, HA port %d%s",
            self.broker_name,
            self.role,
            self.address,
            self.ha.port,
            f", master HA {self.store_config.ha_master_address}" if self.role == SLAVE else "",
        )

    async def _start_remoting(self) -> None:
        store, ha = self.store, self.ha
        assert store is not None and ha is not None and self.remoting_port is not None
        assert self.topics is not None and self.subscriptions is not None
        host = self.listen_host if self.listen_host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        cfg = BrokerConfig(
            self.cluster,
            self.broker_name,
            host,
            self.remoting_port,
            self.namesrv_addrs,
            self._auto_create_topic,
            self.queue_nums,
            "",
            broker_id=self.broker_id if self.broker_id else 1,  # a slave's; Java refuses 0 for one
            ha_addr=f"{host}:{ha.port}",
            sync_delay_s=min(SYNC_DELAY_S, self.sync_period_s),
            sync_period_s=self.sync_period_s,
            slave_read_enable=self.slave_read_enable,
            auto_create_subscription_group=self.auto_create_subscription_group,
        )

        def delay_sink(table: dict[int, int]) -> None:
            # Into the store's ScheduleMessageService, the one writer of delayOffset.json.
            if store.schedule is not None:
                store.schedule.update_offsets(table)

        remoting = BrokerRemoting(
            _RemotingView(self, store),
            cfg,
            self.listen_host,
            store.preparer.store_host_raw,
            offsets=store.consumer_offsets,
            delay_table=self._delay_table,
            delay_sink=delay_sink,
            config_path=self.config_path,
            file_properties=self.config_properties,
            store_properties=store_properties(self.store_config),
            topics=self.topics,
            subscriptions=self.subscriptions,
        )
        remoting.leading = self.is_master
        try:
            await remoting.start()
        except BaseException:
            await self.shutdown()
            raise
        self.remoting = remoting

    @property
    def _auto_create_topic(self) -> bool:
        return self.config_properties.get("autoCreateTopicEnable", "true").strip().lower() == "true"

    async def handle(self, code: int, body: dict[str, Any], peer: str) -> Response:
        """MessageServiceView.handle: the remoting processors' way in (the same checks)."""
        try:
            return await self._handle_message(MessageRequestCode(code), body, peer)
        except DLedgerError as exc:
            return Response(exc.code, {}, exc.message)

    async def shutdown(self) -> None:
        """Stop serving, stop HA, close the store (flushed, checkpoint written, no ``abort``)."""
        if self._stopping:
            return
        self._stopping = True
        if self.remoting is not None:
            await self.remoting.close()
        if self._arrivals is not None:
            self._arrivals.cancel()
        if self._sync_task is not None:
            self._sync_task.cancel()
        if self.store is not None and self.store.schedule is not None:
            # Off the loop: a delivery under way finishes its put on it. Writes delayOffset.json.
            await asyncio.to_thread(self.store.schedule.shutdown)
        if self.server is not None:
            await self.server.close()
        if self.ha is not None:
            await asyncio.to_thread(self.ha.shutdown)
        if self.store is not None:
            await asyncio.to_thread(self.store.close)

    def _sync_source(self) -> str | None:
        if self.master_addr is not None:
            return self.master_addr
        ha = self.store_config.ha_master_address
        if not ha:
            return None
        host, _, port = ha.rpartition(":")
        return f"{host}:{int(port) - 1}"

    def _remoting_master(self) -> str | None:
        """Until the name server says (masterAddr): Java's port convention, the master's HA port
        being its listenPort + 1."""
        ha = self.store_config.ha_master_address
        if not ha:
            return None
        host, _, port = ha.rpartition(":")
        return f"{host}:{int(port) - 1}"

    def _handle_slave_synchronize(self) -> None:
        """handleSlaveSynchronize: a slave syncs metadata from its master; a master does not."""
        if self._sync_task is not None:
            self._sync_task.cancel()
            self._sync_task = None
        if self.remoting is not None:
            # Over remoting (BrokerRemoting's SlaveSynchronize), the role its brokerId too.
            self.remoting.on_role_change(self.is_master)
            if self.role == SLAVE and self.remoting.slave_synchronize.master_addr is None:
                self.remoting.slave_synchronize.master_addr = self._remoting_master()
            return
        if self.role == SLAVE:
            self.slave_synchronize.master_addr = self._sync_source()
            self._sync_task = asyncio.get_running_loop().create_task(self.slave_synchronize.run())
        else:
            self.slave_synchronize.master_addr = None

    # -- delayed messages ----------------------------------------------------------------------

    def _takes_puts(self) -> bool:
        return self.is_master and not self._stopping

    def _schedule_put(self, batch: PreparedBatch) -> bool:
        """ScheduleMessageService's put, from its thread: this broker's, on its loop."""
        assert self._loop is not None and self.store is not None and self.store.schedule is not None
        wait = self.store_config.sync_flush_timeout / 1000.0 + 30.0
        done = call_on_loop(self._loop, lambda: self._put(batch), self.store.schedule.stopping, wait)
        return done is not None and done[0] == PutMessageStatus.PUT_OK

    def _delay_table(self) -> dict[int, int] | None:
        """What GET_ALL_DELAY_OFFSET answers a slave: the ScheduleMessageService's progress."""
        store = self.store
        if store is None or store.schedule is None:
            return None
        return store.schedule.table()

    def _schedule_commit(self, queue_id: int, offset: int) -> bool:
        # Kept as consumer offsets of DELAY_OFFSET_GROUP too: a slave copies those (SlaveSynchronize)
        # and, promoted, goes on from them.
        assert self.store is not None
        self.store.commit_offset(DELAY_OFFSET_GROUP, RMQ_SYS_SCHEDULE_TOPIC, queue_id, offset)
        return True

    def _seed_delay_offsets(self) -> None:
        """A delayOffset.json ahead of the group's offsets here (a Java broker's, or one a crash
        left newer than consumerOffset.json) goes into them, for a slave to copy."""
        store = self.store
        assert store is not None and store.schedule is not None
        for level, offset in store.schedule.table().items():
            if store.query_offset(DELAY_OFFSET_GROUP, RMQ_SYS_SCHEDULE_TOPIC, level - 1) < offset:
                store.commit_offset(DELAY_OFFSET_GROUP, RMQ_SYS_SCHEDULE_TOPIC, level - 1, offset)

    async def _watch_arrivals(self) -> None:
        """MessageArrivingListener: wake held pulls when dispatch moved."""
        assert self.store is not None
        reput = self.store.reput
        seen = reput.reput_from
        while True:
            await asyncio.sleep(ARRIVAL_POLL_S)
            now_at = reput.reput_from
            if now_at != seen:
                seen = now_at
                if self.pulls.held:
                    self.pulls.notify_message_arriving()

    # -- roles -------------------------------------------------------------------------------

    async def change_to_master(self, role: str = SYNC_MASTER) -> None:
        """changeToMaster: stop following, then take puts (after the store rebuilt its
        topic-queue table from its consume queues)."""
        if role not in (ASYNC_MASTER, SYNC_MASTER):
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"role {role!r}: want ASYNC_MASTER or SYNC_MASTER")
        store, ha = self.store, self.ha
        assert store is not None and ha is not None
        ha.update_master_address(None)
        await asyncio.to_thread(ha.ha_client.wait_unlinked, 5.0)
        await asyncio.to_thread(store.change_role, role)
        self.store_config = self.store_config.replace(broker_role=role, ha_master_address=None)
        if store.schedule is not None:
            store.schedule.wake()  # delivers now, not after its idle sleep (1 s)
        self._handle_slave_synchronize()
        log.info("changed to %s", role)

    async def change_to_slave(self, master_ha: str | None) -> None:
        """changeToSlave: refuse puts from now, follow ``master_ha`` (None: keep the address)."""
        store, ha = self.store, self.ha
        assert store is not None and ha is not None
        store.change_role(SLAVE)
        addr = master_ha or self.store_config.ha_master_address
        self.store_config = self.store_config.replace(broker_role=SLAVE, ha_master_address=addr)
        ha.update_master_address(addr)
        if master_ha is not None:
            self.master_addr = None  # follow the new master's address
        self._handle_slave_synchronize()
        log.info("changed to SLAVE of %s", addr)

    async def _update_config(self, body: dict[str, Any]) -> Response:
        role = body.get("brokerRole")
        master_ha = body.get("haMasterAddress")
        if master_ha is not None and not isinstance(master_ha, str):
            return Response(ResponseCode.UNEXPECTED_ARGUMENT, {}, "haMasterAddress must be host:port")
        if role == SLAVE:
            if not (master_ha or self.store_config.ha_master_address):
                return Response(ResponseCode.UNEXPECTED_ARGUMENT, {}, "a slave needs haMasterAddress")
            await self.change_to_slave(master_ha)
        elif role in (ASYNC_MASTER, SYNC_MASTER):
            await self.change_to_master(role)
        else:
            return Response(
                ResponseCode.UNEXPECTED_ARGUMENT, {}, f"brokerRole {role!r}: want ASYNC_MASTER, SYNC_MASTER or SLAVE"
            )
        return Response(ResponseCode.SUCCESS, self._role_body())

    # -- requests ----------------------------------------------------------------------------

    def _role_body(self) -> dict[str, Any]:
        me = self.member_id
        return {
            "role": "LEADER" if self.is_master else "FOLLOWER",
            "term": 0,
            "leader": me if self.is_master else None,
            "id": me,
        }

    def _metadata(self) -> Response:
        store = self.store
        assert store is not None
        me = self.member_id
        return Response(
            ResponseCode.SUCCESS,
            MetadataResponse(
                me,
                self.address,
                self.broker_name,
                "LEADER" if self.is_master else "FOLLOWER",
                0,
                me if self.is_master else None,
                -1,
                -1,
                0,
                os.getpid(),
                {me: self.address},
            ).to_wire(),
        )

    async def _handle(self, request: Request) -> Response:
        if request.group is not None and request.group != self.broker_name:
            return Response(
                ResponseCode.UNKNOWN_GROUP, {}, f"this broker is {self.broker_name!r}, not {request.group!r}"
            )
        code = request.code
        if code == RequestCode.METADATA:
            return self._metadata()
        if code == MessageRequestCode.GET_ALL_CONSUMER_OFFSET:
            assert self.store is not None
            return Response(ResponseCode.SUCCESS, {"json": self.store.consumer_offsets.encode()})
        if code == MessageRequestCode.UPDATE_BROKER_CONFIG:
            return await self._update_config(request.body)
        if code not in MESSAGE_REQUEST_CODES:
            return Response(ResponseCode.UNSUPPORTED, {}, f"request code {code}")
        try:
            return await self._handle_message(MessageRequestCode(code), request.body, request.peer)
        except DLedgerError as exc:
            return Response(exc.code, {}, exc.message)

    def _not_master(self, what: str) -> Response:
        return Response(
            ResponseCode.NOT_LEADER, {"leader": None}, f"{self.member_id} is a slave: {what} go to the master"
        )

    def _master_reachable(self) -> bool:
        return self.ha is not None and self.ha.ha_client.connected

    async def _handle_message(self, c: MessageRequestCode, body: dict[str, Any], peer: str) -> Response:
        store = self.store
        assert store is not None
        if c in (MessageRequestCode.SEND_MESSAGE, MessageRequestCode.SEND_BATCH_MESSAGE):
            started = time.perf_counter()
            resp = await self._send(body, peer)
            if self.is_master:  # a slave's refusals are no sends of its own
                raw = body.get("raw")
                size = len(raw) if isinstance(raw, bytes) else 0
                self.metric_stats.sent(str(body.get("topic")), resp.body, size, time.perf_counter() - started)
                await note_put_topic(self.topics, body.get("topic"), resp, self.remoting)
            return resp
        if body.get("leader_only") and not self.is_master and self._master_reachable():
            return self._not_master("reads for the master")
        if c == MessageRequestCode.PULL_MESSAGE:
            return await self.pulls.pull(PullRequest.from_wire(body))
        if c == MessageRequestCode.UPDATE_CONSUMER_OFFSET:
            if not self.is_master:
                return self._not_master("offset commits")
            req = ConsumerOffsetRequest.from_wire(body)
            why = validate_group(req.group) or self.pulls.queue_problem(req.topic, req.queue_id)
            if why is None and req.offset < 0:
                why = "offset must be >= 0"
            if why is not None:
                return Response(ResponseCode.UNEXPECTED_ARGUMENT, {}, why)
            store.commit_offset(req.group, req.topic, req.queue_id, req.offset)
            await note_commit_group(self.subscriptions, req.group)
            return Response(ResponseCode.SUCCESS, {"offset": req.offset})
        if c == MessageRequestCode.QUERY_CONSUMER_OFFSET:
            req = ConsumerOffsetRequest.from_wire(body)
            return Response(ResponseCode.SUCCESS, {"offset": store.query_offset(req.group, req.topic, req.queue_id)})
        if c in QUEUE_OFFSET_CODES:
            return await queue_offset(store, c, body)
        if c in QUERY_CODES:
            return await query_message(store, c, body)
        if c == MessageRequestCode.GET_ROUTEINFO_BY_TOPIC:
            return route_info(self.queue_nums, self.store_config.max_message_size, self._role_body())
        if c == MessageRequestCode.GET_BROKER_RUNTIME_INFO:
            return Response(ResponseCode.SUCCESS, self.stats())
        return Response(ResponseCode.UNSUPPORTED, {}, f"request code {int(c)}")

    # -- puts --------------------------------------------------------------------------------

    async def _send(self, body: dict[str, Any], peer: str) -> Response:
        if not self.is_master:
            reason = f"{self.member_id} is a slave"
            return Response(
                ResponseCode.NOT_LEADER, SendResponse(PutMessageStatus.SERVICE_NOT_AVAILABLE, reason).to_wire(), reason
            )
        qid = 0
        try:
            req, bodies, props = SendRequest.from_wire(body)
            qid = req.queue_id
            batch: PreparedBatch | PackedSend | _ClassicPacked = self.sends.prepare(req, bodies, props, peer)
            if isinstance(batch, PackedSend):
                sends = self.sends

                def as_messages() -> PreparedBatch:
                    # Where the batch does not fit the current file: message columns, which the
                    # log places across files (once a file, at most).
                    born = _parse_host(req.born_host) if req.born_host else _peer_host(peer)
                    packed = props
                    if packed is None:
                        assert req.props_stem is not None
                        packed = _packed(_stem_properties(req.props_stem, req.uniq_first, len(bodies)))
                    return sends._messages(req, bodies, packed, born)

                batch = _ClassicPacked(batch, as_messages)
        except (IllegalMessage, DLedgerError) as exc:
            reason = exc.message if isinstance(exc, DLedgerError) else str(exc)
            return Response(ResponseCode.SUCCESS, SendResponse(PutMessageStatus.MESSAGE_ILLEGAL, reason, qid).to_wire())
        assert not isinstance(batch, PackedSend)
        return await self._answer_put(batch, qid)

    async def put_inner(self, msgs: list[Message]) -> Response:
        """A put of the broker's own making (over remoting: the transaction bridge's half, final
        and op messages, which a producer's send may not name): no send checks of its topic."""
        if not self.is_master:
            reason = f"{self.member_id} is a slave"
            return Response(
                ResponseCode.NOT_LEADER, SendResponse(PutMessageStatus.SERVICE_NOT_AVAILABLE, reason).to_wire(), reason
            )
        assert self.store is not None
        qid = msgs[0].queue_id if msgs else 0
        try:
            batch = self.store.preparer.prepare(msgs)
        except IllegalMessage as exc:
            return Response(
                ResponseCode.SUCCESS, SendResponse(PutMessageStatus.MESSAGE_ILLEGAL, str(exc), qid).to_wire()
            )
        return await self._answer_put(batch, qid)

    async def _answer_put(self, batch: PreparedBatch | _ClassicPacked, qid: int) -> Response:
        status, result = await self._put(batch)
        if result is None or result.status != AppendMessageStatus.PUT_OK:
            reason = "message larger than a commit-log file" if result is not None else "put failed"
            return Response(ResponseCode.SUCCESS, SendResponse(status, reason, qid).to_wire())
        phys = result.wrote_offsets if result.wrote_offsets is not None else [result.wrote_offset]
        resp = SendResponse(
            status,
            "" if status == PutMessageStatus.PUT_OK else status.name,
            qid,
            int(result.logics_offset),
            phys,
            format_host(self.store.store_host) if self.store is not None else "",
            self.member_id,
        )
        return Response(ResponseCode.SUCCESS, resp.to_wire())

    async def _put(self, batch: PreparedBatch | _ClassicPacked) -> tuple[PutMessageStatus, Any]:
        """The commit log's put, then the flush (SYNC_FLUSH) and the slaves (SYNC_MASTER)."""
        store, ha = self.store, self.ha
        assert store is not None and ha is not None
        try:
            if isinstance(batch, _ClassicPacked):
                result = store.commitlog.put_uniform(batch)
            else:
                result = store.commitlog.put(batch)
        except Exception:
            log.exception("put failed")
            return PutMessageStatus.UNKNOWN_ERROR, None
        if result.status != AppendMessageStatus.PUT_OK:
            return PutMessageStatus.MESSAGE_ILLEGAL, result
        ha.wakeup_all()
        end = (
            int(result.wrote_offsets[-1]) + int(batch.record_lengths()[-1])
            if result.wrote_offsets is not None
            else (int(result.wrote_offset + result.wrote_bytes))
        )
        if not batch.wait_store:
            return PutMessageStatus.PUT_OK, result
        if store.config.sync_flush and not await asyncio.to_thread(store.commitlog.wait_flushed, end):
            return PutMessageStatus.FLUSH_DISK_TIMEOUT, result
        if self.role != SYNC_MASTER:
            return PutMessageStatus.PUT_OK, result
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[PutMessageStatus] = loop.create_future()

        def done(status: PutMessageStatus) -> None:
            loop.call_soon_threadsafe(_settle, fut, status)

        waited = ha.handle_ha(end, done)
        if not isinstance(waited, GroupCommitRequest):
            return waited, result
        return await fut, result

    # -- queries -----------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """GET_BROKER_RUNTIME_INFO: role, HA state, positions and queues."""
        store, ha = self.store, self.ha
        assert store is not None and ha is not None
        queues = [[topic, qid, int(cq.min_offset), int(cq.max_offset)] for topic, qid, cq in list(store.consume_queues)]
        return {
            **self._role_body(),
            "broker_role": self.role,
            "min_phys_offset": store.min_phys_offset,
            "committed_phys_offset": store.max_phys_offset,
            "dispatch_behind_bytes": store.dispatch_behind_bytes(),
            "writable": self.is_master,
            "ha_port": ha.port,
            "ha_slaves": ha.connection_count,
            "ha_push2slave_max_offset": ha.push2slave_max_offset,
            "ha_master_address": ha.ha_client.master_address,
            "ha_connected": ha.ha_client.connected,
            "queues": queues,
            "store_host": format_host(store.store_host),
            "root": str(store.root),
        }


class _RemotingView:
    """MessageServiceView of a started classic broker (its store open)."""

    def __init__(self, broker: BrokerController, store: MessageStore) -> None:
        self.broker = broker
        self.store = store
        self.metric_stats = broker.metric_stats

    async def handle(self, code: int, body: dict[str, Any], peer: str) -> Response:
        return await self.broker.handle(code, body, peer)

    async def put_inner(self, msgs: list[Message]) -> Response:
        return await self.broker.put_inner(msgs)


class _ClassicPacked:
    """A producer's packed batch to one queue, as the classic log's ``put_uniform`` takes a
    UniformBatch: one kernel call encodes its records at their physical offsets, one append
    writes them (no object per message); ``prepared`` is the same batch as message columns."""

    __slots__ = ("_as_messages", "longest", "n", "send", "wait_store")

    def __init__(self, send: PackedSend, as_messages: Callable[[], PreparedBatch]) -> None:
        self.send = send
        self.n = send.n
        self._as_messages = as_messages
        self.longest = int(self.record_lengths().max())
        props = send.properties
        # WAIT=false on every message (a stem names it once): nobody waits for its flush or slave.
        self.wait_store = not (isinstance(props, bytes) and _WAIT_FALSE in props)

    @property
    def tpl(self) -> _ClassicPacked:
        return self

    @property
    def queue_key(self) -> str:
        return self.send.queue_key

    @property
    def advances(self) -> bool:
        return self.send.advances

    @property
    def sraw(self) -> bytes:
        return self.send.store_host

    def record_lengths(self) -> np.ndarray:
        p = self.send
        fixed = int(K.record_length(p.sys_flag, 0, len(p.topic), 0))
        lengths: np.ndarray = np.diff(p.bodies.packed[1]).astype(np.int64) + fixed
        if isinstance(p.properties, bytes):
            lengths += len(p.properties) + 4
        else:
            lengths += np.diff(p.properties.packed[1]).astype(np.int64)
        return lengths

    def encode(self, queue_offset: int, phys_offset: int, store_timestamp: int) -> tuple[Any, np.ndarray]:
        p = self.send
        return K.encode_uniform(
            p.bodies,
            p.topic,
            p.properties,
            p.uniq_first,
            p.queue_id,
            p.flag,
            p.sys_flag,
            p.born_timestamp,
            p.born_host,
            store_timestamp,
            p.store_host,
            queue_offset if p.advances else 0,
            p.advances,
            phys_offset,
            0,
        )

    def prepared(self) -> PreparedBatch:
        return self._as_messages()


def _settle(fut: asyncio.Future[PutMessageStatus], status: PutMessageStatus) -> None:
    if not fut.done():
        fut.set_result(status)
