"""GET_BROKER_CONFIG / UPDATE_BROKER_CONFIG, brokerPermission and GET_CONSUMER_RUNNING_INFO
against a real classic broker process run from a broker.conf (``-c``), with a name server, on
127.0.0.1, as mqadmin's getBrokerConfig / updateBrokerConfig / consumerStatus send them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dledger.rocketmq.broker.broker_controller import BrokerController
from dledger.rocketmq.remoting import RemotingCommand, RequestCode, ResponseCode
from dledger.rocketmq.remoting.netty_decoder import NettyDecoder
from dledger.rocketmq.remoting.netty_remoting_client import NettyRemotingClient
from dledger.rocketmq.remoting.protocol.request_headers import pull_message
from dledger.rocketmq.remoting.remoting_serializable import decode as json_decode
from dledger.rocketmq.remoting.remoting_serializable import encode as json_encode
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.store.properties import parse_properties
from dledger.testing import ClassicBroker, consecutive_free_ports
from tests.rocketmq.remoting.processes import cluster, run, start_namesrv, stop
from tests.rocketmq.remoting.test_broker_codes import max_offset, pull, send, wait_master

pytestmark = pytest.mark.timeout(240)


@dataclass
class Env:
    addr: str
    namesrv: str
    broker: ClassicBroker


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    work = tmp_path_factory.mktemp("broker-config")
    ns_proc, ns_port, _ = start_namesrv(work)
    namesrv = f"127.0.0.1:{ns_port}"
    port = consecutive_free_ports(4) + 2  # remoting P, VIP P - 2, HA P + 1
    extra = ["--namesrv-addr", namesrv, "--broker-name", "broker-a"]
    broker = ClassicBroker(work, "master", "ASYNC_MASTER", conf=f"listenPort={port}\n", extra=extra)
    broker.ha_port = port + 1
    try:
        broker.start()
        run(lambda: wait_master(namesrv), timeout=60)
        yield Env(f"127.0.0.1:{port}", namesrv, broker)
    finally:
        if broker.proc is not None:
            broker.stop()
        stop(ns_proc)


async def get_config(c: NettyRemotingClient, addr: str) -> tuple[dict[str, str], RemotingCommand]:
    r = await c.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG))
    assert r.code == ResponseCode.SUCCESS, r.remark
    return parse_properties(bytes(r.body).decode("utf-8")), r


async def update_config(c: NettyRemotingClient, addr: str, text: str) -> RemotingCommand:
    return await c.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=text.encode()))


async def pull_as(c: NettyRemotingClient, addr: str, group: str, topic: str) -> RemotingCommand:
    return await c.invoke(addr, pull_message(topic, 0, group=group, expression_type=None))


def test_broker_config_is_read_and_changed_at_runtime_and_written_to_broker_conf(env: Env) -> None:
    addr = env.addr

    async def scenario() -> None:
        c = NettyRemotingClient()
        try:
            props, r = await get_config(c, addr)
            # The broker's properties under RocketMQ's names, broker.conf's among them.
            assert props["brokerName"] == "broker-a" and props["brokerId"] == "0"
            assert props["listenPort"] == addr.rsplit(":", 1)[1]
            assert props["mappedFileSizeConsumeQueue"] == "6000"
            # The store's options, in the file or not (Java's Configuration holds them all).
            assert props["haSendHeartbeatInterval"] == "5000" and props["brokerRole"] == "ASYNC_MASTER"
            assert (props["slaveReadEnable"], props["brokerPermission"]) == ("false", "6")
            assert props["autoCreateSubscriptionGroup"] == "true"
            # BrokerFastFailure's switch and waits, Java's defaults.
            assert (props["brokerFastFailureEnable"], props["waitTimeMillsInSendQueue"]) == ("true", "200")
            v0 = json_decode((r.ext_fields or {})["version"].encode())
            # A group that does not exist yet is made by its first pull (autoCreateSubscriptionGroup).
            assert (await pull_as(c, addr, "G-auto", "CfgTopic")).code != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
            # The update: a runtime key, a key that only takes effect at a restart, an unknown one.
            r = await update_config(
                c,
                addr,
                "autoCreateSubscriptionGroup=false\nslaveReadEnable=true\nhaSendHeartbeatInterval=6000\nnoSuchKey=1\n",
            )
            assert (r.code, r.remark) == (ResponseCode.SUCCESS, None)
            props, r = await get_config(c, addr)
            assert (props["slaveReadEnable"], props["autoCreateSubscriptionGroup"]) == ("true", "false")
            assert props["haSendHeartbeatInterval"] == "6000" and "noSuchKey" not in props
            assert json_decode((r.ext_fields or {})["version"].encode())["counter"] == v0["counter"] + 1
            # Taken now: a new group is no longer made.
            r = await pull_as(c, addr, "G-new", "CfgTopic")
            assert r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, r.remark
            # A value that does not parse: refused, nothing stored.
            r = await update_config(c, addr, "brokerPermission=rw\nslaveReadEnable=false\n")
            assert r.code == ResponseCode.SYSTEM_ERROR and "brokerPermission" in (r.remark or "")
            assert (await get_config(c, addr))[0]["slaveReadEnable"] == "true"
        finally:
            await c.close()

    run(scenario)
    # Persisted as Java's Configuration does: broker.conf written again, the unknown key not in it.
    conf = parse_properties(env.broker.conf.read_text())
    assert conf["slaveReadEnable"] == "true" and conf["autoCreateSubscriptionGroup"] == "false"
    assert conf["haSendHeartbeatInterval"] == "6000" and conf["mappedFileSizeConsumeQueue"] == "6000"
    assert "brokerRole" not in conf  # a key the file did not have and nobody updated
    assert "noSuchKey" not in conf
    # A restart runs from the file as it is now.
    env.broker.stop()
    env.broker.start()

    async def after_restart() -> None:
        await wait_master(env.namesrv)
        c = NettyRemotingClient()
        try:
            props, _ = await get_config(c, addr)
            assert (props["slaveReadEnable"], props["autoCreateSubscriptionGroup"]) == ("true", "false")
            assert props["haSendHeartbeatInterval"] == "6000"  # taken at this start
            assert (await pull_as(c, addr, "G-other", "CfgTopic")).code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
            r = await update_config(c, addr, "autoCreateSubscriptionGroup=true\nslaveReadEnable=false\n")
            assert r.code == ResponseCode.SUCCESS
        finally:
            await c.close()

    run(after_restart)


async def route_perms(c: NettyRemotingClient, namesrv: str, topic: str) -> set[int]:
    r = await c.invoke(namesrv, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    if r.code == ResponseCode.TOPIC_NOT_EXIST:
        return set()  # the broker has not registered the topic yet (it does so after the send)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return {int(q["perm"]) for q in json_decode(r.body)["queueDatas"]}


async def until_route_perms(c: NettyRemotingClient, namesrv: str, topic: str, want: set[int]) -> None:
    for _ in range(100):
        if await route_perms(c, namesrv, topic) == want:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"route of {topic}: {await route_perms(c, namesrv, topic)}, want {want}")


def test_broker_permission_refuses_pulls_and_order_sends_as_java(env: Env) -> None:
    """brokerPermission without read: every pull NO_PERMISSION; without write: an order topic's
    sends and a consumer's send-back NO_PERMISSION (an ordinary topic's send is taken, as in
    4.9.4's msgCheck: its clients leave the broker because the route says so)."""
    addr, ip = env.addr, env.addr.rsplit(":", 1)[0]

    async def scenario() -> None:
        c = NettyRemotingClient()
        try:
            await send(c, addr, "PermTopic", b"before")
            order = {"topic": "OrderTopic", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6", "order": "true"}
            r = await c.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, order))
            assert r.code == ResponseCode.SUCCESS
            await send(c, addr, "OrderTopic", b"o1")
            await until_route_perms(c, env.namesrv, "PermTopic", {6})

            # Write only: no pulls; the routes give every topic the broker's permission at once.
            assert (await update_config(c, addr, "brokerPermission=2\n")).code == ResponseCode.SUCCESS
            r = await pull(c, addr, "PermTopic", 0, 0)
            assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, f"the broker[{ip}] pulling message is forbidden")
            await until_route_perms(c, env.namesrv, "PermTopic", {2})

            # Read only: an order topic's send and a send-back refused; pulls served again.
            assert (await update_config(c, addr, "brokerPermission=4\n")).code == ResponseCode.SUCCESS
            ext = {"a": "PG", "b": "OrderTopic", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0", "h": "0"}
            ext |= {"i": "WAIT\x01true", "j": "0", "k": "false", "m": "false"}
            r = await c.invoke(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, b"o2"))
            assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, f"the broker[{ip}] sending message is forbidden")
            assert await max_offset(c, addr, "OrderTopic", 0) == 1
            back = {"offset": "0", "group": "CG", "delayLevel": "0", "originMsgId": "X", "originTopic": "PermTopic"}
            r = await c.invoke(addr, RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, back))
            assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, f"the broker[{ip}] sending message is forbidden")
            await send(c, addr, "PermTopic", b"ordinary")  # not an order topic: taken, as Java
            r = await pull(c, addr, "PermTopic", 0, 0)
            assert r.code == ResponseCode.SUCCESS, r.remark
            await until_route_perms(c, env.namesrv, "PermTopic", {4})
        finally:
            try:
                assert (await update_config(c, addr, "brokerPermission=6\n")).code == ResponseCode.SUCCESS
                await until_route_perms(c, env.namesrv, "PermTopic", {6})
            finally:
                await c.close()

    run(scenario)


