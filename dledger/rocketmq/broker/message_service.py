"""The member side of the replicated message service: RocketMQ's message store on a DLedger group.

``MessageService`` is the ``GroupApplication`` a ``NodeServer`` runs for a group started with
``message_store``. It opens the member's ``MessageStore`` at the store root (``dledger-<id>/``,
``consumequeue/``, ``index/``, ``config/``) and hands the node the DLedger store inside it
(opened with the AppendHook, ``body_pos_patch=28``), so the group's log *is* the commit log.

- Puts (leader only): the put lock serialises them; under it the queue offsets are assigned
  from the topic-queue table, the records encoded in one kernel call and proposed as one
  packed batch, written to the leader's log before the lock is let go. The table moves only
  when the batch is in the log; a leader's log only grows within its term, so the offsets
  of a term are gap-free, and a new term starts from a table rebuilt from the committed
  consume queues (below).
- Every member dispatches committed records into its own consume queues and index (the
  store's ReputMessageService reads only below the committed position), its rounds run by the
  member's loop after commits (``dispatch.LoopReput``); under a heavy stream a follower's
  rounds are 3x further apart than the leader's, whose queues serve the long polls.
- Role change (DLedgerRoleChangeHandler): followers and candidates refuse puts with
  SERVICE_NOT_AVAILABLE and a leader hint; a new leader takes puts once its whole ledger is
  committed and dispatched, after rebuilding the table from its consume queues. A predecessor's
  tail that only a write of the new term can commit (DLedger has no no-op entry) gets one: a
  ROLLBACK record of ``NOOP_TOPIC``, which dispatch puts in no queue and no index.
- Pulls are held until a message is dispatched to the queue or the time is up
  (PullRequestHoldService).
- Consumer offsets go through the log: an UPDATE_CONSUMER_OFFSET is a record of
  ``OFFSET_TOPIC`` (queue 0, JSON body) put by the leader; every member applies those records,
  in log order, to its ``config/consumerOffset.json``. So every member holds the same offsets
  and a commit acknowledged survives a failover.
- Java's ``config/topics.json`` and ``config/subscriptionGroup.json``, with remoting or without
  (``load_metadata``, as a classic broker sets them up): the leader writes a topic at its first
  put and a group at its first offset commit; at start every member adds its queues' topics and
  its offsets' groups, and without remoting also on taking the lead and at its stop (with
  remoting a follower's tables are its leader's, SlaveSynchronize).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dledger._ext import load as _load_ext
from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.errors import DLedgerError
from dledger.metrics import AppMetric
from dledger.net.transport import Response
from dledger.packed import FramedBodies, PackedBodies
from dledger.raft.member_state import Role
from dledger.rocketmq.broker.broker_config import BrokerConfig
from dledger.rocketmq.broker.broker_controller import (
    adopt_store_metadata,
    load_metadata,
    note_commit_group,
    note_put_topic,
)
from dledger.rocketmq.broker.broker_remoting import BrokerRemoting
from dledger.rocketmq.broker.configuration import member_config_path, with_saved_properties
from dledger.rocketmq.broker.pull_message_processor import PullMessageProcessor
from dledger.rocketmq.broker.query_message_processor import (
    QUERY_CODES,
    QUEUE_OFFSET_CODES,
    query_message,
    queue_offset,
    route_info,
)
from dledger.rocketmq.broker.send_message_processor import (
    NOOP_TOPIC,
    OFFSET_TOPIC,
    SYSTEM_TOPICS,
    PackedSend,
    SendMessagePreparer,
)
from dledger.rocketmq.broker.service_metrics import SYSTEM_GROUP_PREFIX, MessageStats
from dledger.rocketmq.store.config import SYNC_FLUSH, MessageStoreConfig
from dledger.rocketmq.store.dispatch import FOLLOWER_HEAVY_PAUSE, HEAVY_PAUSE, LoopReput
from dledger.rocketmq.store.dledger_commitlog import BODY_OFFSET, LEADER, status_of_dledger_code
from dledger.rocketmq.store.encode import (
    IllegalMessage,
    PreparedBatch,
    assign_queue_offsets,
    encode_batch,
)
from dledger.rocketmq.store.message import RMQ_SYS_SCHEDULE_TOPIC, Message, MessageSysFlag, format_host
from dledger.rocketmq.store.schedule_message_service import DELAY_OFFSET_GROUP, call_on_loop
from dledger.rocketmq.store.status import GetMessageStatus, PutMessageStatus
from dledger.rocketmq.store.topic_validator import validate_group
from dledger.rocketmq.wire import (
    MESSAGE_REQUEST_CODES,
    ConsumerOffsetRequest,
    MessageRequestCode,
    PullRequest,
    SendRequest,
    SendResponse,
)

K = _load_ext("message")

if TYPE_CHECKING:
    from dledger.application import GroupApplication, GroupHandle
    from dledger.rocketmq.store.message_store import MessageStore
    from dledger.store.file import MmapFileStore

log = logging.getLogger(__name__)

# A new leader whose no-op did not commit tries again after this.
NOOP_RETRY_S = 1.0
# Past the quorum-ack wait, how long a put waits for the node's answer before it gives up.
ANSWER_MARGIN_S = 5.0
# How long an offset commit waits for its record to be applied here.
OFFSET_APPLY_WAIT_S = 3.0


# The member's own DLedger store options that the message store's derived config lacks.
_STORE_OPTIONS = (
    "flush_file_interval",
    "check_point_interval",
    "mapped_file_size_for_entry_index",
    "data_cache_window",
    "data_store_path",
    "disk_space_ratio_to_check_expired",
    "disk_space_ratio_to_force_clean",
)


def message_store_config(cfg: DLedgerConfig, address: str) -> MessageStoreConfig:
    """The member's MessageStoreConfig from its DLedgerConfig (RocketMQ builds it the other way
    round; the options are the same ones, as DLedgerCommitLog builds them)."""
    if cfg.store_type != "FILE":
        raise DLedgerError(
            ResponseCode.UNEXPECTED_ARGUMENT,
            f"the message store keeps its commit log in files: store_type {cfg.store_type} will not do",
        )
    sync = cfg.sync or cfg.flush_disk_type == SYNC_FLUSH  # DLedgerConfig has checked the name
    return MessageStoreConfig(
        store_path_root_dir=cfg.store_path_root_dir or cfg.store_base_dir,
        enable_dledger_commit_log=True,
        dledger_group=cfg.group,
        dledger_peers=cfg.peers,
        dledger_self_id=cfg.self_id,
        preferred_leader_id=cfg.preferred_leader_ids,
        is_enable_batch_push=cfg.is_enable_batch_push,
        mapped_file_size_commit_log=cfg.mapped_file_size_commit_log or cfg.mapped_file_size_for_entry_data,
        max_message_size=cfg.max_message_size,
        flush_disk_type=SYNC_FLUSH if sync else "ASYNC_FLUSH",
        delete_when=cfg.delete_when,
        file_reserved_time=max(cfg.file_reserved_hours - 1, 0),
        clean_file_forcibly_enable=cfg.enable_disk_force_clean,
        message_index_enable=cfg.message_index_enable,
        access_message_in_memory_max_ratio=cfg.access_message_in_memory_max_ratio,
        store_host=address,
        # A member still catching up after this many seconds as leader says so (and why).
        dledger_leader_ready_timeout=5.0,
        dledger_store_options={name: getattr(cfg, name) for name in _STORE_OPTIONS},
    )


class _NodeAppender:
    """The DLedger commit log's appender in a group: the node owns appends (see ``_put``)."""

    def __init__(self, store: MmapFileStore) -> None:
        self.store = store

    def append_batch(self, bodies: Any, term: int) -> tuple[int, np.ndarray]:
        raise DLedgerError(ResponseCode.UNSUPPORTED, "in a group, puts go through the member's message service")

    @property
    def committed_pos(self) -> int:
        return int(self.store.committed_pos)


