"""read_messages: the Java-written RocketMQ 4.9.4 fixtures read through Arrow exactly as their
``expected/messages.tsv`` and ``consumequeue.tsv`` list them, walking the commit log and through
the consume queues; stores written here read as the store's own decoder reads them."""

from __future__ import annotations

import hashlib
import itertools
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from dledger.rocketmq import read_messages
from dledger.rocketmq.store import arrow_reader
from dledger.rocketmq.store.arrow_reader import (
    COLUMNS,
    ReadArgs,
    RowFilter,
    iter_message_batches,
    log_file_of,
    log_ranges,
    message_batch_reader,
    offset_for_timestamp,
    open_store,
    queue_files_of,
    queue_ranges,
    read_log_file,
    read_queue_files,
    read_range,
    split_log_range,
    thread_pieces,
)
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.listing import escape, message_line, unescape
from dledger.rocketmq.store.message import Message, decode_properties
from dledger.rocketmq.store.message_store import MessageStore

REPO = Path(__file__).resolve().parents[2]
FIXTURES_MQ = REPO / "tests" / "fixtures" / "rocketmq-4.9"
NAMES = ["classic-3topics", "dledger-1node"]


def expected(name: str, listing: str) -> list[str]:
    return (FIXTURES_MQ / name / "expected" / listing).read_text(encoding="utf-8").splitlines()[1:]


def _ms(v: Any) -> int:
    return int(pa.scalar(v, pa.timestamp("ms")).cast(pa.int64()).as_py())


