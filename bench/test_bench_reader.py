"""Reading the log: rows/s of the Spark data source and of read_table, against baselines
taken in the same run on the same rows.

Run (N entries of 100-byte bodies; the issue's full run is 10 million):

    DLEDGER_BENCH_ROWS=10000000 PYTHONPATH=. .venv/bin/python -m pytest bench/test_bench_reader.py \
        --benchmark-only -s

Default N is 1 million (a run of a few minutes on 2 cores). Group ``spark-<N>`` holds:

- ``dledger-arrow``: ``spark.read.format("dledger")``, read() yields Arrow record batches;
- ``dledger-tuples``: baseline (a), the same source and partitions, read() yielding row tuples;
- ``parquet``: baseline (b), Spark's own Parquet reader on the same rows written as Parquet;

each materialising every column (a ``noop`` write). Group ``arrow-<N>`` holds ``read_table``
(c) beside pyarrow's ``pq.read_table`` of the Parquet copy. Every side runs one warm-up round
and ``DLEDGER_BENCH_ROUNDS`` (default 3) timed rounds. At the end the module prints each
median rows/s with the range of its rounds, and the ratios of the medians (targets: >= 10x
(a), >= 0.5x (b), read_table >= 10 M rows/s); the figures are also in each benchmark's
``extra_info``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType
from pytest_benchmark.fixture import BenchmarkFixture

from dledger.config import DLedgerConfig
from dledger.reader import read_table
from dledger.spark import DLedgerDataSource, DLedgerReader
from dledger.store.file import MmapFileStore

ROWS = int(os.environ.get("DLEDGER_BENCH_ROWS", "1000000"))
ROUNDS = int(os.environ.get("DLEDGER_BENCH_ROUNDS", "3"))
BODY = 100
REPO = Path(__file__).resolve().parents[1]
# Data segment size of the generated store: the data source plans one partition per file,
# and the Parquet copy is written as files of about this size (Spark's defaults otherwise).
SEGMENT_BYTES = 64 << 20

# name -> rows/s: (median, slowest round, fastest round).
RESULTS: dict[str, tuple[float, float, float]] = {}
# CPU seconds per round spent in the JVM and in the Python workers (see _spark_cpu).
CPU: dict[str, tuple[float, float]] = {}


def _proc_cpu(pid: str) -> float:
    """utime + stime + reaped children's, in seconds, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _ours(root: int) -> set[str]:
    """The pids of ``root``'s descendants: the JVM this test started and the workers it forked,
    not another session's Spark on the same machine."""
    children: dict[str, list[str]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
        except OSError:
            continue
        children.setdefault(ppid, []).append(pid)
    found: set[str] = set()
    todo = [str(root)]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _spark_cpu() -> tuple[float, float]:
    """(JVM, Python workers) CPU seconds so far: the java process this test started, and the
    PySpark daemon and workers it forked. Shows where a Spark read spends its time."""
    jvm = py = 0.0
    if not os.path.isdir("/proc"):
        return jvm, py
    for pid in _ours(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if argv and argv[0].endswith(b"java"):
                jvm += _proc_cpu(pid)
            elif any(b"pyspark.daemon" in a or b"pyspark/daemon" in a for a in argv):
                py += _proc_cpu(pid)
        except OSError:
            continue
    return jvm, py


class RowTupleReader(DLedgerReader):
    """Baseline (a): the same reader, but read() hands Spark one tuple per row."""

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        for batch in self._read(partition):
            yield from zip(*(c.to_pylist() for c in batch.columns), strict=True)


class RowTupleDataSource(DLedgerDataSource):
    @classmethod
    def name(cls) -> str:
        return "dledger_rows"

    def reader(self, schema: StructType) -> DataSourceReader:
        return RowTupleReader(self.opts, self.nodes, schema)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    node = tmp_path_factory.mktemp("bench-reader") / "dledger-n0"
    cfg = DLedgerConfig(mapped_file_size_for_entry_data=SEGMENT_BYTES)
    s = MmapFileStore(node, cfg, start_services=False)
    rng = np.random.default_rng(42)
    chunk = 100_000
    done = 0
    while done < ROWS:
        n = min(chunk, ROWS - done)
        raw = rng.integers(0, 256, n * BODY, dtype=np.uint8).tobytes()
        s.append_batch([raw[k * BODY : (k + 1) * BODY] for k in range(n)], 1 + done // 1_000_000)
        done += n
    s.update_committed_index(s.ledger_end_term, ROWS - 1)
    s.close()
    return node


@pytest.fixture(scope="module")
def parquet_dir(store: Path) -> Path:
    out = store.parent / "parquet"
    out.mkdir()
    table = read_table(store)
    files = max(2, int(table.nbytes // SEGMENT_BYTES))
    step = -(-table.num_rows // files)
    for k in range(files):
        pq.write_table(table.slice(k * step, step), out / f"part-{k:04d}.parquet", row_group_size=1 << 17)
    return out


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Workers import dledger from the checkout and this module (for the baseline source).
    paths = [str(REPO), str(Path(__file__).parent), *filter(None, os.environ.get("PYTHONPATH", "").split(":"))]
    os.environ["PYTHONPATH"] = ":".join(dict.fromkeys(paths))
    session = (
        SparkSession.builder.master("local[2]")
        .appName("dledger-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(DLedgerDataSource)
    session.dataSource.register(RowTupleDataSource)
    yield session
    session.stop()


def _run(benchmark: BenchmarkFixture, name: str, group: str, fn: Any) -> None:
    """Every side gets the same warm-up round and ROUNDS timed rounds; the figure is the
    median round, with the slowest and fastest beside it."""
    benchmark.group = group
    benchmark.extra_info["rows"] = ROWS
    warmup = 1
    before = _spark_cpu()
    benchmark.pedantic(fn, rounds=ROUNDS, iterations=1, warmup_rounds=warmup)
    after = _spark_cpu()
    st = benchmark.stats.stats
    RESULTS[name] = (ROWS / st.median, ROWS / st.max, ROWS / st.min)
    benchmark.extra_info["rows_per_s"] = round(ROWS / st.median)
    benchmark.extra_info["rows_per_s_range"] = [round(ROWS / st.max), round(ROWS / st.min)]
    if group.startswith("spark"):
        jvm, py = ((a - b) / (ROUNDS + warmup) for a, b in zip(after, before, strict=True))
        CPU[name] = (jvm, py)
        benchmark.extra_info.update(jvm_cpu_s=round(jvm, 2), python_worker_cpu_s=round(py, 2))


def _noop(df: Any) -> None:
    df.write.format("noop").mode("overwrite").save()


def test_spark_dledger_arrow(benchmark: BenchmarkFixture, spark: SparkSession, store: Path) -> None:
    df = spark.read.format("dledger").load(str(store))
    assert df.count() == ROWS
    _run(benchmark, "dledger-arrow", f"spark-{ROWS}", lambda: _noop(df))


def test_spark_dledger_row_tuples(benchmark: BenchmarkFixture, spark: SparkSession, store: Path) -> None:
    df = spark.read.format("dledger_rows").load(str(store))
    assert df.count() == ROWS
    _run(benchmark, "dledger-tuples", f"spark-{ROWS}", lambda: _noop(df))


def test_spark_parquet(benchmark: BenchmarkFixture, spark: SparkSession, parquet_dir: Path) -> None:
    df = spark.read.parquet(str(parquet_dir))
    assert df.count() == ROWS
    _run(benchmark, "parquet", f"spark-{ROWS}", lambda: _noop(df))


def test_read_table(benchmark: BenchmarkFixture, store: Path) -> None:
    def read() -> pa.Table:
        return read_table(store)

    assert read().num_rows == ROWS
    _run(benchmark, "read_table", f"arrow-{ROWS}", read)


def test_read_table_parquet(benchmark: BenchmarkFixture, parquet_dir: Path) -> None:
    """Baseline of (c): pyarrow's own Parquet reader (its threads on) making an Arrow table of
    the same rows, as read_table does from the log (which also checks every body's CRC)."""

    def read() -> pa.Table:
        return pq.read_table(parquet_dir)

    assert read().num_rows == ROWS
    _run(benchmark, "pq.read_table", f"arrow-{ROWS}", read)


@pytest.fixture(scope="module", autouse=True)
def summary() -> Iterator[None]:
    """Prints the figures side by side when the module is done (see them with -s)."""
    yield
    if not RESULTS:
        return
    lines = [
        f"reader benchmark, {ROWS} entries of {BODY}-byte bodies, rows/s, "
        f"median of {ROUNDS} rounds after 1 warm-up [slowest-fastest]:"
    ]
    lines += [f"  {name:16s} {m / 1e6:8.2f} M [{lo / 1e6:.2f}-{hi / 1e6:.2f}]" for name, (m, lo, hi) in RESULTS.items()]
    med = {name: m for name, (m, _, _) in RESULTS.items()}
    arrow = med.get("dledger-arrow")
    if arrow and "dledger-tuples" in med:
        lines.append(f"  arrow / tuples  {arrow / med['dledger-tuples']:8.1f}x  (medians; target >= 10x)")
    if arrow and "parquet" in med:
        lines.append(f"  arrow / parquet {arrow / med['parquet']:8.2f}x  (medians; target >= 0.5x)")
    if "read_table" in med:
        lines.append(f"  read_table      {med['read_table'] / 1e6:8.2f} M rows/s (target >= 10 M)")
    if "read_table" in med and "pq.read_table" in med:
        lines.append(f"  read_table / pq {med['read_table'] / med['pq.read_table']:8.2f}x  (medians)")
    for name, (jvm, py) in CPU.items():
        lines.append(f"  CPU per read, {name:14s}: JVM {jvm:6.2f} s, Python workers {py:6.2f} s")
    print("\n" + "\n".join(lines))
