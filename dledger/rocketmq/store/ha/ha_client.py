"""HAClient: a slave's link to its master, RocketMQ 4.9.4's wire protocol.

It connects to ``ha_master_address`` and reports its max physical offset (8 bytes, big-endian)
at once, after the frames of each read it appends, and after ``ha_send_heartbeat_interval`` without a report.
The master pushes frames ``{phyOffset int64, size int32}`` + ``size`` bytes; each is appended at
that offset in one call (``append_to_commit_log``), and the store's dispatch builds the consume
queues and the index from the appended records as the master's did. A frame that does not start
exactly at the slave's max offset (when the slave holds anything) closes the link; the slave
connects again and reports where it is. A link silent for ``ha_housekeeping_interval`` (the master
sends a heartbeat every 5 s) is closed too.

RocketMQ's slave makes its first report on its 5 s timer; this one reports on connect, which a
Java master takes the same way (it sends nothing before the first report).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Protocol

from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.ha.ha_connection import HEADER, REPORT, configure_socket

log = logging.getLogger(__name__)

# HAClient.READ_MAX_BUFFER_SIZE
READ_MAX_BUFFER_SIZE = 4 * 1024 * 1024
SELECT_S = 1.0
CONNECT_TIMEOUT_S = 3.0
# RocketMQ waits 5 s between attempts to connect; a slave back sooner after a master restart
# or a cut link has less to catch up.
RECONNECT_S = 1.0


class SlaveStore(Protocol):
    """What the client needs of the slave's store (DefaultMessageStore's methods)."""

    @property
    def max_phys_offset(self) -> int: ...

    def append_to_commit_log(self, start_offset: int, data: memoryview) -> bool: ...


class HAClient:
    """See the module docstring. ``update_master_address`` (re)points it; None stops it linking."""

    def __init__(self, store: SlaveStore, config: MessageStoreConfig) -> None:
        self.store = store
        self.config = config
        self._master_address: str | None = config.ha_master_address
        self._sock: socket.socket | None = None
        self._linked_to: str | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rocketmq-ha-client", daemon=True)
        self.current_reported_offset = 0
        self._last_report = 0.0
        self._last_read = 0.0
        self._buf = bytearray(READ_MAX_BUFFER_SIZE)
        self._view = memoryview(self._buf)
        self._filled = 0
        self._dispatch_pos = 0
        # Links made, and frames appended (for tests and stats).
        self.connects = 0
        self.frames = 0

    @property
    def master_address(self) -> str | None:
        return self._master_address

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def update_master_address(self, addr: str | None) -> None:
        if addr != self._master_address:
            log.info("HA master address %s -> %s", self._master_address, addr)
            self._master_address = addr
            self._wake.set()

    def start(self) -> None:
        self._thread.start()

    def wait_unlinked(self, timeout_s: float) -> bool:
        """After ``update_master_address(None)``: wait until the link is down (no append after)."""
        deadline = time.monotonic() + timeout_s
        while self._sock is not None and self._thread.is_alive():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def shutdown(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()
        self._close_master()

    # -- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        cfg = self.config
        heartbeat = cfg.ha_send_heartbeat_interval / 1000.0
        housekeeping = cfg.ha_housekeeping_interval / 1000.0
        while not self._stop.is_set():
            try:
                if not self._connect_master():
                    self._wake.wait(RECONNECT_S)
                    self._wake.clear()
                    continue
                sock = self._sock
                assert sock is not None
                if self._master_address != self._linked_to:
                    self._close_master()  # re-pointed (a role change): link anew, or not
                    continue
                if time.monotonic() - self._last_report > heartbeat and not self._report(self.current_reported_offset):
                    self._close_master()
                    continue
                if not self._process_read_event(sock):
                    self._close_master()
                    continue
                if not self._report_plus():
                    continue
                if time.monotonic() - self._last_read > housekeeping:
                    log.warning("HA master %s silent for %.0f s: closing the link", self._master_address, housekeeping)
                    self._close_master()
            except OSError as exc:
                log.info("HA link to %s failed: %s", self._master_address, exc)
                self._close_master()
                self._stop.wait(RECONNECT_S)
            except Exception:
                log.exception("HA client failed")
                self._close_master()
                self._stop.wait(RECONNECT_S)

    def _connect_master(self) -> bool:
        if self._sock is not None:
            return True
        addr = self._master_address
        if not addr:
            return False
        host, _, port = addr.rpartition(":")
        try:
            sock = socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S)
        except (OSError, ValueError) as exc:
            log.debug("cannot reach HA master %s: %s", addr, exc)
            return False
        configure_socket(sock)
        # A read waits at most SELECT_S (then the loop reports and looks at the clock): one
        # blocking recv rather than a select and a recv, each of which lets go of the GIL.
        sock.settimeout(SELECT_S)
        self._sock = sock
        self._linked_to = addr
        self.connects += 1
        self._filled = self._dispatch_pos = 0
        self.current_reported_offset = int(self.store.max_phys_offset)
        self._last_read = time.monotonic()
        log.info("HA link to master %s made; this slave is at %d", addr, self.current_reported_offset)
        if not self._report(self.current_reported_offset):
            self._close_master()
            return False
        return True

    def _close_master(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
        self._filled = self._dispatch_pos = 0

    def _report(self, offset: int) -> bool:
        """reportSlaveMaxOffset: the 8 bytes of ``offset``."""
        sock = self._sock
        if sock is None:
            return False
        try:
            sock.sendall(REPORT.pack(offset))
        except OSError as exc:
            log.info("HA report to %s failed: %s", self._master_address, exc)
            return False
        self._last_report = time.monotonic()
        return True

    def _report_plus(self) -> bool:
        """reportSlaveMaxOffsetPlus: report when the log grew since the last report."""
        now_at = int(self.store.max_phys_offset)
        if now_at > self.current_reported_offset:
            self.current_reported_offset = now_at
            if not self._report(now_at):
                self._close_master()
                return False
        return True

    def _process_read_event(self, sock: socket.socket) -> bool:
        if self._filled == len(self._buf):
            self._compact()
        try:
            n = sock.recv_into(self._view[self._filled :])
        except TimeoutError:
            return True
        if n == 0:
            log.info("HA master %s closed the link", self._master_address)
            return False
        self._filled += n
        self._last_read = time.monotonic()
        return self._dispatch_read_request()

    def _compact(self) -> None:
        """reallocateByteBuffer: the unprocessed tail to the front."""
        start, end = self._dispatch_pos, self._filled
        self._buf[0 : end - start] = self._view[start:end]
        self._filled = end - start
        self._dispatch_pos = 0

    def _dispatch_read_request(self) -> bool:
        hsize = HEADER.size
        view = self._view
        while True:
            pos = self._dispatch_pos
            diff = self._filled - pos
            if diff < hsize:
                break
            master_offset, size = HEADER.unpack_from(self._buf, pos)
            slave_offset = int(self.store.max_phys_offset)
            if slave_offset != 0 and slave_offset != master_offset:
                log.error(
                    "master pushed offset %d, not this slave's max offset %d: closing the link",
                    master_offset,
                    slave_offset,
                )
                return False
            if size < 0 or size > len(self._buf) - hsize:
                log.error("master pushed a frame of %d bytes: closing the link", size)
                return False
            if diff < hsize + size:
                if pos > 0 and self._filled + (hsize + size - diff) > len(self._buf):
                    self._compact()
                break
            if size:
                if not self.store.append_to_commit_log(master_offset, view[pos + hsize : pos + hsize + size]):
                    return False
                self.frames += 1
            self._dispatch_pos = pos + hsize + size
        # One report for the frames of this read (RocketMQ's slave reports after each frame; the
        # last is the one that counts, and each send costs the GIL a hand-over).
        if not self._report_plus():
            return False
        if self._dispatch_pos == self._filled:
            self._filled = self._dispatch_pos = 0
        return True
