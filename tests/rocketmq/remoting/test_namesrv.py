"""Our name server (``dledger mq namesrv``, a real process on 127.0.0.1) answers what the real
4.9.4 broker, client and mqadmin asked the Java one, as the Java one answered."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from dledger.rocketmq.namesrv.route_info_manager import RouteInfoManager
from dledger.rocketmq.remoting import RemotingCommand, RequestCode, ResponseCode, SerializeType
from dledger.rocketmq.remoting.netty_remoting_client import NettyRemotingClient
from dledger.rocketmq.remoting.protocol.register_broker_body import DataVersion, RegisterBrokerBody, TopicConfig, crc32
from dledger.rocketmq.remoting.remoting_serializable import decode as json_decode
from tests.rocketmq.remoting.captures import frames
from tests.rocketmq.remoting.processes import namesrv, run, start_namesrv, stop

NAMESRV_LINKS = ("broker-namesrv", "client-namesrv")


def _canonical(code: int, body: bytes) -> Any:
    """A response body as the client reads it: JSON, with the orders Java's hash maps give
    (which differ between fastjson and the capture's shim) taken out."""
    if not body:
        return None
    d = json_decode(body)
    if code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
        return {
            "queueDatas": sorted(json.dumps(q, sort_keys=True) for q in d["queueDatas"]),
            "brokerDatas": sorted(
                json.dumps({**b, "brokerAddrs": {str(k): v for k, v in b["brokerAddrs"].items()}}, sort_keys=True)
                for b in d["brokerDatas"]
            ),
            "filterServerTable": d.get("filterServerTable"),
        }
    if code == RequestCode.GET_BROKER_CLUSTER_INFO:
        return {
            "brokerAddrTable": {
                k: {**b, "brokerAddrs": {str(i): a for i, a in b["brokerAddrs"].items()}}
                for k, b in d["brokerAddrTable"].items()
            },
            "clusterAddrTable": {k: sorted(v) for k, v in d["clusterAddrTable"].items()},
        }
    if code == RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
        return sorted(d["topicList"])
    return d


def test_the_captured_name_server_traffic_is_answered_as_the_java_name_server_did(tmp_path: Path) -> None:
    captured = [f for f in frames() if f.link in NAMESRV_LINKS]
    requests = [f for f in captured if f.is_request]
    answers = {(f.info["conn"], f.info["opaque"]): f for f in captured if not f.is_request}
    assert {f.code for f in requests} == {103, 104, 105, 106, 206}

    async def replay(addr: str) -> int:
        clients: dict[int, NettyRemotingClient] = {}
        checked = 0
        try:
            for f in requests:
                conn = f.info["conn"]
                client = clients.setdefault(conn, NettyRemotingClient())
                req = RemotingCommand.decode(f.raw[4:])
                if req.is_oneway:
                    await client.invoke_oneway(addr, req)
                    continue
                got = await client.invoke(addr, req, timeout=10)
                want_frame = answers.get((conn, f.info["opaque"]))
                if want_frame is None:
                    continue  # answered in a later capture than the request's
                want = RemotingCommand.decode(want_frame.raw[4:])
                where = f"{f.scenario} seq {f.info['seq']} {RequestCode(req.code).name}"
                assert got.code == want.code, (where, got.remark)
                assert (got.opaque, got.flag, got.version) == (want.opaque, want.flag, want.version), where
                assert got.serialize_type == req.serialize_type == want.serialize_type, where
                assert got.remark == want.remark, where
                assert got.ext_fields == want.ext_fields, where
                assert _canonical(req.code, bytes(got.body)) == _canonical(req.code, bytes(want.body)), where
                checked += 1
        finally:
            for c in clients.values():
                await c.close()
        return checked

    with namesrv(tmp_path) as addr:
        checked = run(lambda: replay(addr))
    assert checked >= 50


async def _register(
    client: NettyRemotingClient, addr: str, topics: dict[str, TopicConfig], broker_id: int = 0, **kw: str
) -> RemotingCommand:
    body = RegisterBrokerBody(topics, DataVersion(int(time.time() * 1000), 0)).encode()

    ext = {
        "brokerId": str(broker_id),
        "bodyCrc32": str(crc32(body)),
        "clusterName": kw.get("cluster", "C1"),
        "brokerAddr": kw.get("broker_addr", "127.0.0.1:10911"),
        "haServerAddr": kw.get("ha", "127.0.0.1:10912"),
        "compressed": "false",
        "brokerName": kw.get("name", "b1"),
    }
    return await client.invoke(addr, RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body), timeout=10)


