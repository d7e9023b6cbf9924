"""ConsumerOffsetManager: consumerOffset.json as the RocketMQ 4.9.4 broker writes and reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dledger.rocketmq.store.consumer_offset import (
    ConsumerOffsetManager,
    OffsetFileError,
    decode_fastjson,
    decode_offset_table,
    encode_int_map,
    encode_offset_table,
)

FIXTURES_MQ = Path(__file__).resolve().parents[1] / "fixtures" / "rocketmq-4.9"


def test_the_exact_fastjson_text_rocketmq_writes(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path / "config")
    m.commit_offset("group1", "TopicA", 1, 3)
    m.commit_offset("group1", "TopicA", 0, 5)
    m.persist()
    assert (tmp_path / "config" / "consumerOffset.json").read_text() == (
        '{\n\t"offsetTable":{\n\t\t"TopicA@group1":{0:5,1:3\n\t\t}\n\t}\n}'
    )


def test_several_groups_and_an_empty_table() -> None:
    assert encode_offset_table({}) == '{\n\t"offsetTable":{}\n}'
    text = encode_offset_table({"a@g": {0: 1}, "b@g": {2: 7, 10: 9}})
    body = text.split("\n", 2)[2]
    entries = {'\t\t"a@g":{0:1\n\t\t}', '\t\t"b@g":{2:7,10:9\n\t\t}'}
    assert text.startswith('{\n\t"offsetTable":{\n') and text.endswith("\n\t}\n}")
    assert set(body[: -len("\n\t}\n}")].split(",\n")) == entries


def test_decode_reads_fastjson_bare_integer_keys() -> None:
    assert decode_offset_table('{"offsetTable":{"T@g":{0:5,1:3},"U@g":{}}}') == {"T@g": {0: 5, 1: 3}, "U@g": {}}
    # The fixtures' delayOffset.json is the same fastjson format, one level shallower
    # (ScheduleMessageService's level -> offset table): read it, and write it back exactly.
    for name in ("classic-3topics", "dledger-1node"):
        text = (FIXTURES_MQ / name / "config" / "delayOffset.json").read_text()
        table = decode_fastjson(text)
        assert isinstance(table, dict) and set(table["offsetTable"]) == {"1", "2"}
        levels = {int(k): v for k, v in table["offsetTable"].items()}
        assert '{\n\t"offsetTable":' + encode_int_map(levels, 1) + "\n}" == text
    # A key that looks like a bare number inside a string is left alone.
    assert decode_offset_table('{"offsetTable":{"a,1:b@g":{3:4}}}') == {"a,1:b@g": {3: 4}}


def test_round_trip_query_and_reload(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path / "config")
    assert m.load() is False  # no file: an empty table
    assert m.query_offset("g", "T", 0) == -1
    m.commit_offset("g", "T", 0, 10)
    m.commit_offset("g", "T", 3, 4)
    m.commit_offset("h", "订单-topic", 0, 1)
    m.commit_offset("g", "T", 0, 12)
    m.persist()
    again = ConsumerOffsetManager(tmp_path / "config", readonly=True)
    assert again.load() is True
    assert again.offset_table == m.offset_table
    assert again.query_offset("g", "T", 0) == 12 and again.query_offset("g", "T", 1) == -1
    assert again.query_offsets("g", "T") == {0: 12, 3: 4}
    assert again.which_topics_by_consumer("g") == {"T"} and again.which_groups_by_topic("T") == {"g"}
    with pytest.raises(PermissionError):
        again.persist()


def test_persist_keeps_the_previous_file_as_bak(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path)
    m.commit_offset("g", "T", 0, 1)
    m.persist()
    first = (tmp_path / "consumerOffset.json").read_text()
    m.commit_offset("g", "T", 0, 2)
    m.persist()
    assert (tmp_path / "consumerOffset.json.bak").read_text() == first
    assert not (tmp_path / "consumerOffset.json.tmp").exists()


def test_a_corrupt_file_falls_back_to_bak_or_fails_clearly(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path)
    m.commit_offset("g", "T", 0, 1)
    m.persist()
    m.commit_offset("g", "T", 0, 2)
    m.persist()
    (tmp_path / "consumerOffset.json").write_text('{"offsetTable":{"T@g":{0:')
    m2 = ConsumerOffsetManager(tmp_path)
    assert m2.load() is True and m2.query_offset("g", "T", 0) == 1  # from the .bak
    (tmp_path / "consumerOffset.json.bak").write_text("garbage")
    with pytest.raises(OffsetFileError, match=r"consumerOffset\.json"):
        ConsumerOffsetManager(tmp_path).load()
    # An empty file with a good backup is what ConfigManager.load treats as missing.
    (tmp_path / "consumerOffset.json").write_text("")
    (tmp_path / "consumerOffset.json.bak").write_text('{"offsetTable":{"T@g":{0:7}}}')
    m3 = ConsumerOffsetManager(tmp_path)
    assert m3.load() and m3.query_offset("g", "T", 0) == 7
