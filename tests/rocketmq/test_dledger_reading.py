"""Readers of the DLedger commit log (dispatch, pulls) and the store's locks: a flush holding the
store's main lock (an msync can take milliseconds) does not hold readers up, while retention and
close, which unmap files, wait for a reader to finish."""

from __future__ import annotations

import threading
from pathlib import Path

from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message_store import MessageStore
from dledger.testing import store_held


def _store(path: Path) -> MessageStore:
    cfg = MessageStoreConfig(
        enable_dledger_commit_log=True, mapped_file_size_commit_log=1 << 16, store_host="10.0.0.1:10911"
    )
    return MessageStore(path, cfg)


def test_readers_do_not_wait_for_a_flush(tmp_path: Path) -> None:
    s = _store(tmp_path / "s")
    try:
        s.reput.stop()
        assert s.put_batch("T", [b"x" * 100] * 8, tags="a").ok
        cl = s.commitlog
        with store_held(cl.store):  # as the service does while it flushes
            done = threading.Event()

            def read() -> None:
                with cl.reading():
                    seg = cl.segment(0)
                    assert seg is not None
                    seg.view.release()
                done.set()

            t = threading.Thread(target=read)
            t.start()
            assert done.wait(10)
            t.join()
            assert s.reput.dispatch_now() == 8
    finally:
        s.close()


def test_close_waits_for_a_reader(tmp_path: Path) -> None:
    s = _store(tmp_path / "s")
    assert s.put_batch("T", [b"y" * 100] * 4).ok
    cl = s.commitlog
    closed = threading.Event()

    def close() -> None:
        cl.store.close()
        closed.set()

    with cl.reading():
        t = threading.Thread(target=close)
        t.start()
        assert not closed.wait(0.2)  # the files stay mapped while the reader holds them
        seg = cl.segment(0)
        assert seg is not None
        assert bytes(seg.view[seg.start : seg.start + 4]) != b"\0\0\0\0"
        seg.view.release()
    assert closed.wait(10)
    t.join()
    s.close()