def test_a_broker_is_found_through_the_name_server_until_its_connection_closes(tmp_path: Path) -> None:
    async def scenario(addr: str) -> None:
        broker, slave, client = NettyRemotingClient(), NettyRemotingClient(), NettyRemotingClient()
        try:
            r = await _register(broker, addr, {"T1": TopicConfig("T1", 8, 8)})
            assert r.code == ResponseCode.SUCCESS and r.ext_fields == {}
            # A slave learns its master's address and HA address from its answer.
            r = await _register(slave, addr, {"T1": TopicConfig("T1", 8, 8)}, 1, broker_addr="127.0.0.1:20911")
            assert r.ext_fields == {"masterAddr": "127.0.0.1:10911", "haServerAddr": "127.0.0.1:10912"}
            for stype in SerializeType:
                req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}, serialize_type=stype)
                got = await client.invoke(addr, req)
                assert got.code == ResponseCode.SUCCESS and got.serialize_type == stype
                route = json_decode(got.body)
                assert route["queueDatas"] == [
                    {"brokerName": "b1", "perm": 6, "readQueueNums": 8, "topicSysFlag": 0, "writeQueueNums": 8}
                ]
                # A 4.9.4 client gets standard JSON, broker ids quoted.
                assert b'"brokerAddrs":{"0":"127.0.0.1:10911","1":"127.0.0.1:20911"}' in bytes(got.body)
            old = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"})
            old.version = 373  # an older client: fastjson's own form, as it parses it
            got = await client.invoke(addr, old)
            assert b'"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:20911"}' in bytes(got.body)
            info = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
            assert json_decode(info.body)["clusterAddrTable"] == {"C1": ["b1"]}
            # The master's connection closes (kill -9 looks the same): it is gone at once.
            await broker.close()
            for _ in range(100):
                got = await client.invoke(
                    addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"})
                )
                if b'"0"' not in bytes(got.body):
                    break
                await asyncio.sleep(0.05)
            assert json_decode(got.body)["brokerDatas"][0]["brokerAddrs"] == {"1": "127.0.0.1:20911"}
            # Unregistered, the last one takes the topic with it.
            unreg = {"brokerId": "1", "clusterName": "C1", "brokerAddr": "127.0.0.1:20911", "brokerName": "b1"}
            r = await slave.invoke(addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, unreg))
            assert r.code == ResponseCode.SUCCESS
            got = await client.invoke(
                addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"})
            )
            assert got.code == ResponseCode.TOPIC_NOT_EXIST
            topics = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
            assert json_decode(topics.body) == {"topicList": []}
        finally:
            for c in (broker, slave, client):
                await c.close()

    with namesrv(tmp_path) as addr:
        run(lambda: scenario(addr))


def test_codes_it_does_not_serve_are_refused_and_the_connection_stays(tmp_path: Path) -> None:
    async def scenario(addr: str) -> None:
        client = NettyRemotingClient()
        try:
            for code in (RequestCode.SEND_MESSAGE, RequestCode.GET_NAMESRV_CONFIG, 9999):
                got = await client.invoke(addr, RemotingCommand.request(int(code)))
                assert got.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
                assert got.remark == f" request type {int(code)} not supported"
            # A request whose header misses a field the processor needs: SYSTEM_ERROR, still open.
            got = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC))
            assert got.code == ResponseCode.SYSTEM_ERROR and "topic" in (got.remark or "")
            bad = RemotingCommand.request(RequestCode.REGISTER_BROKER, {"bodyCrc32": "1"}, b"{}")
            got = await client.invoke(addr, bad)
            assert (got.code, got.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
            got = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
            assert got.code == ResponseCode.SUCCESS
        finally:
            await client.close()

    with namesrv(tmp_path) as addr:
        run(lambda: scenario(addr))
        # A frame over 16 MiB: the connection is closed, as NettyDecoder closes it.
        host, port = addr.split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(struct.pack(">i", 16 * 1024 * 1024))
            s.settimeout(10)
            assert s.recv(1) == b""


def test_kv_config_codes(tmp_path: Path) -> None:
    async def scenario(addr: str) -> None:
        c = NettyRemotingClient()
        try:
            put = {"namespace": "ORDER_TOPIC_CONFIG", "key": "T1", "value": "b1:4"}
            assert (await c.invoke(addr, RemotingCommand.request(RequestCode.PUT_KV_CONFIG, put))).code == 0
            get = RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T1"})
            got = await c.invoke(addr, get)
            assert got.code == ResponseCode.SUCCESS and got.ext_fields == {"value": "b1:4"}
            lst = RemotingCommand.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"})
            assert json_decode((await c.invoke(addr, lst)).body) == {"table": {"T1": "b1:4"}}
            # A registration's answer carries the order-topic settings.
            r = await _register(c, addr, {"T1": TopicConfig("T1", 4, 4)})
            assert json_decode(r.body) == {"table": {"T1": "b1:4"}}
            route = await c.invoke(addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))
            assert json_decode(route.body)["orderTopicConf"] == "b1:4"
            dele = {"namespace": "ORDER_TOPIC_CONFIG", "key": "T1"}
            assert (await c.invoke(addr, RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, dele))).code == 0
            got = await c.invoke(addr, get)
            assert got.code == ResponseCode.QUERY_NOT_FOUND
        finally:
            await c.close()

    with namesrv(tmp_path) as addr:
        run(lambda: scenario(addr))


