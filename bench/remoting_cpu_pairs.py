"""What ``remoting_send_cpu.py`` (a member) and ``remoting_layer_cpu.py`` (the bare remoting
server) share: a process's CPU over the bench's remoting sends, and the alternation of this
tree with another's, N pairs, with the medians, their ranges and the pairs' ratios."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

import bench.test_bench_remoting as B  # noqa: E402


def process_cpu_s(pid: int) -> float:
    """User + system CPU of ``pid``, every thread (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def us_per_send(pid: int, addr: str, warm_batches: int, batches: int) -> float:
    """``warm_batches`` sends to warm up, then the CPU ``pid`` spends per send over ``batches``."""
    B.BATCHES = warm_batches
    asyncio.run(B.remoting_send(addr, "T"))
    before = process_cpu_s(pid)
    B.BATCHES = batches
    asyncio.run(B.remoting_send(addr, "T"))
    return (process_cpu_s(pid) - before) / (batches + 1) * 1e6


def alternate(doc: str, what: str, measure: Callable[[Path, int], float]) -> None:
    """The command line (``[OTHER_TREE] [--pairs N] [--batches B]``): ``measure(tree,
    batches)`` for this tree and OTHER_TREE in turn, N pairs; ``what`` names the figure."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("other", nargs="?", type=Path, help="another revision's source tree, kernels built")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--batches", type=int, default=3000)
    args = ap.parse_args()
    trees = {"this": HERE} if args.other is None else {"other": args.other.resolve(), "this": HERE}
    got: dict[str, list[float]] = {k: [] for k in trees}
    loads = []
    for _ in range(args.pairs):
        for name, tree in trees.items():
            got[name].append(measure(tree, args.batches))
            loads.append(os.getloadavg()[0])
    for name, xs in got.items():
        print(
            f"{name} ({trees[name]}): {what} per send of 32, median {statistics.median(xs):.0f} us "
            f"({min(xs):.0f}-{max(xs):.0f}), runs {[round(x) for x in xs]}"
        )
    if "other" in got:
        r = [t / o for t, o in zip(got["this"], got["other"], strict=True)]
        print(f"this / other per pair: median {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})")
    print(f"load average (1 min) during the runs: {min(loads):.1f}-{max(loads):.1f}")
    print(f"sends answered SYSTEM_BUSY and sent again: {B.SENT_AGAIN[0]}")
