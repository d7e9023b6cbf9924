"""The local SparkSession the Spark benches share: two cores, no UI, Python workers on this
interpreter importing ``dledger`` from this checkout (and any ``extra_paths``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[1]


@contextmanager
def local_spark(app: str, *, extra_paths: tuple[str, ...] = (), **conf: str) -> Iterator[SparkSession]:
    """A ``local[2]`` session named ``app`` with ``conf`` on top (keys with ``_`` for ``.``:
    ``spark_driver_memory="2g"``), stopped on exit."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [str(REPO), *extra_paths, *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for key, value in conf.items():
        builder = builder.config(key.replace("_", "."), value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
