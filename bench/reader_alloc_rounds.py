"""``read_messages`` of every column under different allocator settings, in alternating child
processes over one store: where the table's fresh pages come from decides how many page faults
a row costs (docs/spark.md, "Where a row's time goes").

    DLEDGER_BENCH_ROWS=2000000 PYTHONPATH=. .venv/bin/python bench/reader_alloc_rounds.py

The kernels' outputs are numpy arrays handed to Arrow without a copy, so glibc's malloc, not
pyarrow's memory pool, supplies them; the settings are glibc tunables. Each round runs one child
per setting (order rotated); a child reads the store ``DLEDGER_BENCH_READS`` times (3) on one
thread and reports the first read's CPU rows/s and minor faults per row, and the later reads' median
(which may reuse the pages the first freed). Printed: median [range] over
``DLEDGER_BENCH_ROUNDS`` (5) rounds, and the load average.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROWS = int(os.environ.get("DLEDGER_BENCH_ROWS", "2000000"))
ROUNDS = int(os.environ.get("DLEDGER_BENCH_ROUNDS", "5"))
READS = int(os.environ.get("DLEDGER_BENCH_READS", "3"))
SETTINGS = {
    "glibc default": "",
    "glibc hugetlb=1 (THP advised)": "glibc.malloc.hugetlb=1",
    "heap only, 64 MiB top pad": "glibc.malloc.mmap_threshold=33554432:glibc.malloc.top_pad=67108864",
    "heap only, 64 MiB top pad, hugetlb=1": (
        "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=33554432:glibc.malloc.top_pad=67108864"
    ),
}


def child(store: str) -> None:
    from dledger.rocketmq import read_messages

    cpu, faults = [], []
    for _ in range(READS):
        before, c = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()
        table = read_messages(store, threads=1)
        cpu.append(ROWS / (time.process_time() - c))
        faults.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / ROWS)
        assert table.num_rows == ROWS
        del table
    # The first read is what a process reading once gets; later ones may reuse freed pages.
    print(json.dumps({"cpu": cpu[0], "faults": faults[0], "cpu_again": statistics.median(cpu[1:] or cpu)}))


def main() -> None:
    from bench.fused_rounds import make_store

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        make_store(store)
        got: dict[str, list[dict[str, float]]] = {k: [] for k in SETTINGS}
        names = list(SETTINGS)
        for r in range(ROUNDS):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                env = dict(os.environ)
                if SETTINGS[name]:
                    env["GLIBC_TUNABLES"] = SETTINGS[name]
                out = subprocess.run(
                    [sys.executable, __file__, "--child", str(store)], env=env, capture_output=True, text=True
                )
                if out.returncode:
                    raise SystemExit(out.stderr)
                got[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {r}: " + ", ".join(f"{k} {v[-1]['cpu'] / 1e6:.2f} M/s" for k, v in got.items()), flush=True)
        print(f"{ROWS} rows, {ROUNDS} rounds, {READS} reads a child, load {os.getloadavg()}")
        for name, v in got.items():
            cpu = [x["cpu"] / 1e6 for x in v]
            fl = [x["faults"] for x in v]
            again = [x["cpu_again"] / 1e6 for x in v]
            print(
                f"{name}: first read CPU {statistics.median(cpu):.2f} M rows/s [{min(cpu):.2f}-{max(cpu):.2f}], "
                f"minor faults a row {statistics.median(fl):.3f} [{min(fl):.3f}-{max(fl):.3f}]; "
                f"later reads {statistics.median(again):.2f} [{min(again):.2f}-{max(again):.2f}]"
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
    else:
        main()
