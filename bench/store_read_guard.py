"""The DLedger store's single reads, this checkout beside another's, in alternating rounds.

    .venv/bin/python bench/store_read_guard.py OTHER/.venv/bin/python --rounds 7

Each round runs one child per side (this checkout's python first, then the other's, in turns)
that fills a store with 100 000 entries of 100 B and times each read kind over 200 000 random
indices (ns a read). Printed: each kind's median [min-max] over the rounds per side, and the
median of the per-round ratios. What it was made for: the readers' guard against close
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
idx = np.random.default_rng(7).integers(0, count, 200_000).tolist()
one = [[i] for i in idx[:50_000]]
out = {}


def timed(name, fn, args):
    t = time.perf_counter_ns()
    for a in args:
        fn(a)
    out[name] = (time.perf_counter_ns() - t) / len(args)


for _ in range(2):  # the first pass warms the pages and the caches
    timed("get", store.get, idx)
    timed("get_body", store.get_body, idx)
    timed("term_at", store.term_at, idx)
    timed("pos_and_size", store.pos_and_size, idx)
    timed("lookup_1", store.lookup, one)
    timed("get_raw_range_8", lambda i: store.get_raw_range(i, i + 7, 1 << 20), idx[:50_000])
store.close()
print(json.dumps(out))
"""


def _one(python: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="dledger-read-guard-") as tmp:
        # -I and a scratch working directory: the child imports the checkout its python has
        # installed, not the one this script runs in.
        proc = subprocess.run(
            [python, "-I", "-c", CHILD, f"{tmp}/node"], cwd=tmp, capture_output=True, text=True, timeout=600
        )
    if proc.returncode != 0:
        raise SystemExit(f"{python}: rc {proc.returncode}\n{proc.stderr[-2000:]}")
    result: dict[str, float] = json.loads(proc.stdout)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("other", help="another checkout's python (the baseline)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"this": [], "other": []}
    for r in range(args.rounds):
        order = [("this", sys.executable), ("other", args.other)]
        for side, python in order if r % 2 == 0 else order[::-1]:
            runs[side].append(_one(python))
    for kind in runs["this"][0]:
        mine = [run[kind] for run in runs["this"]]
        base = [run[kind] for run in runs["other"]]
        ratios = [a / b for a, b in zip(mine, base, strict=True)]
        print(
            f"{kind:<16} this {statistics.median(mine):7.1f} [{min(mine):.1f}-{max(mine):.1f}] ns"
            f"   other {statistics.median(base):7.1f} [{min(base):.1f}-{max(base):.1f}] ns"
            f"   ratio {statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]"
        )


if __name__ == "__main__":
    main()
