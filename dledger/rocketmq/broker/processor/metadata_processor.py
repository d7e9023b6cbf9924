"""AdminBrokerProcessor's subscription-group and delay-offset codes: what a slave's
SlaveSynchronize pulls from its master (GET_ALL_SUBSCRIPTIONGROUP_CONFIG, GET_ALL_DELAY_OFFSET)
and what ``mqadmin updateSubGroup``/``deleteSubGroup`` send (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
DELETE_SUBSCRIPTIONGROUP). The bodies are Java's: SubscriptionGroupManager's JSON and
ScheduleMessageService's ``{"offsetTable":{level:offset}}``."""

from __future__ import annotations

from collections.abc import Callable

from dledger.rocketmq.broker.subscription_group_manager import SubscriptionGroupConfig, SubscriptionGroupManager
from dledger.rocketmq.remoting import remoting_serializable
from dledger.rocketmq.remoting.netty_remoting_server import Channel
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.remoting_command_exception import RemotingCommandException
from dledger.rocketmq.remoting.response_code import ResponseCode


class MetadataProcessor:
    """``delay_table`` gives the broker's delay offsets by level (None: it keeps none)."""

    def __init__(
        self, subscriptions: SubscriptionGroupManager, delay_table: Callable[[], dict[int, int] | None]
    ) -> None:
        self.subscriptions = subscriptions
        self.delay_table = delay_table

    async def get_all_subscription_group(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        return req.response(body=self.subscriptions.encode().encode("utf-8"))

    async def get_all_delay_offset(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        table = self.delay_table()
        if table is None:
            return req.response(ResponseCode.SYSTEM_ERROR, "No delay offset in this broker")
        # ScheduleMessageService.encode(): a map with Integer keys, which fastjson leaves bare.
        ordered = {k: table[k] for k in sorted(table)}
        return req.response(body=remoting_serializable.encode_fastjson({"offsetTable": ordered}, quote_int_keys=False))

    async def update_and_create_subscription_group(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        data = remoting_serializable.decode(req.body) if req.body else None
        try:
            sgc = SubscriptionGroupConfig.from_json(data)  # type: ignore[arg-type]
        except (ValueError, TypeError) as exc:
            raise RemotingCommandException(f"SubscriptionGroupConfig: {exc}") from None
        self.subscriptions.update(sgc)
        return req.response()

    async def delete_subscription_group(self, req: RemotingCommand, ch: Channel) -> RemotingCommand:
        self.subscriptions.delete(req.ext_str("groupName"))
        return req.response()


__all__ = ["MetadataProcessor"]
