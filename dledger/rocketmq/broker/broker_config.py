"""RocketMQ's BrokerConfig, the part a member speaking remoting needs (from its DLedgerConfig:
``listen_port``, ``namesrv_addr``, ``broker_name``, ``broker_cluster_name``, ``broker_ip1``,
``auto_create_topic_enable``), and the view of the member's message service the remoting
processors use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from dledger.config import DLedgerConfig
from dledger.net.transport import Response
from dledger.rocketmq.broker.broker_fast_failure import FastFailureConfig

if TYPE_CHECKING:
    from dledger.rocketmq.broker.service_metrics import MessageStats
    from dledger.rocketmq.store.message import Message
    from dledger.rocketmq.store.message_store import MessageStore


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    cluster: str
    broker_name: str
    broker_ip1: str
    listen_port: int
    namesrv_addrs: tuple[str, ...]
    auto_create_topic_enable: bool
    queue_nums: int
    self_id: str
    # registerNameServerPeriod, in seconds (Java's default 30, clamped to 10-60).
    register_period_s: float = 30.0
    # A classic broker's brokerId (0 master, > 0 slave) and HA address; a DLedger member's
    # follow from its role and self id.
    broker_id: int | None = None
    ha_addr: str | None = None
    # SlaveSynchronize's first round and period (Java: 3 s, 10 s; shorter in tests).
    sync_delay_s: float = 3.0
    sync_period_s: float = 10.0
    # transactionCheckInterval, transactionTimeOut (ms) and transactionCheckMax.
    transaction_check_interval_ms: int = 60000
    transaction_timeout_ms: int = 6000
    transaction_check_max: int = 15
    # slaveReadEnable: a consumer far behind is told to pull from a slave (whichBrokerWhenConsumeSlowly).
    slave_read_enable: bool = False
    auto_create_subscription_group: bool = True
    # sendThreadPoolQueueCapacity, pullThreadPoolQueueCapacity: how many sends / pulls may wait
    # at once (the remoting server's RequestPool).
    send_thread_pool_queue_capacity: int = 10000
    pull_thread_pool_queue_capacity: int = 100000
    # brokerFastFailureEnable and waitTimeMillsIn*Queue (BrokerFastFailure).
    fast_failure: FastFailureConfig = field(default_factory=FastFailureConfig)

    @property
    def broker_addr(self) -> str:
        """brokerIP1:listenPort: what the broker registers and clients connect to."""
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def vip_port(self) -> int:
        return self.listen_port - 2

    @property
    def ha_server_addr(self) -> str:
        if self.ha_addr is not None:
            return self.ha_addr
        # A DLedger broker replicates through its group, not HAService; Java still announces
        # brokerIP2:haListenPort (listenPort + 1), and so do we.
        return f"{self.broker_ip1}:{self.listen_port + 1}"

    @property
    def slave_id(self) -> int:
        """A classic slave's brokerId; DLedgerRoleChangeHandler's of a follower: its self id's
        number + 1 (n0 -> 1)."""
        if self.broker_id is not None:
            return self.broker_id
        digits = "".join(ch for ch in self.self_id if ch.isdigit())
        return int(digits) + 1 if digits else 1

    @staticmethod
    def of(cfg: DLedgerConfig, host: str) -> BrokerConfig | None:
        """None when the member does not speak remoting (no listen_port)."""
        if cfg.listen_port is None:
            return None
        ip = cfg.broker_ip1 or (host if host not in ("", "0.0.0.0", "::") else "127.0.0.1")
        addrs = tuple(a.strip() for a in (cfg.namesrv_addr or "").split(";") if a.strip())
        return BrokerConfig(
            cfg.broker_cluster_name,
            cfg.broker_name or cfg.group,
            ip,
            cfg.listen_port,
            addrs,
            cfg.auto_create_topic_enable,
            cfg.default_topic_queue_nums,
            cfg.self_id,
            cfg.register_name_server_period / 1000.0,
            sync_delay_s=min(3.0, cfg.slave_sync_period / 1000.0),
            sync_period_s=cfg.slave_sync_period / 1000.0,
            transaction_check_interval_ms=cfg.transaction_check_interval,
            transaction_timeout_ms=cfg.transaction_timeout,
            transaction_check_max=cfg.transaction_check_max,
            slave_read_enable=cfg.slave_read_enable,
            auto_create_subscription_group=cfg.auto_create_subscription_group,
            send_thread_pool_queue_capacity=cfg.send_thread_pool_queue_capacity,
            pull_thread_pool_queue_capacity=cfg.pull_thread_pool_queue_capacity,
        )


class MessageServiceView(Protocol):
    """What the remoting processors use of the member's MessageService: its request entry
    (the same checks and paths as the project's own protocol) and its store for reads."""

    store: MessageStore
    metric_stats: MessageStats

    async def handle(self, code: int, body: dict[str, Any], peer: str) -> Response: ...

    async def put_inner(self, msgs: list[Message]) -> Response: ...


__all__ = ["BrokerConfig", "MessageServiceView"]
