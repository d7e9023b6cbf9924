"""IndexFile / IndexService: RocketMQ 4.9.4's key index files, their roll-over and queries."""

from __future__ import annotations

import hashlib
import struct
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dledger.rocketmq.store.index_file import (
    INDEX_HEADER_SIZE,
    IndexFile,
    IndexService,
    build_key,
    geometry_of_size,
    index_file_size,
    index_key_hash,
    index_keys,
    java_string_hash,
    time_millis_to_human_string,
)
from dledger.rocketmq.store.listing import unescape
from dledger.rocketmq.store.message import decode_properties
from tests.test_flush_unmap import rss_kib

FIXTURES_MQ = Path(__file__).resolve().parents[1] / "fixtures" / "rocketmq-4.9"
FIXTURE_NAMES = ["classic-3topics", "dledger-1node"]
T0 = 1_795_421_951_105


def header(path: Path) -> tuple[int, int, int, int, int, int]:
    return struct.unpack(">qqqqii", path.read_bytes()[:INDEX_HEADER_SIZE])


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_java_string_hash_and_the_index_hash() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("abc") == 96354
    assert java_string_hash("🚀") == 0xD83D * 31 + 0xDE80  # a surrogate pair: two UTF-16 units
    assert java_string_hash("标签X") == (0x6807 * 31 + 0x7B7E) * 31 + ord("X")
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert index_key_hash("polygenelubricants") == 0  # Math.abs(MIN_VALUE) stays negative: 0
    assert index_key_hash("a#b") == abs(java_string_hash("a#b"))
    assert build_key("T", "k") == "T#k"


def test_index_keys_are_uniq_key_then_non_empty_keys_segments() -> None:
    assert index_keys("U1", " a  b c ") == ["U1", "a", "b", "c"]
    assert index_keys(None, "k54 k54") == ["k54", "k54"]
    assert index_keys(None, None) == [] and index_keys("U", "") == ["U"]


def test_file_names_are_local_creation_time_to_the_millisecond() -> None:
    ms = 1_795_421_951_110
    assert time_millis_to_human_string(ms) == time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + "110"
    assert len(time_millis_to_human_string(ms)) == 17


def test_geometry_from_the_file_size() -> None:
    assert index_file_size(64, 256) == 5416
    assert geometry_of_size(5416) == (64, 256)
    assert geometry_of_size(index_file_size(5_000_000, 20_000_000)) == (5_000_000, 20_000_000)
    with pytest.raises(ValueError):
        geometry_of_size(5417)


def test_put_and_select_follow_rocketmq_header_rules(tmp_path: Path) -> None:
    path = tmp_path / "20260101000000000"
    f = IndexFile(path, 4, 8, create=True)
    assert header(path) == (0, 0, 0, 0, 0, 0)  # counts stay 0 on disk until the first put
    assert f.put_key("T#a", 100, T0)
    assert f.put_key("T#b", 200, T0 + 2500)
    assert f.put_key("T#a", 300, T0 + 4000)
    f.flush()
    assert header(path) == (T0, T0 + 4000, 100, 300, 2, 4)
    items = f.items()
    assert items["phy_offset"].tolist() == [100, 200, 300]
    assert items["time_diff"].tolist() == [0, 2, 4]
    slot_a = index_key_hash("T#a") % 4
    assert items["prev_index"].tolist()[2] == (1 if slot_a != index_key_hash("T#b") % 4 else 2)
    out: list[int] = []
    f.select_phy_offsets(out, "T#a", 64, 0, 2**63 - 1)
    assert out == [300, 100]  # newest first
    del items
    f.close()


def test_a_file_holds_index_num_minus_one_items(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "20260101000000000", 4, 8, create=True)
    assert f.put_hashes(list(range(10)), list(range(10)), [T0] * 10) == 7
    assert f.is_write_full() and f.index_count == 8
    assert not f.put_key("T#x", 99, T0)
    f.close()


