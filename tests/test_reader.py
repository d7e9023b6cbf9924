"""The Arrow reader (dledger.reader): the log on disk as pyarrow data, without a node."""

from __future__ import annotations

import hashlib
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dledger.config import DLedgerConfig
from dledger.errors import CorruptionError, DLedgerError
from dledger.reader import (
    COLUMNS,
    MalformedEntry,
    NotAStoreError,
    StoreNotFoundError,
    iter_batches,
    plan_read,
    read_table,
)
from dledger.store.file import MmapFileStore
from dledger.store.properties import read_properties
from tests.conftest import REPO, java_fixtures

FIXTURES = java_fixtures()


# -- helpers shared with tests/test_spark.py ----------------------------------------------


def body_of(index: int) -> bytes:
    """A body that says which entry it is, 20..69 bytes long."""
    return (b"%010d:" % index) * (2 + index % 5) + b"x" * (index % 7)


def make_store(
    node_dir: Path,
    config: DLedgerConfig,
    count: int,
    committed: int | None,
    terms: int = 3,
    checkpoint: bool = True,
    start: int = 0,
) -> None:
    """Append entries ``start..start+count-1`` (bodies from :func:`body_of`) in ``terms`` terms,
    commit up to ``committed`` and write the checkpoint (or remove it). Closes the store."""
    store = MmapFileStore(node_dir, config, start_services=False)
    per_term = max(count // terms, 1)
    i = start
    while i < start + count:
        n = min(per_term, start + count - i)
        term = 1 + (i - start) // per_term
        first, _ = store.append_batch([body_of(k) for k in range(i, i + n)], term)
        assert first == i
        i += n
    if committed is not None:
        store.update_committed_index(store.ledger_end_term, committed)
    store.close()
    if not checkpoint:
        (node_dir / "checkpoint").unlink()


def expected_rows(first: int, last: int) -> tuple[int, int, int]:
    """(count, sum of index, sum of body lengths) of entries first..last."""
    idx = range(first, last + 1)
    return len(idx), sum(idx), sum(len(body_of(i)) for i in idx)


def fixture_lines(table: pa.Table) -> list[str]:
    return [
        f"{i} {t} {p} {len(b)} {hashlib.sha256(b).hexdigest()[:16]}"
        for i, t, p, b in zip(
            table["index"].to_pylist(),
            table["term"].to_pylist(),
            table["pos"].to_pylist(),
            table["body"].to_pylist(),
            strict=True,
        )
    ]


def node_dir_of(fixture: Path) -> Path:
    nodes = sorted(p for p in fixture.iterdir() if p.is_dir() and p.name.startswith("dledger-"))
    assert len(nodes) == 1
    return nodes[0]


@pytest.fixture
def store_config() -> DLedgerConfig:
    """4 KiB data segments (about 60 entries each), 640-byte index segments."""
    return DLedgerConfig(mapped_file_size_for_entry_data=4096, mapped_file_size_for_entry_index=640)


def corrupt(path: str, offset: int, data: bytes) -> None:
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


# -- the Java fixture -------------------------------------------------------------------


def test_fixtures_are_present() -> None:
    assert FIXTURES, "no fixture with expected.txt under tests/fixtures"


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_fixture_reads_as_listed(fixture: Path) -> None:
    expected = (fixture / "expected.txt").read_text().splitlines()
    table = read_table(node_dir_of(fixture))
    assert table.schema.names == list(COLUMNS)
    assert fixture_lines(table) == expected[1:]
    begin, end = int(expected[0].split()[1]), int(expected[0].split()[3])
    assert table["index"][0].as_py() == begin and table["index"][-1].as_py() == end
    # The Java writer records no CRC and magic 1.
    assert set(table["magic"].to_pylist()) == {1}


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_fixture_small_batches_ranges_and_base_dir(fixture: Path) -> None:
    expected = (fixture / "expected.txt").read_text().splitlines()[1:]
    batches = list(iter_batches(node_dir_of(fixture), batch_size=7))
    assert all(b.num_rows <= 7 for b in batches)
    assert fixture_lines(pa.Table.from_batches(batches)) == expected
    # The fixture directory is a store base directory with one node: no node column.
    sub = read_table(fixture, start_index=150, end_index=420, columns=["index", "term", "pos", "body"])
    assert sub.schema.names == ["index", "term", "pos", "body"]
    assert fixture_lines(sub) == expected[150:421]
    one_thread = read_table(node_dir_of(fixture), threads=1)
    assert fixture_lines(one_thread) == expected


def test_fixture_is_not_modified() -> None:
    node = node_dir_of(FIXTURES[0])
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in node.rglob("*") if p.is_file()}
    read_table(node)
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in node.rglob("*") if p.is_file()} == before


