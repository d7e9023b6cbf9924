"""The codes a 4.9.4 client sends a broker beyond produce and pull, against a real member on
127.0.0.1: CONSUMER_SEND_MSG_BACK (retry topic, delay, DLQ), a transaction's half message and
END_TRANSACTION, LOCK_BATCH_MQ / UNLOCK_BATCH_MQ, with the codes and header fields the Java
client reads."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dledger.rocketmq.broker.rebalance_lock_manager import RebalanceLockManager
from dledger.rocketmq.remoting import RemotingCommand, RequestCode, ResponseCode
from dledger.rocketmq.remoting.netty_remoting_client import NettyRemotingClient
from dledger.rocketmq.remoting.protocol.request_headers import pull_message, send_message_header_v2
from dledger.rocketmq.remoting.remoting_serializable import decode as json_decode
from dledger.rocketmq.remoting.remoting_serializable import encode as json_encode
from dledger.rocketmq.store.message import decode_message_id
from dledger.rocketmq.store.records import decode_record
from dledger.testing import ClassicBroker, consecutive_free_ports
from tests.rocketmq.remoting.processes import cluster, run, start_namesrv, stop

QUEUES = ["--default-topic-queue-nums", "4"]


@pytest.fixture(scope="module", params=["dledger", "classic"])
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The remoting address of a DLedger group's member, or of a classic master (the same
    processors over either store)."""
    work = tmp_path_factory.mktemp(f"codes-{request.param}")
    if request.param == "dledger":
        with cluster(work, 1, QUEUES) as (ns, brokers):
            run(lambda: wait_master(ns), timeout=60)
            yield brokers.addr("n0")
        return
    ns_proc, ns_port, _ = start_namesrv(work)
    namesrv = f"127.0.0.1:{ns_port}"
    port = consecutive_free_ports(4) + 2  # remoting P, VIP P - 2, HA P + 1
    extra = ["--remoting-port", str(port), "--namesrv-addr", namesrv, "--broker-name", "broker-a"]
    master = ClassicBroker(work, "master", "ASYNC_MASTER", extra=extra)
    master.ha_port = port + 1
    try:
        master.start()
        run(lambda: wait_master(namesrv), timeout=60)
        yield f"127.0.0.1:{port}"
    finally:
        if master.proc is not None:
            master.stop()
        stop(ns_proc)


async def wait_master(namesrv: str) -> None:
    """Until the member leads: it is master (brokerId 0) in the name server's route."""
    c = NettyRemotingClient()
    try:
        while True:
            req = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
            got = await c.invoke(namesrv, req)
            if got.code == ResponseCode.SUCCESS:
                datas = json_decode(got.body)["brokerDatas"]
                if datas and "0" in {str(k) for k in datas[0]["brokerAddrs"]}:
                    return
            await asyncio.sleep(0.1)
    finally:
        await c.close()


def records(body: bytes | memoryview | None) -> list[Any]:
    out, pos, data = [], 0, bytes(body or b"")
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        m = decode_record(data[pos : pos + size], 0)
        assert m is not None
        out.append(m)
        pos += size
    return out


async def send(
    c: NettyRemotingClient, addr: str, topic: str, body: bytes, qid: int = 0, **header: Any
) -> RemotingCommand:
    """A SEND_MESSAGE_V2 that must succeed; ``header``: send_message_header_v2's keywords."""
    ext = send_message_header_v2(topic, qid, **header)
    r = await c.invoke(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body), timeout=10)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return r


async def pull(
    c: NettyRemotingClient, addr: str, topic: str, qid: int, offset: int, suspend_ms: int = 0
) -> RemotingCommand:
    req = pull_message(topic, qid, offset, suspend_ms=suspend_ms)
    return await c.invoke(addr, req, timeout=suspend_ms / 1000 + 10)


async def max_offset(c: NettyRemotingClient, addr: str, topic: str, qid: int) -> int:
    r = await c.invoke(addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(qid)}))
    assert r.code == ResponseCode.SUCCESS, r.remark
    return int((r.ext_fields or {})["offset"])


