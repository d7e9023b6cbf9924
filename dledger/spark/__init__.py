"""PySpark data source for DLedger segment files: ``spark.read.format("dledger")``.

    from dledger.spark import DLedgerDataSource
    spark.dataSource.register(DLedgerDataSource)
    df = spark.read.format("dledger").load("/data/dledger/dledger-n0")

``register(spark)`` does the same and also enables Spark's filter pushdown for Python data
sources, so that filters on ``index`` and ``term`` prune partitions. Needs pyspark >= 4.0
(``pip install dledger[spark]``); filter pushdown needs Spark >= 4.1.

``spark.read.format("rocketmq-jvm")`` reads a classic RocketMQ commit log in the JVM (the
session started with ``SparkSession.builder.config(map=jvm_config())``); see ``dledger.spark.jvm``.
"""

from dledger.spark.jvm import jvm_available, jvm_config, jvm_jar
from dledger.spark.source import (
    DLedgerDataSource,
    DLedgerPartition,
    DLedgerPushdownReader,
    DLedgerReader,
    DLedgerStreamReader,
    Options,
    register,
)

__all__ = [
    "DLedgerDataSource",
    "DLedgerPartition",
    "DLedgerPushdownReader",
    "DLedgerReader",
    "DLedgerStreamReader",
    "Options",
    "jvm_available",
    "jvm_config",
    "jvm_jar",
    "register",
]
