"""The transaction check-back's progress through the op queue (CID_RMQ_SYS_TRANS's offset on
RMQ_SYS_TRANS_OP_HALF_TOPIC, as TransactionalMessageServiceImpl's fillOpRemoveMap and
calculateOpOffset): a round reads only the op messages after it, the progress never passes an op
message whose half message the walk has not reached, and a restarted broker resumes from it.
A classic master in this process, its half messages and END_TRANSACTIONs sent over remoting on
127.0.0.1; the rounds are called directly (the service's own period is 60 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dledger.rocketmq.broker.broker_controller import BrokerController
from dledger.rocketmq.broker.transactional_message_bridge import HALF_TOPIC, OP_TOPIC
from dledger.rocketmq.broker.transactional_message_check_service import CHECK_GROUP
from dledger.rocketmq.remoting import RemotingCommand, ResponseCode
from dledger.rocketmq.remoting.netty_remoting_client import NettyRemotingClient
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message import create_message_id
from dledger.testing import consecutive_free_ports
from tests.rocketmq.remoting.processes import run
from tests.rocketmq.remoting.test_broker_codes import PREPARED, ROLLBACK, TX_PROPS, end_tx, send, until_max_offset

pytestmark = pytest.mark.timeout(120)

NEVER = 10**12  # transactionTimeOut no half message reaches
AT_ONCE = 0


def store_config(root: Path) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=1 << 18,
        mapped_file_size_consume_queue=6000,
        max_hash_slot_num=64,
        max_index_num=4096,
        ha_listen_port=0,
    )


async def start(root: Path, port: int) -> BrokerController:
    b = BrokerController(store_config(root), "127.0.0.1:0", remoting_port=port)
    await b.start()
    return b


def progress(b: BrokerController) -> tuple[int, int]:
    """(half queue, op queue) progress of CID_RMQ_SYS_TRANS (0: none committed yet)."""
    assert b.store is not None
    q = b.store.consumer_offsets.query_offset
    return max(int(q(CHECK_GROUP, HALF_TOPIC, 0)), 0), max(int(q(CHECK_GROUP, OP_TOPIC, 0)), 0)


def test_op_queue_progress_reads_only_new_op_messages_and_survives_a_restart(tmp_path: Path) -> None:
    port = consecutive_free_ports(4) + 2
    addr = f"127.0.0.1:{port}"

    async def scenario() -> None:
        b = await start(tmp_path / "s", port)
        c = NettyRemotingClient()
        try:
            assert b.remoting is not None
            tx = b.remoting.tx_check
            halves = [
                await send(c, addr, "TxT", f"h{i}".encode(), properties=TX_PROPS, sys_flag=PREPARED) for i in range(3)
            ]
            # h1 and h2 ended early; h0 open and young.
            for h in halves[1:]:
                assert (await c.invoke(addr, end_tx(h, ROLLBACK))).code == ResponseCode.SUCCESS
            await until_max_offset(c, addr, OP_TOPIC, 0, 2)
            tx.timeout_ms = NEVER
            assert await tx.check() == 0
            # The walk stopped at h0: the op messages of h1 and h2 are not passed, or h1 and h2
            # would be checked (asked about, put again) once h0 is out of the way.
            assert progress(b) == (0, 0) and tx.op_reads == 2
            assert (await c.invoke(addr, end_tx(halves[0], ROLLBACK))).code == ResponseCode.SUCCESS
            await until_max_offset(c, addr, OP_TOPIC, 0, 3)
            tx.timeout_ms = AT_ONCE
            assert await tx.check() == 0  # every half message ended: nobody asked
            assert progress(b) == (3, 3) and tx.op_reads == 5
            # A long run: no op message read again, none re-put.
            for _ in range(20):
                assert await tx.check() == 0
            assert tx.op_reads == 5 and progress(b) == (3, 3)
            assert b.store is not None and b.store.max_offset_in_queue(HALF_TOPIC, 0) == 3
            # One more ended transaction: only its op message is read.
            h3 = await send(c, addr, "TxT", b"h3", properties=TX_PROPS, sys_flag=PREPARED)
            assert (await c.invoke(addr, end_tx(h3, ROLLBACK))).code == ResponseCode.SUCCESS
            await until_max_offset(c, addr, OP_TOPIC, 0, 4)
            assert await tx.check() == 0
            assert tx.op_reads == 6 and progress(b) == (4, 4)
        finally:
            await c.close()
            await b.shutdown()
        # Restarted: it goes on from the progress, reading nothing again.
        b = await start(tmp_path / "s", port)
        try:
            assert b.remoting is not None
            tx = b.remoting.tx_check
            tx.timeout_ms = AT_ONCE
            assert progress(b) == (4, 4)
            assert await tx.check() == 0
            assert tx.op_reads == 0
        finally:
            await b.shutdown()

    run(scenario)


def test_an_unended_half_message_is_still_checked_with_the_progress(tmp_path: Path) -> None:
    """The op progress does not hide an open transaction: after ended ones, an open one is
    asked about (put again with its check count) and its copy's end is found next round."""
    port = consecutive_free_ports(4) + 2
    addr = f"127.0.0.1:{port}"

    async def scenario() -> None:
        b = await start(tmp_path / "s", port)
        c = NettyRemotingClient()
        try:
            assert b.remoting is not None and b.store is not None
            tx = b.remoting.tx_check
            ended = await send(c, addr, "TxT", b"e", properties=TX_PROPS, sys_flag=PREPARED)
            await send(c, addr, "TxT", b"open", properties=TX_PROPS, sys_flag=PREPARED)
            assert (await c.invoke(addr, end_tx(ended, ROLLBACK))).code == ResponseCode.SUCCESS
            await until_max_offset(c, addr, OP_TOPIC, 0, 1)
            tx.timeout_ms = AT_ONCE
            # No producer to ask: the open one is put again (offset 2) all the same.
            assert await tx.check() == 1
            assert progress(b) == (2, 1)
            await until_max_offset(c, addr, HALF_TOPIC, 0, 3)
            cq = b.store.consume_queues.get(HALF_TOPIC, 0)
            unit = cq.get_unit(2) if cq is not None else None
            assert unit is not None
            msg_id = create_message_id(b.store.preparer.store_host_raw, unit[0])
            copy = RemotingCommand.request(0, {"queueOffset": "2", "msgId": msg_id})
            assert (await c.invoke(addr, end_tx(copy, ROLLBACK))).code == ResponseCode.SUCCESS
            await until_max_offset(c, addr, OP_TOPIC, 0, 2)
            assert await tx.check() == 0
            assert progress(b) == (3, 2)
        finally:
            await c.close()
            await b.shutdown()

    run(scenario)
