"""Offline check of a node directory: every entry's structure, CRC and index unit.

Read-only by construction: it maps the files read-only and never runs recovery, so it can
look at a store that refuses to open (which is when it is needed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dledger._ext import require_built
from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.store.layout import (
    DATA_DIR,
    INDEX_DIR,
    INDEX_DTYPE,
    INDEX_UNIT_SIZE,
    not_a_node_dir,
    read_checkpoint,
    read_index_units,
    segment_size_of,
)

require_built()
from dledger._ext import codec as _codec  # noqa: E402
from dledger._ext import segment as _segment  # noqa: E402


@dataclass(slots=True, frozen=True)
class Problem:
    file: str
    offset: int
    index: int
    message: str

    def __str__(self) -> str:
        return f"{self.file} offset {self.offset} index {self.index}: {self.message}"


@dataclass(slots=True)
class VerifyResult:
    problems: list[Problem]
    entries: int
    bytes: int
    first_index: int
    last_index: int

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_store(node_dir: str | Path, progress: Callable[[int], None] | None = None) -> VerifyResult:
    """Scan every data file; ``progress`` is called with the bytes done after each file."""
    root = Path(node_dir)
    data_dir, index_dir = root / DATA_DIR, root / INDEX_DIR
    if not data_dir.is_dir():
        raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, not_a_node_dir(root))
    problems: list[Problem] = []
    data_size = segment_size_of(data_dir)
    index_size = segment_size_of(index_dir)
    if data_size is None:
        return VerifyResult([], 0, 0, -1, -1)
    data = _segment.MmapFileList(str(data_dir), data_size, True)
    index = _segment.MmapFileList(str(index_dir), index_size or INDEX_UNIT_SIZE, True)
    try:
        data.load()
        if index_size:
            index.load()
        try:
            data.check_self()
        except DLedgerError as exc:
            problems.append(Problem(str(data_dir), 0, -1, exc.message))
        walk = _Walk(index)
        for k, f in enumerate(data.files):
            walk.file(f, last=k == len(data.files) - 1)
            if progress is not None:
                progress(f.file_size)
        problems += walk.problems
        last_index = walk.last_index
        problems.extend(_checkpoint_problems(root, last_index))
        return VerifyResult(problems, walk.entries, walk.nbytes, walk.first_index, last_index)
    finally:
        data.close()
        index.close()


class _Walk:
    """The scan of the data files in order, collecting problems instead of stopping at them."""

    def __init__(self, index: _segment.MmapFileList) -> None:
        self.index = index
        self.problems: list[Problem] = []
        self.entries = 0
        self.nbytes = 0
        self.first_index = -1
        self.expect = -1
        self.prev_term = -1

    @property
    def last_index(self) -> int:
        if self.expect > 0:
            return self.expect - 1
        return self.first_index - 1 if self.first_index >= 0 else -1

    def file(self, f: _segment.MappedFile, last: bool) -> None:
        view = f.view()
        offset = 0
        while True:
            cols, stop, code = _codec.scan(
                view, f.file_from_offset, offset, -1, self.expect, self.prev_term, True, 1 << 20
            )
            if len(cols["index"]):
                self._take(cols, f)
            self.nbytes += stop - offset
            offset = stop
            if code != _codec.SCAN_LIMIT:
                break
        if code in (_codec.SCAN_BAD, _codec.SCAN_CRC):
            self.problems.append(
                Problem(f.path, stop, self.expect, f"{_codec.STOP_NAMES[code]} (entry expected: {self.expect})")
            )
            # Resynchronise at the next file: its first entry names where it stands.
            self.expect = -1
        elif code == _codec.SCAN_ZERO and not last:
            self.problems.append(Problem(f.path, stop, self.expect, "unwritten space before the last file"))

    def _take(self, cols: dict[str, np.ndarray], f: _segment.MappedFile) -> None:
        if self.first_index < 0:
            self.first_index = int(cols["index"][0])
        self.entries += len(cols["index"])
        self.expect, self.prev_term = int(cols["index"][-1]) + 1, int(cols["term"][-1])
        self.problems.extend(_index_problems(self.index, cols, f.file_from_offset, f.path))


def _checkpoint_problems(root: Path, last_index: int) -> list[Problem]:
    ckpt = read_checkpoint(root)
    if ckpt is None:
        return []
    try:
        ckpt_end = ckpt.end_index
    except DLedgerError:
        return [Problem(str(ckpt.path), 0, -1, "unreadable endIndex")]
    if ckpt_end is None or ckpt_end <= last_index:
        return []
    return [
        Problem(
            str(ckpt.path), 0, ckpt_end, f"checkpoint endIndex {ckpt_end} is past the last valid entry {last_index}"
        )
    ]


def _index_problems(index: _segment.MmapFileList, cols: dict[str, np.ndarray], base: int, path: str) -> list[Problem]:
    out: list[Problem] = []
    count = len(cols["index"])
    units = read_index_units(index, int(cols["index"][0]), count)
    filled = len(units)
    got = np.zeros(count, dtype=INDEX_DTYPE)
    got[:filled] = units
    bad = ~(
        (got["magic"] == cols["magic"])
        & (got["pos"] == cols["pos"])
        & (got["size"] == cols["size"])
        & (got["index"] == cols["index"])
        & (got["term"] == cols["term"])
    )
    for k in np.flatnonzero(bad)[:100]:
        what = "missing" if k >= filled else "disagrees with the data"
        out.append(Problem(path, int(cols["pos"][k]) - base, int(cols["index"][k]), f"index unit {what}"))
    return out