def test_a_broker_silent_for_120_s_expires() -> None:
    now = [1000.0]
    routes = RouteInfoManager(clock=lambda: now[0])
    routes.register_broker("C", "a:1", "b", 0, "", {"T": TopicConfig("T")}, DataVersion(1, 0), [], None)
    now[0] += 119.0
    assert routes.scan_not_active_broker() == 0 and routes.pickup_topic_route_data("T") is not None
    # A registration with the same data version keeps it alive (the topics are not re-read).
    routes.register_broker("C", "a:1", "b", 0, "", {"T": TopicConfig("T")}, DataVersion(1, 0), [], None)
    now[0] += 119.0
    assert routes.scan_not_active_broker() == 0
    now[0] += 2.0
    assert routes.scan_not_active_broker() == 1
    assert routes.pickup_topic_route_data("T") is None and routes.broker_addr_table == {}


def test_a_restarted_name_server_knows_brokers_again_once_they_register(tmp_path: Path) -> None:
    proc, port, _ = start_namesrv(tmp_path)
    addr = f"127.0.0.1:{port}"

    async def register_and_route() -> int:
        c = NettyRemotingClient()
        try:
            await _register(c, addr, {"T1": TopicConfig("T1", 2, 2)})
            got = await c.invoke(addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))
            return got.code
        finally:
            await c.close()

    async def route() -> int:
        c = NettyRemotingClient()
        try:
            got = await c.invoke(addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T1"}))
            return got.code
        finally:
            await c.close()

    try:
        assert run(register_and_route) == ResponseCode.SUCCESS
        stop(proc)
        proc, port, _ = start_namesrv(tmp_path, port)
        assert run(route) == ResponseCode.TOPIC_NOT_EXIST  # the tables live in memory, as Java's
        assert run(register_and_route) == ResponseCode.SUCCESS
    finally:
        stop(proc)


@pytest.mark.parametrize("version", [401, 0])
def test_a_topic_not_found_answer_says_so_as_java(tmp_path: Path, version: int) -> None:
    async def scenario(addr: str) -> RemotingCommand:
        c = NettyRemotingClient()
        try:
            req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
            req.version = version
            return await c.invoke(addr, req)
        finally:
            await c.close()

    with namesrv(tmp_path) as addr:
        got = run(lambda: scenario(addr))
    assert got.code == ResponseCode.TOPIC_NOT_EXIST and got.version == 0
    faq = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
    assert got.remark == "No topic route info in name server for the topic: Nope" + faq


def _java_compressed_body(version: tuple[int, int], topics: list[tuple[str, int, int, int]]) -> bytes:
    """RegisterBrokerBody.encode(true) as 4.9.4 writes it, written here from the Java source
    (not through our decoder's module): a DeflaterOutputStream (zlib wrapper,
    BEST_COMPRESSION) of int32 BE length-prefixed pieces: DataVersion.encode(), the topic
    count, each TopicConfig.encode() (``name read write perm filterType``), then
    JSON.toJSONString(filterServerList)."""

    def piece(b: bytes) -> bytes:
        return struct.pack(">i", len(b)) + b

    raw = piece(f'{{"counter":{version[1]},"timestamp":{version[0]}}}'.encode())
    raw += struct.pack(">i", len(topics))
    for name, read, write, perm in topics:
        raw += piece(f"{name} {read} {write} {perm} SINGLE_TAG".encode())
    raw += piece(b"[]")
    c = zlib.compressobj(9)
    return c.compress(raw) + c.flush()


def test_a_compressed_registration_is_read(tmp_path: Path) -> None:
    """A broker with compressedRegister=true (4.9.4's ``compressed`` header) is registered with
    its topics; a body that does not inflate is refused, the connection open."""

    async def scenario(addr: str) -> None:
        broker, client = NettyRemotingClient(), NettyRemotingClient()
        try:
            body = _java_compressed_body((int(time.time() * 1000), 3), [("CT1", 8, 4, 6), ("CT2", 2, 2, 4)])
            ext = {
                "brokerId": "0",
                "bodyCrc32": str(crc32(body)),
                "clusterName": "C1",
                "brokerAddr": "127.0.0.1:10911",
                "haServerAddr": "127.0.0.1:10912",
                "compressed": "true",
                "brokerName": "b1",
            }
            r = await broker.invoke(addr, RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body), timeout=10)
            assert (r.code, r.remark) == (ResponseCode.SUCCESS, None)
            for topic, want in (("CT1", (8, 4, 6)), ("CT2", (2, 2, 4))):
                req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
                got = await client.invoke(addr, req)
                assert got.code == ResponseCode.SUCCESS, topic
                (q,) = json_decode(got.body)["queueDatas"]
                assert (q["readQueueNums"], q["writeQueueNums"], q["perm"]) == want
            bad = b"not deflated"
            ext2 = {**ext, "bodyCrc32": str(crc32(bad)), "brokerName": "b2", "brokerAddr": "127.0.0.1:20911"}
            r = await broker.invoke(addr, RemotingCommand.request(RequestCode.REGISTER_BROKER, ext2, bad), timeout=10)
            assert r.code == ResponseCode.SYSTEM_ERROR and "inflate" in (r.remark or "")
            info = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
            assert json_decode(info.body)["clusterAddrTable"] == {"C1": ["b1"]}
        finally:
            await broker.close()
            await client.close()

    with namesrv(tmp_path) as addr:
        run(lambda: scenario(addr))
