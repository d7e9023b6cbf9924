"""The put path's fused kernels against the struct oracle (record_oracle)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import record_oracle as oracle
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger._ext import message as mk

V4 = oracle.host_bytes("10.0.0.1", 10911)
V6 = oracle.host_bytes("2001:db8::10", 10911)


@settings(max_examples=200, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=200), min_size=1, max_size=20),
    topic=st.binary(min_size=1, max_size=127),
    stem=st.binary(max_size=60),
    per_record=st.booleans(),
    uniq_first=st.one_of(st.just(-1), st.integers(0, 0xFFFF + 40)),
    queue_id=st.integers(0, 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    tran=st.sampled_from([0, 4, 8, 12]),
    born_v6=st.booleans(),
    store_v6=st.booleans(),
    queue_offset=st.integers(0, 2**40),
    phys_offset=st.integers(0, 2**50),
    born_ts=st.integers(0, 2**42),
    store_ts=st.integers(0, 2**42),
)
def test_encode_uniform_writes_the_oracles_records(
    bodies,
    topic,
    stem,
    per_record,
    uniq_first,
    queue_id,
    flag,
    tran,
    born_v6,
    store_v6,
    queue_offset,
    phys_offset,
    born_ts,
    store_ts,
) -> None:
    n = len(bodies)
    sys_flag = tran | (16 if born_v6 else 0) | (32 if store_v6 else 0)
    born, store = (V6 if born_v6 else V4), (V6 if store_v6 else V4)
    props_in: list[bytes] | bytes = [stem + bytes([65 + k % 26]) * k for k in range(n)] if per_record else stem
    advance = tran in (0, 8)
    buf, offs = mk.encode_uniform(
        bodies,
        topic,
        props_in,
        uniq_first,
        queue_id,
        flag,
        sys_flag,
        born_ts,
        born,
        store_ts,
        store,
        queue_offset,
        advance,
        phys_offset,
    )
    want: list[bytes] = []
    for k, body in enumerate(bodies):
        props = props_in[k] if isinstance(props_in, list) else props_in
        if uniq_first >= 0:
            props += b"%04X" % ((uniq_first + k) & 0xFFFF)
        at = phys_offset + sum(len(r) for r in want)
        qoff = queue_offset + k if advance else queue_offset
        want.append(
            oracle.encode_record(
                body,
                topic,
                props,
                queue_id=queue_id,
                flag=flag,
                queue_offset=qoff,
                phys_offset=at,
                sys_flag=sys_flag,
                born_timestamp=born_ts,
                born_host=born,
                store_timestamp=store_ts,
                store_host=store,
            )
        )
    assert buf == b"".join(want)
    assert offs.dtype == np.int64
    assert offs.tolist() == [phys_offset + sum(len(r) for r in want[:k]) for k in range(n + 1)]


def test_encode_uniform_refuses_what_encode_records_refuses() -> None:
    args: dict[str, Any] = dict(
        uniq_first=-1,
        queue_id=0,
        flag=0,
        sys_flag=0,
        born_timestamp=1,
        born_host=V4,
        store_timestamp=1,
        store_host=V4,
        queue_offset=0,
        advance=True,
        phys_offset=0,
    )
    with pytest.raises(ValueError):
        mk.encode_uniform([b"x"], b"t" * 128, b"", **args)
    with pytest.raises(ValueError):
        mk.encode_uniform([b"x"], b"t", b"p" * 32764, **{**args, "uniq_first": 0})
    with pytest.raises(ValueError):
        mk.encode_uniform([b"x"], b"t", b"", **{**args, "born_host": V6})
    with pytest.raises(ValueError):
        mk.encode_uniform([b"x"], b"t", [b"", b""], **args)
    buf, offs = mk.encode_uniform([], b"t", b"", **args)
    assert buf == b"" and offs.tolist() == [0]


@pytest.mark.parametrize("mode", ["classic", "dledger"])
@pytest.mark.parametrize("uniq", [True, False])
def test_uniform_batches_across_files_read_back(tmp_path, mode: str, uniq: bool) -> None:
    """Batches of one queue (the fused encode) that fill several small files: every record is
    whole (the oracle checks its CRC), holds its own physical offset and queue offset, and the
    put results, the consume queue and the log agree."""
    from dledger.rocketmq.store.config import MessageStoreConfig
    from dledger.rocketmq.store.message import UNIQ_KEY, MessageSysFlag
    from dledger.rocketmq.store.message_store import MessageStore

    cfg = MessageStoreConfig(
        enable_dledger_commit_log=mode == "dledger",
        mapped_file_size_commit_log=1 << 14,
        create_uniq_key=uniq,
        store_host="10.0.0.1:10911",
    )
    results: list[Any] = []
    bodies = [bytes([k % 251]) * (k % 300) for k in range(600)]
    with MessageStore(tmp_path / "s", cfg) as s:
        for k in range(0, 600, 30):
            res = s.put_batch("T", bodies[k : k + 30], queue_id=3, tags="tg", properties={"p": "v"})
            assert res.ok
            results.append(res.append_result)
        prepared = s.put_batch("T", [b"half", b"done"], queue_id=3, sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE)
        assert prepared.ok and prepared.append_result is not None
        qoffs = prepared.append_result.queue_offsets
        assert qoffs is not None and qoffs.tolist() == [0, 0]
        assert s.wait_dispatched()
        msgs = list(s.iter_messages())
        assert len(s.commitlog.files.files) > 3
        assert [m.body for m in msgs] == [*bodies, b"half", b"done"]
        phys = [int(p) for r in results for p in r.wrote_offsets]
        assert [m.phys_offset for m in msgs[:600]] == phys
        assert [int(q) for r in results for q in r.queue_offsets] == list(range(600))
        assert [m.queue_offset for m in msgs[:600]] == list(range(600))
        for m in msgs:
            raw = s.commitlog.read(m.phys_offset, m.size)
            rec = oracle.decode_record(raw, 0, check_crc=True)
            assert rec["body"] == m.body and rec["stored_phys_offset"] == m.phys_offset
        if uniq:
            keys = [m.properties[UNIQ_KEY] for m in msgs]
            assert len(set(keys)) == len(keys)
            assert all(len(k) == 32 for k in keys)
        else:
            assert all(UNIQ_KEY not in m.properties for m in msgs)
        assert all(m.tags == "tg" and m.properties["p"] == "v" for m in msgs[:600])
        got = s.get_messages("T", 3, 0, 1000).messages
        assert [m.body for m in got] == bodies


# -- dispatch kernels ------------------------------------------------------------------------------

prop_name = st.sampled_from([b"TAGS", b"KEYS", b"UNIQ_KEY", b"K", b"TAG"])
prop_item = st.one_of(
    st.tuples(prop_name, st.binary(max_size=12).filter(lambda v: b"\x01" not in v and b"\x02" not in v)).map(
        lambda t: t[0] + b"\x01" + t[1]
    ),
    st.binary(max_size=10).filter(lambda v: b"\x02" not in v),
)
props_strings = st.lists(st.lists(prop_item, max_size=6).map(b"\x02".join), max_size=12)


@settings(max_examples=200, deadline=None)
@given(props=props_strings, names=st.lists(prop_name, min_size=1, max_size=4, unique=True))
def test_property_spans_many_is_property_span_of_each_name(props: list[bytes], names: list[bytes]) -> None:
    buf = b"#".join(props)
    offs = np.cumsum([0] + [len(p) + 1 for p in props[:-1]], dtype=np.int64) if props else np.empty(0, np.int64)
    lens = np.array([len(p) for p in props], dtype=np.int64)
    got = mk.property_spans_many(buf, offs, lens, tuple(names))
    assert len(got) == len(names)
    for name, (o, ln) in zip(names, got, strict=True):
        want = [oracle.property_span(p, name) for p in props]
        rel = [(int(a) - int(offs[k]) if a >= 0 else -1, int(b)) for k, (a, b) in enumerate(zip(o, ln, strict=True))]
        assert rel == want
        single = mk.property_spans(buf, offs, lens, name)
        assert single[0].tolist() == o.tolist() and single[1].tolist() == ln.tolist()


@settings(max_examples=200, deadline=None)
@given(topics=st.lists(st.sampled_from([b"A", b"B", b"AB", b"", b"\xe4\xb8\xad", b"BA"]), max_size=30))
def test_topic_ids_number_distinct_topics_in_order(topics: list[bytes]) -> None:
    buf = b"".join(topics)
    offs = np.cumsum([0] + [len(t) for t in topics[:-1]], dtype=np.int64) if topics else np.empty(0, np.int64)
    ids, firsts = mk.topic_ids(buf, offs, np.array([len(t) for t in topics], dtype=np.int64))
    order: list[bytes] = list(dict.fromkeys(topics))
    assert ids.tolist() == [order.index(t) for t in topics]
    assert firsts.tolist() == [topics.index(t) for t in order]


key_text = st.text(alphabet=st.sampled_from(["a", "Z", "0", " ", "#", "中", "\U0001f680", "é"]), max_size=16)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["TopicA", "中文", "t"]), st.one_of(st.none(), key_text), st.one_of(st.none(), key_text)
        ),
        max_size=12,
    ),
    raw_tail=st.binary(max_size=6),
)
def test_index_key_hashes_are_buildindex_keys(rows: list[tuple[str, str | None, str | None]], raw_tail: bytes) -> None:
    """UNIQ_KEY first, then each non-empty KEYS segment, hashed as ``topic#key`` (Java's hash of
    the separately decoded strings, ill-formed UTF-8 included)."""
    parts: list[bytes] = []
    at = 0
    uo: list[int] = []
    ul: list[int] = []
    ko: list[int] = []
    kl: list[int] = []
    prefix: list[int] = []
    want: list[tuple[int, int]] = []
    for k, (topic, uniq, keys) in enumerate(rows):
        prefix.append(oracle.java_hash(topic + "#") & 0xFFFFFFFF)
        for value, o_list, l_list in ((uniq, uo, ul), (keys, ko, kl)):
            if value is None or (o_list is uo and value == ""):
                o_list.append(-1)
                l_list.append(0)
                continue
            raw = value.encode() + (raw_tail if o_list is ko else b"")
            o_list.append(at)
            l_list.append(len(raw))
            parts.append(raw)
            at += len(raw)
        if uniq:
            want.append((oracle.index_key_hash(topic + "#" + uniq), k))
        if keys is not None:
            text = oracle.java_decode(keys.encode() + raw_tail)
            want += [(oracle.index_key_hash(topic + "#" + seg), k) for seg in text.split(" ") if seg]
    hashes, idx = mk.index_key_hashes(
        b"".join(parts),
        np.array(prefix, dtype=np.int64),
        np.array(uo, np.int64),
        np.array(ul, np.int64),
        np.array(ko, np.int64),
        np.array(kl, np.int64),
    )
    assert list(zip(hashes.tolist(), idx.tolist(), strict=True)) == want


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=40), text=st.text(max_size=20))
def test_java_hash_four_at_a_time_is_the_oracles(raw: bytes, text: str) -> None:
    assert mk.java_hash_bytes(raw) == oracle.java_hash_bytes(raw)
    enc = text.encode("utf-8", "surrogatepass")
    assert mk.java_hash_bytes(enc) == oracle.java_hash_bytes(enc)
