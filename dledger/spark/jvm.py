"""The ``rocketmq-jvm`` format: the classic commit log of a RocketMQ message store read by a
Spark DataSource V2 in the JVM (sources in ``spark-jvm/``), with the columns of the Python
``rocketmq`` format. Spark must be started with its jar::

    from dledger.spark import jvm_config
    spark = SparkSession.builder.config(map=jvm_config()).getOrCreate()
    spark.read.format("rocketmq-jvm").load("/data/rocketmq/store")

The jar is built with javac on first use (or by ``setup.py build_ext`` when pyspark is there),
named by the hash of its sources and the pyspark version; a wheel carries the one it was built
with.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from dledger.spark.jvm_build import JAR_STEM, JarBuildError, build_jar
from dledger.spark.options import error

log = logging.getLogger(__name__)

FORMAT = "rocketmq-jvm"
SOURCE_CLASS = "io.dledger.spark.RocketMQJvmSource"
# The Java sources of a checkout (editable install, CI); a wheel has none beside the package.
SOURCES = Path(__file__).resolve().parents[2] / "spark-jvm"
# Where setup.py puts the jar, and where a checkout builds it when the package dir is writable.
PACKAGED = Path(__file__).resolve().parent / "jars"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dledger"


def jvm_jar() -> str:
    """The path of the ``rocketmq-jvm`` jar, built now from ``spark-jvm/`` if it is not current.
    Raises DLedgerError saying what is missing (javac, pyspark, the sources)."""
    try:
        if SOURCES.is_dir():
            if os.access(PACKAGED.parent, os.W_OK):
                return str(build_jar(SOURCES, PACKAGED))
            return str(build_jar(SOURCES, _cache_dir(), drop_others=False))
    except JarBuildError as exc:
        raise error(str(exc)) from exc
    packaged = sorted(PACKAGED.glob(f"{JAR_STEM}-*.jar"))
    if packaged:
        return str(packaged[-1])
    raise error(
        f"the {FORMAT} jar was not built with this install (pyspark and javac were missing at build time) "
        "and its sources are not here: reinstall with pyspark and a JDK 17 present, or use format 'rocketmq'"
    )


def jvm_config() -> dict[str, str]:
    """The SparkSession builder config that puts the ``rocketmq-jvm`` jar on the session:
    ``SparkSession.builder.config(map=jvm_config())``."""
    return {"spark.jars": jvm_jar()}


def jvm_available(spark: Any) -> bool:
    """Whether ``spark``'s driver can load the ``rocketmq-jvm`` format (its jar is on the session)."""
    try:
        jvm = spark.sparkContext._jvm
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm.java.lang.Class.forName(SOURCE_CLASS, True, loader)
        return True
    except Exception:
        return False