async def pull_one(c: NettyRemotingClient, addr: str, topic: str, qid: int, offset: int, wait_s: float) -> Any:
    """The message at ``offset`` of a queue, waiting (held pulls) up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        got = await pull(c, addr, topic, qid, offset, suspend_ms=2000)
        if got.code == ResponseCode.SUCCESS:
            return records(got.body)[0]
        assert time.monotonic() < deadline, (topic, qid, offset, got.code, got.remark)


async def until_max_offset(c: NettyRemotingClient, addr: str, topic: str, qid: int, want: int) -> None:
    deadline = time.monotonic() + 10
    while (got := await max_offset(c, addr, topic, qid)) != want:
        assert time.monotonic() < deadline, (topic, qid, got, want)
        await asyncio.sleep(0.05)


async def pull_n(c: NettyRemotingClient, addr: str, topic: str, qid: int, n: int, wait_s: float) -> list[Any]:
    """The first ``n`` messages of a queue (dispatch is asynchronous: pulls until they are in)."""
    deadline = time.monotonic() + wait_s
    while True:
        got = records((await pull(c, addr, topic, qid, 0, suspend_ms=500)).body)
        if len(got) >= n:
            return got[:n]
        assert time.monotonic() < deadline, (topic, qid, len(got))


def send_back(offset: int, group: str, delay_level: int, origin_id: str, max_times: int | None) -> RemotingCommand:
    ext = {
        "offset": str(offset),
        "group": group,
        "delayLevel": str(delay_level),
        "originMsgId": origin_id,
        "originTopic": "SBTopic",
        "unitMode": "false",
    }
    if max_times is not None:
        ext["maxReconsumeTimes"] = str(max_times)
    return RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext)


def test_consumer_send_msg_back_retries_with_a_delay_then_dead_letters(broker: str) -> None:
    """A failed message goes to %RETRY%<group> after its delay (3 + reconsume times unless the
    consumer names one), counted once more, with RETRY_TOPIC and ORIGIN_MESSAGE_ID; once it was
    consumed maxReconsumeTimes times (16, or the request's) it goes to %DLQ%<group> at once."""
    addr = broker

    async def scenario() -> None:
        c = NettyRemotingClient()
        try:
            # Stored messages with reconsume counts 0, 15, 16 and 3 (as retried messages are).
            sent = [
                await send(
                    c, addr, "SBTopic", f"m{n}".encode(), properties=f"TAGS\x01T{n}\x02KEYS\x01k{n}", reconsume_times=n
                )
                for n in (0, 15, 16, 3)
            ]
            msgs = await pull_n(c, addr, "SBTopic", 0, 4, 10)
            assert [m.reconsume_times for m in msgs] == [0, 15, 16, 3]
            ids = [(r.ext_fields or {})["msgId"] for r in sent]
            # The Java client sends the pulled record's commit-log offset.
            assert [decode_message_id(i)[1] for i in ids] == [m.stored_phys_offset for m in msgs]
            retry, dlq = "%RETRY%CGB", "%DLQ%CGB"

            # delayLevel 1 (1 s): in the retry topic a second later, count + 1.
            r = await c.invoke(addr, send_back(msgs[0].stored_phys_offset, "CGB", 1, ids[0], 16))
            assert (r.code, r.remark, r.ext_fields) == (ResponseCode.SUCCESS, None, None)
            t0 = time.monotonic()
            m = await pull_one(c, addr, retry, 0, 0, 30)
            assert time.monotonic() - t0 >= 0.5
            assert (m.topic, m.body, m.reconsume_times) == (retry, b"m0", 1)
            assert m.properties["RETRY_TOPIC"] == "SBTopic"
            assert m.properties["ORIGIN_MESSAGE_ID"] == ids[0]
            assert m.properties["TAGS"] == "T0" and m.properties["KEYS"] == "k0"
            assert m.properties["WAIT"] == "false"

            # 15 < 16: retried; delayLevel 0 picks 3 + 15 = level 18 (the schedule topic's
            # queue 17), not the DLQ.
            sched_before = await max_offset(c, addr, "SCHEDULE_TOPIC_XXXX", 17)
            r = await c.invoke(addr, send_back(msgs[1].stored_phys_offset, "CGB", 0, ids[1], 16))
            assert r.code == ResponseCode.SUCCESS
            await until_max_offset(c, addr, "SCHEDULE_TOPIC_XXXX", 17, sched_before + 1)

            # 16 >= 16: the DLQ, at once, no delay.
            r = await c.invoke(addr, send_back(msgs[2].stored_phys_offset, "CGB", 0, ids[2], 16))
            assert r.code == ResponseCode.SUCCESS
            d = await pull_one(c, addr, dlq, 0, 0, 5)
            assert (d.topic, d.body, d.reconsume_times) == (dlq, b"m16", 17)
            assert d.properties["RETRY_TOPIC"] == "SBTopic" and d.properties["ORIGIN_MESSAGE_ID"] == ids[2]
            assert "DELAY" not in d.properties
            # No maxReconsumeTimes in the request: the group's retryMaxTimes (16) all the same.
            r = await c.invoke(addr, send_back(msgs[2].stored_phys_offset, "CGB", 0, ids[2], None))
            assert (await pull_one(c, addr, dlq, 0, 1, 5)).body == b"m16"
            # The consumer's own maximum: 3 >= 3.
            r = await c.invoke(addr, send_back(msgs[3].stored_phys_offset, "CGB", 0, ids[3], 3))
            assert (await pull_one(c, addr, dlq, 0, 2, 5)).body == b"m3"
            # delayLevel < 0: the DLQ whatever the count.
            r = await c.invoke(addr, send_back(msgs[0].stored_phys_offset, "CGB", -1, ids[0], 16))
            assert (await pull_one(c, addr, dlq, 0, 3, 5)).body == b"m0"
            assert await max_offset(c, addr, "SCHEDULE_TOPIC_XXXX", 17) == sched_before + 1

            # The group's own retryMaxTimes (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, as mqadmin
            # updateSubGroup), when the consumer names none: 3 >= 3.
            sgc = {"groupName": "CGB", "retryMaxTimes": 3, "retryQueueNums": 1}
            req = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json_encode(sgc))
            assert (await c.invoke(addr, req)).code == ResponseCode.SUCCESS
            r = await c.invoke(addr, send_back(msgs[3].stored_phys_offset, "CGB", 0, ids[3], None))
            assert r.code == ResponseCode.SUCCESS
            assert (await pull_one(c, addr, dlq, 0, 4, 5)).body == b"m3"
            # A group with no retry queues drops it (SUCCESS, nothing stored).
            sgc = {"groupName": "CGB", "retryMaxTimes": 16, "retryQueueNums": 0}
            req = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json_encode(sgc))
            assert (await c.invoke(addr, req)).code == ResponseCode.SUCCESS
            r = await c.invoke(addr, send_back(msgs[2].stored_phys_offset, "CGB", 0, ids[2], 16))
            assert (r.code, await max_offset(c, addr, dlq, 0)) == (ResponseCode.SUCCESS, 5)
            sgc["retryQueueNums"] = 1
            req = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json_encode(sgc))
            assert (await c.invoke(addr, req)).code == ResponseCode.SUCCESS
            # A producer's send to a retry topic past the header's maxReconsumeTimes
            # (handleRetryAndDLQ): the same rule moves it to the DLQ.
            await send(c, addr, retry, b"direct", reconsume_times=2, max_reconsume_times=2)
            assert (await pull_one(c, addr, dlq, 0, 5, 5)).body == b"direct"
            await send(c, addr, retry, b"kept", reconsume_times=1, max_reconsume_times=2)
            assert (await pull_one(c, addr, retry, 0, 1, 5)).body == b"kept"
            assert await max_offset(c, addr, dlq, 0) == 6

            # Both topics are the broker's now (the route's and mqadmin's).
            r = await c.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
            table = json_decode(r.body)["topicConfigTable"]
            assert table[retry]["readQueueNums"] == 1 and table[dlq]["writeQueueNums"] == 1
            # An offset with no message.
            r = await c.invoke(addr, send_back(1 << 40, "CGB", 0, ids[0], 16))
            assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {1 << 40}")
        finally:
            await c.close()

    run(scenario, timeout=120)


