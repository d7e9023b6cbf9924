"""Flow control of the remoting server against a real DLedger member on 127.0.0.1: a client
that pipelines sends past ``sendThreadPoolQueueCapacity`` is answered SYSTEM_BUSY
``[OVERLOAD]`` for the ones past it (nothing for oneway ones), as 4.9.4's processRequestCommand
answers a RejectedExecutionException, and only the accepted ones are stored; a client that
floods pulls without reading their answers is no longer read, so the member's memory stays
bounded, and every answer still comes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.rocketmq.remoting import RemotingCommand, RequestCode, ResponseCode
from dledger.rocketmq.remoting.netty_remoting_client import NettyRemotingClient
from dledger.rocketmq.remoting.netty_remoting_server import OVERLOAD_REMARK
from dledger.rocketmq.remoting.protocol.request_headers import pull_message, send_message_header_v2
from tests.rocketmq.remoting.processes import Brokers, cluster, run
from tests.rocketmq.remoting.test_broker_codes import max_offset, records, send, wait_master

SEND_CAPACITY = 4


@pytest.fixture(scope="module")
def member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Brokers]]:
    work = tmp_path_factory.mktemp("flow")
    extra = ["--default-topic-queue-nums", "4", "--send-thread-pool-queue-capacity", str(SEND_CAPACITY)]
    with cluster(work, 1, extra) as (ns, brokers):
        run(lambda: wait_master(ns), timeout=60)
        yield brokers.addr("n0"), brokers


def _send_request(topic: str, qid: int, k: int, oneway: bool = False) -> RemotingCommand:
    ext = send_message_header_v2(topic, qid)
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, b"%06d" % k + b"x" * 1018, oneway=oneway)


async def _answer(reader: asyncio.StreamReader) -> RemotingCommand:
    length = int.from_bytes(await reader.readexactly(4), "big")
    return RemotingCommand.decode(await reader.readexactly(length))


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_sends_past_the_queue_capacity_are_answered_overload_and_not_stored(member: tuple[str, Brokers]) -> None:
    addr, _brokers = member
    topic, qid = "FlowSend", 1

    async def scenario() -> None:
        c = NettyRemotingClient()
        try:
            await send(c, addr, topic, b"first", qid)  # the topic exists, one message stored
        finally:
            await c.close()
        host, port = addr.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            # Every tenth oneway: Java answers a rejected oneway request with nothing.
            reqs = [_send_request(topic, qid, k, oneway=k % 10 == 9) for k in range(300)]
            writer.write(b"".join(r.encode() for r in reqs))
            asked = [r for r in reqs if not r.is_oneway]
            got = [await asyncio.wait_for(_answer(reader), 30) for _ in asked]
            assert {a.opaque for a in got} == {r.opaque for r in asked}
            ok = [a for a in got if a.code == ResponseCode.SUCCESS]
            busy = [a for a in got if a.code == ResponseCode.SYSTEM_BUSY]
            assert len(ok) + len(busy) == len(got), {(a.code, a.remark) for a in got}
            assert ok and busy, (len(ok), len(busy))
            assert all(a.remark == OVERLOAD_REMARK and a.is_response for a in busy)
            # Normal traffic after the flood: a send on the same connection is taken.
            after = _send_request(topic, qid, 999)
            writer.write(after.encode())
            last = await asyncio.wait_for(_answer(reader), 30)
            assert (last.opaque, last.code) == (after.opaque, ResponseCode.SUCCESS), last.remark
        finally:
            writer.close()
        # What was stored: the first, the accepted ones (oneway ones taken unseen), the last;
        # never one answered busy.
        c = NettyRemotingClient()
        try:
            stored = await max_offset(c, addr, topic, qid)
            offsets = sorted(int((a.ext_fields or {})["queueOffset"]) for a in ok)
            assert len(set(offsets)) == len(ok) and offsets[-1] < stored
            assert len(ok) + 2 <= stored <= len(ok) + 2 + sum(r.is_oneway for r in reqs)
            assert int((last.ext_fields or {})["queueOffset"]) == stored - 1
        finally:
            await c.close()

    run(scenario, timeout=120)


def test_a_client_that_does_not_read_its_pull_answers_is_not_read_and_memory_stays_bounded(
    member: tuple[str, Brokers],
) -> None:
    addr, brokers = member
    pid = brokers.procs["n0"].pid
    topic, qid = "FlowPull", 2
    pulls = 3000  # each answered with 32 messages of 1 KiB: ~100 MB of answers

    async def scenario() -> None:
        c = NettyRemotingClient()
        try:
            for k in range(32):
                await send(c, addr, topic, b"%06d" % k + b"y" * 1018, qid)
            while len(records((await c.invoke(addr, pull_message(topic, qid))).body)) < 32:
                await asyncio.sleep(0.05)  # dispatched
        finally:
            await c.close()
        host, port = addr.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 20)
        try:
            before = _rss(pid)
            reqs = [pull_message(topic, qid) for _ in range(pulls)]
            writer.write(b"".join(r.encode() for r in reqs))
            # Given time to take everything, a server that kept reading would hold the
            # answers the socket cannot: tens of MB.
            peak = before
            for _ in range(20):
                await asyncio.sleep(0.1)
                peak = max(peak, _rss(pid))
            assert peak - before < 32 * 1024 * 1024, (before, peak)
            # Read now: every answer comes, whole (in the order the reads finish).
            seen = set()
            for _ in reqs:
                a = await asyncio.wait_for(_answer(reader), 30)
                assert a.code == ResponseCode.SUCCESS, a.remark
                assert len(records(a.body)) == 32
                seen.add(a.opaque)
            assert seen == {r.opaque for r in reqs}
            assert writer.transport.get_write_buffer_size() == 0
            hb = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(qid)})
            writer.write(hb.encode())
            a = await asyncio.wait_for(_answer(reader), 30)
            assert (a.opaque, a.code, (a.ext_fields or {})["offset"]) == (hb.opaque, ResponseCode.SUCCESS, "32")
        finally:
            writer.close()

    run(scenario, timeout=180)
