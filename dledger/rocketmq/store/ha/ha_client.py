"""HAClient: a slave's link to its master, RocketMQ 4.9.4's wire protocol.

It connects to ``ha_master_address`` and reports its max physical offset (8 bytes, big-endian)
at once, after the frames of each read it appends, and after ``ha_send_heartbeat_interval`` without a report.
The master pushes frames ``{phyOffset int64, size int32}`` + ``size`` bytes; the frames of a read
are appended at their offset in one call a commit-log file (``append_to_commit_log``), and the
store's dispatch builds the consume queues and the index from the appended records as the
master's did. The socket work is a
kernel without the GIL (``dledger._ext.ha.recv_frames``): it sends the report, reads until whole
frames are in the buffer and checks their headers, so the loop takes the GIL once per read,
for the appends (``join_frames`` moves the frames' data together first). A frame that does not start
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

from dledger._ext import load as _load_ext
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.ha.ha_connection import HEADER, REPORT, configure_socket

log = logging.getLogger(__name__)
_HA = _load_ext("ha")

# HAClient.READ_MAX_BUFFER_SIZE is 4 MiB. A busy slave can find more than that queued in its
# socket (TCP autotuning grows it); one read takes it all instead of several, each a GIL
# hand-over and a wait for a core (docs/ha.md). Frames on the wire do not change.
READ_MAX_BUFFER_SIZE = 16 * 1024 * 1024
SELECT_S = 1.0
CONNECT_TIMEOUT_S = 3.0
# RocketMQ waits 5 s between attempts to connect; a slave back sooner after a master restart
# or a cut link has less to catch up.
RECONNECT_S = 1.0


class CommitLogFiles(Protocol):
    file_size: int


class SlaveStore(Protocol):
    """What the client needs of the slave's store (DefaultMessageStore's methods)."""

    commitlog: CommitLogFiles

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
                if not self._process_read_event(sock, heartbeat):
                    self._close_master()
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

    def _process_read_event(self, sock: socket.socket, heartbeat_s: float) -> bool:
        """One read: the report (reportSlaveMaxOffsetPlus when the log grew since the last one,
        or the heartbeat's), then frames, appended (dispatchReadRequest). False ends the link."""
        now_at = int(self.store.max_phys_offset)
        report = -1
        if now_at > self.current_reported_offset or time.monotonic() - self._last_report > heartbeat_s:
            report = self.current_reported_offset = max(now_at, self.current_reported_offset)
        filled_before = self._filled
        status, self._filled, self._dispatch_pos, whole = _HA.recv_frames(
            sock.fileno(), self._buf, self._filled, self._dispatch_pos, now_at, report, SELECT_S
        )
        if report >= 0:
            self._last_report = time.monotonic()
        if self._filled != filled_before or whole != self._dispatch_pos:
            self._last_read = time.monotonic()
        if not self._append_frames(whole):
            return False
        if status == _HA.CLOSED:
            log.info("HA master %s closed the link", self._master_address)
            return False
        if status == _HA.WRONG_OFFSET:
            master_offset, _size = HEADER.unpack_from(self._buf, whole)
            log.error(
                "master pushed offset %d, not this slave's max offset %d: closing the link",
                master_offset,
                int(self.store.max_phys_offset),
            )
            return False
        if status == _HA.BAD_SIZE:
            _offset, size = HEADER.unpack_from(self._buf, whole)
            log.error("master pushed a frame of %d bytes: closing the link", size)
            return False
        return True

    def _append_frames(self, whole: int) -> bool:
        """The whole frames the kernel checked, ``buf[dispatch_pos:whole]``: their data moved
        together (``join_frames``) and appended in one call a commit-log file, not one a frame:
        each call takes the GIL, and waits for it on a busy slave (heartbeats append nothing)."""
        pos = self._dispatch_pos
        if pos == whole:
            return True
        at, end, frames = _HA.join_frames(self._buf, pos, whole)
        if at >= 0:
            file_size = int(self.store.commitlog.file_size)
            view = memoryview(self._buf)
            while pos < end:
                # Frames never cross a master's file, so neither may an append of them.
                n = min(end - pos, file_size - at % file_size)
                if not self.store.append_to_commit_log(at, view[pos : pos + n]):
                    return False
                at += n
                pos += n
            self.frames += frames
        self._dispatch_pos = whole
        if whole == self._filled:
            self._filled = self._dispatch_pos = 0
        return True
