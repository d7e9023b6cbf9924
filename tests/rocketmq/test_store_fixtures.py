"""The stores the Java RocketMQ 4.9.4 store wrote, opened read-only through MessageStore: every
message of ``expected/messages.tsv``, consume queues and key queries as Java reads them, and not
a byte changed."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from dledger.rocketmq.store.message import format_host
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.status import GetMessageStatus

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rocketmq-4.9"
NAMES = ["classic-3topics", "dledger-1node"]


def escape(text: str) -> str:
    out = []
    for ch in text:
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        else:
            out.append(ch)
    return "".join(out)


def unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "x":
            out.append(chr(int(text[i + 2 : i + 4], 16)))
            i += 4
        else:
            out.append({"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}[nxt])
            i += 2
    return "".join(out)


def read_tsv(path: Path) -> list[list[str]]:
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[0].startswith("#")
    return [line.split("\t") for line in lines[1:] if line]


def snapshot(root: Path) -> dict[str, tuple[int, float, str]]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


@pytest.fixture(scope="module", params=NAMES)
def opened(request: pytest.FixtureRequest):
    root = FIXTURES / request.param
    before = snapshot(root)
    store = MessageStore(root, readonly=True)
    yield root, store
    store.close()
    assert snapshot(root) == before, "opening read-only changed the fixture"
    assert not (root / "abort").exists()


def test_mode_is_detected(opened) -> None:
    root, store = opened
    assert store.mode == ("dledger" if root.name.startswith("dledger") else "classic")


def test_every_message_of_messages_tsv(opened) -> None:
    root, store = opened
    expected = read_tsv(root / "expected" / "messages.tsv")
    got = list(store.iter_messages())
    assert len(got) == len(expected)
    for m, row in zip(got, expected, strict=True):
        line = [
            str(m.phys_offset),
            str(m.size),
            escape(m.topic),
            str(m.queue_id),
            str(m.queue_offset),
            str(m.sys_flag),
            str(m.born_timestamp),
            str(m.store_timestamp),
            format_host(m.born_host),
            format_host(m.store_host),
            str(m.reconsume_times),
            str(m.prepared_offset),
            str(m.body_crc),
            hashlib.sha256(m.body).hexdigest()[:16],
            str(len(m.body)),
            escape(m.tags or ""),
            escape(m.keys or ""),
            escape(m.properties_string),
            m.msg_id,
            str(m.flag),
        ]
        assert line == row, f"message at {m.phys_offset}"


def test_lookup_and_msg_id_of_every_message(opened) -> None:
    root, store = opened
    for row in read_tsv(root / "expected" / "messages.tsv"):
        phys, msg_id = int(row[0]), row[18]
        m = store.lookup(phys)
        assert m is not None and m.phys_offset == phys and m.msg_id == msg_id
        assert store.view_by_msg_id(msg_id).phys_offset == phys


def test_offsets_match_summary(opened) -> None:
    root, store = opened
    summary = dict(
        line.split("\t", 1)
        for line in (root / "expected" / "summary.txt").read_text().splitlines()
        if "\t" in line and not line.startswith(("#", "[", "queue", "indexfile", "file"))
    )
    assert store.max_phys_offset == int(summary["maxPhyOffset"])
    assert store.min_phys_offset == int(summary["minPhyOffset"])
    assert store.dispatch_behind_bytes() == 0


def test_get_messages_walks_every_queue(opened) -> None:
    root, store = opened
    by_queue: dict[tuple[str, int], list[list[str]]] = {}
    for row in read_tsv(root / "expected" / "consumequeue.tsv"):
        by_queue.setdefault((row[0], int(row[1])), []).append(row)
    for (topic, qid), rows in by_queue.items():
        assert store.min_offset_in_queue(topic, qid) == int(rows[0][2])
        assert store.max_offset_in_queue(topic, qid) == int(rows[-1][2]) + 1
        seen = []
        offset = int(rows[0][2])
        while True:
            res = store.get_messages(topic, qid, offset, 32)
            if res.status != GetMessageStatus.FOUND:
                assert res.status == GetMessageStatus.OFFSET_OVERFLOW_ONE
                break
            seen += [(m.queue_offset, m.phys_offset, m.size) for m in res.messages]
            assert res.next_begin_offset > offset
            offset = res.next_begin_offset
        assert seen == [(int(r[2]), int(r[3]), int(r[4])) for r in rows]


def test_query_by_key_as_java(opened) -> None:
    root, store = opened
    for row in read_tsv(root / "expected" / "index.tsv"):
        key, topic = row[0], row[1]
        key, topic = unescape(key), unescape(topic)
        want = sorted(int(x) for x in row[2].split(",") if x) if len(row) > 2 else []
        assert sorted(store.query_offsets_by_key(topic, key, 64)) == want, (topic, key)


def test_readonly_refuses_writes(opened) -> None:
    from dledger.rocketmq.store.message import Message
    from dledger.rocketmq.store.status import PutMessageStatus

    _root, store = opened
    res = store.put_message(Message("TopicA", b"x"))
    assert res.status == PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_readonly_open_takes_no_lock(tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "s"
    shutil.copytree(FIXTURES / "classic-3topics", root)
    writer = MessageStore(root, schedule=False)  # counts files: no delayed delivery adding any
    try:
        # A reader beside a running writer: no lock taken, the messages visible.
        reader = MessageStore(root, readonly=True)
        assert sum(1 for _ in reader.iter_messages()) == 1487
        reader.close()
    finally:
        writer.close()
    assert not (root / "abort").exists()
    assert os.path.getsize(root / "checkpoint") == 4096


@pytest.mark.parametrize("name", NAMES)
def test_dispatch_rebuilds_java_queues_and_index_byte_for_byte(tmp_path: Path, name: str) -> None:
    """Consume queues and index files dispatched here from the Java commit log are the files
    the Java store wrote (index file names aside: they are creation times)."""
    import shutil

    from dledger.rocketmq.store.config import MessageStoreConfig

    src = FIXTURES / name
    root = tmp_path / name
    shutil.copytree(src, root)
    shutil.rmtree(root / "index")
    shutil.rmtree(root / "consumequeue")
    cfg = MessageStoreConfig(
        mapped_file_size_commit_log=65536, mapped_file_size_consume_queue=6000, max_hash_slot_num=64, max_index_num=256
    )
    # schedule=False: only what dispatch rebuilds, without the overdue delayed messages delivered.
    with MessageStore(root, cfg, schedule=False) as store:
        assert store.dispatch_behind_bytes() == 0
    java_index = [p.read_bytes() for p in sorted((src / "index").iterdir())]
    ours = [p.read_bytes() for p in sorted((root / "index").iterdir())]
    assert ours == java_index
    java_cq = {str(p.relative_to(src)): p.read_bytes() for p in (src / "consumequeue").rglob("*") if p.is_file()}
    our_cq = {str(p.relative_to(root)): p.read_bytes() for p in (root / "consumequeue").rglob("*") if p.is_file()}
    assert our_cq == java_cq


def test_compressed_bodies_inflate(opened) -> None:
    _root, store = opened
    compressed = [m for m in store.iter_messages() if m.sys_flag & 1]
    assert compressed
    for m in compressed:
        assert len(m.uncompressed_body) >= 0 and m.uncompressed_body != m.body
