"""SYNC_MASTER's isSlaveOK (HAService): a put waits for a slave only when one is connected and
its acknowledged offset is less than ``ha_slave_fallbehind_max`` behind the put's end; otherwise
the answer is SLAVE_NOT_AVAILABLE at once. A raw socket plays the slave (its reports are the
8-byte big-endian offsets of RocketMQ 4.9.4's HA wire)."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

from dledger.rocketmq.store.ha.group_transfer_service import GroupCommitRequest
from dledger.rocketmq.store.ha.ha_service import HAService
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.status import PutMessageStatus
from tests.rocketmq.test_ha import config, fill, wait_for

REP = struct.Struct(">q")
BEHIND_MAX = 4096


def test_slave_ok_needs_a_connected_slave_less_than_fallbehind_max_behind(tmp_path: Path) -> None:
    store = MessageStore(tmp_path / "master", config(ha_slave_fallbehind_max=BEHIND_MAX, sync_flush_timeout=20_000))
    ha = HAService(store)
    ha.start()
    try:
        fill(store, 40)
        end = store.max_phys_offset
        assert end > 2 * BEHIND_MAX
        # No slave at all.
        assert ha.handle_ha(end) == PutMessageStatus.SLAVE_NOT_AVAILABLE
        with socket.create_connection(("127.0.0.1", ha.port)) as sock:
            # Exactly haSlaveFallbehindMax behind: still too far.
            sock.sendall(REP.pack(end - BEHIND_MAX))
            wait_for(lambda: ha.push2slave_max_offset == end - BEHIND_MAX)
            assert not ha.is_slave_ok(end)
            assert ha.handle_ha(end) == PutMessageStatus.SLAVE_NOT_AVAILABLE
            # One byte closer: the put waits for the slave, and is answered once it has the bytes.
            sock.sendall(REP.pack(end - BEHIND_MAX + 1))
            wait_for(lambda: ha.push2slave_max_offset == end - BEHIND_MAX + 1)
            req = ha.handle_ha(end)
            assert isinstance(req, GroupCommitRequest)
            assert req.status is None  # not answered before the slave reports the put's end
            sock.sendall(REP.pack(end))
            assert req.wait_for_flush(10.0) == PutMessageStatus.PUT_OK
        # The slave is gone: though it acknowledged everything, no put waits for it.
        wait_for(lambda: ha.connection_count == 0)
        assert ha.push2slave_max_offset == end
        assert ha.handle_ha(end) == PutMessageStatus.SLAVE_NOT_AVAILABLE
    finally:
        ha.shutdown()
        store.close()
