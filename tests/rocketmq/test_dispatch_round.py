"""dispatch_round, dispatch's one kernel call a batch, against the kernels it stands for:
scan_records / scan_dledger_records, dispatch_keys, index_put_many with IndexFile.putKey's
timeDiff (the struct oracle's index_put), consume_queue_units."""

from __future__ import annotations

import struct

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st
from record_oracle import encode_dledger_entry, encode_record, index_file_size, index_header, index_put

from dledger._ext import load

K = load("message")
INT_MAX = 2**31 - 1

_text = st.text(alphabet=st.sampled_from("ab #é\u4e2dxyz"), max_size=8)
_prop = st.tuples(st.sampled_from(["TAGS", "UNIQ_KEY", "KEYS", "K"]), _text)
# Mostly one queue's run (the fast case), sometimes another topic, queue, offset or a transaction.
_record = st.fixed_dictionaries(
    {
        "topic": st.sampled_from(["TopicA", "TopicA", "TopicA", "B", "SCHEDULE_TOPIC_XXXX"]),
        "queue_id": st.sampled_from([0, 0, 0, 1]),
        "props": st.lists(_prop, max_size=4),
        "sys_flag": st.sampled_from([0, 0, 0, 4, 8, 0xC]),
        "gap": st.sampled_from([0, 0, 0, 0, 1, 5]),
        "ts_step": st.sampled_from([0, 1, 999, 1000, 2500]),
        "body": st.binary(max_size=16),
    }
)


def _log(records: list[dict], dledger: bool, base: int, lead: int) -> tuple[bytes, int]:
    """The records back to back after ``lead`` bytes (a classic log or DLedger entries), and
    where they start."""
    buf = bytearray(b"\x00" * lead)
    qo = 7
    ts = 1_700_000_000_000
    for i, r in enumerate(records):
        props = "\x02".join(f"{k}\x01{v}" for k, v in r["props"]).encode()
        qo += r["gap"]
        ts += r["ts_step"]
        at = len(buf)
        phys = base + at + (48 if dledger else 0)
        rec = encode_record(
            r["body"],
            r["topic"].encode(),
            props,
            queue_id=r["queue_id"],
            queue_offset=qo,
            phys_offset=phys,
            sys_flag=r["sys_flag"],
            born_timestamp=ts - 5,
            store_timestamp=ts,
        )
        buf += encode_dledger_entry(i, 1, base + at, rec) if dledger else rec
        qo += 1
    return bytes(buf), lead


