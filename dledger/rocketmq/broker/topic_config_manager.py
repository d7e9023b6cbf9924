"""RocketMQ's TopicConfigManager for a member that speaks remoting: the topics it serves (queue
counts, permissions), TBW102 for auto-creation, the data version a registration carries, kept
in ``config/topics.json`` as the Java broker keeps it (TopicConfigSerializeWrapper, fastjson's
pretty text, written through ConfigManager's tmp + ``.bak`` + rename; read back from the file or
its ``.bak``, a Java-written one included).

Every topic has at most the store's ``default_topic_queue_nums`` queues (a send to a queue past
them is refused by the message service). A topic the store already holds queues of is served
too: a member that becomes leader serves what its predecessor created.
"""

from __future__ import annotations

import logging
from pathlib import Path

from dledger.rocketmq.broker.config_manager import VersionedTable, load_json
from dledger.rocketmq.remoting.protocol.register_broker_body import DataVersion, TopicConfig
from dledger.rocketmq.remoting.protocol.topic_route_data import PERM_INHERIT, PERM_READ, PERM_WRITE

log = logging.getLogger(__name__)

# TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC: the topic a producer names as its default.
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
# Under the store's config/ directory, where the Java broker keeps it.
FILE_NAME = "topics.json"
# TopicConfigManager.topicConfigTable = new ConcurrentHashMap(1024): its iteration order.
TABLE_CAPACITY = 1024


class TopicConfigManager(VersionedTable[TopicConfig]):
    def __init__(self, path: Path, queue_nums: int, auto_create: bool, cluster: str, broker_name: str) -> None:
        super().__init__(path, "topicConfigTable", TABLE_CAPACITY)
        self.queue_nums = queue_nums
        self.auto_create = auto_create
        data = load_json(path)
        if data is not None:
            try:
                for name, tc in (data.get("topicConfigTable") or {}).items():
                    self.table[name] = TopicConfig.from_json(tc)
                self.data_version = DataVersion.from_json(data.get("dataVersion"))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                log.warning("%s does not read (%s): starting from the built-in topics", path, exc)
        # The Java broker's built-in topics: the auto-create key, and one per cluster and broker name.
        perm = PERM_READ | PERM_WRITE
        if auto_create:
            self.table.setdefault(
                AUTO_CREATE_TOPIC_KEY_TOPIC,
                TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, queue_nums, queue_nums, perm | PERM_INHERIT),
            )
        for name in (cluster, broker_name):
            self.table.setdefault(name, TopicConfig(name, 1, 1, perm | PERM_INHERIT))

    def select(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def adopt(self, topics: list[str]) -> bool:
        """Serve topics the store holds queues of; True when one was new."""
        new = False
        with self._lock:
            for t in topics:
                if t not in self.table and not t.startswith("RMQ_SYS_"):
                    self.table[t] = TopicConfig(t, self.queue_nums, self.queue_nums)
                    new = True
            if new:
                self._changed()
        return new

    def create_in_send(self, topic: str, default_topic: str, queue_nums: int, sys_flag: int = 0) -> TopicConfig | None:
        """createTopicInSendMessageMethod: a topic made from the default one on its first send
        (its queues the fewer of the two counts); None when the default topic does not allow it."""
        with self._lock:
            tc = self.table.get(topic)
            if tc is not None:
                return tc
            default = self.table.get(default_topic)
            if default is None or default_topic != AUTO_CREATE_TOPIC_KEY_TOPIC or not self.auto_create:
                return None
            if not default.perm & PERM_INHERIT:
                return None
            n = max(1, min(queue_nums, default.write_queue_nums, self.queue_nums))
            tc = TopicConfig(topic, n, n, default.perm & ~PERM_INHERIT, topic_sys_flag=sys_flag)
            self.table[topic] = tc
            self._changed()
            log.info("topic %s created from %s with %d queues", topic, default_topic, n)
            return tc

    def create_in_send_back(self, topic: str, queue_nums: int, perm: int) -> TopicConfig:
        """createTopicInSendMessageBackMethod: a retry (or DLQ) topic."""
        with self._lock:
            tc = self.table.get(topic)
            if tc is None:
                tc = self.table[topic] = TopicConfig(topic, queue_nums, queue_nums, perm)
                self._changed()
            return tc

    def update(self, tc: TopicConfig) -> None:
        self._put(tc.topic_name, tc)


__all__ = [
    "AUTO_CREATE_TOPIC_KEY_TOPIC",
    "DLQ_GROUP_TOPIC_PREFIX",
    "FILE_NAME",
    "RETRY_GROUP_TOPIC_PREFIX",
    "TABLE_CAPACITY",
    "TopicConfigManager",
]