def _reserved_offset(req: ConsumerOffsetRequest) -> str | None:
    """Why a client may not commit this offset: the delay service's progress (which RocketMQ
    keeps apart, in delayOffset.json; moved, acknowledged delayed messages are never delivered)
    and the member's own topics are the service's alone."""
    if req.group.startswith(SYSTEM_GROUP_PREFIX):
        return f"consumer group {req.group!r} is reserved for the message service ({SYSTEM_GROUP_PREFIX}*)"
    if req.topic in SYSTEM_TOPICS:
        return f"topic {req.topic!r} is a system topic of the message service"
    return None


def _heavy_dispatch_pause(role: Role) -> float:
    """The pause after a dispatch round of a heavy stream: a leader's queues serve long polls
    and its readiness to take puts, a follower's only follower reads."""
    return HEAVY_PAUSE if role == Role.LEADER else FOLLOWER_HEAVY_PAUSE


class MessageService:
    """The RocketMQ message store of one member of a group (see the module docstring)."""

    request_codes = MESSAGE_REQUEST_CODES

    def __init__(self, config: DLedgerConfig, address: str) -> None:
        from dledger.rocketmq.store.message_store import MessageStore, StoreLockedError

        # UPDATE_BROKER_CONFIG's changes, saved in the member's own file, are its options now.
        self.saved_config_path: Path | None = None
        self.saved_properties: dict[str, str] = {}
        if config.listen_port is not None:
            from dledger.store.properties import read_properties

            self.saved_config_path = member_config_path(Path(config.store_path_root_dir or config.store_base_dir))
            self.saved_properties = read_properties(self.saved_config_path) or {}
            if self.saved_properties:
                log.info("broker properties from %s: %s", self.saved_config_path, self.saved_properties)
                config = with_saved_properties(config, self.saved_properties)
        self.config = config
        self.address = address
        # With RocketMQ's remoting on (listen_port), records carry brokerIP1:listenPort as their
        # store host, as the Java broker stamps them: the offset message ids lead clients there.
        self.broker_config = BrokerConfig.of(config, address.rpartition(":")[0])
        self.remoting: BrokerRemoting | None = None
        store_host = self.broker_config.broker_addr if self.broker_config is not None else address
        self.store_config = message_store_config(config, store_host)
        self.root = Path(self.store_config.store_path_root_dir)
        opened: list[MmapFileStore] = []

        def appender(dstore: MmapFileStore) -> _NodeAppender:
            opened.append(dstore)
            return _NodeAppender(dstore)

        # Dispatch runs on the member's loop (bind), not in a thread of the store's own.
        try:
            self.store: MessageStore = MessageStore(
                self.root, self.store_config, appender=appender, dispatch_thread=False, schedule=False
            )
        except StoreLockedError:
            # Members sharing one --store-dir, as a first try often has them: say so in one line.
            raise DLedgerError(
                ResponseCode.UNEXPECTED_ARGUMENT,
                f"{self.root} is open in another process (a member with the same --store-dir?): "
                "a message-store member needs a store directory of its own",
            ) from None
        if not opened:
            self.store.close()
            raise DLedgerError(
                ResponseCode.UNEXPECTED_ARGUMENT, f"{self.root} holds a classic commit log, not a DLedger one"
            )
        self.node_store: MmapFileStore = opened[0]
        # config/topics.json and config/subscriptionGroup.json, with remoting or without, set up
        # as a classic broker's (BrokerRemoting takes these two).
        self.topics, self.subscriptions = load_metadata(
            self.store,
            config.default_topic_queue_nums,
            config.auto_create_topic_enable,
            config.auto_create_subscription_group,
            config.broker_cluster_name,
            config.broker_name or config.group,
        )
        self.commitlog = self.store.commitlog
        self.queue_nums = config.default_topic_queue_nums
        self._store_host_text = format_host(self.store.store_host)
        self._group: GroupHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # The offset commits waiting for their record to be applied here.
        self._waiters: list[asyncio.Future[None]] = []
        self._offsets_next = self.store.min_offset_in_queue(OFFSET_TOPIC, 0)
        self._stop = threading.Event()
        self._reput: LoopReput | None = None
        self._noop: asyncio.Future[Any] | None = None
        self._adopting: asyncio.Task[None] | None = None  # held: the loop keeps only weak references
        # Delayed messages, delivered by the leader: the store's ScheduleMessageService with this
        # member's put and its offsets committed through the log (started with the loop, in bind).
        assert self.store.schedule is not None
        self.schedule = self.store.schedule
        self.metric_stats = MessageStats()
        self.sends = SendMessagePreparer(self.store, self.store_config, self.queue_nums)
        self.pulls = PullMessageProcessor(
            self.store, self.node_store._unmap_lock, self.queue_nums, self.metric_stats, self._role_body
        )
        self._apply_offsets()

    # -- GroupApplication ------------------------------------------------------------------

    def bind(self, group: GroupHandle) -> None:
        self._group = group
        self._loop = asyncio.get_running_loop()
        # ReputMessageService's rounds, run by this loop after commits (where they arrive): in a
        # thread of its own each round cost GIL and thread hand-overs on every member (see
        # docs/message-service.md), and the arrivals it makes for held pulls come here anyway.
        self._reput = LoopReput(self.store.reput, self._loop, self._dispatched)
        self._reput.heavy_pause = _heavy_dispatch_pause(group.role)
        self._reput.kick()
        self.schedule.start(self._schedule_put, self._schedule_commit, self._takes_puts)
        if self.broker_config is not None:
            self.remoting = BrokerRemoting(
                self,
                self.broker_config,
                self.address.rpartition(":")[0].strip("[]") or "0.0.0.0",
                self.store.preparer.store_host_raw,
                topics=self.topics,
                subscriptions=self.subscriptions,
                config_path=self.saved_config_path,
                file_properties=self.saved_properties,
            )
            self.remoting.leading = group.is_leader
            self._remoting_start = self._loop.create_task(self._start_remoting(self.remoting))

    async def _start_remoting(self, remoting: BrokerRemoting) -> None:
        try:
            await remoting.start()
        except OSError as exc:
            log.error(
                "remoting on port %d failed to start: %s",
                self.broker_config.listen_port if self.broker_config else 0,
                exc,
            )

    def on_role_change(self, role: Role, term: int, leader_id: str | None) -> None:
        # DLedgerRoleChangeHandler's rule, by index as there: a leader takes puts once its
        # ledger end is committed (or it has no entry) and dispatch has caught up.
        st, reput = self.node_store, self.store.reput

        def ready() -> bool:
            end = st.ledger_end_index
            return end == -1 or (st.committed_index >= end and reput.behind() == 0)

        self.commitlog.on_role_change(role.name, term, ready)
        if self._reput is not None:
            self._reput.heavy_pause = _heavy_dispatch_pause(role)
        if role == Role.LEADER and self._loop is not None:
            self._loop.call_soon(self._ensure_committed_tail, term)
            if self.remoting is None:
                # Keep what the predecessor made (its queues' topics, its committed groups); with
                # remoting a follower has its leader's tables (SlaveSynchronize) and remoting's
                # role change adopts the topics.
                self._adopting = self._loop.create_task(
                    asyncio.to_thread(adopt_store_metadata, self.store, self.topics, self.subscriptions)
                )
        if self.remoting is not None:
            self.remoting.on_role_change(role == Role.LEADER)

    def on_committed(self, committed_index: int) -> None:
        self.store.on_committed(int(self.node_store.committed_pos))
        if self._reput is not None:
            # Scheduled, not run here: the node performs this call's outputs (pushes, answers)
            # when it returns.
            self._reput.kick()

    def close(self) -> None:
        self._stop.set()
        if self.remoting is not None and self._loop is not None and self._loop.is_running():
            # Called off the loop: the remoting side unregisters and closes on it.
            try:
                asyncio.run_coroutine_threadsafe(self.remoting.close(), self._loop).result(15)
            except Exception:
                log.exception("closing the remoting side failed")
        # Off the loop (the node calls close in a thread): a delivery under way finishes on it.
        self.schedule.shutdown()
        if self._reput is not None:
            self._reput.close()
        self._apply_offsets()
        if self.remoting is None:
            # Dispatch stopped: a follower's files hold the topics and groups its log brought, for
            # a Java broker restarted on the directory (with remoting, its leader's sync gave them).
            adopt_store_metadata(self.store, self.topics, self.subscriptions)
        self.store.close()

    async def handle(self, code: int, body: dict[str, Any], peer: str) -> Response:
        try:
            c = MessageRequestCode(code)
            if c in (MessageRequestCode.SEND_MESSAGE, MessageRequestCode.SEND_BATCH_MESSAGE):
                return await self._send(body, peer)
            if body.get("leader_only"):
                # A read the client wants from the leader (its default): from one that has
                # caught up, which holds every acknowledged message (a new leader's consume
                # queues may still lack the last ones; the client asks again).
                if not self._group_is_leader():
                    return self._redirect()
                if self._catching_up():
                    return self._not_ready(send=False)
            if c == MessageRequestCode.PULL_MESSAGE:
                return await self.pulls.pull(PullRequest.from_wire(body))
            if c == MessageRequestCode.UPDATE_CONSUMER_OFFSET:
                return await self._client_commit(ConsumerOffsetRequest.from_wire(body))
            if c == MessageRequestCode.QUERY_CONSUMER_OFFSET:
                req = ConsumerOffsetRequest.from_wire(body)
                self._apply_offsets()
                return Response(
                    ResponseCode.SUCCESS, {"offset": self.store.query_offset(req.group, req.topic, req.queue_id)}
                )
            if c in QUEUE_OFFSET_CODES:
                return await queue_offset(self.store, c, body)
            if c in QUERY_CODES:
                return await query_message(self.store, c, body)
            if c == MessageRequestCode.GET_ROUTEINFO_BY_TOPIC:
                return route_info(self.queue_nums, self.store_config.max_message_size, self._role_body())
            if c == MessageRequestCode.GET_BROKER_RUNTIME_INFO:
                return Response(ResponseCode.SUCCESS, self.stats())
        except DLedgerError as exc:
            return Response(exc.code, {}, exc.message)
        return Response(ResponseCode.UNSUPPORTED, {}, f"request code {code}")

    # -- roles -----------------------------------------------------------------------------

    def _role_body(self) -> dict[str, Any]:
        g = self._group
        assert g is not None
        return {"role": g.role.name, "term": g.term, "leader": g.leader_id, "id": g.self_id}

    def _group_is_leader(self) -> bool:
        return self._group is not None and self._group.is_leader

    def _redirect(self) -> Response:
        g = self._group
        assert g is not None
        return Response(
            ResponseCode.NOT_LEADER, {"leader": g.leader_id}, f"{g.self_id} is {g.role.name}; leader {g.leader_id}"
        )

    def _not_writable(self) -> Response | None:
        """None when this member takes puts now; else the refusal (SERVICE_NOT_AVAILABLE)."""
        g = self._group
        assert g is not None
        if not g.is_leader:
            body = SendResponse(
                PutMessageStatus.SERVICE_NOT_AVAILABLE, f"{g.self_id} is {g.role.name}", leader=g.leader_id
            ).to_wire()
            return Response(ResponseCode.NOT_LEADER, body, f"{g.self_id} is {g.role.name}; leader {g.leader_id}")
        if self._catching_up():
            return self._not_ready(send=True)
        return None

    def _schedule_put(self, batch: PreparedBatch) -> bool:
        """ScheduleMessageService's put, from its thread: this member's, on its loop (committed
        by the group before it answers)."""
        assert self._loop is not None
        resp = call_on_loop(self._loop, lambda: self._put(batch), self.schedule.stopping, 60.0)
        if resp is None or resp.code != ResponseCode.SUCCESS:
            return False
        return int(resp.body.get("status", PutMessageStatus.PUT_OK)) == PutMessageStatus.PUT_OK

    def _schedule_commit(self, queue_id: int, offset: int) -> bool:
        """A level's progress, through the log as an offset of DELAY_OFFSET_GROUP: every member
        applies it, and a new leader goes on from it."""
        assert self._loop is not None
        req = ConsumerOffsetRequest(DELAY_OFFSET_GROUP, RMQ_SYS_SCHEDULE_TOPIC, queue_id, offset)
        resp = call_on_loop(self._loop, lambda: self._update_offset(req), self.schedule.stopping, 60.0)
        return resp is not None and resp.code == ResponseCode.SUCCESS

    def _takes_puts(self) -> bool:
        """What _not_writable answers, without building its refusal."""
        g = self._group
        return g is not None and g.is_leader and not self._stop.is_set() and not self._catching_up()

    def _catching_up(self) -> bool:
        """This member leads but its message store does not take puts yet (§7.5)."""
        g, cl = self._group, self.commitlog
        return g is not None and (not cl.writable or cl.role != LEADER or cl.term != g.term)

    def _not_ready(self, *, send: bool) -> Response:
        """LEADER_NOT_READY, which clients ask again: a send's answer, or a read's."""
        g = self._group
        assert g is not None
        reason = f"{g.self_id} leads term {g.term} but is still catching up (committing and dispatching its log)"
        body = (
            SendResponse(PutMessageStatus.SERVICE_NOT_AVAILABLE, reason, leader=g.self_id).to_wire()
            if send
            else {"leader": g.self_id}
        )
        return Response(ResponseCode.LEADER_NOT_READY, body, reason)

    def _ensure_committed_tail(self, term: int) -> None:
        """A new leader whose log ends past its committed index proposes a no-op record, so the
        tail commits (Raft's no-op; DLedger has none) and the leader can take puts."""
        g = self._group
        if g is None or not g.is_leader or g.term != term or self._stop.is_set():
            return
        st = self.node_store
        assert self._loop is not None
        if self.commitlog.writable:
            return
        if st.committed_index >= st.ledger_end_index:
            # Committed; dispatch is catching up. Look again (a tail may come back to commit).
            self._loop.call_later(NOOP_RETRY_S, self._ensure_committed_tail, term)
            return
        if self._noop is None or self._noop.done():
            try:
                batch = self.store.preparer.prepare(
                    [Message(NOOP_TOPIC, b"", sys_flag=MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)]
                )
                buf, starts = encode_batch(batch, np.zeros(1, np.int64), np.zeros(1, np.int64), int(time.time() * 1000))
                self._noop = g.propose(PackedBodies(buf, starts))
                log.info(
                    "leader of term %d: proposed a no-op so that entries up to %d commit", term, st.ledger_end_index
                )
            except Exception:
                log.exception("no-op proposal failed")
        # Look again later: the no-op may fail (pending full, a quorum lost for a while).
        self._loop.call_later(NOOP_RETRY_S, self._ensure_committed_tail, term)

    # -- puts ------------------------------------------------------------------------------

    async def _send(self, body: dict[str, Any], peer: str) -> Response:
        started = time.perf_counter()
        resp = await self._send_checked(body, peer)
        return await self._sent(body.get("topic"), body.get("raw"), resp, started)

    async def send_packed(
        self, req: SendRequest, bodies: PackedBodies, props: PackedBodies | None, peer: str
    ) -> Response:
        """A send whose bodies and properties are packed already (the remoting processor's,
        from a kernel): as ``handle(SEND_BATCH_MESSAGE, ...)`` without a wire dict made and
        read back (``to_wire``/``from_wire``, its checks being true by construction)."""
        started = time.perf_counter()
        refused = self._not_writable()
        if refused is not None:
            resp = refused
        elif len(bodies.offsets) < 2:
            resp = Response(
                ResponseCode.SUCCESS, SendResponse(PutMessageStatus.MESSAGE_ILLEGAL, "no messages").to_wire()
            )
        else:
            resp = await self._prepare_and_put(req, bodies, props, peer)
        return await self._sent(req.topic, bodies.raw, resp, started)

    async def _sent(self, topic: object, raw: object, resp: Response, started: float) -> Response:
        if self._group_is_leader():  # a follower's redirects are no sends of its own
            self.metric_stats.sent(
                str(topic),
                resp.body,
                len(raw) if isinstance(raw, bytes | memoryview) else 0,
                time.perf_counter() - started,
            )
            await note_put_topic(self.topics, topic, resp, self.remoting)
        return resp

    async def put_inner(self, msgs: list[Message]) -> Response:
        """A put of the broker's own making (the transaction bridge's half, final and op
        messages): not a producer's send, so none of a send's topic checks (system topics
        are its to write); answered as a send."""
        refused = self._not_writable()
        if refused is not None:
            return refused
        try:
            batch = self.store.preparer.prepare(msgs)
        except IllegalMessage as exc:
            return Response(ResponseCode.SUCCESS, SendResponse(PutMessageStatus.MESSAGE_ILLEGAL, str(exc)).to_wire())
        return await self._put(batch)

    async def _send_checked(self, body: dict[str, Any], peer: str) -> Response:
        refused = self._not_writable()
        if refused is not None:
            return refused
        try:
            req, bodies, props = SendRequest.from_wire(body)
        except DLedgerError as exc:
            return Response(ResponseCode.SUCCESS, SendResponse(PutMessageStatus.MESSAGE_ILLEGAL, exc.message).to_wire())
        return await self._prepare_and_put(req, bodies, props, peer)

    async def _prepare_and_put(
        self, req: SendRequest, bodies: PackedBodies, props: PackedBodies | None, peer: str
    ) -> Response:
        try:
            batch = self.sends.prepare(req, bodies, props, peer)
        except IllegalMessage as exc:
            return Response(
                ResponseCode.SUCCESS, SendResponse(PutMessageStatus.MESSAGE_ILLEGAL, str(exc), req.queue_id).to_wire()
            )
        except DLedgerError as exc:
            return Response(ResponseCode.SUCCESS, SendResponse(PutMessageStatus.MESSAGE_ILLEGAL, exc.message).to_wire())
        return await self._put(batch)

    async def _put(self, batch: PreparedBatch | PackedSend) -> Response:
        """Assign queue offsets, encode and propose under the put lock; answer once committed."""
        g = self._group
        assert g is not None
        refused = self._not_writable()
        if refused is not None:
            return refused
        cl = self.commitlog
        n = batch.n
        st = self.node_store
        with cl.put_lock:
            now = cl._store_time()
            bodies: FramedBodies | PackedBodies
            if isinstance(batch, PackedSend):
                first_offset = cl.topic_queue_table.get(batch.queue_key, 0) if batch.advances else 0
                bodies = batch.encode(first_offset, now)
                updates = {batch.queue_key: first_offset + n} if batch.advances else {}
                qid = batch.queue_id
            else:
                queue_offsets, updates = assign_queue_offsets(cl.topic_queue_table, batch)
                buf, starts = encode_batch(batch, queue_offsets, np.zeros(n, dtype=np.int64), now)
                bodies = PackedBodies(buf, starts)
                first_offset = int(queue_offsets[0])
                qid = int(batch.queue_ids[0])
            before = st.ledger_end_index
            fut = g.propose(bodies)
            if st.ledger_end_index == before + n:
                # In the log: later puts of this term follow these offsets.
                cl.topic_queue_table.update(updates)
                cl.last_store_timestamp = now
        try:
            # The node answers every proposal (at the latest WAIT_QUORUM_ACK_TIMEOUT); a bound
            # all the same, so that a consensus call that failed cannot hold the client forever.
            r = await asyncio.wait_for(fut, self.config.max_wait_ack_time_ms / 1000.0 + ANSWER_MARGIN_S)
        except asyncio.TimeoutError:
            reason = "no answer from the consensus layer"
            return Response(
                ResponseCode.TIMEOUT, SendResponse(PutMessageStatus.UNKNOWN_ERROR, reason, qid).to_wire(), reason
            )
        if r.code != ResponseCode.SUCCESS:
            status = status_of_dledger_code(r.code)
            resp = SendResponse(
                status,
                ResponseCode(r.code).name if r.code in ResponseCode._value2member_map_ else str(r.code),
                qid,
                leader=r.leader_id or g.leader_id,
            )
            return Response(r.code, resp.to_wire(), resp.reason)
        resp = SendResponse(
            PutMessageStatus.PUT_OK,
            "",
            qid,
            first_offset,
            r.positions if len(r.positions) else [r.pos],
            self._store_host_text,
            g.self_id,
            phys_add=BODY_OFFSET,
        )
        return Response(ResponseCode.SUCCESS, resp.to_wire())

    # -- pulls -----------------------------------------------------------------------------

    def _dispatched(self, n: int) -> None:
        """A dispatch round put ``n`` records into the queues (on the loop): wake what waits for
        them (RocketMQ's MessageArrivingListener), and apply the offset records among them."""
        if self.pulls.held or self._waiters:
            self._on_arrival()
        elif self.store.max_offset_in_queue(OFFSET_TOPIC, 0) > self._offsets_next:
            self._apply_offsets()

    def _on_arrival(self) -> None:
        """Wake the pulls whose queue now has a message at their offset (and the offset commits)."""
        self.pulls.notify_message_arriving()
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)
        self._apply_offsets()

    # -- consumer offsets --------------------------------------------------------------------

    def _apply_offsets(self) -> None:
        """Apply the offset records dispatched since the last call, in log order."""
        store = self.store
        end = store.max_offset_in_queue(OFFSET_TOPIC, 0)
        while self._offsets_next < end:
            res = store.get_messages(OFFSET_TOPIC, 0, self._offsets_next, 256)
            if res.status == GetMessageStatus.FOUND:
                for m in res.messages:
                    try:
                        rec = json.loads(m.body)
                        store.commit_offset(
                            str(rec["group"]), str(rec["topic"]), int(rec["queueId"]), int(rec["offset"])
                        )
                    except (ValueError, KeyError, TypeError):
                        log.warning("offset record at %d is not one: %r", m.queue_offset, m.body[:80])
            elif res.next_begin_offset <= self._offsets_next:
                break
            self._offsets_next = max(res.next_begin_offset, self._offsets_next + (res.status == GetMessageStatus.FOUND))

    async def _client_commit(self, req: ConsumerOffsetRequest) -> Response:
        """A consumer's commit: checked (``_update_offset`` is the service's own path too)."""
        why = validate_group(req.group) or _reserved_offset(req) or self.pulls.queue_problem(req.topic, req.queue_id)
        if why is not None:
            return Response(ResponseCode.UNEXPECTED_ARGUMENT, {}, why)
        resp = await self._update_offset(req)
        if resp.code == ResponseCode.SUCCESS:
            await note_commit_group(self.subscriptions, req.group)
        return resp

    async def _update_offset(self, req: ConsumerOffsetRequest) -> Response:
        if req.offset < 0:
            return Response(ResponseCode.UNEXPECTED_ARGUMENT, {}, "offset must be >= 0")
        refused = self._not_writable()
        if refused is not None:
            return refused
        body = json.dumps(
            {"group": req.group, "topic": req.topic, "queueId": req.queue_id, "offset": req.offset}
        ).encode()
        try:
            batch = self.store.preparer.prepare([Message(OFFSET_TOPIC, body, queue_id=0)])
        except IllegalMessage as exc:
            return Response(ResponseCode.UNEXPECTED_ARGUMENT, {}, str(exc))
        resp = await self._put(batch)
        if resp.code != ResponseCode.SUCCESS:
            return resp
        # Answer once this member applied it, so that a query here sees it.
        record_offset = int(resp.body["queue_offset"])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + OFFSET_APPLY_WAIT_S
        while self._offsets_next <= record_offset and loop.time() < deadline:
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append(fut)
            self._apply_offsets()
            if self._offsets_next > record_offset:
                break
            try:
                await asyncio.wait_for(fut, max(deadline - loop.time(), 0.001))
            except asyncio.TimeoutError:
                pass
        return Response(ResponseCode.SUCCESS, {"offset": req.offset})

    def metrics(self) -> list[AppMetric]:
        """The message service's metrics for ``--metrics-port`` (on the loop)."""
        held = self.pulls.holding
        writable = bool(self.commitlog.writable) and not self.node_store.disk_full
        return self.metric_stats.metrics(self.store, held, writable)

    def stats(self) -> dict[str, Any]:
        """GET_BROKER_RUNTIME_INFO: the member's role and the store's positions and queues."""
        store = self.store
        for _attempt in range(10):
            try:
                queues = [
                    [topic, qid, int(cq.min_offset), int(cq.max_offset)] for topic, qid, cq in store.consume_queues
                ]
                break
            except RuntimeError:
                continue  # dispatch made a queue while we looked
        else:
            queues = []
        return {
            **self._role_body(),
            "min_phys_offset": store.min_phys_offset,
            "committed_phys_offset": store.committed_phys_offset,
            "ledger_end_pos": int(self.commitlog.ledger_end_pos),
            "dispatch_behind_bytes": store.dispatch_behind_bytes(),
            # A leader on a full disk refuses every put (DISK_FULL) though its role allows them.
            "writable": bool(self.commitlog.writable) and not self.node_store.disk_full,
            "disk_full": bool(self.node_store.disk_full),
            "queues": queues,
            "store_host": format_host(store.store_host),
            "root": str(self.root),
        }


__all__ = ["NOOP_TOPIC", "OFFSET_TOPIC", "MessageService", "message_store_config"]


def message_service_factory(config: DLedgerConfig, address: str) -> GroupApplication | None:
    """The ``application_factory`` of a node server whose groups may run the message store: a
    ``MessageService`` for a group whose config has ``message_store``, nothing for the rest."""
    return MessageService(config, address) if config.message_store else None
