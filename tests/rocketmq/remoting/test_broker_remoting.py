"""A member of a DLedger group with the message store speaks RocketMQ's remoting protocol: the
requests the real 4.9.4 producer and lite-pull consumer sent the Java broker (and the name
server) get the answers the Java broker gave; real processes on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dledger.rocketmq.remoting import RemotingCommand, RequestCode, ResponseCode, SerializeType
from dledger.rocketmq.remoting.netty_remoting_client import NettyRemotingClient
from dledger.rocketmq.remoting.protocol.request_headers import pull_message, send_message_header_v2
from dledger.rocketmq.remoting.remoting_serializable import decode as json_decode
from dledger.rocketmq.store.message import decode_message_id
from dledger.rocketmq.store.records import decode_record
from tests.rocketmq.remoting.captures import SCENARIOS, Frame, frames
from tests.rocketmq.remoting.processes import Brokers, cluster, run

CAPTURED_BROKER = "127.0.0.1:29911"
QUEUES = ["--default-topic-queue-nums", "4"]  # the capture's broker: 4 queues a topic


@pytest.fixture(scope="module")
def one_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Brokers]]:
    with cluster(tmp_path_factory.mktemp("remoting"), 1, QUEUES) as c:
        yield c


def _records(body: bytes) -> list[dict[str, Any]]:
    out = []
    pos = 0
    while pos < len(body):
        size = int.from_bytes(body[pos : pos + 4], "big")
        m = decode_record(body[pos : pos + size], 0)
        assert m is not None
        out.append(
            {
                "topic": m.topic,
                "body": m.body,
                "queue": (m.queue_id, m.queue_offset),
                "flag": m.flag,
                "sys_flag": m.sys_flag,
                "born": m.born_timestamp,
                "reconsume": m.reconsume_times,
                "props": dict(m.properties),
            }
        )
        pos += size
    return out


def _route(body: bytes | memoryview, broker_addr: str) -> Any:
    d = json_decode(bytes(body).replace(broker_addr.encode(), CAPTURED_BROKER.encode()))
    return (
        sorted(json.dumps(q, sort_keys=True) for q in d["queueDatas"]),
        sorted(
            json.dumps({**b, "brokerAddrs": {str(k): v for k, v in b["brokerAddrs"].items()}}, sort_keys=True)
            for b in d["brokerDatas"]
        ),
    )


# What mqadmin clusterList and brokerStatus read of GET_BROKER_RUNTIME_INFO.
RUNTIME_KEYS = {
    "msgPutTotalTodayNow",
    "msgGetTotalTodayNow",
    "msgPutTotalYesterdayMorning",
    "msgPutTotalTodayMorning",
    "msgGetTotalYesterdayMorning",
    "msgGetTotalTodayMorning",
    "putTps",
    "getTransferedTps",
    "commitLogDiskRatio",
    "pageCacheLockTimeMills",
    "earliestMessageTimeStamp",
    "brokerVersionDesc",
    "dispatchBehindBytes",
}
_MQ_ENTRY = re.compile(rb'\{"[^{}]*"queueId":(\d+)[^{}]*\}:\{([^{}]*)\}')


def _offset_table(body: bytes) -> list[tuple[int, dict[str, int]]]:
    """fastjson's ``{MessageQueue:{...}}`` map (objects as keys): queue id and its numbers but
    the timestamps (which are the capture's)."""
    out = []
    for m in _MQ_ENTRY.finditer(body):
        fields = json.loads(b"{" + m.group(2) + b"}")
        out.append((int(m.group(1)), {k: v for k, v in fields.items() if "imestamp" not in k}))
    return sorted(out, key=lambda e: e[0])


def _check(f: Frame, req: RemotingCommand, got: RemotingCommand, want: RemotingCommand, broker_addr: str) -> None:
    where = f"{f.scenario} seq {f.info['seq']} {RequestCode(req.code).name}"
    assert got.code == want.code, (where, got.remark)
    assert got.opaque == want.opaque and got.is_response and got.serialize_type == req.serialize_type, where
    assert set(got.ext_fields or {}) == set(want.ext_fields or {}), where
    g, w = got.ext_fields or {}, want.ext_fields or {}
    code = req.code
    if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        assert (g["queueId"], g["queueOffset"]) == (w["queueId"], w["queueOffset"]), where
        ids = g["msgId"].split(",")
        assert len(ids) == len(w["msgId"].split(",")), where
        for mid in ids:  # offset ids lead back to this broker
            host, _phys = decode_message_id(mid)
            assert f"{host[0]}:{host[1]}" == broker_addr, where
    elif code == RequestCode.PULL_MESSAGE:
        assert g == w and got.remark == want.remark, where
        assert _records(bytes(got.body)) == _records(bytes(want.body)), where
    elif code == RequestCode.GET_ROUTEINFO_BY_TOPIC and got.code == ResponseCode.SUCCESS:
        assert _route(got.body, broker_addr) == _route(want.body, CAPTURED_BROKER), where
    elif code in (RequestCode.QUERY_MESSAGE, RequestCode.VIEW_MESSAGE_BY_ID):
        assert _records(bytes(got.body)) == _records(bytes(want.body)), where
    elif code == RequestCode.GET_BROKER_RUNTIME_INFO:
        table = json_decode(got.body)["table"]
        assert RUNTIME_KEYS <= set(table) and all(isinstance(v, str) for v in table.values()), where
    elif code in (RequestCode.GET_TOPIC_STATS_INFO, RequestCode.GET_CONSUME_STATS):
        assert _offset_table(bytes(got.body)) == _offset_table(bytes(want.body)), where
        assert len(_offset_table(bytes(got.body))) == 4, where
    elif code == RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
        # The Java broker has built-in topics ours does not (SCHEDULE_TOPIC_XXXX...).
        assert set(json_decode(got.body)["topicList"]) <= set(json_decode(want.body)["topicList"]), where
    elif code == RequestCode.GET_BROKER_CLUSTER_INFO:
        ours = bytes(got.body).replace(broker_addr.encode(), CAPTURED_BROKER.encode())
        assert b'"brokerAddrs":{0:' in ours, where  # fastjson's bare broker ids, as a 4.9.4 name server
        assert json_decode(ours) == json_decode(want.body), where
    else:
        assert g == w, where
        assert bytes(got.body) == bytes(want.body), where


def test_the_captured_producer_and_consumer_traffic_gets_the_java_brokers_answers(
    one_broker: tuple[str, Brokers],
) -> None:
    namesrv_addr, brokers = one_broker
    broker_addr = brokers.addr("n0")
    scenarios = (
        "b-produce-sync",
        "c-produce-batch",
        "d-consume",
        *(s for s in SCENARIOS if s.startswith("e")),
        "g-rocketmq-serialize",
    )
    captured = [f for s in scenarios for f in frames(s) if f.link in ("client-namesrv", "client-broker")]
    answers = {(f.info["conn"], f.info["opaque"]): f for f in captured if not f.is_request}

    async def replay() -> dict[int, int]:
        clients: dict[int, NettyRemotingClient] = {}
        checked: dict[int, int] = {}
        # The Java broker's commit-log offsets (in its offset ids) -> ours, for VIEW_MESSAGE_BY_ID.
        offsets: dict[int, int] = {}
        try:
            for f in captured:
                if not f.is_request:
                    continue
                addr = namesrv_addr if f.link == "client-namesrv" else broker_addr
                client = clients.setdefault(f.info["conn"], NettyRemotingClient())
                req = RemotingCommand.decode(f.raw[4:])
                if req.is_oneway:
                    await client.invoke_oneway(addr, req)
                    continue
                want_f = answers.get((f.info["conn"], f.info["opaque"]))
                if want_f is None:
                    continue  # a pull the Java broker still held when the consumer left
                want = RemotingCommand.decode(want_f.raw[4:])
                if req.code == RequestCode.VIEW_MESSAGE_BY_ID and req.ext_fields:
                    req.ext_fields["offset"] = str(offsets[int(req.ext_fields["offset"])])
                got = await client.invoke(addr, req, timeout=30)
                if req.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE) and got.ext_fields:
                    theirs = (want.ext_fields or {})["msgId"].split(",")
                    for t, o in zip(theirs, got.ext_fields["msgId"].split(","), strict=True):
                        offsets[decode_message_id(t)[1]] = decode_message_id(o)[1]
                if req.code == RequestCode.GET_ROUTEINFO_BY_TOPIC and got.code != want.code:
                    # The broker registers a topic it just created at once, not in the same instant.
                    for _ in range(50):
                        await asyncio.sleep(0.1)
                        req.opaque += 1 << 20
                        got = await client.invoke(addr, req, timeout=10)
                        got.opaque = want.opaque
                        if got.code == want.code:
                            break
                if req.code == RequestCode.UNREGISTER_CLIENT or req.code == RequestCode.HEART_BEAT:
                    await asyncio.sleep(0.05)
                _check(f, req, got, want, broker_addr)
                checked[req.code] = checked.get(req.code, 0) + 1
        finally:
            for c in clients.values():
                await c.close()
        return checked

    checked = run(replay, timeout=240)
    for code in (11, 12, 14, 17, 28, 33, 34, 35, 38, 105, 106, 202, 203, 206, 208, 300, 310, 320):
        assert checked.get(code), (code, checked)


