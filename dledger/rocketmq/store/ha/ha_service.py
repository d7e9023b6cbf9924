"""HAService: classic master/slave replication of a commit log (RocketMQ 4.9.4, seed-spec §6.2-6.5).

Every store runs one, master or slave, as DefaultMessageStore does: ``AcceptSocketService``
listens on ``ha_listen_port`` and makes an ``HAConnection`` per slave that connects; the
``HAClient`` links a slave to ``ha_master_address`` (idle while there is none); the
``GroupTransferService`` answers a SYNC_MASTER's waiting puts as the slaves acknowledge.

``push2slave_max_offset`` is the highest offset any slave has acknowledged. ``is_slave_ok`` is
what a SYNC_MASTER asks before a put waits: a slave is connected and the best one is less than
``ha_slave_fallbehind_max`` behind where the put ends.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.ha.group_transfer_service import GroupCommitRequest, GroupTransferService
from dledger.rocketmq.store.ha.ha_client import HAClient
from dledger.rocketmq.store.ha.ha_connection import HAConnection
from dledger.rocketmq.store.status import PutMessageStatus

log = logging.getLogger(__name__)

ACCEPT_SELECT_S = 1.0


class AcceptSocketService:
    """Listens for slaves; each connection becomes an HAConnection."""

    def __init__(self, service: HAService, host: str, port: int) -> None:
        self.service = service
        self.host = host
        self.port = port
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rocketmq-ha-accept", daemon=True)

    def begin_accept(self) -> None:
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
            sock.listen(16)
        except OSError:
            sock.close()
            raise
        sock.settimeout(ACCEPT_SELECT_S)
        self.port = int(sock.getsockname()[1])
        self._sock = sock
        log.info("HA service listens on %s:%d", self.host, self.port)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        sock = self._sock
        assert sock is not None
        while not self._stop.is_set():
            try:
                conn, addr = sock.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if not self._stop.is_set():
                    log.warning("HA accept failed: %s", exc)
                    self._stop.wait(0.1)
                continue
            peer = f"{addr[0]}:{addr[1]}"
            try:
                ha = HAConnection(self.service, conn, peer)
            except OSError as exc:
                log.warning("HA connection from %s failed: %s", peer, exc)
                conn.close()
                continue
            log.info("HA service: slave %s connected", peer)
            self.service.add_connection(ha)
            ha.start()

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class HAService:
    """The HA service of one store. ``store`` is a MessageStore over a classic commit log
    (``commitlog``, ``max_phys_offset``, ``append_to_commit_log``); ``host`` the address the
    HA port binds (127.0.0.1 unless told)."""

    def __init__(self, store: Any, config: MessageStoreConfig | None = None, host: str = "127.0.0.1") -> None:
        self.store = store
        self.config: MessageStoreConfig = config or store.config
        self._lock = threading.Lock()
        self.connections: list[HAConnection] = []
        self.push2slave_max_offset = 0
        self.accept_service = AcceptSocketService(self, host, self.config.ha_listen_port)
        self.group_transfer_service = GroupTransferService(lambda: self.push2slave_max_offset)
        self.ha_client = HAClient(store, self.config)
        self._started = False

    @property
    def port(self) -> int:
        return self.accept_service.port

    @property
    def connection_count(self) -> int:
        with self._lock:
            return len(self.connections)

    def start(self) -> None:
        self.accept_service.begin_accept()
        self.accept_service.start()
        self.group_transfer_service.start()
        self.ha_client.start()
        self._started = True

    def shutdown(self) -> None:
        if not self._started:
            return
        self._started = False
        self.ha_client.shutdown()
        self.accept_service.shutdown()
        with self._lock:
            conns = list(self.connections)
        for c in conns:
            c.close()
        for c in conns:
            c.join(5.0)
        self.group_transfer_service.shutdown()

    # -- connections ---------------------------------------------------------------------------

    def add_connection(self, conn: HAConnection) -> None:
        with self._lock:
            self.connections.append(conn)

    def remove_connection(self, conn: HAConnection) -> None:
        with self._lock:
            if conn in self.connections:
                self.connections.remove(conn)

    def update_master_address(self, addr: str | None) -> None:
        self.ha_client.update_master_address(addr)

    # -- the master's data ---------------------------------------------------------------------

    def master_max_offset(self) -> int:
        return int(self.store.commitlog.max_offset)

    def transfer_start(self, requested: int) -> int:
        """Where a slave that reported ``requested`` first is sent from: there, or (an empty
        slave) the first byte of the master's last commit-log file."""
        if requested != 0:
            return requested
        at = self.master_max_offset()
        at -= at % int(self.store.commitlog.file_size)
        return max(at, 0)

    def log_file_at(self, offset: int) -> tuple[int, int, str] | None:
        """The commit-log file holding ``offset``: (its first offset, its size, its path), or
        None. Taken without the log's read lock (a lookup under the GIL, no mapping read): the
        write side reads the file through a descriptor of its own."""
        cl = self.store.commitlog
        if cl.closed:
            return None
        f = cl.find_file(offset)
        if f is None:
            return None
        return int(f.file_from_offset), int(f.file_size), str(f.path)

    def wakeup_all(self) -> None:
        """The commit log grew (a put: the broker calls this after each) or a link ended: every
        write side is told where the log ends now and woken, without a hand-over of the GIL."""
        try:
            end = self.master_max_offset()
        except Exception:  # the store closed under us: nothing to send
            return
        with self._lock:
            for c in self.connections:
                c.feed.publish(end)

    # -- acknowledgements ------------------------------------------------------------------------

    def notify_transfer_some(self, offset: int) -> None:
        with self._lock:
            if offset <= self.push2slave_max_offset:
                return
            self.push2slave_max_offset = offset
        self.group_transfer_service.notify_transfer_some()

    def is_slave_ok(self, master_put_where: int) -> bool:
        with self._lock:
            if not self.connections:
                return False
            return master_put_where - self.push2slave_max_offset < self.config.ha_slave_fallbehind_max

    def put_request(self, req: GroupCommitRequest) -> None:
        self.group_transfer_service.put_request(req)
        self.wakeup_all()

    def handle_ha(self, next_offset: int, on_done: Any = None) -> GroupCommitRequest | PutMessageStatus:
        """CommitLog.handleHA of a SYNC_MASTER's put ending at ``next_offset``: SLAVE_NOT_AVAILABLE
        at once, or the request the put waits on (answered PUT_OK or, after
        ``sync_flush_timeout``, FLUSH_SLAVE_TIMEOUT)."""
        if not self.is_slave_ok(next_offset):
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        req = GroupCommitRequest(next_offset, time.monotonic() + self.config.sync_flush_timeout / 1000.0, on_done)
        self.put_request(req)
        return req