def line_of(r: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The messages.tsv line of a row (its properties column left out), and the properties."""
    body = r["body"]
    fields = [
        r["commit_log_offset"],
        r["size"],
        escape(r["topic"]),
        r["queue_id"],
        r["queue_offset"],
        r["sys_flag"],
        _ms(r["born_timestamp"]),
        _ms(r["store_timestamp"]),
        r["born_host"],
        r["store_host"],
        r["reconsume_times"],
        r["prepared_transaction_offset"],
        r["body_crc"],
        hashlib.sha256(body).hexdigest()[:16],
        len(body),
        escape(r["tags"]),
        escape(r["keys"]),
        r["msg_id"],
        r["flag"],
    ]
    props = dict(r["properties"])
    assert len(props) == len(r["properties"]), "a name twice in one map"
    return "\t".join(str(f) for f in fields), props


def split_expected(line: str) -> tuple[str, dict[str, str]]:
    cols = line.split("\t")
    props = decode_properties(unescape(cols[17]))
    return "\t".join(cols[:17] + cols[18:]), props


@pytest.mark.parametrize("name", NAMES)
def test_walk_reads_every_record_as_java_listed(name: str) -> None:
    table = read_messages(FIXTURES_MQ / name)
    assert table.column_names == list(COLUMNS)
    want = [split_expected(line) for line in expected(name, "messages.tsv")]
    got = [line_of(r) for r in table.to_pylist()]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g == w
    # Properties are a map<string, string>; a name given twice keeps its last value (the batch's WAIT).
    assert table.schema.field("properties").type == pa.map_(pa.string(), pa.string())
    assert table.schema.field("store_timestamp").type == pa.timestamp("ms")


@pytest.mark.parametrize("max_bytes", [700, 4096])
def test_a_walk_cut_into_pieces_reads_every_record_once(max_bytes: int) -> None:
    """Each commit-log file cut at record starts, each piece read by mapping its file alone: the
    pieces together are the Java listing, each record once (the fixture's PREPARED transaction
    records, in no queue, lie inside pieces)."""
    name = "classic-3topics"
    want = [split_expected(line) for line in expected(name, "messages.tsv")]
    with open_store(FIXTURES_MQ / name) as store:
        files = log_ranges(store, None, None, True)
        pieces = [p for r in files for p in split_log_range(store, r, max_bytes)]
        assert len(pieces) > 2 * len(files)
        for rng in files:  # the pieces of a file abut and cover it
            mine = [p for p in pieces if rng.start <= p.start < rng.end]
            assert mine[0].start == rng.start and mine[-1].end == rng.end
            assert all(a.end == b.start for a, b in itertools.pairwise(mine))
        batches = []
        for p in pieces:
            file = log_file_of(store, p)
            assert file is not None
            batches += list(read_log_file(file, p, ReadArgs()))
    got = [line_of(r) for r in pa.Table.from_batches(batches).to_pylist()]
    assert got == want


def test_a_walk_read_on_threads_is_cut_at_record_starts_and_reads_as_java_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``read_messages`` on threads cuts a walk at record starts (16 threads: pieces of a 32nd
    of the fixture's 18 files of 64 KiB, the minimum lowered) and gives the Java listing, each
    record once, in log order."""
    name = "classic-3topics"
    monkeypatch.setattr(arrow_reader, "MIN_PIECE_BYTES", 512)
    with open_store(FIXTURES_MQ / name) as store:
        files = log_ranges(store, None, None, True)
        pieces = thread_pieces(store, files, 16)
    assert len(pieces) > len(files)
    assert pieces[0].start == files[0].start and pieces[-1].end == files[-1].end
    assert all(a.end == b.start for a, b in itertools.pairwise(pieces))
    table = read_messages(FIXTURES_MQ / name, threads=16)
    got = [line_of(r) for r in table.to_pylist()]
    assert got == [split_expected(line) for line in expected(name, "messages.tsv")]


@pytest.mark.parametrize("threads", [2, 3])
def test_a_walk_of_several_files_on_threads_reads_as_on_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    """A store written here, its log in several files each cut for the threads (batches of 64
    rows, so pieces end inside batches and files): every column as a one-thread read gives it."""
    store = _bench_like_store(tmp_path / "s", 30_000, file_size=2 << 20)
    with open_store(store) as s:
        files = log_ranges(s, None, None, True)
        assert len(files) >= 3
        assert len(thread_pieces(s, files, threads, min_bytes=300_000)) > len(files)
    one = read_messages(store, threads=1, batch_rows=64)
    monkeypatch.setattr(arrow_reader, "MIN_PIECE_BYTES", 300_000)
    many = read_messages(store, threads=threads, batch_rows=64)
    assert many.num_rows == one.num_rows == 30_000
    assert many.equals(one)
    assert many.column("commit_log_offset").to_pylist() == sorted(set(one.column("commit_log_offset").to_pylist()))


@pytest.mark.parametrize("name", NAMES)
def test_batches_held_from_a_reusing_reader_read_as_java_listed(name: str) -> None:
    """A ``message_batch_reader`` reuses a batch's buffers only once the batch is gone: batches
    of 3 rows all kept (each next one is made while the others are held) are the Java listing,
    and so are the batches taken one by one."""
    want = [split_expected(line) for line in expected(name, "messages.tsv")]
    batches = list(message_batch_reader(FIXTURES_MQ / name, batch_rows=3))
    assert len(batches) > 10
    assert [line_of(r) for r in pa.Table.from_batches(batches).to_pylist()] == want
    # And taken one by one, each batch in reused buffers (nulls of tags and keys vary by row).
    assert [line_of(r) for b in message_batch_reader(FIXTURES_MQ / name, batch_rows=3) for r in b.to_pylist()] == want


def test_batches_taken_one_by_one_reuse_their_buffers_and_read_as_a_table(tmp_path: Path) -> None:
    """Batches consumed one at a time by a ``for`` loop (which holds the batch before while it
    asks for the next) are built in two sets of buffers per commit-log file, not new ones per
    batch, and each reads as the same rows of ``read_messages``."""
    store = _bench_like_store(tmp_path / "s", 20_000, file_size=2 << 20)
    table = read_messages(store, threads=1)
    files = len(list((store / "commitlog").iterdir()))
    at, batches, addresses = 0, 0, set()
    for batch in message_batch_reader(store, batch_rows=500):
        assert batch.equals(table.slice(at, batch.num_rows).combine_chunks().to_batches()[0])
        addresses.add(batch.column("body").buffers()[2].address)
        at += batch.num_rows
        batches += 1
    assert at == table.num_rows == 20_000
    assert len(addresses) <= 2 * files < batches


def test_a_dledger_walk_is_not_cut_and_reads_each_file_alone() -> None:
    """A DLedger log keeps one range per data file, each read by mapping that file alone (no
    store opened per Spark partition): together the Java listing, each record once."""
    name = "dledger-1node"
    batches = []
    with open_store(FIXTURES_MQ / name) as store:
        ranges = log_ranges(store, None, None, True)
        assert len(ranges) > 1
        for rng in ranges:
            assert split_log_range(store, rng, 700) == [rng]
            file = log_file_of(store, rng)
            assert file is not None and file.dledger
            batches += list(read_log_file(file, rng, ReadArgs()))
    got = [line_of(r) for r in pa.Table.from_batches(batches).to_pylist()]
    assert got == [split_expected(line) for line in expected(name, "messages.tsv")]


@pytest.mark.parametrize("name", NAMES)
def test_topics_read_through_the_consume_queues(name: str) -> None:
    root = FIXTURES_MQ / name
    units = [line.split("\t") for line in expected(name, "consumequeue.tsv")]
    topics = sorted({unescape(u[0]) for u in units})
    table = read_messages(root, topics=topics)
    rows = table.to_pylist()
    got = sorted(
        (escape(r["topic"]), r["queue_id"], r["queue_offset"], r["commit_log_offset"], r["size"]) for r in rows
    )
    want = sorted((u[0], int(u[1]), int(u[2]), int(u[3]), int(u[4])) for u in units)
    assert got == want
    # Each row is the message the walk lists at that offset.
    by_phys = {int(line.split("\t", 1)[0]): split_expected(line) for line in expected(name, "messages.tsv")}
    for r in rows:
        line, props = line_of(r)
        want_line, want_props = by_phys[r["commit_log_offset"]]
        # The queue offset of a delivered schedule copy or a committed half is its unit's.
        assert line.split("\t")[:4] == want_line.split("\t")[:4]
        assert line.split("\t")[5:] == want_line.split("\t")[5:] and props == want_props
    # Queues come in order, each in queue-offset order.
    for topic in topics:
        for qid in {r["queue_id"] for r in rows if r["topic"] == topic}:
            offs = [r["queue_offset"] for r in rows if r["topic"] == topic and r["queue_id"] == qid]
            assert offs == sorted(offs) and offs == list(range(offs[0], offs[0] + len(offs)))


@pytest.mark.parametrize("name", NAMES)
def test_offsets_queues_columns_and_timestamps(name: str) -> None:
    root = FIXTURES_MQ / name
    units = [line.split("\t") for line in expected(name, "consumequeue.tsv")]
    a0 = [int(u[3]) for u in units if u[0] == "TopicA" and u[1] == "0"]
    t = read_messages(root, topics="TopicA", queues=[0], start=2, end=5, columns=["queue_offset", "commit_log_offset"])
    assert t.column_names == ["queue_offset", "commit_log_offset"]
    assert t.column("queue_offset").to_pylist() == [2, 3, 4]
    assert t.column("commit_log_offset").to_pylist() == a0[2:5]
    # Per queue, Kafka style: -2 earliest, -1 latest.
    per = read_messages(root, topics=["TopicA"], start={"TopicA": {"0": 3, "1": -1}}, end={"TopicA": {"2": 1}})
    counts: dict[int, int] = {}
    for q in per.column("queue_id").to_pylist():
        counts[q] = counts.get(q, 0) + 1
    total = {q: sum(1 for u in units if u[0] == "TopicA" and int(u[1]) == q) for q in range(4)}
    assert counts == {0: total[0] - 3, 2: 1, 3: total[3]}
    # The store-time binary search: the first offset stored at or after a time.
    stamps = read_messages(root, topics="TopicB", queues=[0], columns=["store_timestamp"])
    ts = [_ms(v) for v in stamps.column("store_timestamp").to_pylist()]
    with open_store(root) as store:
        for i in (0, 1, len(ts) // 2, len(ts) - 1):
            assert offset_for_timestamp(store, "TopicB", 0, ts[i]) == ts.index(ts[i])
            assert offset_for_timestamp(store, "TopicB", 0, ts[i] + 1) == next(
                (k for k, v in enumerate(ts) if v > ts[i]), len(ts)
            )
        assert offset_for_timestamp(store, "TopicB", 0, 0) == 0
    # Batches carry the same rows as the table.
    batches = list(iter_message_batches(root, batch_rows=100, columns=["commit_log_offset"]))
    assert len(batches) > 5 and all(b.num_rows <= 100 for b in batches)
    assert [v for b in batches for v in b.column(0).to_pylist()] == read_messages(
        root, columns=["commit_log_offset"]
    ).column(0).to_pylist()


@pytest.mark.parametrize("name", NAMES)
def test_decompress_inflates_compressed_bodies(name: str) -> None:
    table = read_messages(FIXTURES_MQ / name, columns=["sys_flag", "body"], decompress=True)
    raw = read_messages(FIXTURES_MQ / name, columns=["sys_flag", "body"])
    flags = table.column("sys_flag").to_pylist()
    assert sum(f & 1 for f in flags) > 5
    for f, body, stored in zip(flags, table.column("body").to_pylist(), raw.column("body").to_pylist(), strict=True):
        assert body == (zlib.decompress(stored) if f & 1 else stored)


@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_our_stores_read_as_the_decoder_reads_them(tmp_path: Path, mode: str) -> None:
    cfg = MessageStoreConfig(
        enable_dledger_commit_log=mode == "dledger", mapped_file_size_commit_log=64 * 1024, store_host="10.0.0.1:10911"
    )
    with MessageStore(tmp_path, cfg) as s:
        for k in range(60):
            assert s.put_batch("T", [bytes([k]) * (k * 7 % 500) for _ in range(20)], queue_id=k % 3, tags=f"t{k}").ok
            m = Message("U", b"x" * k, tags="only", keys="a b", properties={"p": "v", "\u00e9": "\u4e2d"})
            assert s.put_message(m).ok
        assert s.wait_dispatched()
        assert len(s.commitlog.files.files) > 3
        msgs = list(s.iter_messages())
    table = read_messages(tmp_path)
    assert table.num_rows == len(msgs) == 60 * 21
    for r, m in zip(table.to_pylist(), msgs, strict=True):
        line, props = line_of(r)
        want, want_props = split_expected(message_line(m))
        assert line == want and props == want_props
    by_queue = read_messages(tmp_path, topics=["T"])
    assert by_queue.num_rows == 1200
    assert sorted(by_queue.column("commit_log_offset").to_pylist()) == [m.phys_offset for m in msgs if m.topic == "T"]


def test_a_reader_beside_a_writer_walks_past_what_dispatch_reached(tmp_path: Path) -> None:
    """A read-only open finds the log's end from where the queues end (not by recovering the
    last files): records written since, into later files too, are all walked."""
    cfg = MessageStoreConfig(mapped_file_size_commit_log=64 * 1024)
    s = MessageStore(tmp_path, cfg, dispatch_thread=False)
    try:
        for q in range(3):
            assert s.put_batch("T", [b"x" * 100] * 50, queue_id=q).ok
        s.reput.dispatch_now()
        dispatched = len(s.commitlog.files.files)
        for k in range(40):
            assert s.put_batch("T", [bytes([k]) * 300] * 20, queue_id=k % 3).ok
        assert len(s.commitlog.files.files) > dispatched + 2
        walked = read_messages(tmp_path, columns=["commit_log_offset", "body"])
        assert walked.num_rows == 150 + 800
        assert walked.column("body").to_pylist() == [b"x" * 100] * 150 + [
            bytes([k]) * 300 for k in range(40) for _ in range(20)
        ]
        assert read_messages(tmp_path, topics="T", columns=["queue_id"]).num_rows == 150
    finally:
        s.close()


def _queue_file_rows(root: Path, columns: list[str], batch_rows: int = 8192) -> tuple[list[Any], list[Any]]:
    """Every queue of the store read by mapping its own files, and through the opened store."""
    args = ReadArgs(tuple(columns), batch_rows)
    alone: list[Any] = []
    through: list[Any] = []
    with open_store(root) as store:
        for rng in queue_ranges(store):
            files = queue_files_of(store, rng)
            assert files is not None
            alone += [r for b in read_queue_files(files, rng, args) for r in b.to_pylist()]
            through += [r for b in read_range(store, rng, args) for r in b.to_pylist()]
    return alone, through


@pytest.mark.parametrize("name", NAMES)
def test_a_queue_read_from_its_own_files_lists_the_java_units(name: str) -> None:
    """A Spark queue partition maps only its consume queue's and commit-log (or DLedger data)
    files: the rows are the units Java's consume queues list, each the message Java's walk
    lists there."""
    alone, through = _queue_file_rows(FIXTURES_MQ / name, list(COLUMNS))
    assert alone == through
    want = sorted(tuple(u.split("\t")[:5]) for u in expected(name, "consumequeue.tsv"))
    got = sorted(
        (escape(r["topic"]), str(r["queue_id"]), str(r["queue_offset"]), str(r["commit_log_offset"]), str(r["size"]))
        for r in alone
    )
    assert got == want


def test_a_queue_read_from_its_own_files_spans_every_file(tmp_path: Path) -> None:
    """Queues of many consume-queue files pointing into many commit-log files, read in small
    batches: every message once, in queue order, with its body."""
    cfg = MessageStoreConfig(mapped_file_size_commit_log=16 * 1024, mapped_file_size_consume_queue=20 * 40)
    with MessageStore(tmp_path, cfg) as s:
        for k in range(90):
            assert s.put_batch("T", [bytes([k]) * (50 + k)] * 7, queue_id=k % 3).ok
        assert s.wait_dispatched()
        assert len(s.commitlog.files.files) > 5
    alone, through = _queue_file_rows(tmp_path, ["queue_id", "queue_offset", "body"], batch_rows=25)
    assert alone == through
    assert len(alone) == 630
    for q in range(3):
        rows = [r for r in alone if r["queue_id"] == q]
        assert [r["queue_offset"] for r in rows] == list(range(210))
        assert [r["body"] for r in rows] == [bytes([k]) * (50 + k) for k in range(q, 90, 3) for _ in range(7)]


def test_a_walk_filters_on_columns_it_does_not_return() -> None:
    """Pushed-down filters read scan columns the output does not have (the scan fills only what
    is asked): the rows kept are those the full read's columns select."""
    root = FIXTURES_MQ / "classic-3topics"
    full = read_messages(root, columns=["topic", "queue_id", "queue_offset", "store_timestamp", "body"]).to_pylist()
    ts = sorted(r["store_timestamp"] for r in full)[len(full) // 3]
    topic = full[0]["topic"]
    rows = RowFilter(topics=frozenset({topic}), queue_ids=frozenset({0, 1}), offset_min=1, ts_min=_ms(ts))
    args = ReadArgs(("body",), 7, rows=rows)
    with open_store(root) as store:
        got = [
            r["body"]
            for rng in log_ranges(store, None, None, True)
            for b in read_range(store, rng, args)
            for r in b.to_pylist()
        ]
    want = [
        r["body"]
        for r in full
        if r["topic"] == topic and r["queue_id"] in (0, 1) and r["queue_offset"] >= 1 and r["store_timestamp"] >= ts
    ]
    assert want and len(want) < len(full)
    assert got == want


# -- memory: the result holds what it shows --------------------------------------------------


def _bench_like_store(root: Path, n: int, file_size: int = 1 << 30) -> Path:
    body = bytes(range(100))
    with MessageStore(root, MessageStoreConfig(mapped_file_size_commit_log=file_size)) as s:
        for k in range(0, n, 5000):
            assert s.put_batch("MemTopic", [body] * min(5000, n - k), queue_id=(k // 5000) % 4, tags="mem").ok
        assert s.wait_dispatched(60)
    return root


@pytest.mark.parametrize("how", ["walk", "queues"])
def test_result_allocations_are_its_size(tmp_path: Path, how: str) -> None:
    """The numpy allocations behind the returned table (traced by tracemalloc) are its nbytes
    within a few percent: no buffer is a slice of a larger one (a slice keeps its whole
    allocation alive, and resident once the allocator reuses memory: the 10 M bench grew to
    21 GB), and while reading, no more than one extra batch's worth is held."""
    import tracemalloc

    store = _bench_like_store(tmp_path / "s", 60_000)
    kwargs: dict[str, Any] = {"topics": ["MemTopic"]} if how == "queues" else {}
    tracemalloc.start()
    try:
        table = read_messages(store, batch_rows=4096, **kwargs)
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert table.num_rows == 60_000
    assert table.get_total_buffer_size() <= table.nbytes * 1.01
    # Python objects of the read (store, schema, batches) add well under 5% at 60 k rows.
    assert held <= table.nbytes * 1.05, (held, table.nbytes)


def _mapped_rss(path: Path) -> int:
    """Resident bytes of this process's mappings of ``path`` (from /proc/self/smaps)."""
    rss = 0
    current = False
    with open("/proc/self/smaps", encoding="utf-8") as fh:
        for line in fh:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5:
                current = len(head) >= 6 and head[-1] == str(path)
            elif current and line.startswith("Rss:"):
                rss += int(head[1]) * 1024
    return rss


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc/self/smaps (Linux)")
def test_walk_lets_go_of_commit_log_pages_once_read(tmp_path: Path) -> None:
    """A walk unmaps the pages of a commit-log file it has read: a read of a store as large as
    memory is not held twice (the table and the mapped log) in the resident size."""
    store = _bench_like_store(tmp_path / "s", 40_000, file_size=4 << 20)
    first = store / "commitlog" / f"{0:020d}"
    batches = iter_message_batches(store, batch_rows=2048)
    rows = 0
    for batch in batches:
        rows += batch.num_rows
        if batch.column("commit_log_offset")[0].as_py() >= 4 << 20:
            break  # now in the second file: the first is read
    assert first.stat().st_size == 4 << 20
    assert _mapped_rss(first) <= 64 << 10, _mapped_rss(first)
    rows += sum(b.num_rows for b in batches)
    assert rows == 40_000
