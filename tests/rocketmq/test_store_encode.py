"""The store's encoding of messages: the Python single-record encoder and the batch kernel write
the same bytes, which the struct oracle reads back as the message that was put."""

from __future__ import annotations

import numpy as np
import record_oracle as oracle
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger._ext import message as K
from dledger.rocketmq.store.batch_preparer import BatchPreparer
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.encode import encode_batch, encode_one
from dledger.rocketmq.store.message import Message, MessageSysFlag, decode_properties, encode_host

# property names and values cannot hold the separators \x01 and \x02
text = st.text(
    alphabet=st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]), min_size=1, max_size=20
)
hosts = st.one_of(
    st.tuples(st.ip_addresses(v=4).map(str), st.integers(0, 65535)),
    st.tuples(st.ip_addresses(v=6).map(str), st.integers(0, 65535)),
)
messages = st.builds(
    Message,
    # Any text the store takes as a topic: one directory name (no "/", no NUL, not "." or "..").
    topic=st.text(
        alphabet=st.characters(exclude_characters="/\x00", exclude_categories=["Cs"]), min_size=1, max_size=30
    ).filter(lambda t: t not in (".", "..")),
    body=st.binary(max_size=300),
    queue_id=st.integers(0, 7),
    flag=st.integers(-(2**31), 2**31 - 1),
    tags=st.one_of(st.none(), text),
    keys=st.one_of(st.none(), st.lists(text.filter(lambda k: " " not in k), max_size=3)),
    properties=st.dictionaries(text, text, max_size=4),
    sys_flag=st.sampled_from(
        [
            0,
            MessageSysFlag.COMPRESSED_FLAG,
            MessageSysFlag.TRANSACTION_PREPARED_TYPE,
            MessageSysFlag.TRANSACTION_COMMIT_TYPE,
        ]
    ),
    born_timestamp=st.integers(1, 2**41),
    born_host=hosts,
    reconsume_times=st.integers(0, 16),
    prepared_offset=st.integers(0, 2**40),
)


@settings(max_examples=150, deadline=None)
@given(msg=messages, store_v6=st.booleans(), queue_offset=st.integers(0, 2**40), phys=st.integers(0, 2**50))
def test_single_encoder_matches_kernel_and_oracle(msg: Message, store_v6: bool, queue_offset: int, phys: int) -> None:
    store_host = ("2001:db8::10", 10911) if store_v6 else ("192.168.0.10", 10911)
    prep = BatchPreparer(MessageStoreConfig(), store_host)
    batch = prep.prepare([msg])
    mine = encode_one(batch, queue_offset, phys, 1795421951105)
    kernel, _starts = K.encode_records(
        batch.bodies,
        batch.topics,
        batch.properties,
        np.array(batch.queue_ids, dtype=np.int32),
        np.array(batch.flags, dtype=np.int32),
        np.array([queue_offset], dtype=np.int64),
        np.array([phys], dtype=np.int64),
        np.array(batch.sys_flags, dtype=np.int32),
        np.array(batch.born_timestamps, dtype=np.int64),
        batch.born_hosts,
        np.array([1795421951105], dtype=np.int64),
        batch.store_hosts,
        np.array(batch.reconsume_times, dtype=np.int32),
        np.array(batch.prepared_offsets, dtype=np.int64),
    )
    assert mine == bytes(kernel)
    assert int(batch.lengths[0]) == len(mine)
    rec = oracle.decode_record(mine, 0, check_crc=True)
    assert rec["body"] == msg.body and rec["topic"] == msg.topic.encode()
    assert rec["queue_offset"] == queue_offset and rec["stored_phys_offset"] == phys
    assert msg.born_host is not None and rec["born_host"] == encode_host(msg.born_host)
    assert rec["store_host"] == encode_host(store_host)
    assert rec["flag"] == msg.flag and rec["reconsume_times"] == msg.reconsume_times
    props = decode_properties(rec["properties"].decode())
    for k, v in msg.properties.items():
        if k not in ("TAGS", "KEYS", "DELAY"):
            assert props[k] == v
    if msg.tags:
        assert props["TAGS"] == msg.tags
    assert "UNIQ_KEY" in props


@settings(max_examples=60, deadline=None)
@given(msgs=st.lists(messages, min_size=2, max_size=20))
def test_batch_lengths_are_cal_msg_length(msgs: list[Message]) -> None:
    prep = BatchPreparer(MessageStoreConfig(), ("192.168.0.10", 10911))
    batch = prep.prepare(msgs)
    buf, starts = encode_batch(batch, np.zeros(batch.n, dtype=np.int64), np.zeros(batch.n, dtype=np.int64), 5)
    assert list(np.diff(starts)) == list(batch.lengths)
    recs, _stop, code = oracle.scan_records(bytes(buf), 0, check_crc=True)
    assert code == oracle.STOP_END and [r["body"] for r in recs] == [m.body for m in msgs]
