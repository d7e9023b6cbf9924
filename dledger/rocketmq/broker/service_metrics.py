"""What a message-store member counts for ``--metrics-port`` (RocketMQ's BrokerStatsManager:
TOPIC_PUT_NUMS, GROUP_GET_NUMS; and the consumer lag its exporters report as the group diff).

The request path only adds to plain ints; the rest is read from the store when Prometheus
scrapes (on the member's loop, see dledger.metrics)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from dledger.metrics import APPEND_BUCKETS, AppMetric, LatencyHistogram
from dledger.rocketmq.store.consumer_offset import TOPIC_GROUP_SEPARATOR
from dledger.rocketmq.store.status import PutMessageStatus

SYSTEM_GROUP_PREFIX = "RMQ_SYS_"  # consumer groups of the service itself

if TYPE_CHECKING:
    from dledger.rocketmq.store.message_store import MessageStore

_PHYS_ITEM = 8  # bytes of one phys offset in a SendResponse


class MessageStats:
    """Counters of one member's message service."""

    def __init__(self) -> None:
        self.put_messages: Counter[str] = Counter()  # topic -> messages stored (PUT_OK)
        self.put_bytes: Counter[str] = Counter()  # topic -> body bytes of those
        self.put_refused: Counter[str] = Counter()  # status name -> send requests refused
        self.pulled_messages: Counter[str] = Counter()  # topic -> messages pulls returned
        self.send_latency = LatencyHistogram(APPEND_BUCKETS)

    def sent(self, topic: str, body: dict[str, Any], body_bytes: int, seconds: float) -> None:
        """A send request answered with ``body`` (a SendResponse on the wire, or none); the
        latency of stored ones only (a refusal's is no send's)."""
        status = body.get("status")
        if status == PutMessageStatus.PUT_OK:
            self.send_latency.observe(seconds)
            phys = body.get("phys")
            self.put_messages[topic] += max(len(phys) // _PHYS_ITEM, 1) if isinstance(phys, bytes) else 1
            self.put_bytes[topic] += body_bytes
        else:
            try:
                name = PutMessageStatus(status).name if status is not None else "SERVICE_NOT_AVAILABLE"
            except ValueError:
                name = str(status)
            self.put_refused[name] += 1

    def metrics(self, store: MessageStore, held_pulls: int, writable: bool) -> list[AppMetric]:
        put = AppMetric(
            "dledger_mq_put_messages", "messages this member stored as leader, by topic", "counter", ("topic",)
        )
        put.points = [((t,), n) for t, n in sorted(self.put_messages.items())]
        put_bytes = AppMetric("dledger_mq_put_body_bytes", "body bytes of those messages", "counter", ("topic",))
        put_bytes.points = [((t,), n) for t, n in sorted(self.put_bytes.items())]
        refused = AppMetric(
            "dledger_mq_send_refused", "send requests answered with another status than PUT_OK", "counter", ("status",)
        )
        refused.points = [((s,), n) for s, n in sorted(self.put_refused.items())]
        latency = AppMetric(
            "dledger_mq_send_latency_seconds", "from a send request's arrival to its answer", "histogram"
        )
        latency.points = [((), self.send_latency.snapshot())]
        pulled = AppMetric("dledger_mq_pulled_messages", "messages pulls returned, by topic", "counter", ("topic",))
        pulled.points = [((t,), n) for t, n in sorted(self.pulled_messages.items())]
        gauges = [
            ("dledger_mq_held_pulls", "pulls held until a message arrives (PullRequestHoldService)", held_pulls),
            ("dledger_mq_writable", "1 while this member takes sends (a caught-up leader, disk not full)", writable),
            (
                "dledger_mq_dispatch_behind_bytes",
                "commit-log bytes not yet in the consume queues and index",
                store.dispatch_behind_bytes(),
            ),
            (
                "dledger_mq_commitlog_min_offset",
                "first commit-log offset kept (retention moves it)",
                store.min_phys_offset,
            ),
            (
                "dledger_mq_commitlog_committed_offset",
                "commit-log offset up to which records are committed",
                store.committed_phys_offset,
            ),
        ]
        out = [put, put_bytes, refused, latency, pulled]
        for name, doc, value in gauges:
            out.append(AppMetric(name, doc, "gauge", (), [((), float(value))]))
        out.append(_consumer_lag(store))
        return out


def _consumer_lag(store: MessageStore) -> AppMetric:
    """Messages each consumer group has yet to consume, by topic: the sum over the queues it has
    committed in of (max offset - the committed one, or the queue's minimum when retention
    deleted what lay between), RocketMQ's group diff less what no consumer can read any more.
    The service's own groups (RMQ_SYS_*: the delay service's, whose lag is messages not yet
    due) are left out."""
    lag = AppMetric(
        "dledger_mq_consumer_lag_messages",
        "messages a consumer group has still to consume, by topic (its queues with a commit)",
        "gauge",
        ("consumer_group", "topic"),
    )
    for key, queues in sorted(store.consumer_offsets.offset_table.items()):
        topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
        if group.startswith(SYSTEM_GROUP_PREFIX):
            continue
        behind = 0
        for q, off in list(queues.items()):
            top = store.max_offset_in_queue(topic, q)
            behind += max(top - max(off, store.min_offset_in_queue(topic, q)), 0)
        lag.points.append(((group, topic), behind))
    return lag
