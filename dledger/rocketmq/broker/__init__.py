"""What a member runs on top of a message store (rocketmq-broker): ``message_service`` (the
member of a DLedger group: SendMessageProcessor, PullMessageProcessor and the consumer-offset
requests over the project's transport; delayed messages by the store's
ScheduleMessageService, ``store.schedule_message_service``) and ``service_metrics``
(BrokerStatsManager's series)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dledger.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from dledger.rocketmq.broker.message_service import MessageService, message_service_factory

__all__ = ["MessageService", "message_service_factory"]

__getattr__, __dir__ = lazy_exports(
    __name__, {"MessageService": "message_service", "message_service_factory": "message_service"}
)
