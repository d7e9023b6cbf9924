"""The message store's columnar reads: messages as scan columns over one buffer, or as an
Arrow table, with no Python object per message (the fast path under pulls, the Arrow reader
and the dump listings). ``MessageStore.pull_columns``, ``pull_arrow`` and ``iter_batches``
call these with their commit log and consume queue.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np

from dledger._ext import load as _load_ext
from dledger.rocketmq.store.consume_queue import ConsumeQueue

log = logging.getLogger(__name__)
K = _load_ext("message")
_gather = _load_ext("gather")

_SCAN_BATCH = 4096
# iter_batches copies the log this much at a time (more than the largest record).
_WINDOW = 16 << 20


def _empty_columns() -> dict[str, np.ndarray]:
    cols, _stop, _code = K.scan_records(memoryview(b""), 0, 0, -1, False, -1)
    cols["phys_offset"] = np.empty(0, np.int64)
    cols["queue_offset"] = np.empty(0, np.int64)
    for column in cols.values():
        column.setflags(write=False)  # shared by every answer
    return cols


# Made once: a held pull's every look that finds nothing answers it.
_EMPTY_COLUMNS = _empty_columns()


def _no_rows() -> tuple[memoryview, dict[str, np.ndarray]]:
    """What pull_columns answers for no message: the columns it answers for some, empty."""
    return memoryview(b""), dict(_EMPTY_COLUMNS)


def pull_columns(
    cl: Any, cq: ConsumeQueue | None, offset: int, max_count: int, max_bytes: int | None
) -> tuple[memoryview, dict[str, np.ndarray]]:
    """MessageStore.pull_columns over a commit log and a queue (None: the queue does not exist)."""
    empty = _no_rows()
    if cq is None or offset < int(cq.min_offset):
        return empty
    phys, sizes, _tags = cq.get_units(offset, max_count)
    if not len(phys):
        return empty
    if max_bytes is not None and len(phys) > 1:
        fit = max(int(np.searchsorted(np.cumsum(sizes), max_bytes, side="right")), 1)
        phys, sizes = phys[:fit], sizes[:fit]
    ok = (phys + sizes <= int(cl.readable_end)) & (phys >= int(cl.min_offset))
    if not ok.all():
        cut = int(np.argmin(ok))
        phys, sizes = phys[:cut], sizes[:cut]
    if not len(phys):
        return empty
    fsize = int(cl.file_size)
    file_no = phys // fsize
    cuts = np.flatnonzero(np.diff(file_no)) + 1
    parts = []
    with cl.reading():
        for run in np.split(np.arange(len(phys)), cuts):
            f = cl.find_file(int(phys[run[0]]))
            if f is None:
                break
            view = f.view()
            try:
                data, _voff = _gather.gather(view, phys[run] - f.file_from_offset, sizes[run])
                parts.append(data)
            finally:
                view.release()
    if not parts:
        return empty
    buf = memoryview(np.concatenate(parts) if len(parts) > 1 else parts[0])  # type: ignore[arg-type]
    cols, _stop, _code = K.scan_records(buf, 0, 0, -1, False, -1)
    n = len(cols["size"])
    cols["phys_offset"] = phys[:n].astype(np.int64)
    cols["queue_offset"] = np.arange(offset, offset + n, dtype=np.int64)
    return buf, cols


def pull_arrow(cl: Any, cq: ConsumeQueue | None, offset: int, max_count: int) -> Any:
    """MessageStore.pull_arrow over a commit log and a queue (None: the queue does not exist)."""
    import pyarrow as pa

    names = ("size", "store_timestamp", "born_timestamp", "sys_flag", "flag", "reconsume_times")
    tables = []
    if cq is not None and offset >= int(cq.min_offset):
        phys, sizes, _tags = cq.get_units(offset, max_count)
        ok = (phys + sizes <= int(cl.readable_end)) & (phys >= int(cl.min_offset))
        if len(phys) and not ok.all():
            cut = int(np.argmin(ok))
            phys, sizes = phys[:cut], sizes[:cut]
        fsize = int(cl.file_size)
        cuts = np.flatnonzero(np.diff(phys // fsize)) + 1
        at = 0
        with cl.reading():
            for part, part_sizes in zip(np.split(phys, cuts), np.split(sizes, cuts), strict=True):
                if not len(part):
                    break
                f = cl.find_file(int(part[0]))
                if f is None:
                    break
                view = f.view()
                try:
                    n, cols, body, body_vo, props, props_vo = K.pull_records(
                        view, part - f.file_from_offset, part_sizes
                    )
                finally:
                    view.release()
                if not n:
                    break
                out: dict[str, Any] = {
                    "queue_offset": pa.array(np.arange(offset + at, offset + at + n, dtype=np.int64)),
                    "phys_offset": pa.array(part[:n]),
                }
                out.update((k, pa.array(cols[k])) for k in names)
                for name, data, vo in (("body", body, body_vo), ("properties", props, props_vo)):
                    out[name] = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(vo), pa.py_buffer(data)])
                tables.append(pa.table(out))
                at += n
                if n < len(part):
                    break
    if not tables:
        # The schema of a table with rows (the kernel's column types).
        empty: dict[str, Any] = {k: pa.array([], pa.int64()) for k in ("queue_offset", "phys_offset")}
        for k in names:
            empty[k] = pa.array([], pa.int64() if k.endswith("timestamp") else pa.int32())
        empty.update(body=pa.array([], pa.binary()), properties=pa.array([], pa.binary()))
        return pa.table(empty)
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables).combine_chunks()


def iter_batches(cl: Any, start_phys: int | None) -> Iterator[tuple[memoryview, dict[str, np.ndarray]]]:
    """MessageStore.iter_batches over a commit log (each segment says whether its records are
    DLedger entries)."""
    pos = max(int(cl.min_offset), 0)
    if start_phys is not None:
        # (An upgraded store's old records below its DLedger entries have no entry header.)
        pos = max(start_phys - cl.header_size_at(start_phys), pos)
    end = int(cl.readable_end)
    while pos < end:
        with cl.reading():
            seg = cl.segment(pos, end)
            if seg is None:
                nxt = cl.roll_next_file(pos)
                if nxt >= end:
                    return
                pos = nxt
                continue
            stop_at = min(seg.end, seg.start + _WINDOW)
            try:
                data = bytes(seg.view[seg.start : stop_at])
            finally:
                seg.view.release()
        base = seg.base + seg.start
        scan = K.scan_dledger_records if seg.dledger else K.scan_records
        cur = 0
        while True:
            cols, stop, code = scan(data, base, cur, -1, False, _SCAN_BATCH)
            if len(cols["size"]):
                yield memoryview(data), cols
            cur = stop
            if code != K.STOP_LIMIT:
                break
        if code == K.STOP_BLANK:
            pos = cl.roll_next_file(base + stop)
        elif code == K.STOP_END or (code == K.STOP_BAD and stop_at < seg.end and stop > 0):
            # The window ended (maybe inside a record): go on from the last whole record.
            pos = base + stop
            if seg.start + stop >= cl.file_size:
                pos = cl.roll_next_file(base + stop - 1)
        else:
            log.error("commit log: %s record at %d; the walk stops there", K.STOP_NAMES[code], base + stop)
            return