class Consumer:
    """A client on its own socket: heartbeats as a consumer of ``group`` and answers what the
    broker forwards to it (GET_CONSUMER_RUNNING_INFO) as ``answer`` says."""

    def __init__(self, client_id: str, group: str) -> None:
        self.client_id, self.group = client_id, group
        self.asked: list[RemotingCommand] = []
        self.mode = "answer"

    async def connect(self, addr: str) -> None:
        host, port = addr.rsplit(":", 1)
        self.reader, self.writer = await asyncio.open_connection(host, int(port))
        self.task = asyncio.get_running_loop().create_task(self._serve())
        beat = {
            "clientID": self.client_id,
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": self.group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [],
                    "unitMode": False,
                }
            ],
        }
        self.beat = RemotingCommand.request(RequestCode.HEART_BEAT, body=json_encode(beat))
        self.beat.version = 401
        self.beat_answer: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.writer.write(self.beat.encode())

    async def _serve(self) -> None:
        decoder = NettyDecoder()
        while data := await self.reader.read(65536):
            for frame in decoder.feed(data):
                cmd = RemotingCommand.decode(frame)
                if cmd.is_response:
                    if cmd.opaque == self.beat.opaque and not self.beat_answer.done():
                        self.beat_answer.set_result(cmd)
                    continue
                if cmd.code != RequestCode.GET_CONSUMER_RUNNING_INFO:
                    continue  # NOTIFY_CONSUMER_IDS_CHANGED
                self.asked.append(cmd)
                if self.mode == "close":
                    self.writer.close()
                    return
                if self.mode == "silent":
                    continue
                info = {"properties": {"clientId": self.client_id, "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY"}}
                self.writer.write(cmd.response(body=json_encode(info)).encode())

    async def close(self) -> None:
        self.writer.close()
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def test_consumer_running_info_is_forwarded_to_the_client_and_its_answer_returned(env: Env) -> None:
    addr = env.addr

    def ask(client_id: str) -> RemotingCommand:
        fields = {"consumerGroup": "RunG", "clientId": client_id, "jstackEnable": "false"}
        return RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, fields)

    async def scenario() -> None:
        admin = NettyRemotingClient()
        consumer = Consumer("10.0.0.1@1", "RunG")
        try:
            await consumer.connect(addr)
            assert (await asyncio.wait_for(consumer.beat_answer, 10)).code == ResponseCode.SUCCESS
            r = await admin.invoke(addr, ask("10.0.0.1@1"), timeout=15)
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert json_decode(r.body)["properties"]["clientId"] == "10.0.0.1@1"
            (fwd,) = consumer.asked
            assert (fwd.ext_fields or {})["consumerGroup"] == "RunG" and not fwd.is_oneway
            # A client the group does not have.
            r = await admin.invoke(addr, ask("10.0.0.9@9"))
            assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "The Consumer <RunG> <10.0.0.9@9> not online")
            # A client whose connection closes before it answers.
            consumer.mode = "close"
            r = await admin.invoke(addr, ask("10.0.0.1@1"), timeout=15)
            assert r.code == ResponseCode.SYSTEM_ERROR
            assert (r.remark or "").startswith("invoke consumer <RunG> <10.0.0.1@1> Exception")
        finally:
            await consumer.close()
            await admin.close()

    run(scenario)


