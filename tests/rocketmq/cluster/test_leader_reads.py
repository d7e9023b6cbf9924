"""A read from the leader sees every acknowledged message: a leader whose message store is
still catching up (§7.5: its log not yet committed or dispatched) answers reads as it answers
sends, LEADER_NOT_READY, which the client asks again, rather than from queues that may lack the
last acknowledged messages. One real member in this process."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.rocketmq.broker.message_service import MessageService, message_service_factory
from dledger.rocketmq.client.consumer import AsyncConsumer
from dledger.rocketmq.client.producer import AsyncProducer
from dledger.rocketmq.store.message import Message
from dledger.server import NodeServer
from dledger.testing import one_member_config

pytestmark = pytest.mark.timeout(60)


def test_a_leader_still_catching_up_answers_reads_not_ready_until_it_is(tmp_path: Path) -> None:
    cfg = one_member_config(tmp_path, message_store=True, mapped_file_size_for_entry_data=1 << 22)

    async def run() -> None:
        server = NodeServer(cfg, application_factory=message_service_factory)
        await server.start()
        try:
            svc = server.groups["g"].app
            assert isinstance(svc, MessageService)
            async with AsyncProducer(cfg.peers, "g") as producer:
                assert (await producer.send(Message("T", b"acknowledged"), queue_id=0)).ok
            async with AsyncConsumer(cfg.peers, "cg", "T", dledger_group="g", timeout=0.5) as consumer:
                # Dispatch builds the consume queue a moment after the ack, as RocketMQ's does.
                deadline = time.monotonic() + 10
                while await consumer.max_offset(0) != 1:
                    assert time.monotonic() < deadline, "the acknowledged message was never dispatched"
                    await asyncio.sleep(0.01)
                # As between a new leader's election and its log committed and dispatched.
                svc.commitlog.writable = False
                t0 = time.monotonic()
                with pytest.raises(DLedgerError) as err:
                    await consumer.max_offset(0)
                assert err.value.code == ResponseCode.LEADER_NOT_READY
                assert time.monotonic() - t0 >= 0.4  # asked again until its timeout
                svc.commitlog.writable = True
                assert await consumer.max_offset(0) == 1
        finally:
            await server.close()

    asyncio.run(run())