def end_tx(r: RemotingCommand, tran: int, group: str = "TXG") -> RemotingCommand:
    ext = r.ext_fields or {}
    _host, phys = decode_message_id(ext["msgId"])
    fields = {
        "producerGroup": group,
        "tranStateTableOffset": ext["queueOffset"],
        "commitLogOffset": str(phys),
        "commitOrRollback": str(tran),
        "fromTransactionCheck": "false",
        "msgId": "UNIQ",
        "transactionId": "UNIQ",
    }
    return RemotingCommand.request(RequestCode.END_TRANSACTION, fields)


TX_PROPS = "TRAN_MSG\x01true\x02PGROUP\x01TXG\x02WAIT\x01true\x02TAGS\x01tx"
PREPARED, COMMIT, ROLLBACK = 0x1 << 2, 0x2 << 2, 0x3 << 2


def test_half_messages_are_seen_only_once_committed(broker: str) -> None:
    """A transaction's half message is stored out of its topic's sight; END_TRANSACTION commit
    (oneway, as the Java producer sends it) puts the real message, rollback drops it; each
    end writes the op message."""
    addr = broker

    async def scenario() -> None:
        c = NettyRemotingClient()
        try:
            a = await send(c, addr, "TxTopic", b"to-commit", qid=1, properties=TX_PROPS, sys_flag=PREPARED)
            b = await send(c, addr, "TxTopic", b"to-roll-back", qid=1, properties=TX_PROPS, sys_flag=PREPARED)
            ea, eb = a.ext_fields or {}, b.ext_fields or {}
            assert (ea["queueId"], ea["queueOffset"], eb["queueOffset"]) == ("1", "0", "1")
            # Not visible before the commit.
            got = await pull(c, addr, "TxTopic", 1, 0, suspend_ms=500)
            assert got.code == ResponseCode.PULL_NOT_FOUND and not records(got.body)
            # Wrong producer group, wrong queue offset: refused, nothing put.
            r = await c.invoke(addr, end_tx(a, COMMIT, "OTHER"))
            assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "The producer group wrong")
            bad = end_tx(a, COMMIT)
            assert bad.ext_fields is not None
            bad.ext_fields["tranStateTableOffset"] = "7"
            r = await c.invoke(addr, bad)
            assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong")
            assert await max_offset(c, addr, "TxTopic", 1) == 0
            # Commit, oneway as the Java producer: the real message appears.
            await c.invoke_oneway(addr, end_tx(a, COMMIT))
            m = await pull_one(c, addr, "TxTopic", 1, 0, 10)
            assert (m.topic, m.queue_id, m.body) == ("TxTopic", 1, b"to-commit")
            assert m.sys_flag & ROLLBACK == COMMIT
            assert m.properties["TRAN_MSG"] == "true" and m.properties["PGROUP"] == "TXG"
            assert m.properties["REAL_TOPIC"] == "TxTopic" and m.properties["REAL_QID"] == "1"
            # 4.9.4 writes the half message's properties from its map, WAIT put back in it.
            assert m.properties["WAIT"] == "true" and m.properties["CLUSTER"] == "DefaultCluster"
            _host, half_phys = decode_message_id(ea["msgId"])
            assert m.prepared_offset == half_phys
            # Rollback answers SUCCESS and puts nothing in the topic.
            r = await c.invoke(addr, end_tx(b, ROLLBACK))
            assert (r.code, r.remark) == (ResponseCode.SUCCESS, None)
            got = await pull(c, addr, "TxTopic", 1, 1, suspend_ms=500)
            assert got.code == ResponseCode.PULL_NOT_FOUND
            assert await max_offset(c, addr, "TxTopic", 1) == 1
            # The op messages: "d" and each half message's queue offset.
            op = await pull_n(c, addr, "RMQ_SYS_TRANS_OP_HALF_TOPIC", 0, 2, 10)
            assert [(o.properties["TAGS"], o.body) for o in op] == [("d", b"0"), ("d", b"1")]
            half = await pull_n(c, addr, "RMQ_SYS_TRANS_HALF_TOPIC", 0, 2, 10)
            assert [h.body for h in half] == [b"to-commit", b"to-roll-back"]
            # An end for a message that is not there.
            gone = end_tx(a, COMMIT)
            assert gone.ext_fields is not None
            gone.ext_fields["commitLogOffset"] = str(1 << 40)
            r = await c.invoke(addr, gone)
            assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
        finally:
            await c.close()

    run(scenario, timeout=120)