# -- generated stores ---------------------------------------------------------------------


def test_multi_segment_store_counts_and_sums(tmp_path: Path, store_config: DLedgerConfig) -> None:
    node = tmp_path / "dledger-n0"
    make_store(node, store_config, 1000, committed=899)
    plan = plan_read(node)
    assert len(plan.segments) > 10  # many data files
    assert plan.segments[0].first_index == 0 and plan.segments[-1].last_index == 899
    table = read_table(node)
    n, s_index, s_len = expected_rows(0, 899)
    assert table.num_rows == n
    assert pc.sum(table["index"]).as_py() == s_index
    assert pc.sum(pc.binary_length(table["body"])).as_py() == s_len
    assert table["body"].to_pylist() == [body_of(i) for i in range(900)]
    terms = table["term"].to_numpy()
    assert terms[0] == 1 and terms[-1] == 3 and np.all(np.diff(terms) >= 0)
    # body_crc is the zlib CRC32 of the body, as a signed int32.
    import zlib

    crcs = table["body_crc"].to_numpy().view(np.uint32)
    assert [int(c) for c in crcs[:50]] == [zlib.crc32(body_of(i)) for i in range(50)]
    # committed_only=False reads past the committed index to the end of the log.
    everything = read_table(node, committed_only=False)
    assert everything.num_rows == 1000
    assert everything["index"].to_pylist() == list(range(1000))
    # start/end (inclusive) narrow the range; past the end is clamped, before the start is empty.
    part = read_table(node, start_index=123, end_index=456)
    assert part["index"].to_pylist() == list(range(123, 457))
    assert read_table(node, start_index=950).num_rows == 0
    assert read_table(node, start_index=950, committed_only=False).num_rows == 50
    assert read_table(node, start_index=10, end_index=9).num_rows == 0


def test_columns_and_batches(tmp_path: Path, store_config: DLedgerConfig) -> None:
    node = tmp_path / "dledger-n0"
    make_store(node, store_config, 300, committed=299)
    t = read_table(node, columns=["body", "index"])
    assert t.schema.names == ["body", "index"]
    assert t["index"].to_pylist() == list(range(300))
    batches = list(iter_batches(node, batch_size=5, columns=["index"]))
    assert all(0 < b.num_rows <= 5 for b in batches)
    assert pa.Table.from_batches(batches)["index"].to_pylist() == list(range(300))
    # The body column is a plain Arrow binary array: usable by pandas/polars as is.
    assert t.column("body").type == pa.binary()
    assert t.to_pandas()["body"][7] == body_of(7) if _has("pandas") else True
    if _has("polars"):
        import polars as pl

        df = pl.from_arrow(t)
        assert isinstance(df, pl.DataFrame)
        assert df["index"].sum() == sum(range(300))


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def test_several_nodes_get_a_node_column(tmp_path: Path, store_config: DLedgerConfig) -> None:
    make_store(tmp_path / "dledger-n0", store_config, 200, committed=199)
    make_store(tmp_path / "dledger-n1", store_config, 150, committed=120)
    (tmp_path / "not-a-node").mkdir()  # ignored: not a store
    t = read_table(tmp_path)
    assert t.schema.names == [*COLUMNS, "node"]
    by_node = {n: t.filter(pc.equal(t["node"], n))["index"].to_pylist() for n in ("n0", "n1")}
    assert by_node == {"n0": list(range(200)), "n1": list(range(121))}
    # A list of node directories is the same read.
    t2 = read_table([tmp_path / "dledger-n1", str(tmp_path / "dledger-n0")], columns=["node", "index"])
    assert t2.schema.names == ["node", "index"]
    assert t2.num_rows == 321
    # One node: no node column, and asking for it says why.
    with pytest.raises(DLedgerError, match="only when several nodes"):
        read_table(tmp_path / "dledger-n0", columns=["node"])


