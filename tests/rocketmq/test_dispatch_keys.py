"""dispatch_keys, dispatch's fused pass, against the kernels it stands for (topic_ids,
property_spans_many, java_hash_many, index_key_hashes) and the Java hash of ``topic#key``."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from record_oracle import key_columns

from dledger._ext import load

K = load("message")

_text = st.text(alphabet=st.sampled_from("ab #é\u4e2d\U0001f600xyz"), max_size=12)
_prop = st.tuples(st.sampled_from(["TAGS", "UNIQ_KEY", "KEYS", "K", "TAG", ""]), _text)
_record = st.tuples(
    st.sampled_from(["TopicA", "T", "topic-%RETRY%g", "", "SCHEDULE_TOPIC_XXXX"]),
    st.lists(_prop, max_size=6),
    st.sampled_from([0, 4, 8, 0xC]),
)


def _layout(records: list[tuple[str, list[tuple[str, str]], int]]) -> tuple[bytes, dict[str, np.ndarray]]:
    raw = [
        (topic.encode(), b"".join(k.encode() + b"\x01" + v.encode() + b"\x02" for k, v in props), flag)
        for topic, props, flag in records
    ]
    return key_columns(raw, b"\x09", b"\x05")


def _expected(buf: bytes, c: dict[str, np.ndarray], index_from: int) -> tuple[np.ndarray, ...]:
    ids, firsts = K.topic_ids(buf, c["topic_off"], c["topic_len"])
    spans = K.property_spans_many(buf, c["props_off"], c["props_len"], (b"TAGS", b"UNIQ_KEY", b"KEYS"))
    tags = K.java_hash_many(buf, *spans[0]).astype(np.int64)
    topics = [buf[o : o + n].decode() for o, n in zip(c["topic_off"][firsts], c["topic_len"][firsts], strict=True)]
    prefix = np.array([K.java_hash(t + "#") & 0xFFFFFFFF for t in topics], dtype=np.int64)[ids]
    sel = np.flatnonzero((c["sys_flag"] & 0xC != 0xC) & (np.arange(len(ids)) >= index_from))
    (uo, ul), (ko, kl) = spans[1], spans[2]
    hashes, rows = K.index_key_hashes(buf, prefix[sel], uo[sel], ul[sel], ko[sel], kl[sel])
    return ids, firsts, tags, hashes, sel[rows]


@settings(max_examples=300, deadline=None)
@given(records=st.lists(_record, max_size=40), index_from=st.integers(-2, 45))
def test_dispatch_keys_is_the_kernels_it_fuses(
    records: list[tuple[str, list[tuple[str, str]], int]], index_from: int
) -> None:
    buf, c = _layout(records)
    got = K.dispatch_keys(
        buf, buf, c["props_off"], c["props_len"], c["topic_off"], c["topic_len"], c["sys_flag"], index_from
    )
    want = _expected(buf, c, max(index_from, 0))
    for g, w in zip(got, want, strict=True):
        assert g.tolist() == w.tolist()
    assert [a.dtype for a in got] == [np.int32, np.int64, np.int64, np.int32, np.int64]


def test_dispatch_keys_with_more_than_256_topics_and_a_separate_topic_buffer() -> None:
    records = [(f"t{i % 300}", [("KEYS", f"k{i} x"), ("TAGS", "a")], 0) for i in range(700)]
    buf, c = _layout(records)
    topics = b"\x00" + buf  # the topics read from a buffer of their own, one byte later
    got = K.dispatch_keys(
        buf, topics, c["props_off"], c["props_len"], c["topic_off"] + 1, c["topic_len"], c["sys_flag"], 0
    )
    for g, w in zip(got, _expected(buf, c, 0), strict=True):
        assert g.tolist() == w.tolist()
    assert len(got[1]) == 300