def test_service_rolls_to_new_files_newest_first(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "index", 4, 8)
    svc.load()
    # 10 messages with the key "hot" and one other key each: 20 items, 7 per file.
    n = 10
    written = svc.build_index(
        "T", [["hot", f"k{i}"] for i in range(n)], [i * 100 for i in range(n)], [T0 + i * 1000 for i in range(n)]
    )
    assert written == 20
    names = [f.name for f in svc.files]
    assert len(names) == 3 and names == sorted(names) and len(set(names)) == 3
    first, second, _ = svc.files
    assert (first.begin_phy_offset, first.end_phy_offset) == (0, 300)
    # A new file starts where the full one ended (then its first item moves the begin).
    assert (second.begin_phy_offset, second.begin_timestamp) == (300, T0 + 3000)
    svc.flush()  # waits for the flushes of the full files
    assert svc.index_msg_timestamp == second.end_timestamp  # the last full file, for the checkpoint
    assert svc.query("T", "hot") == [i * 100 for i in reversed(range(n))]
    assert svc.query("T", "hot", 3) == [900, 800, 700]
    assert svc.query("T", "k4") == [400]
    assert svc.query("U", "hot") == [] and svc.query("T", "nope") == []
    svc.close()
    # Reopened, read-only: same answers, nothing written.
    before = snapshot(tmp_path)
    ro = IndexService(tmp_path / "index", 4, 8, readonly=True)
    ro.load()
    assert ro.query("T", "hot") == [i * 100 for i in reversed(range(n))]
    with pytest.raises(PermissionError):
        ro.build_index("T", [["x"]], [10_000], [T0 + 20_000])
    ro.close()
    assert snapshot(tmp_path) == before


def test_a_full_file_is_flushed_unmapped_and_still_answers(tmp_path: Path) -> None:
    """The flush of a full file (written no more) unmaps its pages before the msync, so that it
    need not write-protect them one TLB shootdown each: its bytes are on disk all the same, and
    queries read them back through the mapping."""
    items = 2000  # 40 KB of items: ten pages
    svc = IndexService(tmp_path / "index", 64, items + 1)
    svc.load()
    n = items + 10
    assert svc.build_index("T", [[f"k{i}"] for i in range(n)], range(0, n * 100, 100), [T0] * n) == n
    full = svc.files[0]
    assert full.is_write_full() and len(svc.files) == 2
    svc.flush()  # waits for the full file's flush
    assert rss_kib(full.path) <= 8  # the last page at most
    assert full.mm is not None and bytes(full.mm) == full.path.read_bytes()
    assert svc.query("T", "k7") == [700] and svc.query("T", f"k{n - 1}") == [(n - 1) * 100]
    assert rss_kib(full.path) > 0  # faulted back in by the query
    svc.close()


def test_max_num_is_capped_by_max_msgs_num_batch(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "index", 16, 256, max_msgs_num_batch=5)
    svc.build_index("T", [["k"]] * 20, list(range(0, 2000, 100)), [T0] * 20)
    assert svc.query("T", "k", 64) == [1900, 1800, 1700, 1600, 1500]
    result = svc.query_offset("T", "k", 64)
    assert (result.index_last_update_timestamp, result.index_last_update_phyoffset) == (T0, 1900)
    svc.close()


def test_time_filtering(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "index", 4, 8)
    svc.build_index("T", [["k"]] * 12, [i * 10 for i in range(12)], [T0 + i * 10_000 for i in range(12)])
    assert len(svc.files) == 2
    # Items carry whole seconds from their file's begin time; the range is inclusive.
    assert svc.query("T", "k", 64, T0 + 30_000, T0 + 60_000) == [60, 50, 40, 30]
    assert svc.query("T", "k", 64, T0 + 95_000, T0 + 10**9) == [110, 100]
    assert svc.query("T", "k", 64, 0, T0 - 1) == []
    svc.close()


def test_duplicate_keys_and_already_indexed_messages(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "index", 8, 32)
    assert svc.build_one("T", "U1", "k54 k54", 500, T0) == 3
    assert svc.query("T", "k54") == [500, 500]
    # A message before the last file's endPhyOffset was indexed already.
    assert svc.build_index("T", [["k54"]], [400], [T0]) == 0
    # ROLLBACK messages are not indexed.
    assert svc.build_one("T", "U2", "r", 600, T0, sys_flag=12) == 0
    assert svc.query("T", "r") == []
    svc.close()


def test_delete_expired_keeps_the_last_file(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "index", 4, 8)
    svc.build_index("T", [["k"]] * 20, [i * 10 for i in range(20)], [T0] * 20)
    assert len(svc.files) == 3
    assert svc.delete_expired(70) == 1  # the first ends at 60
    assert svc.delete_expired(10**9) == 1
    assert len(svc.files) == 1 and len(list((tmp_path / "index").iterdir())) == 1
    svc.close()


def test_after_an_abnormal_exit_files_past_the_checkpoint_are_dropped(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "index", 4, 8)
    svc.build_index("T", [["k"]] * 10, [i * 10 for i in range(10)], [T0 + i * 1000 for i in range(10)])
    svc.close()
    checkpoint = svc.index_msg_timestamp
    svc = IndexService(tmp_path / "index", 4, 8)
    svc.load(last_exit_ok=False, index_msg_timestamp=checkpoint)
    assert len(svc.files) == 1 and svc.files[0].end_timestamp == checkpoint
    assert len(list((tmp_path / "index").iterdir())) == 1
    svc.close()


