"""Puts with a key per message (issue 40): a single put's KEYS value put into its cached template
in C (``PutTemplate.with_keys``), a batch's keys appended by the encoder (``prepare_keyed``, a
``UniformBatch`` with keys). Both write the bytes of the general paths, refuse what they refuse,
and a store keeps every guarantee (UNIQ_KEY unique, the key index finds each message). The
single put's check of a message's numbers, in C, is java_ranges_ok's."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import record_oracle as oracle
from hypothesis import given, settings
from hypothesis import strategies as st
from test_put_one import messages, preparer, single_record

from dledger._ext import message as K
from dledger.rocketmq.store.batch_preparer import BatchPreparer, UniformBatch
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.encode import IllegalMessage, encode_batch, encode_one
from dledger.rocketmq.store.message import Message, java_ranges_ok
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.status import PutMessageStatus

# Keys as callers give them, the ones that cannot be stored among them: a separator, a lone
# surrogate (no UTF-8), empty, multi-byte, several keys in one.
any_key = st.one_of(
    st.none(),
    st.text(max_size=10),
    st.sampled_from(["", "k\x01", "x\x02y", "\ud800", "订单-🚀-1", "a b", " ", "key-0-1"]),
    st.lists(st.text(alphabet="ab\x01 ", max_size=3), max_size=3),
)


@settings(max_examples=80, deadline=None)
@given(m=messages, keys=st.lists(any_key, min_size=1, max_size=6), store_v6=st.booleans(), uniq=st.booleans())
def test_keyed_template_writes_the_batch_paths_bytes(m: Message, keys: list[Any], store_v6: bool, uniq: bool) -> None:
    """Messages that differ in their keys only share one cached template: each put's record is
    still the batch path's, byte for byte, and a key the batch path refuses is refused."""
    batch_prep, single_prep = preparer(store_v6, uniq), preparer(store_v6, uniq)
    for k in keys + keys:
        mk = dataclasses.replace(m, keys=k)
        try:
            batch = batch_prep.prepare([mk])
        except IllegalMessage:
            with pytest.raises(IllegalMessage):
                single_prep.put_template(mk)
            single_prep.uniq.take(1)
            continue
        want = encode_one(batch, 7 if batch.advances[0] else 0, 4096, 1795421951105)
        tpl = single_prep.put_template(mk)
        got = single_record(single_prep, mk, 7, 4096, 1795421951105)
        assert got == want
        assert tpl.fixed_len + len(mk.body) == len(got)
        assert oracle.decode_record(got, 0, check_crc=True)["body"] == mk.body


def test_keyed_templates_are_cached_without_their_keys() -> None:
    prep = BatchPreparer(MessageStoreConfig(), ("10.0.0.1", 10911))
    props = {"CLUSTER": "DefaultCluster"}
    for seq in range(100):
        prep.put_template(Message("T", b"x", queue_id=seq % 8, tags="TagA", keys=f"key-0-{seq}", properties=props))
    assert len(prep._put_templates) == 8


@settings(max_examples=150, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=64), min_size=1, max_size=12),
    keys=st.data(),
    tags=st.one_of(st.none(), st.just(""), st.just("TagA")),
    properties=st.one_of(st.none(), st.just({}), st.just({"CLUSTER": "DefaultCluster"}), st.just({"KEYS": "shared k"})),
    uniq=st.booleans(),
    store_v6=st.booleans(),
    born_host=st.one_of(st.none(), st.just(("10.0.0.1", 50000)), st.just(("2001:db8::7", 99))),
)
def test_keyed_uniform_batch_writes_the_general_paths_bytes(
    bodies: list[bytes],
    keys: st.DataObject,
    tags: str | None,
    properties: dict[str, str] | None,
    uniq: bool,
    store_v6: bool,
    born_host: tuple[str, int] | None,
) -> None:
    """``prepare_keyed`` (the encoder writes the keys) against ``prepare_columns_at`` (the
    properties made one by one in Python): the same records, lengths and refusals."""
    each = keys.draw(st.lists(any_key, min_size=len(bodies), max_size=len(bodies)))
    fast, general = preparer(store_v6, uniq), preparer(store_v6, uniq)
    args = ("T", bodies, 3, tags, each, properties, 0, 0, born_host, 1795421951000)
    try:
        want = general.prepare_columns_at(*args)
    except IllegalMessage:
        with pytest.raises(IllegalMessage):
            fast.prepare_keyed(*args)
        return
    got = fast.prepare_keyed(*args)
    n = len(bodies)
    qoffs = np.arange(11, 11 + n, dtype=np.int64)
    want_buf, want_starts = encode_batch(want, qoffs, np.zeros(n, dtype=np.int64), 1795421951105)
    want_recs = [bytes(want_buf[int(want_starts[i]) : int(want_starts[i + 1])]) for i in range(n)]
    if isinstance(got, UniformBatch):
        assert got.keys is not None
        buf, offs = got.encode(11, 0, 1795421951105)
        recs = [bytes(buf[int(offs[i]) : int(offs[i + 1])]) for i in range(n)]
        # PHYSICALOFFSET differs (the uniform encoder assigns it): compare the rest.
        for r in recs + want_recs:
            assert oracle.decode_record(r, 0, check_crc=True)
        strip = [r[:28] + r[36:] for r in recs]
        assert strip == [r[:28] + r[36:] for r in want_recs]
        assert got.record_lengths().tolist() == want.record_lengths().tolist() == [len(r) for r in recs]
        assert got.longest == max(len(r) for r in recs)
        again = got.prepared()
        buf2, starts2 = encode_batch(again, qoffs, np.zeros(n, dtype=np.int64), 1795421951105)
        assert bytes(buf2) == bytes(want_buf)
        assert (starts2 == want_starts).all()
    else:
        buf3, _ = encode_batch(got, qoffs, np.zeros(n, dtype=np.int64), 1795421951105)
        assert bytes(buf3) == bytes(want_buf)