def lock_body(client_id: str, qids: list[int], group: str = "OG") -> bytes:
    mqs = [{"brokerName": "broker-a", "queueId": q, "topic": "OrderTopic"} for q in qids]
    return json_encode({"clientId": client_id, "consumerGroup": group, "mqSet": mqs, "onlyThisBroker": False})


def test_orderly_consumers_lock_queues(broker: str) -> None:
    """A queue held by one client of a group is not given to another until released; another
    group's locks are its own."""
    addr = broker

    async def scenario() -> None:
        c = NettyRemotingClient()

        async def lock(client_id: str, qids: list[int], group: str = "OG") -> list[int]:
            req = RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=lock_body(client_id, qids, group))
            r = await c.invoke(addr, req)
            assert r.code == ResponseCode.SUCCESS and r.remark is None
            got = json_decode(r.body)["lockOKMQSet"]
            assert all(m["brokerName"] == "broker-a" and m["topic"] == "OrderTopic" for m in got)
            return sorted(m["queueId"] for m in got)

        async def unlock(client_id: str, qids: list[int]) -> None:
            req = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=lock_body(client_id, qids))
            r = await c.invoke(addr, req)
            assert (r.code, r.remark) == (ResponseCode.SUCCESS, None)

        try:
            assert await lock("A", [0, 1]) == [0, 1]
            assert await lock("B", [1, 2]) == [2]
            assert await lock("A", [0, 1, 2]) == [0, 1]  # renewed; B's stays B's
            await unlock("B", [0])  # not B's: A keeps it
            assert await lock("B", [0]) == []
            await unlock("A", [1])
            assert await lock("B", [1]) == [1]
            assert await lock("A", [0, 1, 2], "OTHER") == [0, 1, 2]
            bad = RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=b'{"mqSet":[{"topic":"T"}]}')
            assert (await c.invoke(addr, bad)).code == ResponseCode.SYSTEM_ERROR
        finally:
            await c.close()

    run(scenario)


