"""RocketMQ's clients (rocketmq-client) over the project's transport: ``producer``
(DefaultMQProducer) and ``consumer`` (DefaultLitePullConsumer). A client process loads no store
writer, no node server and no broker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dledger.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from dledger.rocketmq.client.consumer import AsyncConsumer, Consumer, PullResult
    from dledger.rocketmq.client.producer import AsyncProducer, Producer
    from dledger.rocketmq.client.send_result import SendResult

__all__ = ["AsyncConsumer", "AsyncProducer", "Consumer", "Producer", "PullResult", "SendResult"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AsyncConsumer": "consumer",
        "Consumer": "consumer",
        "PullResult": "consumer",
        "AsyncProducer": "producer",
        "Producer": "producer",
        "SendResult": "send_result",
    },
)
