"""The fused pass (every column of a record made at once, for reads of most columns) gives the
same values as the per-column kernels (a read of one column takes the selective scan): on the
Java-written fixtures and on random messages, walking the commit log and through the queues."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dledger.rocketmq import read_messages
from dledger.rocketmq.store.arrow_reader import COLUMNS, ReadArgs
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore

FIXTURES_MQ = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "rocketmq-4.9"


def test_a_read_of_all_columns_takes_the_fused_pass() -> None:
    assert ReadArgs(COLUMNS).fused is not None
    assert ReadArgs(("topic", "queue_id", "body")).fused is None


def assert_fused_matches_per_column(path: Path, **kwargs: Any) -> None:
    whole = read_messages(path, threads=1, **kwargs)
    assert whole.num_rows > 0
    for name in COLUMNS:
        alone = read_messages(path, columns=[name], threads=1, **kwargs).column(name)
        assert whole.column(name).equals(alone), name


@pytest.mark.parametrize("name", ["classic-3topics", "dledger-1node"])
@pytest.mark.parametrize("by_queue", [False, True])
def test_java_fixtures_read_the_same_fused(name: str, by_queue: bool) -> None:
    path = FIXTURES_MQ / name
    topics = sorted(read_messages(path, columns=["topic"]).column("topic").unique().to_pylist())
    assert_fused_matches_per_column(path, **({"topics": topics} if by_queue else {}))


text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00\x01\x02"), max_size=12)
hosts = st.one_of(
    st.tuples(st.ip_addresses(v=4).map(str), st.integers(0, 65535)),
    st.tuples(st.ip_addresses(v=6).map(str), st.integers(0, 65535)),
    st.none(),
)
messages = st.builds(
    Message,
    topic=st.sampled_from(["A", "Topic-b", "\u00e9t\u00e9"]),
    body=st.binary(max_size=300),
    queue_id=st.integers(0, 2),
    flag=st.integers(-(2**31), 2**31 - 1),
    tags=st.none() | text,
    keys=st.none() | text | st.lists(text.filter(bool), max_size=3),
    properties=st.dictionaries(text.filter(bool), text.filter(bool), max_size=4),
    born_host=hosts,
    reconsume_times=st.integers(0, 16),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=st.lists(messages, min_size=1, max_size=40), dledger=st.booleans(), batch_rows=st.sampled_from([3, 8192]))
def test_random_messages_read_the_same_fused(msgs: list[Message], dledger: bool, batch_rows: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = MessageStoreConfig(
            enable_dledger_commit_log=dledger, mapped_file_size_commit_log=4096, store_host="[::1]:10911"
        )
        with MessageStore(Path(tmp), cfg) as s:
            for m in msgs:
                assert s.put_message(m).ok
            assert s.wait_dispatched(30)
        assert_fused_matches_per_column(Path(tmp), batch_rows=batch_rows)
        topics = sorted({m.topic for m in msgs})
        assert_fused_matches_per_column(Path(tmp), topics=topics, batch_rows=batch_rows)
        assert read_messages(Path(tmp)).num_rows == len(msgs)


@pytest.mark.timeout(120)  # a budget that never grew would loop on the record for ever
def test_a_record_larger_than_a_batch_budget_is_read(tmp_path: Path) -> None:
    """A fused walk batch holds at most 2 MiB of records; a larger record grows it."""
    with MessageStore(tmp_path, MessageStoreConfig(mapped_file_size_commit_log=8 << 20)) as s:
        assert s.put_batch("Big", [b"x" * 3_000_000, b"y" * 10, b"z" * 3000], queue_id=0).ok
        assert s.wait_dispatched(30)
    table = read_messages(tmp_path, batch_rows=2)
    assert table.column("body").to_pylist() == [b"x" * 3_000_000, b"y" * 10, b"z" * 3000]
    assert pa.compute.sum(table.column("size")).as_py() > 3_000_000