def test_without_checkpoint_reads_to_last_valid_entry(tmp_path: Path, store_config: DLedgerConfig) -> None:
    node = tmp_path / "dledger-n0"
    make_store(node, store_config, 500, committed=100, checkpoint=False)
    assert read_table(node)["index"].to_pylist() == list(range(500))
    # A torn tail (index units written, data not: a crash before the data reached the disk)
    # is not returned, and is no error.
    plan = plan_read(node)
    last = plan.segments[-1]
    corrupt(last.data_file, last.end_pos - last.file_from_offset - 100, b"\0" * 100)
    assert read_table(node)["index"].to_pylist() == list(range(499))


def test_empty_and_uncommitted_stores(tmp_path: Path, store_config: DLedgerConfig) -> None:
    node = tmp_path / "dledger-n0"
    MmapFileStore(node, store_config, start_services=False).close()
    empty = read_table(node)
    assert empty.num_rows == 0 and empty.schema.names == list(COLUMNS)
    make_store(tmp_path / "dledger-n1", store_config, 50, committed=None)
    assert read_properties(tmp_path / "dledger-n1" / "checkpoint") == {"endIndex": "49", "committedIndex": "-1"}
    assert read_table(tmp_path / "dledger-n1").num_rows == 0
    assert read_table(tmp_path / "dledger-n1", committed_only=False).num_rows == 50


# -- corruption ---------------------------------------------------------------------------


def test_corrupt_body_fails_fast_or_is_dropped_and_counted(tmp_path: Path, store_config: DLedgerConfig) -> None:
    node = tmp_path / "dledger-n0"
    make_store(node, store_config, 400, committed=399)
    victim = 222
    seg = next(s for s in plan_read(node).segments if s.first_index <= victim <= s.last_index)
    t = read_table(node, columns=["index", "pos"])
    pos = t["pos"][victim].as_py()
    rel = pos - seg.file_from_offset
    corrupt(seg.data_file, rel + 48 + 3, b"\xff")  # a body byte: the recorded CRC no longer matches
    with pytest.raises(CorruptionError) as exc:
        read_table(node)
    err = exc.value
    assert (err.file, err.offset, err.index) == (seg.data_file, rel, victim)
    assert seg.data_file in str(err) and f"offset {rel}" in str(err) and f"entry {victim}" in str(err)
    dropped: list[MalformedEntry] = []
    t = read_table(node, mode="DROPMALFORMED", malformed=dropped)
    assert t["index"].to_pylist() == [i for i in range(400) if i != victim]
    assert dropped == [MalformedEntry("n0", seg.data_file, rel, victim, "crc mismatch", 1)]
    # Without CRC checks the flipped byte is not seen (the Java writer records no CRC anyway).
    assert read_table(node, verify_crc=False).num_rows == 400


def test_corrupt_header_is_skipped_through_the_index(tmp_path: Path, store_config: DLedgerConfig) -> None:
    node = tmp_path / "dledger-n0"
    make_store(node, store_config, 400, committed=399)
    pos = read_table(node, columns=["pos"])["pos"].to_pylist()
    segs = plan_read(node).segments
    bad = [100, 101, 300]
    for victim in bad:
        seg = next(s for s in segs if s.first_index <= victim <= s.last_index)
        corrupt(seg.data_file, pos[victim] - seg.file_from_offset + 4, b"\x7f\x00\x00\x00")  # size field
    with pytest.raises(CorruptionError, match=r"entry 100 .*bad header"):
        list(iter_batches(node, batch_size=16))
    dropped: list[MalformedEntry] = []
    t = read_table(node, mode="dropmalformed", malformed=dropped, batch_size=16)
    assert t["index"].to_pylist() == [i for i in range(400) if i not in bad]
    assert [(d.index, d.count, d.reason) for d in dropped] == [(i, 1, "bad header") for i in bad]


# -- errors ---------------------------------------------------------------------------------


