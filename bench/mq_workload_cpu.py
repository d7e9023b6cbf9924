"""CPU a message of issue 40's workload (``test_bench_mq_workload.py``'s producer), per thread:
the put thread's, dispatch's, the store's services'. On a machine others share, wall time says
how much of a core a run was given; CPU per message says what the code costs, and two trees
compare on it in alternating processes:

    for i in 1 2 3; do for t in /path/to/old /path/to/new; do
        (cd $t && PYTHONPATH=$t python bench/mq_workload_cpu.py classic single 100); done; done

(an older tree needs this file and ``test_bench_mq_workload.py`` copied into its ``bench/``).
``--no-kernel`` puts single messages by the Python path the one-call kernel (``K.SinglePut``)
replaced, in the same tree: its baseline in alternating processes without a second build.
Prints the put thread's CPU a message for each of three timed runs of ``--messages`` (min and
median), then each thread's over all three and dispatch's catch-up.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.test_bench_mq_workload import Producer, workload_config
from bench.thread_cpu import thread_times
from dledger.rocketmq.store.message_store import MessageStore


class _NoKernel:
    def put(self, msg: object) -> None:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("mode", choices=["classic", "dledger"])
    ap.add_argument("kind", choices=["single", "batch"])
    ap.add_argument("size", type=int, help="body bytes")
    ap.add_argument("--unkeyed", action="store_true", help="no key per message (the same run's baseline)")
    ap.add_argument("--messages", type=int, default=0, help="a timed run (default 30,000 single, 100,000 batch)")
    ap.add_argument(
        "--no-kernel",
        action="store_true",
        help="single puts by the Python path (put_template, put_one), the one-call kernel's baseline",
    )
    args = ap.parse_args()
    n = args.messages or (30_000 if args.kind == "single" else 100_000)
    n = max(32, n // 32 * 32)
    root = Path(tempfile.mkdtemp(prefix="dledger-workload-cpu-"))
    try:
        with MessageStore(root, workload_config(args.mode)) as store:
            if args.no_kernel:
                # K.SinglePut handing every message back: put_message's general path does it all.
                store._single_put = _NoKernel()
            p = Producer(store, 0, args.kind, not args.unkeyed, args.size)
            p.put(max(32, n // 4 // 32 * 32))  # warm: files, caches, templates
            if not store.wait_dispatched(600):
                raise SystemExit("dispatch did not catch up within 600 s")
            per_run = []
            cpu0 = thread_times()
            for _ in range(3):
                c0 = time.thread_time()
                p.put(n)
                per_run.append((time.thread_time() - c0) / n * 1e6)
            t0 = time.perf_counter()
            if not store.wait_dispatched(600):
                raise SystemExit("dispatch did not catch up within 600 s")
            catch_up = time.perf_counter() - t0
            cpu1 = thread_times()
            names = {str(t.native_id): t.name for t in threading.enumerate()}
            keys = ("unkeyed" if args.unkeyed else "keyed") + (", no kernel" if args.no_kernel else "")
            print(
                f"{args.mode} {args.kind} {args.size} B {keys}: put thread {min(per_run):.2f} us/msg min, "
                f"{statistics.median(per_run):.2f} median of 3; dispatch caught up {catch_up:.2f} s after"
            )
            for tid, v in sorted(cpu1.items(), key=lambda kv: cpu0.get(kv[0], 0.0) - kv[1]):
                spent = v - cpu0.get(tid, 0.0)
                if spent > 0:
                    print(f"  {names.get(tid, tid):32s} {spent / (3 * n) * 1e6:6.2f} us/msg")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
