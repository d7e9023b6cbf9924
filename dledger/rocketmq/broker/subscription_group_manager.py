"""RocketMQ's SubscriptionGroupManager and SubscriptionGroupConfig: the consumer groups a broker
knows (retry queues, retry limit, broadcast, which broker a slow consumer is sent to), kept in
``config/subscriptionGroup.json`` as the Java broker keeps it (fastjson's pretty text, written
through ConfigManager's tmp + ``.bak`` + rename), with a data version a slave compares before it
takes its master's table.

A group is made on its first heartbeat or pull (``autoCreateSubscriptionGroup``, on by default),
or by UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (``mqadmin updateSubGroup``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dledger.rocketmq.broker.config_manager import VersionedTable, load_json
from dledger.rocketmq.remoting.protocol.register_broker_body import DataVersion

log = logging.getLogger(__name__)

FILE_NAME = "subscriptionGroup.json"
# subscriptionGroupTable = new ConcurrentHashMap(1024): its iteration order.
TABLE_CAPACITY = 1024
# MixAll's groups SubscriptionGroupManager.init puts in every table; the last four broadcast.
SYSTEM_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
)

# MixAll.CID_RMQ_SYS_PREFIX: such groups are made even with auto-creation off (isSysConsumerGroup).
SYS_CONSUMER_GROUP_PREFIX = "CID_RMQ_SYS_"
# The groups our store keeps its own progress under (the delay service's), never a consumer's.
SERVICE_GROUP_PREFIX = "RMQ_SYS_"


@dataclass(slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0  # MixAll.MASTER_ID
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    def to_json(self) -> dict[str, Any]:
        """The bean's properties, sorted by name as fastjson writes them."""
        return {
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "groupName": self.group_name,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> SubscriptionGroupConfig:
        if not isinstance(d, dict) or not d.get("groupName"):
            raise ValueError(f"not a SubscriptionGroupConfig: {d!r}")

        def flag(key: str) -> bool:
            v = d.get(key, True)
            return v if isinstance(v, bool) else str(v).lower() == "true"

        return SubscriptionGroupConfig(
            str(d["groupName"]),
            flag("consumeEnable"),
            flag("consumeFromMinEnable"),
            flag("consumeBroadcastEnable"),
            int(d.get("retryQueueNums", 1)),
            int(d.get("retryMaxTimes", 16)),
            int(d.get("brokerId", 0)),
            int(d.get("whichBrokerWhenConsumeSlowly", 1)),
            flag("notifyConsumerIdsChangedEnable"),
        )


def decode_wrapper(data: dict[str, Any]) -> tuple[dict[str, SubscriptionGroupConfig], DataVersion]:
    """The table and data version of a SubscriptionGroupManager's JSON (a file, or the body of
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG)."""
    raw = data.get("subscriptionGroupTable") or {}
    if not isinstance(raw, dict):
        raise ValueError("subscriptionGroupTable is not an object")
    table = {str(k): SubscriptionGroupConfig.from_json(v) for k, v in raw.items()}
    return table, DataVersion.from_json(data.get("dataVersion"))


class SubscriptionGroupManager(VersionedTable[SubscriptionGroupConfig]):
    def __init__(self, path: Path, auto_create: bool = True) -> None:
        super().__init__(path, "subscriptionGroupTable", TABLE_CAPACITY)
        self.auto_create = auto_create
        for name in SYSTEM_GROUPS:
            self.table[name] = SubscriptionGroupConfig(name)
        data = load_json(path)
        if data is not None:
            try:
                table, version = decode_wrapper(data)
            except (ValueError, TypeError, AttributeError) as exc:
                log.warning("%s does not read (%s): starting from the built-in groups", path, exc)
            else:
                self.table.update(table)  # decode: putAll over the built-in ones
                self.data_version = version

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """findSubscriptionGroupConfig: the group's config, made (and persisted) on first sight
        when auto-creation is on (a system group's always); None for an unknown group otherwise."""
        sgc = self.table.get(group)
        if sgc is not None or not group or not (self.auto_create or group.startswith(SYS_CONSUMER_GROUP_PREFIX)):
            return sgc
        with self._lock:
            sgc = self.table.get(group)
            if sgc is None:
                sgc = self.table[group] = SubscriptionGroupConfig(group)
                log.info("auto create a subscription group, %s", sgc)
                self._changed()
            return sgc

    def adopt(self, groups: list[str]) -> bool:
        """Keep the groups the store holds consumer offsets of (their commits came through a
        log or a master's sync, not through this member), as ``find`` would make them; the
        service's own ``RMQ_SYS_`` groups are no consumers'. True when one was new."""
        new = False
        with self._lock:
            for g in groups:
                if g and g not in self.table and not g.startswith(SERVICE_GROUP_PREFIX):
                    if self.auto_create or g.startswith(SYS_CONSUMER_GROUP_PREFIX):
                        self.table[g] = SubscriptionGroupConfig(g)
                        new = True
            if new:
                self._changed()
        return new

    def update(self, sgc: SubscriptionGroupConfig) -> None:
        """updateSubscriptionGroupConfig."""
        self._put(sgc.group_name, sgc)


__all__ = ["FILE_NAME", "SubscriptionGroupConfig", "SubscriptionGroupManager", "decode_wrapper"]
