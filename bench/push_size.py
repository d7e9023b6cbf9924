"""Replicated produce at several ``max_batch_push_size`` values, alternating round by round:
messages/s and the group's CPU a message (``bench/cluster_cpu.py``'s accounting), for the
entry-level group or the message service, with ``test_bench_mq_cluster.py``'s producer.

    python bench/push_size.py --side messages --size 1024 --count 400000 --rounds 3 --mib 1 4

The figures of docs/performance.md ("Push size") come from this.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import cluster_bench as cb
from bench.cluster_cpu import Account
from bench.test_bench_mq_cluster import CHUNK, WINDOW, mq_throughput


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--side", choices=("entries", "messages"), default="messages")
    ap.add_argument("--size", type=int, default=100, help="body bytes")
    ap.add_argument("--count", type=int, default=1_000_000, help="messages a round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each push size, alternating")
    ap.add_argument("--mib", type=int, nargs="+", default=[1, 4], help="push sizes in MiB")
    args = ap.parse_args()
    got: dict[int, list[tuple[float, float]]] = {m: [] for m in args.mib}
    for _ in range(args.rounds):
        for mib in args.mib:
            extra = ["--max-batch-push-size", str(mib << 20)]
            acc = Account()
            if args.side == "messages":
                rate = mq_throughput(args.size, args.count, timed=acc, extra=extra)
            else:
                rate = cb.dledger_throughput(args.size, args.count, CHUNK, WINDOW, extra=extra, timed=acc).entries_per_s
            cpu = acc.total() / args.count * 1e6
            got[mib].append((rate, cpu))
            members = " ".join(f"{m}={sum(per.values()):.2f}s" for m, per in sorted(acc.members.items()))
            print(f"{mib} MiB: {rate:,.0f}/s, CPU {cpu:.2f} us a message ({members})", flush=True)
    for mib, rows in got.items():
        rates = [r for r, _ in rows]
        print(
            f"{mib} MiB: median {statistics.median(rates):,.0f}/s [{min(rates):,.0f}-{max(rates):,.0f}], "
            f"CPU {statistics.median(c for _, c in rows):.2f} us a message"
        )


if __name__ == "__main__":
    main()