@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_keyed_puts_are_found_by_key_with_unique_ids(tmp_path: Path, mode: str) -> None:
    """The workload of issue 40 into small files (batches cross file ends): every message is
    read back in order with its key, its UNIQ_KEY unique, and the index finds it by either."""
    cfg = MessageStoreConfig(
        enable_dledger_commit_log=mode == "dledger", mapped_file_size_commit_log=64 * 1024, store_host="10.0.0.1:10911"
    )
    props = {"CLUSTER": "DefaultCluster"}
    with MessageStore(tmp_path / "s", cfg) as s:
        seq = 0
        for b in range(40):
            keys = [f"key-0-{seq + i}" for i in range(32)]
            res = s.put_batch(
                "BenchTopic",
                [bytes([b]) * 300] * 32,
                queue_id=b % 8,
                tags="TagA",
                keys=keys,
                properties=props,
                born_host=("10.0.0.1", 50000),
            )
            assert res.status == PutMessageStatus.PUT_OK
            seq += 32
            msg = Message(
                "BenchTopic",
                b"single",
                queue_id=b % 8,
                tags="TagA",
                keys=f"key-0-{seq}",
                properties=props,
                born_host=("10.0.0.1", 50000),
            )
            assert s.put_message(msg).status == PutMessageStatus.PUT_OK
            seq += 1
        assert s.wait_dispatched(30)
        got = [m for q in range(8) for m in s.get_messages("BenchTopic", q, 0, 10_000).messages]
        assert len(got) == seq
        assert sorted(str(m.keys) for m in got) == sorted(f"key-0-{i}" for i in range(seq))
        uniq = [m.properties["UNIQ_KEY"] for m in got]
        assert len(set(uniq)) == seq
        for q in range(8):
            offsets = [m.queue_offset for m in s.get_messages("BenchTopic", q, 0, 10_000).messages]
            assert offsets == list(range(len(offsets)))
        for i in (0, 31, 32, 33, 700, seq - 1):
            found = s.query_by_key("BenchTopic", f"key-0-{i}", 4)
            assert [m.keys for m in found] == [f"key-0-{i}"]
        m = got[5]
        assert [x.phys_offset for x in s.query_by_key("BenchTopic", m.properties["UNIQ_KEY"], 4)] == [m.phys_offset]
        assert all(m.properties["CLUSTER"] == "DefaultCluster" and m.tags == "TagA" for m in got)


def test_clean_keys_take_the_uniform_batch() -> None:
    # A batch whose keys read back as they are is one UniformBatch (one kernel call under the
    # lock), not columns of properties made in Python.
    prep = preparer(False)
    got = prep.prepare_keyed("T", [b"a", b"b"], 0, "TagA", ["k1", None], None, 0, 0, None, 0)
    assert isinstance(got, UniformBatch)
    listed = prep.prepare_keyed("T", [b"a", b"b"], 0, "TagA", [["k1"], None], None, 0, 0, None, 0)
    assert not isinstance(listed, UniformBatch)


numbers = st.one_of(
    st.integers(-(2**64), 2**64),
    st.sampled_from([2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, 2**63, -(2**63) + 1, -(2**63)]),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-10, max_value=10),
    st.integers(-100, 100).map(np.int32),
)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(numbers, min_size=5, max_size=5))
def test_c_number_check_is_java_ranges_ok(values: list[Any]) -> None:
    """The single put's check of a message's numbers (in C) refuses what java_ranges_ok refuses:
    a number past its field's Java type, a bool, a float or a numpy scalar."""
    m = Message("T", b"x")
    m.flag, m.sys_flag, m.reconsume_times, m.born_timestamp, m.prepared_offset = values
    assert K.message_ints_ok(m) == java_ranges_ok(m)


@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_a_key_that_makes_a_record_too_big_refuses_the_batch(tmp_path: Path, mode: str) -> None:
    """The size checks count each body with its own key: a short body with a long key is over
    max_message_size though the longest body alone is not, and keys past the properties limit
    are refused; nothing is written."""
    cfg = MessageStoreConfig(
        enable_dledger_commit_log=mode == "dledger", max_message_size=4096, store_host="10.0.0.1:10911"
    )
    with MessageStore(tmp_path / "s", cfg) as s:
        end = s.max_phys_offset
        bodies = [b"b" * 3500, b"s"]
        res = s.put_batch("T", bodies, keys=["short", "k" * 3990])
        assert res.status == PutMessageStatus.MESSAGE_ILLEGAL
        assert s.put_batch("T", [b"x", b"y"], keys=[None, "k" * 40000]).status == PutMessageStatus.MESSAGE_ILLEGAL
        assert s.max_phys_offset == end and s.commitlog.topic_queue_table == {}
        assert s.put_batch("T", bodies, keys=["short", "k" * 300]).ok
