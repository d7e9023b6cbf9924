"""``Message`` as callers use it: its fields stored by a C type (issue 40), with everything the
slots dataclass it was gave them: the constructor's keywords and defaults, ``dataclasses``
(fields, replace, asdict), equality, repr, pickling and copying, MessageExt as its dataclass
subclass, and the single-put kernel reading the fields directly."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from pathlib import Path

import pytest

from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message import Message, MessageExt
from dledger.rocketmq.store.message_store import MessageStore

FIELDS = (
    "topic",
    "body",
    "queue_id",
    "flag",
    "tags",
    "keys",
    "properties",
    "delay_level",
    "sys_flag",
    "born_timestamp",
    "born_host",
    "reconsume_times",
    "prepared_offset",
)


def a_message() -> Message:
    return Message(
        "T",
        b"body",
        queue_id=3,
        flag=7,
        tags="TagA",
        keys=["k1", "k2"],
        properties={"CLUSTER": "c"},
        delay_level=2,
        sys_flag=0,
        born_timestamp=1234,
        born_host=("10.0.0.1", 50000),
        reconsume_times=1,
        prepared_offset=9,
    )


def test_the_constructor_takes_every_field_by_keyword_and_position_with_its_default() -> None:
    m = Message("T")
    assert [getattr(m, f) for f in FIELDS] == ["T", b"", 0, 0, None, None, {}, 0, 0, 0, None, 0, 0]
    values = [getattr(a_message(), f) for f in FIELDS]
    assert [getattr(Message(*values), f) for f in FIELDS] == values
    assert Message(**dict(zip(FIELDS, values, strict=True))) == Message(*values)
    with pytest.raises(TypeError):
        Message()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Message("T", colour="red")  # type: ignore[call-arg]


def test_the_constructor_refuses_what_a_python_init_refuses() -> None:
    with pytest.raises(TypeError):
        Message("T", b"", queue_id=1, topic="U")  # type: ignore[misc]
    with pytest.raises(TypeError):
        Message(*range(14))
    # A keyword name made at run time (not the interned constant) is matched by its value.
    name = "".join(["queue", "_id"])
    assert Message("T", **{name: 4}).queue_id == 4  # type: ignore[arg-type]
    # A subclass gets the same constructor.
    sub = type("Sub", (Message,), {"__slots__": ()})
    m = sub("T", b"b", tags="x")
    assert (type(m), m.topic, m.body, m.tags, m.properties) == (sub, "T", b"b", "x", {})


def test_each_message_gets_a_properties_dict_of_its_own() -> None:
    a, b = Message("T"), Message("T")
    a.properties["x"] = "1"
    assert b.properties == {}
    assert Message("T").properties == {}


def test_fields_replace_and_asdict_work_as_on_the_dataclass() -> None:
    assert tuple(f.name for f in dataclasses.fields(Message)) == FIELDS
    assert dataclasses.is_dataclass(Message)
    m = a_message()
    r = dataclasses.replace(m, topic="U", queue_id=5)
    assert type(r) is Message
    assert (r.topic, r.queue_id, r.body, r.keys, r.properties) == ("U", 5, b"body", ["k1", "k2"], {"CLUSTER": "c"})
    assert m.topic == "T"
    assert dataclasses.asdict(m) == {f: getattr(m, f) for f in FIELDS}
    ext_names = tuple(f.name for f in dataclasses.fields(MessageExt))
    assert ext_names[: len(FIELDS)] == FIELDS and "msg_id" in ext_names


def test_equality_compares_every_field_and_the_class() -> None:
    assert a_message() == a_message()
    changes: tuple[object, ...] = ("U", b"x", 4, 8, "TagB", "k", {}, 3, 1, 5, ("10.0.0.2", 1), 2, 10)
    for name, other in zip(FIELDS, changes, strict=True):
        assert dataclasses.replace(a_message(), **{name: other}) != a_message(), name  # type: ignore[arg-type]
    ext = MessageExt(**{f: getattr(a_message(), f) for f in FIELDS})
    assert ext != a_message() and a_message() != ext
    with pytest.raises(TypeError):
        hash(a_message())


def test_repr_is_the_dataclass_repr() -> None:
    assert repr(Message("T", b"b", queue_id=1)) == (
        "Message(topic='T', body=b'b', queue_id=1, flag=0, tags=None, keys=None, properties={}, "
        "delay_level=0, sys_flag=0, born_timestamp=0, born_host=None, reconsume_times=0, prepared_offset=0)"
    )


def test_messages_pickle_and_copy_with_every_field() -> None:
    m = a_message()
    ext = MessageExt(**{f: getattr(m, f) for f in FIELDS}, queue_offset=11, phys_offset=12, msg_id="ID", size=99)
    for obj in (m, ext):
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            back = pickle.loads(pickle.dumps(obj, protocol))
            assert type(back) is type(obj) and back == obj
        assert copy.copy(obj) == obj
        deep = copy.deepcopy(obj)
        assert deep == obj and deep.properties is not obj.properties


def test_message_ext_keeps_message_fields_and_its_own() -> None:
    ext = MessageExt("T", b"b", queue_id=2, tags="TagA", queue_offset=5, store_host=("10.0.0.9", 10911))
    assert (ext.topic, ext.body, ext.queue_id, ext.tags, ext.queue_offset) == ("T", b"b", 2, "TagA", 5)
    assert ext.tags_value == "TagA" and ext.store_host_string == "10.0.0.9:10911"
    ext.topic = "U"
    assert ext.topic == "U"
    with pytest.raises(AttributeError):
        ext.not_a_field = 1  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        a_message().not_a_field = 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_the_single_put_reads_message_fields_directly_and_stores_them(tmp_path: Path, mode: str) -> None:
    cfg = MessageStoreConfig(enable_dledger_commit_log=mode == "dledger", mapped_file_size_commit_log=1 << 20)
    with MessageStore(tmp_path, cfg) as store:
        # Message and MessageExt are read by their fields' offsets, not by thirteen getattrs.
        assert Message in store._single_put.slot_types
        m = Message("T", b"payload", queue_id=1, tags="TagA", keys="k-1", properties={"CLUSTER": "c"})
        for _ in range(3):
            assert store.put_message(m).ok
        assert store.wait_dispatched(30)
        got = store.get_messages("T", 1, 0, 10).messages
        stored = [(g.body, g.tags, g.keys, g.properties["CLUSTER"]) for g in got]
        assert stored == [(b"payload", "TagA", "k-1", "c")] * 3
