"""The log of a DLedger store on disk as Arrow data, without a running node.

``read_table(path)`` returns a ``pyarrow.Table`` (for pandas, polars, DuckDB, ...);
``iter_batches(path)`` yields ``pyarrow.RecordBatch``es. The Spark data source
(``dledger.spark``) plans and reads with the same functions: ``plan_read`` (``plan.py``) cuts
the log into :class:`Segment`\\ s (a run of entries inside one data file, located through the
index file) and ``read_segment`` (``arrow.py``) turns one into record batches, with no Python
object per entry.

What is read: entries from the begin index (the first entry of the first data file) up to
the committed index of the ``checkpoint`` file, or, when the store has no checkpoint (a
store written by the Java DLedger, which writes one only on shutdown or flush) or with
``committed_only=False``, up to the last entry the index file names whose data is valid.
The range is fixed when the read is planned, so a store being appended to meanwhile is read
as of that moment, and every returned entry passed the scan's checks (structure, position,
index continuity, non-decreasing term and, when recorded, the body CRC).

Schema: ``index long, term long, pos long, magic int, body_crc int, body binary``, plus
``node string`` when more than one node directory is read. ``body_crc`` is the stored
unsigned CRC32 reinterpreted as a signed 32-bit int (Spark has no unsigned int);
``& 0xFFFFFFFF`` gives it back. ``end_index`` is inclusive, like DLedger's ledgerEndIndex.
"""

from dledger.reader.arrow import (
    DEFAULT_BATCH_ROWS,
    MAX_BATCH_BYTES,
    MalformedEntry,
    iter_batches,
    read_segment,
    read_table,
)
from dledger.reader.plan import NodeSnapshot, PathArg, ReadPlan, Segment, plan_read, resolve_nodes
from dledger.reader.schema import (
    COLUMNS,
    DROPMALFORMED,
    FAILFAST,
    MODES,
    NODE_COLUMN,
    NotAStoreError,
    StoreNotFoundError,
    arrow_schema,
    check_columns,
    check_mode,
)

__all__ = [
    "COLUMNS",
    "DEFAULT_BATCH_ROWS",
    "DROPMALFORMED",
    "FAILFAST",
    "MAX_BATCH_BYTES",
    "MODES",
    "NODE_COLUMN",
    "MalformedEntry",
    "NodeSnapshot",
    "NotAStoreError",
    "PathArg",
    "ReadPlan",
    "Segment",
    "StoreNotFoundError",
    "arrow_schema",
    "check_columns",
    "check_mode",
    "iter_batches",
    "plan_read",
    "read_segment",
    "read_table",
    "resolve_nodes",
]
