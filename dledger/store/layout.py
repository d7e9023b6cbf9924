"""The DLedger 0.2.x on-disk layout, in one place: what the store, the offline verifier and the
readers know about a node directory.

A node directory (``dledger-<selfId>/``), as DLedgerMmapFileStore lays it out::

    data/<20-digit offset>    entries (48-byte header + body), a blank record at the end of each file
    index/<20-digit offset>   32-byte index units, entry i's at absolute offset i*32
    checkpoint                Java properties: endIndex=..., committedIndex=...

Each directory of segments is DLedger's MmapFileList: files named by the absolute offset of
their first byte, all of one size (read from the files themselves when a store is opened).
The sizes and magic numbers come from the kernels (``_ext/dl_format.h``, exported by
``dledger._ext.codec``), so the C and the Python code cannot disagree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dledger._ext import load as _load_ext
from dledger.codes import ResponseCode
from dledger.errors import DLedgerError
from dledger.store.properties import read_properties, write_properties

if TYPE_CHECKING:
    from dledger._ext.segment import MmapFileList

_codec = _load_ext("codec")

# -- entries and index units (DLedgerEntry, DLedgerEntryCoder) ------------------------------

MAGIC_1: int = _codec.MAGIC_1
CURRENT_MAGIC: int = _codec.CURRENT_MAGIC
# A blank record (magic -1, then its int length) pads the end of a data file (MmapFile.BLANK_MAGIC_CODE).
BLANK_MAGIC_CODE: int = _codec.BLANK_MAGIC_CODE
MIN_BLANK_LEN: int = _codec.MIN_BLANK_LEN
# Where the header holds the entry's own position (DLedgerEntry.POS_OFFSET).
POS_OFFSET: int = _codec.POS_OFFSET
# The header before bodySize (DLedgerEntry.HEADER_SIZE), and where the body starts (BODY_OFFSET).
HEADER_SIZE: int = _codec.HEADER_SIZE
BODY_OFFSET: int = _codec.BODY_OFFSET
INDEX_UNIT_SIZE: int = _codec.INDEX_UNIT_SIZE

# The entry header and the index unit as numpy sees them (big-endian, fields in file order):
# the vectorised twins of dl_write_header and dl_write_index, for reading or rewriting many at once.
HEADER_DTYPE = np.dtype(
    [
        ("magic", ">i4"),
        ("size", ">i4"),
        ("index", ">i8"),
        ("term", ">i8"),
        ("pos", ">i8"),
        ("channel", ">i4"),
        ("chain_crc", ">u4"),
        ("body_crc", ">u4"),
        ("body_size", ">i4"),
    ]
)
INDEX_DTYPE = np.dtype([("magic", ">i4"), ("pos", ">i8"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8")])

# -- the node directory ---------------------------------------------------------------------

DATA_DIR = "data"
INDEX_DIR = "index"
CHECK_POINT_FILE = "checkpoint"
END_INDEX_KEY = "endIndex"
COMMITTED_INDEX_KEY = "committedIndex"
SEGMENT_NAME_DIGITS = 20


def is_store_dir(path: Path) -> bool:
    """Whether ``path`` is a node directory (it has data/, index/ or a checkpoint)."""
    return (path / DATA_DIR).is_dir() or (path / INDEX_DIR).is_dir() or (path / CHECK_POINT_FILE).is_file()


def not_a_node_dir(path: Path) -> str:
    """What to say of a directory that is no node directory (a store root, say): where to point."""
    nodes = sorted(p.name for p in path.glob("dledger-*") if is_store_dir(p)) if path.is_dir() else []
    here = f" (here: {', '.join(nodes)})" if nodes else ""
    return (
        f"{path} is not a dledger node directory (no data/, index/ or checkpoint); "
        f"point at the dledger-<id> directory{here}"
    )


# -- checkpoint -----------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class Checkpoint:
    """The ``checkpoint`` file as found. Each index is parsed when asked for, so a reader that
    needs one key is not failed by damage to the other."""

    path: Path
    values: dict[str, str]

    def index(self, key: str) -> int | None:
        """``key`` as an int, None when absent; DISK_ERROR when it is not a number."""
        raw = self.values.get(key)
        if raw is None:
            return None
        try:
            return int(raw)
        except ValueError as exc:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"{self.path}: {key} is not a number ({raw!r})") from exc

    @property
    def end_index(self) -> int | None:
        return self.index(END_INDEX_KEY)

    @property
    def committed_index(self) -> int | None:
        return self.index(COMMITTED_INDEX_KEY)


def read_checkpoint(node_dir: Path) -> Checkpoint | None:
    """The node directory's checkpoint, or None when it has none (the Java DLedger writes one
    only on flush or shutdown)."""
    path = node_dir / CHECK_POINT_FILE
    values = read_properties(path)
    return None if values is None else Checkpoint(path, values)


def write_checkpoint(node_dir: Path, end_index: int, committed_index: int) -> None:
    """Replace the checkpoint atomically (see ``write_properties``)."""
    write_properties(node_dir / CHECK_POINT_FILE, {END_INDEX_KEY: end_index, COMMITTED_INDEX_KEY: committed_index})


# -- segment files (MmapFileList) -----------------------------------------------------------


@dataclass(slots=True, frozen=True)
class SegmentFile:
    offset: int  # absolute offset of the file's first byte, its name
    path: str
    size: int


def is_segment_name(name: str) -> bool:
    return len(name) == SEGMENT_NAME_DIGITS and name.isdigit()


def list_segments(directory: Path) -> list[SegmentFile]:
    """The segment files of ``directory`` in offset order: 20-digit names only, so dot-names (a
    file being created) and strays are left out, as is a file deleted (retention) while listing."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for name in names:
        if is_segment_name(name):
            path = os.path.join(directory, name)
            try:
                out.append(SegmentFile(int(name), path, os.stat(path).st_size))
            except FileNotFoundError:
                continue
    out.sort(key=lambda f: f.offset)
    return out


def check_one_size(directory: Path, files: list[SegmentFile], size: int | None = None) -> int | None:
    """The size all ``files`` share (and ``size``, when given), None for no files and no size;
    DISK_ERROR when they differ: a directory's segments are all of one size."""
    sizes = {f.size for f in files} | ({size} if size is not None else set())
    if len(sizes) > 1:
        raise DLedgerError(ResponseCode.DISK_ERROR, f"{directory}: segment files of mixed sizes {sorted(sizes)}")
    return sizes.pop() if sizes else None


def segment_size_of(directory: Path) -> int | None:
    """The size of the segment files in ``directory`` (all must agree), or None if there are none."""
    return check_one_size(directory, list_segments(directory))


def read_index_units(index: MmapFileList, first: int, count: int) -> np.ndarray:
    """Up to ``count`` index units from entry ``first`` on, as INDEX_DTYPE views of the mapped
    index files (copied only when they span files); shorter where the files end."""
    parts = []
    off = first * INDEX_UNIT_SIZE
    want = count
    while want > 0:
        f = index.find(off)
        if f is None:
            break
        rel = off - f.file_from_offset
        n = min(want, (f.file_size - rel) // INDEX_UNIT_SIZE)
        parts.append(np.frombuffer(f.view(rel, rel + n * INDEX_UNIT_SIZE), dtype=INDEX_DTYPE))
        want -= n
        off += n * INDEX_UNIT_SIZE
    if not parts:
        return np.empty(0, dtype=INDEX_DTYPE)
    return np.concatenate(parts) if len(parts) > 1 else parts[0]
