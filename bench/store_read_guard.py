"""The DLedger store's single reads, this checkout beside another's, in alternating rounds.

    .venv/bin/python bench/store_read_guard.py OTHER/.venv/bin/python --rounds 30

One child per side holds a store of 100 000 entries of 100 B; each round times one pass of a
read kind over 20 000 random indices in each child, the two in turns (ns a read), so that the
machine's load falls on both alike. Printed: each kind's median [min-max] over the rounds per
side, and the median [min-max] of the per-round ratios. What it was made for: the readers' guard against close
(docs/store.md, "Reads against close").
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
import numpy as np
from dledger.store.file import MmapFileStore

store = MmapFileStore(sys.argv[1], start_services=False)
count = 100_000
store.append_batch([i.to_bytes(8, "little") * 12 + b"...." for i in range(count)], 1)
idx = np.random.default_rng(7).integers(0, count, 20_000).tolist()
one = [[i] for i in idx]
kinds = {
    "get": (store.get, idx),
    "get_body": (store.get_body, idx),
    "term_at": (store.term_at, idx),
    "pos_and_size": (store.pos_and_size, idx),
    "lookup_1": (store.lookup, one),
    "get_raw_range_8": (lambda i: store.get_raw_range(i, i + 7, 1 << 20), idx),
}
print(json.dumps(list(kinds)), flush=True)
for line in sys.stdin:  # a kind's name: time one pass over the indices, answer ns a read
    fn, args = kinds[line.strip()]
    t = time.perf_counter_ns()
    for a in args:
        fn(a)
    print((time.perf_counter_ns() - t) / len(args), flush=True)
store.close()
"""


class _Side:
    """A child of one checkout's python holding a filled store, timing a pass when asked."""

    def __init__(self, python: str, tmp: str) -> None:
        # -I and a scratch working directory: the child imports the checkout its python has
        # installed, not the one this script runs in.
        self.python = python
        self.proc = subprocess.Popen(
            [python, "-I", "-c", CHILD, f"{tmp}/node"],
            cwd=tmp,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.kinds: list[str] = json.loads(self._line())

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.python}: the child ended (rc {self.proc.wait()})")
        return line

    def time(self, kind: str) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(kind + "\n")
        self.proc.stdin.flush()
        return float(self._line())

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("other", help="another checkout's python (the baseline)")
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dledger-read-guard-") as a, tempfile.TemporaryDirectory() as b:
        this, other = _Side(sys.executable, a), _Side(args.other, b)
        try:
            for kind in this.kinds:
                for side in (this, other):
                    side.time(kind)  # warm-up pass: pages and caches
                mine, base = [], []
                for r in range(args.rounds):
                    pair = (this, other) if r % 2 == 0 else (other, this)
                    got = {id(side): side.time(kind) for side in pair}
                    mine.append(got[id(this)])
                    base.append(got[id(other)])
                ratios = [x / y for x, y in zip(mine, base, strict=True)]
                print(
                    f"{kind:<16} this {statistics.median(mine):7.1f} [{min(mine):.1f}-{max(mine):.1f}] ns"
                    f"   other {statistics.median(base):7.1f} [{min(base):.1f}-{max(base):.1f}] ns"
                    f"   ratio {statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]",
                    flush=True,
                )
        finally:
            this.stop()
            other.stop()


if __name__ == "__main__":
    main()