def _time_diffs(ts: np.ndarray, begin: int, fresh: bool) -> np.ndarray:
    """IndexFile._time_diffs: putKey's timeDiff of each item put in one call."""
    begins = np.full(len(ts), begin, dtype=np.int64)
    if fresh and len(ts) > 1:
        begins[1:] = ts[0]
    diff = np.where(ts - begins < 0, 0, (ts - begins) // 1000)
    return np.where(begins <= 0, 0, np.minimum(diff, INT_MAX)).astype(np.int32)


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(_record, max_size=30),
    dledger=st.booleans(),
    floor_at=st.integers(-1, 31),
    index_num=st.sampled_from([4, 16, 200]),
    begin_ts=st.sampled_from([0, 1_699_999_999_000, 1_700_000_000_000]),
    used=st.sampled_from([0, 1, 3]),
    max_records=st.sampled_from([-1, 5, 4096]),
)
def test_dispatch_round_is_the_kernels_it_fuses(
    records: list[dict],
    dledger: bool,
    floor_at: int,
    index_num: int,
    begin_ts: int,
    used: int,
    max_records: int,
) -> None:
    base = 1 << 20
    buf, start = _log(records, dledger, base, 24)
    scan = K.scan_dledger_records if dledger else K.scan_records
    cols, stop, code = scan(buf, base, start, -1, False, max_records)
    n = len(cols["size"])
    phys = cols["phys_offset"]
    floor = int(phys[floor_at]) if 0 <= floor_at < n else (-1 if floor_at < 0 else 1 << 62)
    index_from = int(np.searchsorted(phys, floor))
    ids, firsts, tags, hashes, rows = K.dispatch_keys(
        buf,
        buf,
        cols["props_off"],
        cols["props_len"],
        cols["topic_off"],
        cols["topic_len"],
        cols["sys_flag"],
        index_from,
    )
    # An index file with ``used`` items in it already (slots 5, 6, ...), begin_ts in its header.
    slots = 5
    want_index = bytearray(index_file_size(slots, index_num))
    struct.pack_into(">q", want_index, 0, begin_ts)
    for k in range(min(used, index_num - 1)):
        index_put(want_index, slots, index_num, k, 10 + k, 0)
    got_index = bytearray(want_index)
    fresh = index_header(want_index)["index_count"] <= 1
    put = K.index_put_many(
        want_index, slots, index_num, hashes, phys[rows], _time_diffs(cols["store_timestamp"][rows], begin_ts, fresh)
    )

    got = K.dispatch_round(buf, base, start, -1, dledger, max_records, floor, got_index, slots, index_num, begin_ts)
    gcols, gstop, gcode, gids, gfirsts, gtags, ghashes, grows, units, gput = got
    assert (gstop, gcode) == (stop, code)
    assert set(gcols) == set(cols)
    for name, col in cols.items():
        assert np.array_equal(gcols[name], col), name
    for a, b in zip((gids, gfirsts, gtags, ghashes, grows), (ids, firsts, tags, hashes, rows), strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert gput == put
    assert got_index == want_index
    tran = cols["sys_flag"] & 0xC
    qo = cols["queue_offset"]
    uniform = (
        n > 0
        and len(firsts) == 1
        and bool(((tran == 0) | (tran == 8)).all())
        and bool((cols["queue_id"] == cols["queue_id"][0]).all())
        and bool((qo == qo[0] + np.arange(n)).all())
    )
    event(f"uniform={uniform} put={min(put, 2)}")
    if uniform:
        assert units is not None and bytes(units) == K.consume_queue_units(phys, cols["size"], tags)
    else:
        assert units is None


def test_dispatch_round_without_an_index_file_and_past_the_floor() -> None:
    buf, start = _log([{"topic": "T", "queue_id": 0, "props": [("KEYS", "a b")], "sys_flag": 0, "gap": 0,
                        "ts_step": 1, "body": b"x"}] * 3, False, 0, 0)  # fmt: skip
    cols, _stop, _code, _ids, _firsts, _tags, hashes, rows, units, put = K.dispatch_round(
        buf, 0, start, -1, False, -1, 1 << 62
    )
    assert len(cols["size"]) == 3 and len(hashes) == 0 and len(rows) == 0 and put == 0
    assert units is not None and len(units) == 3 * K.CQ_UNIT_SIZE
    _cols, _stop, _code, _ids, _firsts, _tags, hashes, rows, _units, put = K.dispatch_round(
        buf, 0, start, -1, False, -1, 0
    )
    assert list(rows) == [0, 0, 1, 1, 2, 2] and put == 0  # keys found, none put (no index file)


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(_record, min_size=1, max_size=12),
    dledger=st.booleans(),
    next_shift=st.sampled_from([0, 0, 1]),
    phys_shift=st.sampled_from([-1, -1, 0]),
    room_short=st.sampled_from([0, 0, 1]),
    topic=st.sampled_from([b"TopicA", b"TopicA", b"B"]),
    queue_id=st.sampled_from([0, 0, 1]),
)
def test_dispatch_round_writes_a_run_that_continues_the_queue_into_its_file(
    records: list[dict],
    dledger: bool,
    next_shift: int,
    phys_shift: int,
    room_short: int,
    topic: bytes,
    queue_id: int,
) -> None:
    buf, start = _log(records, dledger, 0, 0)
    cols, *_rest, units, _put = K.dispatch_round(buf, 0, start, -1, dledger, -1, 1 << 62)
    n = len(cols["size"])
    cq = bytearray(b"\xee" * (40 + n * 20 + 16))
    first_end = int(cols["phys_offset"][0]) + int(cols["size"][0])
    room = n * 20 - room_short
    got = K.dispatch_round(
        buf, 0, start, -1, dledger, -1, 1 << 62, None, 0, 0, 0,
        cq, 40, room, topic, queue_id, int(cols["queue_offset"][0]) + next_shift, first_end + phys_shift,
        0, len(cq),
    )  # fmt: skip
    fits = (
        units is not None
        and topic == records[0]["topic"].encode()
        and queue_id == int(cols["queue_id"][0])
        and next_shift == 0
        and phys_shift < 0
        and room_short == 0
    )
    if fits:
        assert units is not None and got[8] is not None and len(got[8]) == 0
        assert bytes(cq[40 : 40 + n * 20]) == bytes(units)
        assert cq[:40] == b"\xee" * 40 and cq[40 + n * 20 :] == b"\xee" * 16
    else:
        assert cq == bytearray(b"\xee" * len(cq))
        assert (got[8] is None) == (units is None) and (units is None or bytes(got[8]) == bytes(units))