def test_clear_errors(tmp_path: Path, store_config: DLedgerConfig) -> None:
    with pytest.raises(StoreNotFoundError, match="no such file or directory"):
        read_table(tmp_path / "nope")
    with pytest.raises(FileNotFoundError):  # also a FileNotFoundError, for callers that catch that
        read_table(tmp_path / "nope")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "x.txt").write_text("hi")
    with pytest.raises(NotAStoreError, match="is not a dledger store"):
        read_table(tmp_path / "plain")
    with pytest.raises(NotAStoreError, match="is a file"):
        read_table(tmp_path / "plain" / "x.txt")
    with pytest.raises(DLedgerError, match="no path given"):
        read_table([])
    node = tmp_path / "dledger-n0"
    make_store(node, store_config, 10, committed=9)
    with pytest.raises(DLedgerError, match=r"unknown column.*'bodyy'"):
        read_table(node, columns=["index", "bodyy"])
    with pytest.raises(DLedgerError, match="unknown mode 'PERMISSIVE'"):
        read_table(node, mode="PERMISSIVE")
    with pytest.raises(DLedgerError, match="start_index must be >= 0"):
        read_table(node, start_index=-1)
    with pytest.raises(DLedgerError, match="batch_size must be positive"):
        read_table(node, batch_size=0)
    with pytest.raises(TypeError):
        read_table(node, no_such_option=1)  # type: ignore[call-arg]


def test_segments_pickle(tmp_path: Path, store_config: DLedgerConfig) -> None:
    node = tmp_path / "dledger-n0"
    make_store(node, store_config, 100, committed=99)
    segs = plan_read(node).segments
    assert pickle.loads(pickle.dumps(segs)) == segs


# -- a store being written while it is read -----------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from dledger.config import DLedgerConfig
    from dledger.store.file import MmapFileStore
    from tests.test_reader import body_of

    node, deadline = Path(sys.argv[1]), time.monotonic() + float(sys.argv[2])
    cfg = DLedgerConfig(mapped_file_size_for_entry_data=64 * 1024, mapped_file_size_for_entry_index=32 * 512)
    store = MmapFileStore(node, cfg, start_services=False)
    term, i = 1, 0
    while time.monotonic() < deadline:
        n = 1 + i % 97
        store.append_batch([body_of(k) for k in range(i, i + n)], term)
        i += n
        # Commit lags the end, so uncommitted entries are always on disk.
        store.update_committed_index(term, i - 1 - (i % 50))
        store.checkpoint()
        if i % 7 == 0:
            term += 1
        if i > 200 and not Path(sys.argv[1] + ".ready").exists():
            Path(sys.argv[1] + ".ready").touch()
    """
)


def test_read_while_another_process_appends(tmp_path: Path) -> None:
    node = tmp_path / "dledger-n0"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, str(script), str(node), "60"], env=env, cwd=REPO)
    try:
        ready = Path(str(node) + ".ready")
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None, "writer died"
            assert time.monotonic() < deadline, "writer never got going"
            time.sleep(0.05)
        reads = 0
        last_seen = -1
        grew = False
        t_end = time.monotonic() + 4
        while time.monotonic() < t_end or reads < 5:
            before = int(read_properties(node / "checkpoint")["committedIndex"])  # type: ignore[index]
            t = read_table(node, columns=["index", "term", "body"])
            after = int(read_properties(node / "checkpoint")["committedIndex"])  # type: ignore[index]
            idx = t["index"].to_numpy()
            # A contiguous prefix of the log, never past what the checkpoint said, never torn.
            assert len(idx) and idx[0] == 0 and np.array_equal(idx, np.arange(len(idx)))
            assert before <= idx[-1] <= after
            assert np.all(np.diff(t["term"].to_numpy()) >= 0)
            bodies = t["body"].to_pylist()
            assert all(b == body_of(k) for k, b in enumerate(bodies))
            # Uncommitted tails are readable on request, and are whole entries too.
            u = read_table(node, start_index=int(idx[-1]), committed_only=False, columns=["index", "body"])
            assert all(b == body_of(k) for k, b in zip(u["index"].to_pylist(), u["body"].to_pylist(), strict=True))
            grew = grew or idx[-1] > last_seen >= 0
            last_seen = int(idx[-1])
            reads += 1
        assert grew, "the writer appended nothing during the reads"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_package_reexports_the_reader() -> None:
    import dledger
    import dledger.reader

    assert dledger.read_table is dledger.reader.read_table
    assert dledger.iter_batches is dledger.reader.iter_batches
