"""dledger: a Raft-replicated append-only commitlog, on-disk compatible with RocketMQ's DLedger."""

from dledger.codes import RequestCode, ResponseCode
from dledger.config import DLedgerConfig
from dledger.errors import CorruptionError, DLedgerError

__version__ = "0.1.0"

__all__ = [
    "CorruptionError",
    "DLedgerConfig",
    "DLedgerError",
    "MmapFileStore",
    "RequestCode",
    "ResponseCode",
    "__version__",
]


def __getattr__(name: str) -> object:
    if name == "MmapFileStore":
        from dledger.store.file import MmapFileStore

        return MmapFileStore
    if name in ("read_table", "iter_batches"):
        # Lazy, and not in __all__: the reader needs pyarrow (the "arrow"/"spark" extras).
        from dledger import reader

        return getattr(reader, name)
    raise AttributeError(name)