async def _send(
    c: NettyRemotingClient, addr: str, topic: str, body: bytes, tags: str, qid: int = 0, keys: str = ""
) -> RemotingCommand:
    props = f"TAGS\x01{tags}\x02WAIT\x01true" + (f"\x02KEYS\x01{keys}" if keys else "")
    ext = send_message_header_v2(topic, qid, properties=props)
    return await c.invoke(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body), timeout=10)


def _pull(
    topic: str, qid: int, offset: int, sub: str = "*", suspend_ms: int = 0, stype: SerializeType = SerializeType.JSON
) -> RemotingCommand:
    return pull_message(topic, qid, offset, suspend_ms=suspend_ms, subscription=sub, serialize_type=stype)


def test_long_polling_tag_filtering_offsets_and_queries(one_broker: tuple[str, Brokers]) -> None:
    _ns, brokers = one_broker
    addr = brokers.addr("n0")

    async def scenario() -> None:
        c, other = NettyRemotingClient(), NettyRemotingClient()
        try:
            r = await _send(c, addr, "PollTopic", b"first", "TagA", keys="k-first")
            assert r.code == ResponseCode.SUCCESS, r.remark
            # Caught up: the pull is held for its suspend time, then PULL_NOT_FOUND.
            t0 = time.monotonic()
            got = await c.invoke(addr, _pull("PollTopic", 0, 1, suspend_ms=1500), timeout=10)
            held = time.monotonic() - t0
            assert got.code == ResponseCode.PULL_NOT_FOUND and got.remark == "OFFSET_OVERFLOW_ONE"
            assert held >= 1.4, held
            assert got.ext_fields == {
                "suggestWhichBrokerId": "0",
                "nextBeginOffset": "1",
                "maxOffset": "1",
                "minOffset": "0",
            }
            # A held pull is answered as soon as a message arrives.
            t0 = time.monotonic()
            pull = asyncio.ensure_future(c.invoke(addr, _pull("PollTopic", 0, 1, suspend_ms=15000), timeout=20))
            await asyncio.sleep(0.5)
            r = await _send(other, addr, "PollTopic", b"second", "TagB")
            got = await pull
            assert got.code == ResponseCode.SUCCESS and time.monotonic() - t0 < 10
            assert [m["body"] for m in _records(bytes(got.body))] == [b"second"]
            # Tags: only the subscribed ones (by the consume queue's tag hash codes).
            await _send(c, addr, "PollTopic", b"third", "TagA")
            got = await c.invoke(addr, _pull("PollTopic", 0, 0, "TagA || TagC", stype=SerializeType.ROCKETMQ))
            assert got.code == ResponseCode.SUCCESS and got.serialize_type == SerializeType.ROCKETMQ
            assert [m["body"] for m in _records(bytes(got.body))] == [b"first", b"third"]
            assert got.ext_fields and got.ext_fields["nextBeginOffset"] == "3"
            got = await c.invoke(addr, _pull("PollTopic", 0, 1, "TagC"))
            assert got.code == ResponseCode.PULL_RETRY_IMMEDIATELY and not got.body
            # Offsets of a queue.
            q = {"topic": "PollTopic", "queueId": "0"}
            mx = await c.invoke(addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, q))
            mn = await c.invoke(addr, RemotingCommand.request(RequestCode.GET_MIN_OFFSET, q))
            assert (mx.ext_fields, mn.ext_fields) == ({"offset": "3"}, {"offset": "0"})
            earliest = await c.invoke(addr, RemotingCommand.request(RequestCode.GET_EARLIEST_MSG_STORETIME, q))
            ts = int((earliest.ext_fields or {})["timestamp"])
            assert abs(ts - time.time() * 1000) < 120_000
            later = await c.invoke(
                addr,
                RemotingCommand.request(
                    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**q, "timestamp": str(ts + 3_600_000)}
                ),
            )
            # Past every message: the last one's offset, as 4.9.4's getOffsetInQueueByTime.
            assert later.ext_fields == {"offset": "2"}
            # Commit and read back an offset.
            upd = {"consumerGroup": "CG", "topic": "PollTopic", "queueId": "0", "commitOffset": "2"}
            assert (await c.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, upd))).code == 0
            qo = await c.invoke(
                addr,
                RemotingCommand.request(
                    RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "CG", "topic": "PollTopic", "queueId": "0"}
                ),
            )
            assert qo.ext_fields == {"offset": "2"}
            # By key (the index), and by the offset message id's commit-log offset.
            now = int(time.time() * 1000)
            qm = {
                "topic": "PollTopic",
                "key": "k-first",
                "maxNum": "32",
                "beginTimestamp": "0",
                "endTimestamp": str(now + 60_000),
            }
            got = await c.invoke(addr, RemotingCommand.request(RequestCode.QUERY_MESSAGE, qm))
            assert got.code == ResponseCode.SUCCESS and [m["body"] for m in _records(bytes(got.body))] == [b"first"]
            first_id = (r.ext_fields or {})["msgId"]
            _host, phys = decode_message_id(first_id)
            got = await c.invoke(addr, RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phys)}))
            assert [m["body"] for m in _records(bytes(got.body))] == [b"second"]
            # A topic nobody made and that does not come from TBW102.
            ext = {
                "a": "PG",
                "b": "NoSuch",
                "c": "NotTBW",
                "d": "4",
                "e": "0",
                "f": "0",
                "g": "0",
                "h": "0",
                "i": "",
                "j": "0",
            }
            got = await c.invoke(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, b"x"))
            assert got.code == ResponseCode.TOPIC_NOT_EXIST
        finally:
            await c.close()
            await other.close()

    run(scenario, timeout=120)


def test_codes_it_does_not_serve_are_refused_on_both_ports_and_the_connection_stays(
    one_broker: tuple[str, Brokers],
) -> None:
    _ns, brokers = one_broker
    port = brokers.listen_ports["n0"]

    async def scenario() -> None:
        c = NettyRemotingClient()
        try:
            for addr in (f"127.0.0.1:{port}", f"127.0.0.1:{port - 2}"):
                got = await c.invoke(addr, RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, {"x": "1"}))
                assert got.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
                got = await c.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"}))
                assert got.code == ResponseCode.SYSTEM_ERROR  # a header field missing
                got = await c.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
                assert got.code == ResponseCode.SUCCESS and "TBW102" in json_decode(got.body)["topicConfigTable"]
        finally:
            await c.close()

    run(scenario)
