"""The longest record of a packed send (``SendMessagePreparer._packed``): its lengths as two
``np.diff`` calls, as before, against the subtraction of two views of the summed offsets, the
way it is taken now; the CPU of each (``time.thread_time``), alternating rounds.

    python bench/remoting_record_lengths.py [--rounds 9] [--calls 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

BATCH = 32


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=20000)
    args = ap.parse_args()
    # A remoting batch of 32 x 1 KiB: body and properties offsets, a leading 0 each.
    boffs = np.arange(BATCH + 1, dtype=np.int64) * 1024
    poffs = np.arange(BATCH + 1, dtype=np.int64) * 70

    def by_diff() -> int:
        return int((np.diff(boffs) + np.diff(poffs)).max())

    def by_views() -> int:
        ends = boffs + poffs
        return int((ends[1:] - ends[:-1]).max())

    assert by_diff() == by_views()
    ways: dict[str, Callable[[], int]] = {"np.diff": by_diff, "views": by_views}
    got: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(args.rounds):
        for name, f in ways.items():
            t0 = time.thread_time()
            for _ in range(args.calls):
                f()
            got[name].append((time.thread_time() - t0) / args.calls * 1e6)
    for name, xs in got.items():
        print(f"{name}: {statistics.median(xs):.2f} us CPU a send ({min(xs):.2f}-{max(xs):.2f})")
    r = [v / d for v, d in zip(got["views"], got["np.diff"], strict=True)]
    print(f"views / np.diff per round: {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})")


if __name__ == "__main__":
    main()