def _fixture_messages(root: Path) -> tuple[list[str], list[list[str]], list[int], list[int]]:
    topics: list[str] = []
    keys: list[list[str]] = []
    phys: list[int] = []
    ts: list[int] = []
    for line in (root / "expected" / "messages.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        col = line.split("\t")
        if int(col[5]) & 12 == 12:  # ROLLBACK: not indexed
            continue
        props = decode_properties(unescape(col[17]))
        topics.append(unescape(col[2]))
        keys.append(index_keys(props.get("UNIQ_KEY"), props.get("KEYS")))
        phys.append(int(col[0]))
        ts.append(int(col[7]))
    return topics, keys, phys, ts


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_rebuilding_the_fixture_index_gives_the_java_files_byte_for_byte(tmp_path: Path, name: str) -> None:
    root = FIXTURES_MQ / name
    topics, keys, phys, ts = _fixture_messages(root)
    svc = IndexService(tmp_path / "index", 64, 256)
    half = len(phys) // 3  # one message at a time, then batches
    for i in range(half):
        svc.build_index(topics[i], [keys[i]], [phys[i]], [ts[i]])
    svc.build_index(topics[half : half * 2], keys[half : half * 2], phys[half : half * 2], ts[half : half * 2])
    svc.build_index(topics[half * 2 :], keys[half * 2 :], phys[half * 2 :], ts[half * 2 :])
    svc.close()
    mine = sorted((tmp_path / "index").iterdir())
    java = sorted((root / "index").iterdir())
    assert len(mine) == len(java)
    for a, b in zip(mine, java, strict=True):
        assert a.read_bytes() == b.read_bytes(), b.name


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_index_answers_every_expected_query(name: str) -> None:
    root = FIXTURES_MQ / name
    svc = IndexService(root / "index", readonly=True)  # geometry from the 5416-byte files
    svc.load()
    assert [(f.hash_slot_num, f.index_num) for f in svc.files] == [(64, 256)] * len(svc.files)
    lines = (root / "expected" / "index.tsv").read_text(encoding="utf-8").splitlines()[1:]
    for line in lines:
        key, topic, offsets = line.split("\t")
        got = svc.query(unescape(topic), unescape(key), 64)
        assert ",".join(map(str, sorted(got))) == offsets, line
    svc.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    messages=st.lists(
        st.lists(st.sampled_from(["a", "b", "c", "d", "e", "ab", "订单", "🚀"]), max_size=3), min_size=1, max_size=60
    ),
    batch=st.integers(1, 20),
    max_num=st.integers(1, 70),
)
def test_queries_match_a_brute_force_model(
    tmp_path_factory: pytest.TempPathFactory, messages: list[list[str]], batch: int, max_num: int
) -> None:
    """Over any number of files: every item with the key's hash, newest first, up to max_num."""
    root = tmp_path_factory.mktemp("ix")
    svc = IndexService(root / "index", 3, 8, max_msgs_num_batch=1000)
    phys = [100 + i * 10 for i in range(len(messages))]
    ts = [T0 + i * 700 for i in range(len(messages))]
    for start in range(0, len(messages), batch):
        end = start + batch
        svc.build_index("T", messages[start:end], phys[start:end], ts[start:end])
    items = [(index_key_hash(build_key("T", k)), p) for keys, p in zip(messages, phys, strict=True) for k in keys]
    assert sum(f.entries for f in svc.files) == len(items)
    assert all(f.entries == 7 for f in svc.files[:-1])
    for key in ["a", "b", "ab", "订单", "🚀", "zzz"]:
        h = index_key_hash(build_key("T", key))
        want = [p for kh, p in reversed(items) if kh == h][:max_num]
        assert svc.query("T", key, max_num) == want, key
    svc.close()


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_index_headers_are_the_summary(name: str) -> None:
    root = FIXTURES_MQ / name
    want = [
        ln.split("\t")[1:]
        for ln in (root / "expected" / "summary.txt").read_text(encoding="utf-8").splitlines()
        if ln.startswith("indexfile\t")
    ]
    svc = IndexService(root / "index", 64, 256, readonly=True)
    svc.load()
    got = [
        [
            f.name,
            str(f.begin_timestamp),
            str(f.end_timestamp),
            str(f.begin_phy_offset),
            str(f.end_phy_offset),
            str(f.hash_slot_count),
            str(f.index_count),
        ]
        for f in svc.files
    ]
    svc.close()
    assert got == want
