"""``batch_append_1k`` (dledger.perf.store_bench) by thread CPU time: MB of entries written per
CPU-second of the writing thread, ours and the baseline (``os.writev`` into a preallocated
file) alternating round by round, medians of ``ROUNDS`` with their range. Thread CPU time
counts the kernel's work in the syscalls and page faults, not the time the thread waited for a
core, so on a loaded 2-core machine it tells what the store costs where wall-clock rounds
mostly tell what else ran. Run it against two trees to compare them:

    PYTHONPATH=/path/to/tree .venv/bin/python bench/append_cpu.py 9
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from dledger.perf import store_bench as sb


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    case = sb.case_batch_append_1k(Path(tempfile.mkdtemp(prefix="dledger-bench-")), sb.Sizes.for_mode(quick=False))
    ours: list[float] = []
    base: list[float] = []
    try:
        for _ in range(rounds):
            for fn, out in ((case.ours, ours), (case.baseline, base)):
                case.fresh()
                t0 = time.thread_time()
                units = fn()
                out.append(units / (time.thread_time() - t0) / sb.MB)
    finally:
        for cleanup in case.cleanup:
            cleanup()
    mo, mb = statistics.median(ours), statistics.median(base)
    print(
        f"MB per CPU-second, median of {rounds} [range]: ours {mo:,.0f} [{min(ours):,.0f}-{max(ours):,.0f}], "
        f"os.writev {mb:,.0f} [{min(base):,.0f}-{max(base):,.0f}], ratio of medians {mo / mb:.2f}x"
    )


if __name__ == "__main__":
    main()
