"""Stores: the mmap file store (DLedger's on-disk format) and the memory store."""

from dledger.store.base import DLedgerStore
from dledger.store.entry import Entry
from dledger.store.memory import MemoryStore

__all__ = ["DLedgerStore", "Entry", "MemoryStore", "MmapFileStore"]


def __getattr__(name: str) -> object:
    # The file store needs the compiled kernels; the memory store and Entry do not, so the
    # consensus layer and its simulation import without a build.
    if name == "MmapFileStore":
        from dledger.store.file import MmapFileStore

        return MmapFileStore
    raise AttributeError(name)
