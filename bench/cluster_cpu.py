"""Where a replicated produce round's CPU goes: the entry-level group and the message service
doing the rounds of ``test_bench_mq_cluster.py``'s produce figure, with each member's threads'
CPU time (``/proc/<pid>/task/*/stat``) and the producer's own read around the timed part.

On two cores that both sides keep busy, throughput follows CPU a message. In the runs of
2026-11-27 the CPU a message spread about half as much as messages/s did (2.7-3.3 us against
500k-790k entries/s on the entry-level side), so compare two trees by this figure.
Thread names come from ``py-spy dump`` when py-spy is installed (pip install py-spy);
without it threads are listed by id.

    python bench/cluster_cpu.py --size 100 --rounds 2
"""

from __future__ import annotations

import argparse
import concurrent.futures
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import cluster_bench as cb
from bench.test_bench_mq_cluster import CHUNK, WINDOW, mq_throughput
from bench.thread_cpu import thread_times
from dledger.testing import TestCluster

# What the members still do once the producer has its last answer (followers' dispatch).
SETTLE_S = 1.0


def thread_names(pid: int) -> dict[str, str]:
    """Python thread names by thread id, from ``py-spy dump`` ({} without py-spy)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        return {}
    try:
        out = subprocess.run([spy, "dump", "-p", str(pid)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {m.group(1): m.group(2) for m in re.finditer(r'^Thread (\d+) \([^)]*\): "([^"]*)"', out, re.M)}


class Account:
    """The members' and this process's CPU over a run's timed part (``timed`` of the throughput
    functions), and after SETTLE_S more: ``members[id][thread name] = seconds``."""

    def __init__(self) -> None:
        self.members: dict[str, dict[str, float]] = {}
        self.leader = ""
        self.client = 0.0

    def __call__(self, cluster: TestCluster) -> Callable[[], None]:
        pids = {m: p.pid for m, p in cluster.procs.items()}
        # Asked from a thread of its own: this runs inside the producer's event loop, where the
        # blocking client refuses to run.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            self.leader = pool.submit(cluster.wait_leader, 5).result()
        before = {m: thread_times(pid) for m, pid in pids.items()}
        client0 = time.process_time()

        def done() -> None:
            self.client = time.process_time() - client0
            time.sleep(SETTLE_S)
            for m, pid in pids.items():
                names = thread_names(pid)
                per: dict[str, float] = {}
                for tid, t in thread_times(pid).items():
                    name = names.get(tid, tid)
                    per[name] = per.get(name, 0.0) + t - before[m].get(tid, 0.0)
                self.members[m] = per

        return done

    def total(self) -> float:
        return self.client + sum(sum(per.values()) for per in self.members.values())

    def report(self, side: str, count: int, rate: float) -> str:
        cpu = self.total() / count * 1e6
        lines = [f"{side}: {rate:,.0f}/s, CPU {cpu:.2f} us a message (client {self.client:.2f} s)"]
        for m in sorted(self.members):
            per = self.members[m]
            busy = sorted(((v, k) for k, v in per.items() if v >= 0.01), reverse=True)
            role = "*" if m == self.leader else " "
            threads = "  ".join(f"{k}={v:.2f}" for v, k in busy)
            lines.append(f"   {m}{role} {sum(per.values()):.2f} s  {threads}")
        return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--size", type=int, default=100, help="body bytes")
    ap.add_argument("--count", type=int, default=1_000_000, help="messages a round")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of each side, alternating")
    args = ap.parse_args()
    per_msg: dict[str, list[float]] = {"entries": [], "messages": []}
    for _ in range(args.rounds):
        acc = Account()
        rate = cb.dledger_throughput(args.size, args.count, CHUNK, WINDOW, timed=acc).entries_per_s
        print(acc.report("entry-level", args.count, rate), flush=True)
        per_msg["entries"].append(acc.total() / args.count * 1e6)
        acc = Account()
        rate = mq_throughput(args.size, args.count, timed=acc)
        print(acc.report("message service", args.count, rate), flush=True)
        per_msg["messages"].append(acc.total() / args.count * 1e6)
    e, m = statistics.median(per_msg["entries"]), statistics.median(per_msg["messages"])
    print(f"median CPU a message: entry-level {e:.2f} us, message service {m:.2f} us; ratio {e / m:.2f}x")


if __name__ == "__main__":
    main()
