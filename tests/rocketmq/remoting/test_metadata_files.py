"""config/topics.json and config/subscriptionGroup.json as the Java broker writes and reads them:
the properties of Java's TopicConfig, SubscriptionGroupConfig and DataVersion, fastjson's pretty
layout, ConfigManager's tmp + .bak + rename, a Java-written file read back."""

from __future__ import annotations

import json
from pathlib import Path

from dledger.rocketmq.broker.config_manager import chm_order
from dledger.rocketmq.broker.subscription_group_manager import (
    SYSTEM_GROUPS,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from dledger.rocketmq.broker.topic_config_manager import TABLE_CAPACITY, TopicConfigManager
from dledger.rocketmq.remoting.protocol.register_broker_body import DataVersion, TopicConfig
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.request_code import RequestCode
from tests.rocketmq.remoting.captures import frames

# The fields of RocketMQ 4.9.4's classes (common/TopicConfig.java, SubscriptionGroupConfig.java,
# DataVersion.java), which fastjson writes as properties.
TOPIC_CONFIG_FIELDS = {
    "topicName",
    "readQueueNums",
    "writeQueueNums",
    "perm",
    "topicFilterType",
    "topicSysFlag",
    "order",
}
SUBSCRIPTION_GROUP_FIELDS = {
    "groupName",
    "consumeEnable",
    "consumeFromMinEnable",
    "consumeBroadcastEnable",
    "retryQueueNums",
    "retryMaxTimes",
    "brokerId",
    "whichBrokerWhenConsumeSlowly",
    "notifyConsumerIdsChangedEnable",
}
DATA_VERSION_FIELDS = {"timestamp", "counter"}

# What fastjson's toJSONString(wrapper, true) gives for one topic: tabs, a property a line,
# properties sorted by name, the closing brace on its own line.
JAVA_TOPICS_JSON = (
    "{\n"
    '\t"dataVersion":{\n'
    '\t\t"counter":7,\n'
    '\t\t"timestamp":1700000000123\n'
    "\t},\n"
    '\t"topicConfigTable":{\n'
    '\t\t"JavaTopic":{\n'
    '\t\t\t"order":true,\n'
    '\t\t\t"perm":4,\n'
    '\t\t\t"readQueueNums":3,\n'
    '\t\t\t"topicFilterType":"MULTI_TAG",\n'
    '\t\t\t"topicName":"JavaTopic",\n'
    '\t\t\t"topicSysFlag":1,\n'
    '\t\t\t"writeQueueNums":2\n'
    "\t\t}\n"
    "\t}\n"
    "}"
)
JAVA_SUBSCRIPTION_JSON = (
    "{\n"
    '\t"dataVersion":{\n'
    '\t\t"counter":3,\n'
    '\t\t"timestamp":1700000000456\n'
    "\t},\n"
    '\t"subscriptionGroupTable":{\n'
    '\t\t"JavaGroup":{\n'
    '\t\t\t"brokerId":0,\n'
    '\t\t\t"consumeBroadcastEnable":false,\n'
    '\t\t\t"consumeEnable":true,\n'
    '\t\t\t"consumeFromMinEnable":true,\n'
    '\t\t\t"groupName":"JavaGroup",\n'
    '\t\t\t"notifyConsumerIdsChangedEnable":true,\n'
    '\t\t\t"retryMaxTimes":5,\n'
    '\t\t\t"retryQueueNums":2,\n'
    '\t\t\t"whichBrokerWhenConsumeSlowly":1\n'
    "\t\t}\n"
    "\t}\n"
    "}"
)


def _topics(path: Path) -> TopicConfigManager:
    return TopicConfigManager(path, 8, True, "DefaultCluster", "broker-a")


def test_topics_json_has_javas_properties_and_layout(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    m = _topics(path)
    m.update(TopicConfig("T1", 4, 4, 6))
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    assert set(data) == {"dataVersion", "topicConfigTable"}
    assert set(data["dataVersion"]) == DATA_VERSION_FIELDS
    assert data["dataVersion"]["counter"] == m.data_version.counter
    for name, tc in data["topicConfigTable"].items():
        assert set(tc) == TOPIC_CONFIG_FIELDS
        assert tc["topicName"] == name
    assert data["topicConfigTable"]["T1"] == {
        "order": False,
        "perm": 6,
        "readQueueNums": 4,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "T1",
        "topicSysFlag": 0,
        "writeQueueNums": 4,
    }
    # fastjson's pretty layout: tabs, sorted properties, a property a line.
    assert text.startswith('{\n\t"dataVersion":{\n\t\t"counter":')
    assert '\n\t\t"T1":{\n\t\t\t"order":false,\n\t\t\t"perm":6,\n\t\t\t"readQueueNums":4,\n' in text
    assert text.endswith("\n\t\t}\n\t}\n}")


def test_a_java_written_topics_json_reads_back_and_is_rewritten_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    path.write_text(JAVA_TOPICS_JSON, encoding="utf-8")
    m = TopicConfigManager(path, 8, False, "DefaultCluster", "broker-a")
    assert m.select("JavaTopic") == TopicConfig("JavaTopic", 3, 2, 4, "MULTI_TAG", 1, True)
    assert m.data_version == DataVersion(1700000000123, 7)
    # Only the file's topics (the built-in ones aside): our text is Java's.
    for name in ("DefaultCluster", "broker-a"):
        m.table.pop(name)
    assert m.encode(pretty=True) == JAVA_TOPICS_JSON


def test_a_java_written_subscription_group_json_reads_back_and_is_rewritten_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "subscriptionGroup.json"
    path.write_text(JAVA_SUBSCRIPTION_JSON, encoding="utf-8")
    m = SubscriptionGroupManager(path)
    assert m.table["JavaGroup"] == SubscriptionGroupConfig(
        "JavaGroup", consume_broadcast_enable=False, retry_queue_nums=2, retry_max_times=5
    )
    assert m.data_version == DataVersion(1700000000456, 3)
    for name in SYSTEM_GROUPS:
        m.table.pop(name)
    assert m.encode(pretty=True) == JAVA_SUBSCRIPTION_JSON


def test_subscription_group_json_has_javas_properties(tmp_path: Path) -> None:
    path = tmp_path / "subscriptionGroup.json"
    m = SubscriptionGroupManager(path)
    assert m.find("G1") is not None  # autoCreateSubscriptionGroup
    data = json.loads(path.read_text(encoding="utf-8"))
    assert set(data) == {"dataVersion", "subscriptionGroupTable"}
    assert set(data["dataVersion"]) == DATA_VERSION_FIELDS
    assert set(data["subscriptionGroupTable"]) == {"G1", *SYSTEM_GROUPS}
    for g in data["subscriptionGroupTable"].values():
        assert set(g) == SUBSCRIPTION_GROUP_FIELDS
    assert data["subscriptionGroupTable"]["G1"]["retryMaxTimes"] == 16
    assert data["subscriptionGroupTable"]["G1"]["whichBrokerWhenConsumeSlowly"] == 1


def test_persist_keeps_the_previous_file_as_bak_and_load_falls_back_to_it(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    m = _topics(path)
    m.update(TopicConfig("A", 1, 1))
    first = path.read_text()
    m.update(TopicConfig("B", 1, 1))
    assert (tmp_path / "topics.json.bak").read_text() == first
    assert not (tmp_path / "topics.json.tmp").exists()
    path.write_text("{ torn")  # a file a crash cut (not possible through rename, but a disk can)
    back = _topics(path)
    assert back.select("A") is not None and back.select("B") is None


def test_the_master_table_is_taken_only_when_its_data_version_differs(tmp_path: Path) -> None:
    m = SubscriptionGroupManager(tmp_path / "subscriptionGroup.json")
    version = DataVersion(1700000000000, 42)
    assert m.replace_from_master({"G": SubscriptionGroupConfig("G")}, version)
    assert m.data_version == version and set(m.table) == {"G"}
    inode = (tmp_path / "subscriptionGroup.json").stat().st_ino
    assert not m.replace_from_master({"G": SubscriptionGroupConfig("G")}, DataVersion(1700000000000, 42))
    assert (tmp_path / "subscriptionGroup.json").stat().st_ino == inode  # not rewritten


def test_the_topic_table_is_in_the_order_a_java_broker_iterates_it() -> None:
    """The captured REGISTER_BROKER bodies of the Java 4.9.4 broker hold its TopicConfigManager's
    table as it iterates (a ConcurrentHashMap(1024)); ours writes the same order."""
    seen = 0
    for f in frames():
        if f.is_request and f.code == RequestCode.REGISTER_BROKER:
            body = json.loads(bytes(RemotingCommand.decode(f.raw[4:]).body))
            keys = list(body["topicConfigSerializeWrapper"]["topicConfigTable"])
            assert keys == chm_order(keys, TABLE_CAPACITY), f.scenario
            seen += 1
    assert seen >= 3
    # Insertion order does not matter, only the keys.
    keys = ["TopicA", "%RETRY%g", "TBW102", "broker-a", "SCHEDULE_TOPIC_XXXX"]
    assert chm_order(keys, TABLE_CAPACITY) == chm_order(sorted(keys), TABLE_CAPACITY)