def test_a_lock_expires_60_s_after_its_holders_last_request() -> None:
    """RebalanceLockManager's expiry on its clock: held while the holder renews within 60 s,
    taken over by another client only after 60 s without a renewal."""
    now = [0.0]
    locks = RebalanceLockManager(clock=lambda: now[0])
    mq = ("T", "b", 0)
    assert locks.try_lock_batch("G", [mq], "A") == [mq]
    now[0] = 59_000.0
    assert locks.try_lock_batch("G", [mq], "B") == []
    assert locks.try_lock_batch("G", [mq], "A") == [mq]  # renewed at 59 s
    now[0] = 59_000.0 + 60_000.0
    assert locks.try_lock_batch("G", [mq], "B") == []  # 60 s since the renewal: not past it
    now[0] += 1.0
    assert locks.try_lock_batch("G", [mq], "B") == [mq]
    assert locks.try_lock_batch("G", [mq], "A") == []


def test_unserved_codes_answer_request_code_not_supported(broker: str) -> None:
    async def scenario() -> None:
        c = NettyRemotingClient()
        try:
            for code in (9999, int(RequestCode.CONSUME_MESSAGE_DIRECTLY)):
                r = await c.invoke(broker, RemotingCommand.request(code, {"x": "1"}))
                assert (r.code, r.remark) == (
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    f" request type {code} not supported",
                )
            # The connection stays.
            r = await c.invoke(broker, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
            assert r.code == ResponseCode.SUCCESS
        finally:
            await c.close()
        # Oneway: the broker's default processor (AdminBrokerProcessor) answers through the
        # normal path, which leaves a oneway request unanswered (4.9.4); the next answer on
        # the connection is the next request's.
        host, port = broker.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            quiet = RemotingCommand.request(9999, {"x": "1"}, oneway=True)
            asked = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
            writer.write(quiet.encode() + asked.encode())
            length = int.from_bytes(await reader.readexactly(4), "big")
            got = RemotingCommand.decode(await reader.readexactly(length))
            assert (got.opaque, got.code) == (asked.opaque, ResponseCode.SUCCESS)
        finally:
            writer.close()

    run(scenario)


def test_broker_config_is_served_and_updated_in_memory(broker: str) -> None:
    """GET_BROKER_CONFIG / UPDATE_BROKER_CONFIG on either broker (a DLedger member keeps an
    update in memory; a classic one's file: test_broker_config_codes.py)."""

    async def scenario() -> None:
        c = NettyRemotingClient()
        try:

            async def props() -> dict[str, str]:
                r = await c.invoke(broker, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG))
                assert r.code == ResponseCode.SUCCESS and "version" in (r.ext_fields or {})
                text = bytes(r.body).decode()
                return dict(line.split("=", 1) for line in text.splitlines())

            before = await props()
            assert before["brokerId"] == "0" and before["slaveReadEnable"] == "false"
            assert before["listenPort"] == broker.rsplit(":", 1)[1]
            body = b"slaveReadEnable=true\nnoSuchKey=x\n"
            r = await c.invoke(broker, RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=body))
            assert r.code == ResponseCode.SUCCESS
            after = await props()
            assert after["slaveReadEnable"] == "true" and "noSuchKey" not in after
            body = b"slaveReadEnable=false\n"
            r = await c.invoke(broker, RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=body))
            assert r.code == ResponseCode.SUCCESS
        finally:
            await c.close()

    run(scenario)


