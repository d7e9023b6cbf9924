"""A Python data source that does no work: it yields one prebuilt Arrow batch of ``queue_id``
over and over. Its ``count()`` is what Spark's Python data source path itself costs per row
(planning in Python workers, the worker-to-JVM Arrow hand-off, rows in the JVM), the floor under
any Python source's rate on this machine (docs/spark.md)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

BATCH_ROWS = 8192  # the rocketmq source's batch size
SCHEMA = pa.schema([pa.field("queue_id", pa.int32(), nullable=False)])


class _Reader(DataSourceReader):
    def __init__(self, rows: int, parts: int) -> None:
        self.rows, self.parts = rows, parts

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(k) for k in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        k = int(partition.value)
        rows = self.rows // self.parts + (k < self.rows % self.parts)
        batch = pa.RecordBatch.from_arrays([pa.array(np.arange(BATCH_ROWS, dtype=np.int32) % 8)], schema=SCHEMA)
        while rows > 0:
            yield batch if rows >= BATCH_ROWS else batch.slice(0, rows)
            rows -= BATCH_ROWS


class ConstantBatchSource(DataSource):
    """``spark.read.format("constant-batches").option("rows", N).option("partitions", P).load()``."""

    @classmethod
    def name(cls) -> str:
        return "constant-batches"

    def schema(self) -> str:
        return "queue_id int not null"

    def reader(self, schema: object) -> DataSourceReader:
        return _Reader(int(self.options["rows"]), int(self.options.get("partitions", 1)))
