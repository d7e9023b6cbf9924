"""A send whose message is stored but whose wait after the put ran out (SLAVE_NOT_AVAILABLE from a
SYNC_MASTER with no slave; FLUSH_DISK_TIMEOUT and FLUSH_SLAVE_TIMEOUT the same way) is answered
as 4.9.4's SendMessageProcessor.handlePutMessageResult answers it: the status's code with the
msgId, queueId and queueOffset of a SUCCESS (``sendOK = true``), so the Java client's SendResult
has the stored message's offset and id, not -1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.rocketmq.remoting import RemotingCommand, RequestCode, ResponseCode
from dledger.rocketmq.remoting.netty_remoting_client import NettyRemotingClient
from dledger.rocketmq.remoting.protocol.request_headers import send_message_header_v2
from dledger.rocketmq.store.message import decode_message_id
from dledger.testing import ClassicBroker, consecutive_free_ports
from tests.rocketmq.remoting.processes import run
from tests.rocketmq.remoting.test_broker_codes import pull_n

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def sync_master(tmp_path: Path) -> Iterator[str]:
    """The remoting address of a SYNC_MASTER classic broker that has no slave."""
    port = consecutive_free_ports(4) + 2  # remoting P, VIP P - 2, HA P + 1
    master = ClassicBroker(tmp_path, "master", "SYNC_MASTER", extra=["--remoting-port", str(port)])
    master.ha_port = port + 1
    try:
        master.start()
        yield f"127.0.0.1:{port}"
    finally:
        if master.proc is not None:
            master.stop()


def test_slave_not_available_carries_the_stored_messages_id_and_offset(sync_master: str) -> None:
    async def scenario() -> None:
        c = NettyRemotingClient()
        try:
            answers = []
            for body in (b"first", b"second"):
                ext = send_message_header_v2("Stored", 0)
                req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body)
                answers.append(await c.invoke(sync_master, req, timeout=10))
            for k, r in enumerate(answers):
                assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE, (r.code, r.remark)
                ext = r.ext_fields or {}
                assert ext.get("queueId") == "0" and ext.get("queueOffset") == str(k), ext
            # The ids name the records the queue holds, in order.
            stored = await pull_n(c, sync_master, "Stored", 0, 2, wait_s=10)
            assert [m.body for m in stored] == [b"first", b"second"]
            ids = [decode_message_id((r.ext_fields or {})["msgId"])[1] for r in answers]
            assert ids == [m.stored_phys_offset for m in stored]
        finally:
            await c.close()

    run(scenario, timeout=60)
