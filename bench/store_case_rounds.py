"""One case of `dledger bench store`, ours and its baseline in alternating rounds, for one or
more checkouts (each its own interpreter, so builds can be compared in one sitting).

    .venv/bin/python bench/store_case_rounds.py batch_lookup --rounds 7 \\
        --python .venv/bin/python --python OTHER/.venv/bin/python --pairs 2

Each child process builds the case once (full sizes), then times ours and the baseline in turns
for ``--rounds`` rounds and prints its medians [min-max] in the case's unit (millions a second,
or MB/s for byte cases); the interpreters run in turn, ``--pairs`` times.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CHILD = r"""
import shutil, statistics, sys, tempfile, time
from pathlib import Path
from dledger.perf import store_bench as sb

name, rounds = sys.argv[1], int(sys.argv[2])
makers = {f.__name__.removeprefix("case_"): f for f in sb.CASES}
root = Path(tempfile.mkdtemp(prefix="dledger-case-"))
try:
    case = makers[name](root, sb.Sizes.for_mode(False))
    ours, base = [], []
    for _ in range(rounds):
        for side, out in ((case.ours, ours), (case.baseline, base)):
            case.fresh()
            t = time.perf_counter()
            units = side()
            out.append(units / (time.perf_counter() - t) / 1e6)
    for c in case.cleanup:
        c()
finally:
    shutil.rmtree(root, ignore_errors=True)
m, b = statistics.median(ours), statistics.median(base)
print(f"{sys.executable}: {name} ours {m:.1f} [{min(ours):.1f}-{max(ours):.1f}] M/s, "
      f"{case.baseline_name} {b:.1f} [{min(base):.1f}-{max(base):.1f}] M/s, ratio {m / b:.2f}x")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", help="a case of dledger bench store: batch_lookup, random_get, ...")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--python", action="append", default=None, help="an interpreter (repeatable)")
    ap.add_argument("--pairs", type=int, default=1)
    args = ap.parse_args()
    pythons = args.python or [sys.executable]
    for _ in range(args.pairs):
        for py in pythons:
            # -P: never import dledger from the caller's working directory.
            subprocess.run([py, "-P", "-c", CHILD, args.case, str(args.rounds)], check=True)


if __name__ == "__main__":
    main()
