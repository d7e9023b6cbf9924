"""Classic HA on RocketMQ 4.9.4's wire protocol: each side against a raw socket playing the other
(exact bytes of reports, headers and heartbeats; a report split across reads; a push at the
wrong offset; frames within one commit-log file), then a master and a slave store linked."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dledger.rocketmq.store.config import SLAVE, MessageStoreConfig
from dledger.rocketmq.store.ha.ha_service import HAService
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.status import GetMessageStatus, PutMessageStatus

FILE = 64 * 1024
BATCH = 20_000  # not a divisor of FILE: a frame would cross a file if the master let it
HDR = struct.Struct(">qi")
REP = struct.Struct(">q")


def config(**kw: object) -> MessageStoreConfig:
    return MessageStoreConfig(
        mapped_file_size_commit_log=FILE,
        mapped_file_size_consume_queue=300 * 20,
        max_hash_slot_num=64,
        max_index_num=512,
        store_host="127.0.0.1:10911",
        ha_listen_port=0,
        ha_transfer_batch_size=BATCH,
    ).replace(**kw)


def wait_for(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.01)


def fill(store: MessageStore, n: int, start: int = 0) -> None:
    for k in range(start, start + n, 10):
        msgs = [
            Message("TopicHA", bytes([i % 251]) * (300 + i % 500), queue_id=i % 2, keys=f"k{i}")
            for i in range(k, k + 10)
        ]
        assert store.put_messages(msgs).status == PutMessageStatus.PUT_OK


def log_bytes(store: MessageStore, start: int, end: int) -> bytes:
    out = bytearray()
    at = start
    while at < end:
        f = store.commitlog.files.find(at)
        assert f is not None, at
        rel = at - f.file_from_offset
        n = min(end - at, f.file_size - rel)
        out += f.read(rel, n)
        at += n
    return bytes(out)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def closed_by_peer(sock: socket.socket, timeout: float = 10.0) -> bool:
    """True when the peer closes (reads drain what it sent before)."""
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


@pytest.fixture
def master(tmp_path: Path) -> Iterator[tuple[MessageStore, HAService]]:
    store = MessageStore(tmp_path / "master", config(ha_send_heartbeat_interval=300))
    ha = HAService(store)
    ha.start()
    try:
        yield store, ha
    finally:
        ha.shutdown()
        store.close()


def frames_until(sock: socket.socket, end: int, start: int) -> list[tuple[int, int, bytes]]:
    """Frames from the master until its pushes reach ``end`` (heartbeats kept too)."""
    out = []
    at = start
    sock.settimeout(10)
    while at < end:
        off, size = HDR.unpack(recv_exact(sock, 12))
        body = recv_exact(sock, size) if size else b""
        out.append((off, size, body))
        if size:
            at = off + size
    return out


def test_master_pushes_from_the_report_in_frames_within_one_file(master: tuple[MessageStore, HAService]) -> None:
    store, ha = master
    fill(store, 400)
    end = store.max_phys_offset
    assert end > 3 * FILE
    start = 1000  # mid-file, as a non-empty slave resumes
    with socket.create_connection(("127.0.0.1", ha.port)) as sock:
        sock.sendall(REP.pack(start))
        frames = frames_until(sock, end, start)
    data = [f for f in frames if f[1]]
    assert data[0][0] == start
    at = start
    for off, size, body in data:
        assert off == at  # contiguous
        assert 0 < size <= BATCH
        assert off // FILE == (off + size - 1) // FILE  # never crosses a commit-log file
        assert body == log_bytes(store, off, off + size)
        at = off + size
    assert at == end


def test_empty_slave_starts_at_the_masters_last_file_and_heartbeats_exactly(
    master: tuple[MessageStore, HAService],
) -> None:
    store, ha = master
    fill(store, 400)
    end = store.max_phys_offset
    last_file = end - end % FILE
    with socket.create_connection(("127.0.0.1", ha.port)) as sock:
        sock.sendall(REP.pack(0))
        frames = frames_until(sock, end, last_file)
        assert next(f for f in frames if f[1])[0] == last_file
        # Silent now: the next bytes are a heartbeat at the end, {end, 0}, within the interval.
        sock.settimeout(5)
        assert recv_exact(sock, 12) == struct.pack(">qi", end, 0)


def test_master_sends_nothing_before_the_first_report(master: tuple[MessageStore, HAService]) -> None:
    store, ha = master
    fill(store, 20)
    with socket.create_connection(("127.0.0.1", ha.port)) as sock:
        sock.settimeout(1.0)
        with pytest.raises((TimeoutError, socket.timeout)):
            sock.recv(1)
        sock.sendall(REP.pack(0))
        # The report came later than the heartbeat interval (as a Java slave's, 5 s after it
        # connects): first a heartbeat where the transfer starts, then the data.
        assert recv_exact(sock, 12) == struct.pack(">qi", 0, 0)
        off, size = HDR.unpack(recv_exact(sock, 12))
        assert (off, size) == (0, store.max_phys_offset)


def test_report_split_across_reads_is_one_acknowledgement(master: tuple[MessageStore, HAService]) -> None:
    store, ha = master
    fill(store, 50)
    end = store.max_phys_offset
    with socket.create_connection(("127.0.0.1", ha.port)) as sock:
        sock.sendall(REP.pack(0))
        frames_until(sock, end, 0)
        raw = REP.pack(end - 7)
        sock.sendall(raw[:3])
        time.sleep(0.3)
        assert ha.push2slave_max_offset == 0  # 3 bytes are no report
        sock.sendall(raw[3:])
        wait_for(lambda: ha.push2slave_max_offset == end - 7)
        # Two reports and half of a third in one write: the last complete one counts, and the
        # half waits for its rest.
        third = REP.pack(end - 1)
        sock.sendall(REP.pack(end - 5) + REP.pack(end - 3) + third[:4])
        wait_for(lambda: ha.push2slave_max_offset == end - 3)
        sock.sendall(third[4:])
        wait_for(lambda: ha.push2slave_max_offset == end - 1)


def test_report_past_the_masters_end_closes_the_link(master: tuple[MessageStore, HAService]) -> None:
    store, ha = master
    fill(store, 20)
    end = store.max_phys_offset
    with socket.create_connection(("127.0.0.1", ha.port)) as sock:
        sock.sendall(REP.pack(0))
        frames_until(sock, end, 0)
        sock.sendall(REP.pack(end + 1))
        assert closed_by_peer(sock)
    wait_for(lambda: ha.connection_count == 0)


def test_master_closes_a_silent_link(tmp_path: Path) -> None:
    store = MessageStore(tmp_path / "m", config(ha_housekeeping_interval=500, ha_send_heartbeat_interval=100))
    ha = HAService(store)
    ha.start()
    try:
        with socket.create_connection(("127.0.0.1", ha.port)) as sock:
            sock.sendall(REP.pack(0))
            wait_for(lambda: ha.connection_count == 1)
            assert closed_by_peer(sock, 5.0)
        wait_for(lambda: ha.connection_count == 0)
    finally:
        ha.shutdown()
        store.close()


# -- the slave against a raw master ------------------------------------------------------------


class RawMaster:
    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(10)
        self.port = self.server.getsockname()[1]

    def accept(self) -> socket.socket:
        conn, _ = self.server.accept()
        conn.settimeout(10)
        return conn

    def close(self) -> None:
        self.server.close()


@contextmanager
def raw_master_and_slave(tmp_path: Path, messages: int) -> Iterator[tuple[MessageStore, RawMaster, MessageStore]]:
    """A store with ``messages`` to push from, a raw master socket, and a slave store (with its
    HAService) linking to it."""
    src = MessageStore(tmp_path / "src", config())
    fill(src, messages)
    raw = RawMaster()
    slave = MessageStore(tmp_path / "slave", config(broker_role=SLAVE, ha_master_address=f"127.0.0.1:{raw.port}"))
    ha = HAService(slave)
    ha.start()
    try:
        yield src, raw, slave
    finally:
        ha.shutdown()
        slave.close()
        src.close()
        raw.close()


def record_start_before(store: MessageStore, base: int, offset: int) -> int:
    """The start of the record that holds ``offset`` (records from ``base``, a file's start)."""
    at = base
    while True:
        size = store.commitlog.record_size_at(at)
        assert size > 0
        if at + size > offset:
            return at
        at += size


def dispatched_to(store: MessageStore, offset: int) -> Callable[[], bool]:
    return lambda: bool(store.reput.reput_from == offset)


def test_slave_reports_appends_frames_and_dispatches(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with raw_master_and_slave(tmp_path, 400) as (src, raw, slave):
        end = src.max_phys_offset
        last_file = end - end % FILE
        conn = raw.accept()
        assert recv_exact(conn, 8) == REP.pack(0)  # reports on connect: empty
        # The master's last file, as a master sends an empty slave, in uneven frames.
        at = last_file
        for size in (5000, 12, 30_000):
            size = min(size, end - at)
            conn.sendall(HDR.pack(at, size) + log_bytes(src, at, at + size))
            at += size
            assert recv_exact(conn, 8) == REP.pack(at)  # a report after each append
            # Frames cut records: dispatch takes every whole one and waits at the cut one.
            wait_for(dispatched_to(slave, record_start_before(src, last_file, at)), 5)
        assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.records
        conn.sendall(HDR.pack(at, 0))  # a heartbeat appends nothing
        conn.sendall(HDR.pack(at, end - at)[:7])
        time.sleep(0.1)
        conn.sendall(HDR.pack(at, end - at)[7:] + log_bytes(src, at, end))
        assert recv_exact(conn, 8) == REP.pack(end)
        assert slave.max_phys_offset == end
        assert log_bytes(slave, last_file, end) == log_bytes(src, last_file, end)
        # Dispatch built the queues of what arrived, as on the master.
        wait_for(lambda: slave.dispatch_behind_bytes() == 0)
        for qid in (0, 1):
            hi = src.max_offset_in_queue("TopicHA", qid)
            assert slave.max_offset_in_queue("TopicHA", qid) == hi
            lo = slave.min_offset_in_queue("TopicHA", qid)
            got = slave.get_messages("TopicHA", qid, lo, 1000, 1 << 30)
            want = src.get_messages("TopicHA", qid, lo, 1000, 1 << 30)
            assert got.status == GetMessageStatus.FOUND
            assert [(m.phys_offset, m.body) for m in got.messages] == [(m.phys_offset, m.body) for m in want.messages]
        assert [m.phys_offset for m in slave.query_by_key("TopicHA", "k399")] == [
            m.phys_offset for m in src.query_by_key("TopicHA", "k399")
        ]
        conn.close()


def test_slave_closes_on_a_push_at_the_wrong_offset_and_reports_again(tmp_path: Path) -> None:
    with raw_master_and_slave(tmp_path, 20) as (src, raw, slave):
        end = src.max_phys_offset
        conn = raw.accept()
        assert recv_exact(conn, 8) == REP.pack(0)
        conn.sendall(HDR.pack(0, 1000) + log_bytes(src, 0, 1000))
        assert recv_exact(conn, 8) == REP.pack(1000)
        conn.sendall(HDR.pack(1001, 10) + log_bytes(src, 1001, 1011))  # not at 1000
        assert closed_by_peer(conn)
        assert slave.max_phys_offset == 1000  # nothing appended
        conn.close()
        conn = raw.accept()  # back, where it is
        assert recv_exact(conn, 8) == REP.pack(1000)
        conn.sendall(HDR.pack(1000, end - 1000) + log_bytes(src, 1000, end))
        assert recv_exact(conn, 8) == REP.pack(end)
        conn.close()


# -- a master and a slave ------------------------------------------------------------------------


def test_master_and_slave_stores_replicate_byte_for_byte(tmp_path: Path) -> None:
    m = MessageStore(tmp_path / "m", config())
    mha = HAService(m)
    mha.start()
    s = MessageStore(tmp_path / "s", config(broker_role=SLAVE, ha_master_address=f"127.0.0.1:{mha.port}"))
    sha = HAService(s)
    sha.start()
    try:
        wait_for(lambda: mha.connection_count == 1 and sha.ha_client.connected)
        # The empty slave is sent from the master's last file as of when the write side takes
        # its report: here the log's start, before anything is put (else the test races it).
        wait_for(lambda: mha.connections[0].next_transfer_from_where == 0)
        for k in range(5):
            fill(m, 100, k * 100)
            mha.wakeup_all()
        end = m.max_phys_offset
        assert end > 4 * FILE
        wait_for(lambda: s.max_phys_offset == end and mha.push2slave_max_offset == end)
        assert log_bytes(s, 0, end) == log_bytes(m, 0, end)
        assert s.put_messages([Message("TopicHA", b"x")]).status == PutMessageStatus.SERVICE_NOT_AVAILABLE
        wait_for(lambda: s.dispatch_behind_bytes() == 0 and m.dispatch_behind_bytes() == 0)
        for qid in (0, 1):
            a = m.get_messages("TopicHA", qid, 0, 10_000, 1 << 30)
            b = s.get_messages("TopicHA", qid, 0, 10_000, 1 << 30)
            assert [(x.queue_offset, x.phys_offset, x.body) for x in a.messages] == [
                (x.queue_offset, x.phys_offset, x.body) for x in b.messages
            ]
    finally:
        sha.shutdown()
        mha.shutdown()
        s.close()
        m.close()


def test_send_file_frames_sends_exact_frames_of_a_file_and_times_out_on_a_stuck_slave(tmp_path: Path) -> None:
    """The write side's kernel: RocketMQ's frames of a file's bytes from a position, on a
    non-blocking socket (Python's with a timeout); a peer that reads nothing ends it."""
    from dledger._ext import load

    ha_kernel = load("ha")
    data = bytes(range(256)) * 1000  # 256,000 bytes
    path = tmp_path / "log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    a, b = socket.socketpair()
    try:
        a.settimeout(5)
        path.unlink()  # deleted (retention) while the descriptor is open: still readable
        got = bytearray()
        reader = threading.Thread(target=lambda: got.extend(recv_all(b, 12 * 7 + 200_000)))
        reader.start()
        # log position 1_000_000 is the file's byte 5_000; 200,000 bytes in frames of 32 KiB
        assert ha_kernel.send_file_frames(a.fileno(), fd, 1_000_000, 5_000, 200_000, 32768, 5.0) == 200_000
        reader.join(10)
        at, pos = 0, 1_000_000
        while at < len(got):
            off, size = HDR.unpack_from(got, at)
            assert off == pos and 0 < size <= 32768
            assert got[at + 12 : at + 12 + size] == data[5_000 + pos - 1_000_000 : 5_000 + pos - 1_000_000 + size]
            at += 12 + size
            pos += size
        assert pos == 1_200_000 and at == len(got)
        with pytest.raises(TimeoutError):
            # nobody reads b any more: the socket's buffers fill, then the timeout
            for _ in range(1000):
                ha_kernel.send_file_frames(a.fileno(), fd, 0, 0, 250_000, 32768, 0.2)
    finally:
        os.close(fd)
        a.close()
        b.close()


def recv_all(sock: socket.socket, n: int) -> bytes:
    sock.settimeout(10)
    return recv_exact(sock, n)


# -- the kernels, against raw sockets ---------------------------------------------------------------


def _recv(ha_kernel: object, sock: socket.socket, buf: bytearray, filled: int, pos: int, expected: int) -> tuple:
    return ha_kernel.recv_frames(sock.fileno(), buf, filled, pos, expected, -1, 0.3)  # type: ignore[attr-defined]


def test_recv_frames_reports_waits_for_whole_frames_and_checks_every_header() -> None:
    """The slave's read kernel: the report's exact bytes first; a header split across reads
    (7 + 3 + 2 bytes) and a body split across reads are waited for; every header of a read must
    name the slave's end (the end of the frames before it), or the read stops at it."""
    from dledger._ext import load

    k = load("ha")
    a, b = socket.socketpair()
    try:
        a.settimeout(5)
        # Stale bytes of earlier reads (all ones): a header read before its 12 bytes are there
        # would take its size from them.
        buf = bytearray(b"\xff" * 1024)
        # Nothing to read: the report goes, the read comes back idle.
        assert k.recv_frames(a.fileno(), buf, 0, 0, 1000, 1000, 0.2) == (k.IDLE, 0, 0, 0)
        b.settimeout(5)
        assert recv_exact(b, 8) == REP.pack(1000)
        frame = HDR.pack(1000, 5) + b"abcde"
        b.sendall(frame[:7])
        assert _recv(k, a, buf, 0, 0, 1000) == (k.IDLE, 7, 0, 0)
        b.sendall(frame[7:10])
        assert _recv(k, a, buf, 7, 0, 1000) == (k.IDLE, 10, 0, 0)
        b.sendall(frame[10:15])
        assert _recv(k, a, buf, 10, 0, 1000) == (k.IDLE, 15, 0, 0)
        # the body's rest, a heartbeat at the new end and a frame after it: all three whole
        b.sendall(frame[15:] + HDR.pack(1005, 0) + HDR.pack(1005, 4) + b"wxyz")
        status, filled, pos, whole = _recv(k, a, buf, 15, 0, 1000)
        assert (status, pos, whole) == (k.FRAMES, 0, 17 + 12 + 16) and filled == whole
        assert bytes(buf[12:17]) == b"abcde" and bytes(buf[41:45]) == b"wxyz"
        # A read whose second frame is not where the first ends: the first is whole, the
        # second is named (whole points at it).
        b.sendall(HDR.pack(1009, 2) + b"ab" + HDR.pack(1012, 1) + b"c")
        status, filled, pos, whole = _recv(k, a, buf, 45, 45, 1009)
        assert (status, pos, whole) == (k.WRONG_OFFSET, 45, 45 + 14)
        assert HDR.unpack_from(buf, whole) == (1012, 1)
        # A first frame elsewhere than the slave's end.
        b.sendall(HDR.pack(7, 1) + b"z")
        assert _recv(k, a, bytearray(64), 0, 0, 8)[0] == k.WRONG_OFFSET
        # An empty slave (0) takes any offset.
        b.sendall(HDR.pack(4096, 1) + b"z")
        assert _recv(k, a, bytearray(64), 0, 0, 0) == (k.FRAMES, 13, 0, 13)
        # A size the buffer cannot hold, or negative.
        b.sendall(HDR.pack(0, 64 - 11))
        assert _recv(k, a, bytearray(64), 0, 0, 0)[0] == k.BAD_SIZE
        b.sendall(HDR.pack(0, -1))
        assert _recv(k, a, bytearray(64), 0, 0, 0)[0] == k.BAD_SIZE
        # A partial frame that does not fit behind processed bytes is moved to the front.
        small = bytearray(64)
        b.sendall(HDR.pack(50, 40) + bytes(range(40)))
        assert _recv(k, a, small, 30, 30, 50) == (k.FRAMES, 52, 0, 52)
        assert HDR.unpack_from(small, 0) == (50, 40) and bytes(small[12:52]) == bytes(range(40))
        b.close()
        assert _recv(k, a, small, 0, 0, 90)[0] == k.CLOSED
    finally:
        a.close()
        b.close()


def test_join_frames_puts_the_frames_data_together_in_log_order() -> None:
    """The slave appends a read's frames in one call a file: ``join_frames`` moves their data
    together (headers and heartbeats out) and says from which offset; data that do not follow
    on from the frame before, or a frame cut short, are refused rather than joined."""
    from dledger._ext import load

    k = load("ha")
    frames = (
        HDR.pack(1000, 0)
        + HDR.pack(1000, 5)
        + b"abcde"
        + HDR.pack(1005, 3)
        + b"fgh"
        + HDR.pack(1008, 0)
        + HDR.pack(1008, 1)
        + b"i"
    )
    buf = bytearray(b"..") + bytearray(frames) + bytearray(b"tail")
    assert k.join_frames(buf, 2, 2 + len(frames)) == (1000, 2 + 9, 3)
    assert bytes(buf[:11]) == b"..abcdefghi"
    assert bytes(buf[-4:]) == b"tail"  # nothing past the frames is touched
    # Only heartbeats: no data.
    assert k.join_frames(bytearray(HDR.pack(7, 0) * 2), 0, 24) == (-1, 0, 0)
    # A frame that does not start where the one before ended.
    gap = HDR.pack(0, 2) + b"ab" + HDR.pack(3, 1) + b"c"
    with pytest.raises(ValueError):
        k.join_frames(bytearray(gap), 0, len(gap))
    # A frame cut short, and a header cut short.
    with pytest.raises(ValueError):
        k.join_frames(bytearray(frames), 0, len(frames) - 1)
    with pytest.raises(ValueError):
        k.join_frames(bytearray(frames), 0, 10)


def test_push_file_sends_what_is_published_when_woken_and_stops_at_the_files_end(tmp_path: Path) -> None:
    """The master's write kernel: frames of the file up to the feed's published end, the next
    ones as soon as a publish wakes it (its idle wait is far longer than the test may take),
    never past the file's end; ``stop`` ends it."""
    from dledger._ext import load

    k = load("ha")
    data = bytes(range(256)) * 400  # 102,400 bytes: a "file" from log offset 1 << 20
    path = tmp_path / "log"
    path.write_bytes(data)
    base = 1 << 20
    fd = os.open(path, os.O_RDONLY)
    a, b = socket.socketpair()
    feed = k.LogFeed()
    got: list[int] = []

    def push(start: int, limit: int) -> None:
        got.append(k.push_file(feed, a.fileno(), fd, start, base, limit, 32768, 60.0, 5.0))

    try:
        a.settimeout(5)
        feed.publish(base + 40_000)
        t = threading.Thread(target=push, args=(base + 1000, base + len(data)))
        t.start()
        b.settimeout(10)
        frames = [HDR.unpack(recv_exact(b, 12)) for _ in range(1)]
        body = recv_exact(b, frames[0][1])
        assert frames[0] == (base + 1000, 32768) and body == data[1000:33768]
        assert HDR.unpack(recv_exact(b, 12)) == (base + 33768, 40_000 - 33768)
        recv_exact(b, 40_000 - 33768)
        feed.publish(base + 30_000)  # an older end: never back
        assert feed.end == base + 40_000
        feed.publish(base + 50_000)  # the kernel waits: this wakes it
        assert HDR.unpack(recv_exact(b, 12)) == (base + 40_000, 10_000)
        assert recv_exact(b, 10_000) == data[40_000:50_000]
        feed.stop()
        t.join(10)
        assert got == [base + 50_000]
        # Published past the file: it stops at the file's end (the next frame is the next file's).
        feed2 = k.LogFeed()
        feed2.publish(base + 10 * len(data))
        assert k.push_file(
            feed2, a.fileno(), fd, base + 100_000, base, base + len(data), 32768, 60.0, 5.0
        ) == base + len(data)
        assert HDR.unpack(recv_exact(b, 12)) == (base + 100_000, len(data) - 100_000)
    finally:
        os.close(fd)
        a.close()
        b.close()


def test_slave_appends_through_the_mapping_and_past_the_prewritten_mark_byte_for_byte(tmp_path: Path) -> None:
    """A slave's append of a read's frames: below the prefault's mark it goes through the
    mapping in pieces, past it in one write; the log holds exactly the master's bytes either
    way (the test's other stores use 64 KiB files, never pre-written far enough for pieces)."""
    big = 8 << 20
    m = MessageStore(tmp_path / "m", config(mapped_file_size_commit_log=big))
    s = MessageStore(tmp_path / "s", config(broker_role=SLAVE, mapped_file_size_commit_log=big))
    try:
        fill(m, 7000)
        end = m.max_phys_offset
        assert 3 << 20 < end < big
        data = log_bytes(m, 0, end)
        first = 100_000
        # The file is new, with no mark yet: one write that lets go of the GIL.
        assert s.append_to_commit_log(0, memoryview(data)[:first])
        f = s.commitlog.files.files[-1]
        assert f.guarded
        # The prefault thread writes zeros ahead of the write position: wait until the rest of
        # the data lies below its mark (rounded down to 2 MiB), so it goes in mapped pieces.
        wait_for(lambda: f.prewritten_to >= 6 << 20)
        assert s.append_to_commit_log(first, memoryview(data)[first : end - 1000])
        assert s.append_to_commit_log(end - 1000, memoryview(data)[end - 1000 :])
        assert s.max_phys_offset == end
        assert log_bytes(s, 0, end) == data
        # Not where the log ends: refused, nothing written.
        assert not s.append_to_commit_log(end + 1, b"x" * 10)
        assert s.max_phys_offset == end
    finally:
        s.close()
        m.close()
