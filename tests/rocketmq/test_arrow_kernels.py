"""The Arrow reader's column kernels (``_ext/message_arrow.pxi``) against the Python decoders:
properties as a map with TAGS and KEYS, host text and message ids, on any input."""

from __future__ import annotations

import ipaddress
import struct

import numpy as np
import pyarrow as pa
import record_oracle as oracle
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger._ext import message as mk
from dledger.rocketmq.store.message import create_message_id, format_host

prop_name = st.sampled_from([b"TAGS", b"KEYS", b"UNIQ_KEY", b"K", b"TAG", b""])
prop_value = st.binary(max_size=12).filter(lambda v: b"\x01" not in v and b"\x02" not in v)
prop_item = st.one_of(
    st.tuples(prop_name, prop_value).map(lambda t: t[0] + b"\x01" + t[1]),
    st.binary(max_size=10).filter(lambda v: b"\x02" not in v),
)
props_strings = st.lists(st.lists(prop_item, max_size=6).map(b"\x02".join), max_size=12)


def _packed(items: list[bytes]) -> tuple[bytes, np.ndarray, np.ndarray]:
    buf = b"#".join(items)
    offs = np.cumsum([0] + [len(p) + 1 for p in items[:-1]], dtype=np.int64) if items else np.empty(0, np.int64)
    return buf, offs, np.array([len(p) for p in items], dtype=np.int64)


def _strings(n: int, data: np.ndarray, offsets: np.ndarray, bitmap: np.ndarray | None = None, nulls: int = 0) -> list:
    validity = pa.py_buffer(bitmap) if nulls else None
    arr = pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)
    arr.validate(full=True)
    return arr.to_pylist()


@settings(max_examples=300, deadline=None)
@given(props=props_strings)
def test_property_columns_read_as_string2message_properties(props: list[bytes]) -> None:
    buf, offs, lens = _packed(props)
    props_map, tags, keys = mk.property_columns(buf, offs, lens, True, True, True)
    assert props_map is not None
    eo, kd, ko, vd, vo = props_map
    want = [oracle.parse_properties(p.decode("latin-1")) for p in props]
    keys_col = _strings(len(ko) - 1, kd, ko)
    values_col = _strings(len(vo) - 1, vd, vo)
    got = [
        [(keys_col[j].decode("latin-1"), values_col[j].decode("latin-1")) for j in range(eo[k], eo[k + 1])]
        for k in range(len(props))
    ]
    assert got == [list(w.items()) for w in want]  # in order of first sight, a later value wins
    for name, col in (("TAGS", tags), ("KEYS", keys)):
        assert col is not None
        values = _strings(len(props), *col)
        assert values == [None if name not in w else w[name].encode("latin-1") for w in want]


@given(props=props_strings, want=st.tuples(st.booleans(), st.booleans(), st.booleans()))
def test_property_columns_make_only_what_is_asked(props: list[bytes], want: tuple[bool, bool, bool]) -> None:
    got = mk.property_columns(*_packed(props), *want)
    assert [g is not None for g in got] == list(want)


v4 = st.tuples(st.binary(min_size=4, max_size=4), st.integers(-(2**31), 2**31 - 1))
v6 = st.tuples(st.binary(min_size=16, max_size=16), st.integers(0, 65535))


@settings(max_examples=200, deadline=None)
@given(hosts=st.lists(st.tuples(st.one_of(v4, v6), st.integers(1, 3)), max_size=20))
def test_host_texts_and_message_ids_are_format_host_and_create_message_id(
    hosts: list[tuple[tuple[bytes, int], int]],
) -> None:
    rows = [h for h, repeat in hosts for _ in range(repeat)]  # runs of one host, as in a log
    raws = [addr + struct.pack(">i", port) for addr, port in rows]
    buf = b"".join(raws)
    off = np.cumsum([0] + [len(r) for r in raws[:-1]], dtype=np.int64) if raws else np.empty(0, np.int64)
    v6_rows = np.array([len(r) == 20 for r in raws], dtype=bool)
    sys_flag = np.where(v6_rows, mk.BORNHOST_V6_FLAG, 0).astype(np.int32)
    data, vo = mk.host_texts(buf, off, sys_flag, mk.BORNHOST_V6_FLAG)
    want = [format_host((str(ipaddress.ip_address(a)), p)).encode() for a, p in rows]
    assert _strings(len(rows), data, vo) == want
    phys = np.arange(len(rows), dtype=np.int64) * 977 + 2**40
    data, vo = mk.offset_msg_ids(buf, off, np.where(v6_rows, mk.STOREHOSTADDRESS_V6_FLAG, 0).astype(np.int32), phys)
    assert _strings(len(rows), data, vo) == [
        create_message_id(r, int(p)).encode() for r, p in zip(raws, phys, strict=True)
    ]