def test_a_consumer_that_does_not_answer_in_time_is_consume_msg_timeout(tmp_path: Path) -> None:
    """Broker2Client.callClient's timeout (10 s; 0.5 s here, on a broker in this process)."""
    port = consecutive_free_ports(4) + 2
    addr = f"127.0.0.1:{port}"
    cfg = MessageStoreConfig(
        store_path_root_dir=str(tmp_path / "s"),
        mapped_file_size_commit_log=1 << 18,
        mapped_file_size_consume_queue=6000,
        ha_listen_port=0,
    )

    async def scenario() -> None:
        b = BrokerController(cfg, "127.0.0.1:0", remoting_port=port)
        await b.start()
        admin = NettyRemotingClient()
        consumer = Consumer("10.0.0.2@2", "SlowG")
        try:
            assert b.remoting is not None
            b.remoting.admin.call_client_timeout_s = 0.5
            consumer.mode = "silent"
            await consumer.connect(addr)
            assert (await asyncio.wait_for(consumer.beat_answer, 10)).code == ResponseCode.SUCCESS
            fields = {"consumerGroup": "SlowG", "clientId": "10.0.0.2@2", "jstackEnable": "false"}
            r = await admin.invoke(addr, RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, fields))
            assert r.code == ResponseCode.CONSUME_MSG_TIMEOUT
            assert (r.remark or "").startswith("consumer <SlowG> <10.0.0.2@2> Timeout")
            assert len(consumer.asked) == 1
        finally:
            await consumer.close()
            await admin.close()
            await b.shutdown()

    run(scenario)


