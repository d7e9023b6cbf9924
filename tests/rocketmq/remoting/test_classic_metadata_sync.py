"""A classic master and slave (``dledger mq broker --remoting-port``) with our name server, as
processes on 127.0.0.1: both found through the name server with their brokerIds, a topic and a
subscription group made on the master appear on the slave (files and answers) within the sync
period, the slave rewrites nothing while the master's data version stays, and the bodies of the
four sync codes are Java's."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dledger.rocketmq.remoting import remoting_serializable
from dledger.rocketmq.remoting.netty_remoting_client import NettyRemotingClient
from dledger.rocketmq.remoting.remoting_command import RemotingCommand
from dledger.rocketmq.remoting.request_code import RequestCode
from dledger.rocketmq.remoting.response_code import ResponseCode
from dledger.rocketmq.store.consumer_offset import decode_offset_table
from dledger.testing import ClassicBroker, consecutive_free_ports
from tests.rocketmq.remoting.processes import cluster, run, start_namesrv, stop
from tests.rocketmq.remoting.test_metadata_files import SUBSCRIPTION_GROUP_FIELDS, TOPIC_CONFIG_FIELDS

SYNC_PERIOD_MS = 400


class Pair:
    def __init__(self, namesrv: str, master: ClassicBroker, slave: ClassicBroker, m_port: int, s_port: int) -> None:
        self.namesrv = namesrv
        self.master, self.slave = master, slave
        self.master_remoting = f"127.0.0.1:{m_port}"
        self.slave_remoting = f"127.0.0.1:{s_port}"


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    ns_proc, ns_port, _ = start_namesrv(tmp_path)
    namesrv = f"127.0.0.1:{ns_port}"
    made: list[ClassicBroker] = []
    try:
        # remoting port P (VIP P - 2), HA P + 1: Java's layout.
        m_port = consecutive_free_ports(4) + 2
        s_port = consecutive_free_ports(4) + 2
        common = ["--namesrv-addr", namesrv, "--slave-sync-period-ms", str(SYNC_PERIOD_MS)]
        master = ClassicBroker(tmp_path, "master", "ASYNC_MASTER", extra=["--remoting-port", str(m_port), *common])
        master.ha_port = m_port + 1
        made.append(master)
        master.start()
        slave = ClassicBroker(
            tmp_path,
            "slave",
            "SLAVE",
            master.ha,
            extra=["--remoting-port", str(s_port), "--broker-id", "2", *common],
        )
        made.append(slave)
        slave.start()
        yield Pair(namesrv, master, slave, m_port, s_port)
    finally:
        for b in made:
            if b.proc is not None:
                b.stop()
        stop(ns_proc)


async def _call(
    client: NettyRemotingClient, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b""
) -> RemotingCommand:
    resp = await client.invoke(addr, RemotingCommand.request(code, ext, body), 5.0)
    assert resp.code == ResponseCode.SUCCESS, (code, resp.code, resp.remark)
    return resp


async def _until(check: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.1)


def _vip(addr: str) -> str:
    host, _, port = addr.rpartition(":")
    return f"{host}:{int(port) - 2}"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None


def test_slave_takes_the_masters_topics_and_groups_and_both_register_with_their_broker_ids(pair: Pair) -> None:
    slave_config = pair.slave.dir / "config"

    async def scenario() -> None:
        client = NettyRemotingClient()
        try:
            # Both registered, the master as brokerId 0, the slave with its own, and HA address.
            async def registered() -> dict[int, str] | None:
                resp = await _call(client, pair.namesrv, RequestCode.GET_BROKER_CLUSTER_INFO)
                info = remoting_serializable.decode(resp.body)
                addrs = (info.get("brokerAddrTable") or {}).get("broker-a", {}).get("brokerAddrs") or {}
                table = {int(k): v for k, v in addrs.items()}
                return table if len(table) == 2 else None

            assert await _until(registered) == {0: pair.master_remoting, 2: pair.slave_remoting}
            assert (
                "broker-a"
                in (
                    remoting_serializable.decode(
                        (await _call(client, pair.namesrv, RequestCode.GET_BROKER_CLUSTER_INFO)).body
                    ).get("clusterAddrTable", {})["DefaultCluster"]
                )
            )

            # A topic (mqadmin updateTopic) and a group (mqadmin updateSubGroup) on the master.
            ext = {
                "topic": "MetaTopic",
                "readQueueNums": "3",
                "writeQueueNums": "3",
                "perm": "6",
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": "0",
                "order": "false",
            }
            await _call(client, pair.master_remoting, RequestCode.UPDATE_AND_CREATE_TOPIC, ext)
            group = {
                "groupName": "MetaGroup",
                "consumeEnable": True,
                "consumeFromMinEnable": True,
                "consumeBroadcastEnable": False,
                "retryQueueNums": 2,
                "retryMaxTimes": 5,
                "brokerId": 0,
                "whichBrokerWhenConsumeSlowly": 1,
                "notifyConsumerIdsChangedEnable": True,
            }
            body = remoting_serializable.encode(group)
            await _call(client, pair.master_remoting, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
            made = time.monotonic()

            async def on_slave() -> bool:
                t, g = _read(slave_config / "topics.json"), _read(slave_config / "subscriptionGroup.json")
                return bool(
                    t and "MetaTopic" in t["topicConfigTable"] and g and "MetaGroup" in g["subscriptionGroupTable"]
                )

            await _until(on_slave, 10.0)
            assert time.monotonic() - made < 10 * SYNC_PERIOD_MS / 1000 + 2

            # The slave's files: the master's table and data version, Java's properties.
            master_vip = _vip(pair.master_remoting)
            m_topics = json.loads(bytes((await _call(client, master_vip, RequestCode.GET_ALL_TOPIC_CONFIG)).body))
            s_topics = _read(slave_config / "topics.json")
            assert s_topics is not None
            assert s_topics == m_topics
            assert s_topics["topicConfigTable"]["MetaTopic"] == {
                "order": False,
                "perm": 6,
                "readQueueNums": 3,
                "topicFilterType": "SINGLE_TAG",
                "topicName": "MetaTopic",
                "topicSysFlag": 0,
                "writeQueueNums": 3,
            }
            for tc in s_topics["topicConfigTable"].values():
                assert set(tc) == TOPIC_CONFIG_FIELDS
            m_groups = json.loads(
                bytes((await _call(client, master_vip, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).body)
            )
            s_groups = _read(slave_config / "subscriptionGroup.json")
            assert s_groups == m_groups
            assert s_groups is not None and s_groups["subscriptionGroupTable"]["MetaGroup"] == group
            for g in s_groups["subscriptionGroupTable"].values():
                assert set(g) == SUBSCRIPTION_GROUP_FIELDS
            # The slave answers with the master's data, as a Java slave would.
            s_answer = json.loads(
                bytes((await _call(client, pair.slave_remoting, RequestCode.GET_ALL_TOPIC_CONFIG)).body)
            )
            assert s_answer["dataVersion"] == m_topics["dataVersion"]

            # The data version rule: nothing changes on the master, nothing is rewritten on the
            # slave (the file is replaced, so a rewrite changes its inode).
            inodes = {n: (slave_config / n).stat().st_ino for n in ("topics.json", "subscriptionGroup.json")}
            await asyncio.sleep(5 * SYNC_PERIOD_MS / 1000)
            assert {n: (slave_config / n).stat().st_ino for n in inodes} == inodes

            # The other two sync bodies, as Java's: ConsumerOffsetSerializeWrapper and
            # ScheduleMessageService's offset table (integer keys bare).
            offsets = (await _call(client, master_vip, RequestCode.GET_ALL_CONSUMER_OFFSET)).body
            assert bytes(offsets).startswith(b'{"offsetTable":{')
            decode_offset_table(bytes(offsets).decode())
            delay = (await _call(client, master_vip, RequestCode.GET_ALL_DELAY_OFFSET)).body
            assert bytes(delay) == b'{"offsetTable":{}}'  # no delayed message yet: Java's empty table
        finally:
            await client.close()

    run(scenario, 90.0)


def test_dledger_followers_take_the_leaders_topics_and_groups(tmp_path: Path) -> None:
    from tests.rocketmq.remoting.test_broker_remoting import QUEUES
    from tests.rocketmq.remoting.test_group_remoting import _wait_master

    with cluster(tmp_path, 3, [*QUEUES, "--slave-sync-period", str(SYNC_PERIOD_MS)]) as (namesrv, brokers):
        by_addr = {brokers.addr(m): m for m in brokers.ids}

        async def scenario() -> None:
            client = NettyRemotingClient()
            try:
                leader = (await _wait_master(client, namesrv, 3, None, 20))[0]
                ext = {"topic": "GroupTopic", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"}
                await _call(client, leader, RequestCode.UPDATE_AND_CREATE_TOPIC, ext)
                body = remoting_serializable.encode({"groupName": "GroupGroup", "retryMaxTimes": 3})
                await _call(client, leader, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
                followers = [m for a, m in by_addr.items() if a != leader]

                async def synced() -> bool:
                    for m in followers:
                        config = tmp_path / m / "config"
                        t, g = _read(config / "topics.json"), _read(config / "subscriptionGroup.json")
                        if not (t and "GroupTopic" in t["topicConfigTable"]):
                            return False
                        if not (g and g["subscriptionGroupTable"].get("GroupGroup", {}).get("retryMaxTimes") == 3):
                            return False
                    return True

                await _until(synced, 15.0)
            finally:
                await client.close()

        run(scenario, 90.0)


def test_a_promoted_slave_registers_as_master_at_once(pair: Pair) -> None:
    from dledger.rocketmq.client.mq_admin import update_broker_role_async

    slave_topics = pair.slave.dir / "config" / "topics.json"

    async def cluster_addrs(client: NettyRemotingClient) -> dict[int, str]:
        resp = await _call(client, pair.namesrv, RequestCode.GET_BROKER_CLUSTER_INFO)
        info = remoting_serializable.decode(resp.body)
        addrs = (info.get("brokerAddrTable") or {}).get("broker-a", {}).get("brokerAddrs") or {}
        return {int(k): v for k, v in addrs.items()}

    async def scenario() -> None:
        client = NettyRemotingClient()
        try:

            async def both() -> bool:
                return len(await cluster_addrs(client)) == 2

            await _until(both)
            pair.master.stop()  # SIGTERM: it unregisters on the way out

            async def master_gone() -> bool:
                return await cluster_addrs(client) == {2: pair.slave_remoting}

            await _until(master_gone)
            await update_broker_role_async(pair.slave.addr, "ASYNC_MASTER")

            async def promoted() -> bool:
                return await cluster_addrs(client) == {0: pair.slave_remoting}

            await _until(promoted, 5.0)  # registered at once, not at the 30 s period
            # Its topics now change by its own hand (UPDATE_AND_CREATE_TOPIC), persisted at once.
            await _call(
                client,
                pair.slave_remoting,
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {"topic": "AfterPromotion", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"},
            )
            data = _read(slave_topics)
            assert data is not None and "AfterPromotion" in data["topicConfigTable"]
        finally:
            await client.close()

    run(scenario, 90.0)