CHECKED = [
    *QUEUES,
    "--transaction-check-interval",
    "500",
    "--transaction-timeout",
    "300",
    "--transaction-check-max",
    "2",
]


def test_unended_half_messages_are_checked_back_with_their_producer(tmp_path: Path) -> None:
    """A half message nobody ended is asked about (CHECK_TRANSACTION_STATE, oneway, to a producer
    of its group), naming a copy whose END_TRANSACTION (fromTransactionCheck) commits it; an
    ended one is never asked about; past transactionCheckMax checks one is dropped."""
    with cluster(tmp_path, 1, CHECKED) as (ns, brokers):
        run(lambda: wait_master(ns), timeout=60)
        addr = brokers.addr("n0")

        async def scenario() -> None:
            checks: asyncio.Queue[RemotingCommand] = asyncio.Queue()
            producer = NettyRemotingClient(on_request=checks.put_nowait)
            try:
                beat = {"clientID": "P1", "producerDataSet": [{"groupName": "TXG"}], "consumerDataSet": []}
                r = await producer.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=json_encode(beat)))
                assert r.code == ResponseCode.SUCCESS
                props = TX_PROPS + "\x02UNIQ_KEY\x01U-OPEN"
                rolled = await send(producer, addr, "CkTopic", b"rolled", qid=2, properties=TX_PROPS, sys_flag=PREPARED)
                assert (await producer.invoke(addr, end_tx(rolled, ROLLBACK))).code == ResponseCode.SUCCESS
                open_ = await send(producer, addr, "CkTopic", b"open", qid=2, properties=props, sys_flag=PREPARED)
                check = await asyncio.wait_for(checks.get(), 20)
                assert check.code == RequestCode.CHECK_TRANSACTION_STATE and check.is_oneway
                h = check.ext_fields or {}
                assert (h["msgId"], h["transactionId"]) == ("U-OPEN", "U-OPEN")
                # The copy: a later offset in the half queue than the message sent.
                assert int(h["tranStateTableOffset"]) > int((open_.ext_fields or {})["queueOffset"])
                assert decode_message_id(h["offsetMsgId"])[1] == int(h["commitLogOffset"])
                (m,) = records(check.body)
                assert (m.topic, m.queue_id, m.body) == ("CkTopic", 2, b"open")
                assert m.properties["TRANSACTION_CHECK_TIMES"] == "1"
                # The producer's answer commits it.
                ans = {
                    "producerGroup": "TXG",
                    "tranStateTableOffset": h["tranStateTableOffset"],
                    "commitLogOffset": h["commitLogOffset"],
                    "commitOrRollback": str(COMMIT),
                    "fromTransactionCheck": "true",
                    "msgId": h["msgId"],
                    "transactionId": h["transactionId"],
                }
                await producer.invoke_oneway(addr, RemotingCommand.request(RequestCode.END_TRANSACTION, ans))
                got = await pull_one(producer, addr, "CkTopic", 2, 0, 10)
                assert got.body == b"open"
                # Nothing else is asked about: not the rolled-back one, not the committed one.
                await asyncio.sleep(2.0)
                assert checks.empty()
                # A producer that never answers: asked transactionCheckMax times, then dropped.
                quiet = await send(
                    producer,
                    addr,
                    "CkTopic",
                    b"quiet",
                    qid=2,
                    properties=TX_PROPS + "\x02UNIQ_KEY\x01U-Q",
                    sys_flag=PREPARED,
                )
                assert quiet.code == ResponseCode.SUCCESS
                asked = [await asyncio.wait_for(checks.get(), 20) for _ in range(2)]
                assert [(c.ext_fields or {})["msgId"] for c in asked] == ["U-Q", "U-Q"]
                await asyncio.sleep(2.0)
                assert checks.empty()
                assert await max_offset(producer, addr, "TRANS_CHECK_MAX_TIME_TOPIC", 0) == 1
                assert await max_offset(producer, addr, "CkTopic", 2) == 1
            finally:
                await producer.close()

        run(scenario, timeout=120)
