"""A DLedger-group member without remoting keeps Java's config/topics.json and
config/subscriptionGroup.json (a Java broker restarted on a member's directory finds the topics
and groups): the topic a put named and the group a consumer committed for, on the project's own
protocol, on the leader at once and on every member by its stop; read back at a restart. Three
real member processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dledger.rocketmq.broker.send_message_processor import OFFSET_TOPIC
from dledger.rocketmq.client.consumer import Consumer
from dledger.rocketmq.client.producer import Producer
from dledger.rocketmq.store.message import Message
from dledger.testing import FAST, TestCluster
from tests.rocketmq.test_classic_broker import JAVA_GROUPS, group_json

pytestmark = pytest.mark.timeout(180)

QUEUES = 3


def topic_json(name: str, queues: int, perm: int = 6) -> dict[str, Any]:
    """A TopicConfig as the Java broker writes it into topics.json."""
    return {
        "order": False,
        "perm": perm,
        "readQueueNums": queues,
        "topicFilterType": "SINGLE_TAG",
        "topicName": name,
        "topicSysFlag": 0,
        "writeQueueNums": queues,
    }


def config_file(c: TestCluster, member: str, name: str) -> Path:
    return c.store_dir(member) / "config" / name


def read_tables(c: TestCluster, member: str) -> tuple[dict[str, Any], dict[str, Any]]:
    topics = config_file(c, member, "topics.json").read_text()
    groups = config_file(c, member, "subscriptionGroup.json").read_text()
    for text in (topics, groups):
        assert text.startswith('{\n\t"dataVersion":{\n\t\t"counter":')  # fastjson's pretty text
    return json.loads(topics)["topicConfigTable"], json.loads(groups)["subscriptionGroupTable"]


def put_and_commit(c: TestCluster, topic: str, group: str, commits: int) -> None:
    """A put to ``topic`` and a commit of ``group`` (making ``commits`` commit records in the
    log so far), then every member dispatched both (so a follower's stop finds them in its
    queues and offsets)."""
    with Producer(c.peers, timeout=15) as p:
        assert p.send(Message(topic, b"x"), queue_id=QUEUES - 1).ok
    with Consumer(c.peers, group, topic, timeout=15) as con:
        con.commit(QUEUES - 1, 1)

        def dispatched() -> bool:
            views = con.stats()
            return len(views) == len(c.ids) and all(
                any(q[0] == topic and q[3] >= 1 for q in v.get("queues", []))
                and any(q[0] == OFFSET_TOPIC and q[3] >= commits for q in v.get("queues", []))
                for v in views.values()
            )

        c.wait_for(dispatched, 30, "every member dispatched the put and the commit")


def stop_all(c: TestCluster) -> None:
    for m in list(c.procs):
        assert c.stop(m) == 0


def test_a_member_without_remoting_keeps_topics_and_groups_in_java_files(tmp_path: Path) -> None:
    c = TestCluster(
        tmp_path,
        member_dirs=True,
        extra=[*FAST, "--message-store", "--default-topic-queue-nums", str(QUEUES)],
    )
    with c.running():
        put_and_commit(c, "TopicNew", "GroupNew", 1)
        leader = c.wait_leader()
        # The leader wrote both at once (createTopicInSendMessageMethod, findSubscriptionGroupConfig).
        topics, groups = read_tables(c, leader)
        assert topics["TopicNew"] == topic_json("TopicNew", QUEUES)
        assert groups["GroupNew"] == group_json("GroupNew")
        stop_all(c)
        for m in c.ids:
            topics, groups = read_tables(c, m)
            assert topics["TopicNew"] == topic_json("TopicNew", QUEUES), m
            # Java's built-in topics: the auto-create key (it inherits), the cluster, the broker name.
            assert topics["TBW102"] == topic_json("TBW102", QUEUES, perm=7)
            assert {"DefaultCluster", "default"} <= set(topics)
            assert not any(t.startswith("RMQ_SYS_") for t in topics), m
            assert set(groups) == JAVA_GROUPS | {"GroupNew"}, m
            assert all(groups[g] == group_json(g) for g in groups)
            # A topic and a group only the files hold (a Java broker made them): read at start.
            for name, table, entry in (
                ("topics.json", "topicConfigTable", topic_json("TopicJava", 8)),
                ("subscriptionGroup.json", "subscriptionGroupTable", {**group_json("GroupJava"), "retryMaxTimes": 3}),
            ):
                path = config_file(c, m, name)
                data = json.loads(path.read_text())
                data[table][entry.get("topicName") or entry["groupName"]] = entry
                path.write_text(json.dumps(data))
        c.start_all()
        c.wait_leader()
        put_and_commit(c, "TopicTwo", "GroupTwo", 2)
        stop_all(c)
        for m in c.ids:
            topics, groups = read_tables(c, m)
            assert topics["TopicJava"] == topic_json("TopicJava", 8), m
            assert {"TopicNew", "TopicTwo"} <= set(topics), m
            assert set(groups) == JAVA_GROUPS | {"GroupNew", "GroupTwo", "GroupJava"}, m
            assert groups["GroupJava"]["retryMaxTimes"] == 3