def test_a_dledger_members_config_updates_are_saved_and_taken_at_its_next_start(tmp_path: Path) -> None:
    """A member has no broker.conf: UPDATE_BROKER_CONFIG writes its own
    ``config/broker.properties`` in its store, and a restarted member runs with it: the runtime
    keys (a write-only brokerPermission refuses pulls) and its options (defaultTopicQueueNums is
    listed from the member's own option, which the file's value replaced)."""
    with cluster(tmp_path, 1, ["--default-topic-queue-nums", "4"]) as (ns, brokers):
        run(lambda: wait_master(ns), timeout=60)
        addr = brokers.addr("n0")

        async def update() -> None:
            c = NettyRemotingClient()
            try:
                await send(c, addr, "Saved", b"before")
                r = await update_config(c, addr, "brokerPermission=2\nslaveReadEnable=true\ndefaultTopicQueueNums=6\n")
                assert r.code == ResponseCode.SUCCESS, r.remark
            finally:
                await c.close()

        run(update)
        (saved,) = list((tmp_path / "n0").rglob("broker.properties"))
        assert saved.parent.name == "config"
        text = saved.read_text(encoding="latin-1")
        got = parse_properties(text)
        assert {k: got[k] for k in ("brokerPermission", "slaveReadEnable", "defaultTopicQueueNums")} == {
            "brokerPermission": "2",
            "slaveReadEnable": "true",
            "defaultTopicQueueNums": "6",
        }
        stop(brokers.procs.pop("n0"))
        brokers.start("n0")
        run(lambda: wait_master(ns), timeout=60)

        async def after_restart() -> None:
            c = NettyRemotingClient()
            try:
                props, _ = await get_config(c, addr)
                assert (props["brokerPermission"], props["slaveReadEnable"], props["defaultTopicQueueNums"]) == (
                    "2",
                    "true",
                    "6",
                )
                r = await pull_as(c, addr, "CG", "Saved")
                assert r.code == ResponseCode.NO_PERMISSION, (r.code, r.remark)
                # Writes are still allowed.
                await send(c, addr, "Saved", b"after")
                # Back to read-write: saved again, and pulls are served.
                r = await update_config(c, addr, "brokerPermission=6\n")
                assert r.code == ResponseCode.SUCCESS
                assert (await pull_as(c, addr, "CG", "Saved")).code == ResponseCode.SUCCESS
            finally:
                await c.close()

        run(after_restart)
        assert parse_properties(saved.read_text(encoding="latin-1"))["brokerPermission"] == "6"
