"""Whether this machine's CPUs slow each other: the thread CPU time of a fixed CRC loop, alone
and beside a process that keeps another CPU busy (a CRC loop, or a pure Python loop), in
alternating trials. On a machine whose CPUs are separate cores the ratios stay near 1.0; where
the virtual CPUs can land on one physical core's hyperthreads, or the host is shared, work
moved to "the other CPU" (a pre-writer, dispatch) also slows the thread it was taken from.

    python bench/vcpu_share.py --trials 6
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
import zlib

from dledger.child_process import python_code

SPINNERS = {
    "crc32": "import os, zlib\nd = os.urandom(1 << 16)\nwhile True: zlib.crc32(d)",
    "python": "while True: pass",
}


def work(data: bytes, loops: int) -> float:
    """Thread CPU seconds of ``loops`` CRCs of ``data``."""
    c = time.thread_time()
    for _ in range(loops):
        zlib.crc32(data)
    return time.thread_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--trials", type=int, default=6)
    ap.add_argument("--loops", type=int, default=20_000)
    args = ap.parse_args()
    data = os.urandom(1 << 16)
    ratios: dict[str, list[float]] = {k: [] for k in SPINNERS}
    for _ in range(args.trials):
        for kind, code in SPINNERS.items():
            alone = work(data, args.loops)
            spinner = subprocess.Popen(python_code(code, die_with_parent=True))
            try:
                time.sleep(0.3)  # running before the timed part
                beside = work(data, args.loops)
            finally:
                spinner.kill()
                spinner.wait()
            ratios[kind].append(beside / alone)
    for kind, rs in ratios.items():
        shown = " ".join(f"{r:.2f}" for r in rs)
        print(f"beside a {kind} loop: CPU time x{statistics.median(rs):.2f} (median; trials {shown})")


if __name__ == "__main__":
    main()
