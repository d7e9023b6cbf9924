"""HAConnection: the master's side of one slave's link, RocketMQ 4.9.4's wire protocol.

- Read side (ReadSocketService): the slave sends its max physical offset as 8-byte big-endian
  reports; the last complete 8 bytes read count. The first report is where the transfer starts
  (``slave_request_offset``); every report is an acknowledgement (``slave_ack_offset``), which
  a SYNC_MASTER's puts wait for. A report past the master's own end closes the link (4.9.4).
- Write side (WriteSocketService): frames of a 12-byte header ``{phyOffset int64, size int32}``
  and ``size`` bytes of commit log, at most ``ha_transfer_batch_size`` and never past the end of
  the commit-log file they start in; a size-0 heartbeat after ``ha_send_heartbeat_interval`` of
  silence. A slave that reports 0 (empty) is sent the master's last file from its first byte.
- Either side ends the link: a read of nothing for ``ha_housekeeping_interval``, a closed or
  failed socket; both stop and the service forgets the connection.

Each side is a thread. The write side runs in a kernel without the GIL, a commit-log file at a
time (``dledger._ext.ha.push_file``): it sends frames, each a header and the file's bytes by
``sendfile`` from a descriptor of the file it holds open, up to where the master's puts have
published the log's end (``LogFeed``), then waits on the feed's eventfd for the next put. It
comes back to Python at a file's end, after IDLE_WAIT_S without a put (the heartbeat, a look
at the log of its own) or on an error. It takes none of the log's locks: the store's writers
never wait on a slave, and the write side never waits behind dispatch or the prefault.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import struct
import threading
import time
from typing import Protocol

from dledger._ext import load as _load_ext
from dledger.rocketmq.store.config import MessageStoreConfig

log = logging.getLogger(__name__)
_HA = _load_ext("ha")

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
# ReadSocketService.READ_MAX_BUFFER_SIZE
READ_MAX_BUFFER_SIZE = 1024 * 1024
# WriteSocketService: sleep(10) while the slave has not reported; allWaitForRunning(100) idle.
FIRST_REPORT_POLL_S = 0.01
IDLE_WAIT_S = 0.1
SELECT_S = 1.0
# How long a send may wait for a slave that reads nothing.
SEND_TIMEOUT_S = 5.0


def configure_socket(sock: socket.socket) -> None:
    """HAConnection's (and HAClient's) socket options: no Nagle; reads wait in select, a send
    at most SEND_TIMEOUT_S."""
    sock.settimeout(SEND_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # RocketMQ fixes both buffers at 64 KiB; here the kernel sizes them (autotuning, which a
    # fixed size turns off): a 1 MiB send through 64 KiB took ~16 partial sends, each a GIL
    # hand-over of up to 5 ms on a busy broker (slave lag p50 170 ms in bench/test_bench_mq_ha.py).


class ConnectionOwner(Protocol):
    """What a link needs of its HAService."""

    config: MessageStoreConfig

    def master_max_offset(self) -> int: ...

    def transfer_start(self, requested: int) -> int: ...

    def log_file_at(self, offset: int) -> tuple[int, int, str] | None: ...  # (base, size, path)

    def notify_transfer_some(self, offset: int) -> None: ...

    def remove_connection(self, conn: HAConnection) -> None: ...

    def wakeup_all(self) -> None: ...


class HAConnection:
    """One slave's link; ``start`` runs its read and write sides."""

    def __init__(self, service: ConnectionOwner, sock: socket.socket, client_addr: str) -> None:
        self.service = service
        self.sock = sock
        self.client_addr = client_addr
        configure_socket(sock)
        # -1 until the slave's first report.
        self.slave_request_offset = -1
        self.slave_ack_offset = -1
        # Where the write side sends from next (-1 until the first report).
        self.next_transfer_from_where = -1
        # The commit-log file the write side reads: its first offset and a descriptor.
        self._file_base = -1
        self._file_fd = -1
        # Where the log ends, as the master's puts publish it (HAService.wakeup_all).
        self.feed = _HA.LogFeed()
        self._stop = threading.Event()
        self._closed = False
        self._close_lock = threading.Lock()
        # The socket is closed by the last of the two sides to end.
        self._running = 2
        self._reader = threading.Thread(target=self._read_loop, name=f"rocketmq-ha-read-{client_addr}", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name=f"rocketmq-ha-write-{client_addr}", daemon=True)

    def start(self) -> None:
        self._reader.start()
        self._writer.start()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    # -- read side -------------------------------------------------------------------------

    def _read_loop(self) -> None:
        cfg = self.service.config
        housekeeping = cfg.ha_housekeeping_interval / 1000.0
        pending = bytearray()
        last_read = time.monotonic()
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([self.sock], [], [], SELECT_S)
                if ready:
                    data = self.sock.recv(READ_MAX_BUFFER_SIZE)
                    if not data:
                        log.info("slave %s closed the HA link", self.client_addr)
                        break
                    last_read = time.monotonic()
                    pending += data
                    whole = len(pending) - len(pending) % 8
                    if whole:
                        # The last complete report counts; the ones before it are older news.
                        (offset,) = REPORT.unpack_from(pending, whole - 8)
                        del pending[:whole]
                        if not self._on_report(offset):
                            break
                if time.monotonic() - last_read > housekeeping:
                    log.warning("HA link of slave %s silent for %.0f s: closing it", self.client_addr, housekeeping)
                    break
        except OSError as exc:
            if not self._stop.is_set():
                log.info("HA link of slave %s failed reading: %s", self.client_addr, exc)
        finally:
            self.close()
            self._side_ended()

    def _on_report(self, offset: int) -> bool:
        self.slave_ack_offset = offset
        if self.slave_request_offset < 0:
            self.slave_request_offset = offset
            log.info("slave %s requests offset %d", self.client_addr, offset)
        elif offset > self.service.master_max_offset():
            log.warning(
                "slave %s reports offset %d, past this master's commit log end %d: closing the link",
                self.client_addr,
                offset,
                self.service.master_max_offset(),
            )
            return False
        self.service.notify_transfer_some(offset)
        return True

    # -- write side ------------------------------------------------------------------------

    def _write_loop(self) -> None:
        cfg = self.service.config
        heartbeat = cfg.ha_send_heartbeat_interval / 1000.0
        batch = cfg.ha_transfer_batch_size
        last_write = time.monotonic()
        try:
            while not self._stop.is_set():
                if self.slave_request_offset == -1:
                    self._stop.wait(FIRST_REPORT_POLL_S)
                    continue
                if self.next_transfer_from_where == -1:
                    self.next_transfer_from_where = self.service.transfer_start(self.slave_request_offset)
                    log.info(
                        "master transfers from %d to slave %s, which requested %d",
                        self.next_transfer_from_where,
                        self.client_addr,
                        self.slave_request_offset,
                    )
                if time.monotonic() - last_write > heartbeat:
                    self.sock.sendall(HEADER.pack(self.next_transfer_from_where, 0))
                    last_write = time.monotonic()
                idle = max(min(IDLE_WAIT_S, heartbeat - (time.monotonic() - last_write)), 0.001)
                at = self.next_transfer_from_where
                self.next_transfer_from_where = self._push_log(at, batch, idle)
                if self.next_transfer_from_where != at:
                    last_write = time.monotonic()
        except OSError as exc:
            if not self._stop.is_set():
                log.info("HA link of slave %s failed writing: %s", self.client_addr, exc)
        finally:
            self._close_file()
            self.close()
            self._side_ended()

    def _push_log(self, offset: int, batch: int, idle_s: float) -> int:
        """getCommitLogData and the frames' transfer, in the kernel: the file holding ``offset``
        from there as frames of at most ``batch`` bytes (never past the file), up to the log's
        end and on as puts extend it, until the file's end or ``idle_s`` without a put. Returns
        where it got to. A slave that takes nothing for SEND_TIMEOUT_S ends the link
        (TimeoutError)."""
        # Published here too: puts made before the link (or by a store without a broker's put).
        self.feed.publish(self.service.master_max_offset())
        found = self.service.log_file_at(offset)
        if found is None:
            self._stop.wait(idle_s)
            return offset
        base, file_size, path = found
        if base != self._file_base:
            self._close_file()
            # Opened once a file: a file retention deletes meanwhile stays readable through it.
            self._file_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            self._file_base = base
        limit = base + file_size
        return int(
            _HA.push_file(
                self.feed, self.sock.fileno(), self._file_fd, offset, base, limit, batch, idle_s, SEND_TIMEOUT_S
            )
        )

    def _close_file(self) -> None:
        fd, self._file_fd, self._file_base = self._file_fd, -1, -1
        if fd >= 0:
            os.close(fd)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop both sides (from either side, or the service); the service forgets the link."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        self.feed.stop()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.service.remove_connection(self)
        self.service.wakeup_all()

    def _side_ended(self) -> None:
        with self._close_lock:
            self._running -= 1
            last = self._running == 0
        if last:
            self.sock.close()

    def join(self, timeout: float | None = None) -> None:
        me = threading.current_thread()
        for t in (self._reader, self._writer):
            if t is not me and t.is_alive():
                t.join(timeout)
