"""Stores: the mmap file store (DLedger's on-disk format) and the memory store."""

from dledger.store.base import DLedgerStore
from dledger.store.entry import Entry
from dledger.store.memory import MemoryStore

__all__ = ["DLedgerStore", "Entry", "MemoryStore", "MmapFileStore"]


def __getattr__(name: str) -> object:
    # Loaded on first use: the memory store and Entry need only the codec kernel (for the
    # layout), the file store also the segment kernel and its file machinery.
    if name == "MmapFileStore":
        from dledger.store.file import MmapFileStore

        return MmapFileStore
    raise AttributeError(name)
