"""The segment files of a node directory, mapped read-only on demand (the reader's view of
DLedger's MmapFileList): names and sizes listed once through ``dledger.store.layout``."""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from dledger._ext import load as _load_ext
from dledger.codes import ResponseCode
from dledger.errors import CorruptionError, DLedgerError
from dledger.store.layout import CURRENT_MAGIC, INDEX_UNIT_SIZE, MAGIC_1, check_one_size, list_segments

_codec = _load_ext("codec")

log = logging.getLogger(__name__)


class Unit(NamedTuple):
    """An index unit (DLedger's index entry): where entry ``entry_index`` is and its term."""

    magic: int
    pos: int
    size: int
    entry_index: int
    term: int


def map_file(path: str) -> mmap.mmap | None:
    """``path`` mapped read-only, or None when it is empty."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return None
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def close_map(mm: mmap.mmap) -> None:
    try:
        mm.close()
    except BufferError:  # an Arrow/numpy view still uses it; it closes when collected
        pass


class SegmentFiles:
    """The segment files of one directory (``data/`` or ``index/``), mapped read-only on demand.

    Names and sizes are listed once; a writer creating its next file meanwhile leaves a last
    file that is empty or short, which is left out (nothing in it can be committed yet).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.starts: list[int] = []
        self.paths: list[str] = []
        self.file_size = 0
        self._maps: dict[int, mmap.mmap] = {}
        files = list_segments(directory)
        if not files:
            return
        # A file being created is shorter than the segment size, never longer.
        size = max(f.size for f in files)
        while files and files[-1].size != size:
            log.debug(
                "%s: leaving out %s (%d bytes, segment size %d): being created",
                directory,
                files[-1].path,
                files[-1].size,
                size,
            )
            files.pop()
        if size == 0:
            return
        check_one_size(directory, files)
        self.file_size = size
        self.starts = [f.offset for f in files]
        self.paths = [f.path for f in files]

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def end(self) -> int:
        """The absolute offset just after the last file."""
        return self.starts[-1] + self.file_size if self.starts else 0

    def locate(self, offset: int) -> int:
        """The number of the file holding absolute ``offset``, or -1."""
        if not self.starts or offset < self.starts[0]:
            return -1
        k = (offset - self.starts[0]) // self.file_size
        if k < len(self.starts) and self.starts[k] <= offset < self.starts[k] + self.file_size:
            return k
        for k, start in enumerate(self.starts):  # a gap in the files (never in a sound store)
            if start <= offset < start + self.file_size:
                return k
        return -1

    def map(self, k: int) -> mmap.mmap:
        mm = self._maps.get(k)
        if mm is None:
            try:
                mapped = map_file(self.paths[k])
            except FileNotFoundError as exc:
                raise DLedgerError(
                    ResponseCode.DISK_ERROR, f"{self.paths[k]}: deleted while being read (retention?)"
                ) from exc
            if mapped is None:
                raise DLedgerError(ResponseCode.DISK_ERROR, f"{self.paths[k]}: empty segment file")
            mm = self._maps[k] = mapped
        return mm

    def close(self) -> None:
        for mm in self._maps.values():
            close_map(mm)
        self._maps.clear()


class IndexFiles(SegmentFiles):
    """The index files: entry ``i``'s 32-byte unit is at absolute offset ``i * 32``."""

    @property
    def first_unit(self) -> int:
        return self.starts[0] // INDEX_UNIT_SIZE if self.starts else 0

    @property
    def end_unit(self) -> int:
        return self.end // INDEX_UNIT_SIZE

    def unit(self, i: int) -> Unit | None:
        off = i * INDEX_UNIT_SIZE
        k = self.locate(off)
        if k < 0:
            return None
        return Unit(*_codec.decode_index(self.map(k), off - self.starts[k]))

    def sound(self, i: int) -> Unit:
        """Entry ``i``'s index unit, which must be written and name entry ``i``."""
        u = self.unit(i)
        if u is None or not (MAGIC_1 <= u.magic <= CURRENT_MAGIC) or u.entry_index != i or u.pos < 0 or u.size <= 0:
            raise CorruptionError(
                f"{self.directory}: index unit of entry {i} is missing or corrupt ({u}); open the store "
                "read-write once (dledger verify / a node start) to rebuild the index from the data",
                file=str(self.directory),
                offset=i * INDEX_UNIT_SIZE,
                index=i,
            )
        return u


def first_true(lo: int, hi: int, pred: Callable[[int], bool]) -> int:
    """Smallest i in [lo, hi) with pred(i), for pred monotone (False...True); hi if none."""
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
