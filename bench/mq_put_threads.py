"""Single puts of issue 40's workload from several producer threads in one process: the rate,
CPU a message and context switches a message, per producer thread and per store thread.
What it measures is contention: a producer thread that sleeps once a put (voluntary switches
near 1000 a 1000 messages) waits for the put lock or the GIL at every put, and its CPU a
message grows with the hand-overs (docs/message-store.md, "Puts from several threads").

    .venv/bin/python bench/mq_put_threads.py {classic,dledger} --threads 4 --messages 200000

Two trees compare in alternating processes (run from each tree's directory, with its venv).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.test_bench_mq_workload import Producer, run_threads, workload_config
from bench.thread_cpu import thread_times
from dledger.rocketmq.store.message_store import MessageStore


def switches(path: str) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of the thread whose status file is ``path``."""
    with open(path) as f:
        status = f.read()
    vol = int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
    invol = int(status.split("\nnonvoluntary_ctxt_switches:")[1].split()[0])
    return vol, invol


def store_threads() -> dict[str, tuple[float, int, int]]:
    """CPU seconds and switches of every thread of this process, by thread id."""
    out = {}
    for tid, cpu in thread_times().items():
        try:
            vol, invol = switches(f"/proc/self/task/{tid}/status")
        except OSError:
            continue  # the thread ended
        out[tid] = (cpu, vol, invol)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("mode", choices=["classic", "dledger"])
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--size", type=int, default=100, help="body bytes")
    ap.add_argument("--messages", type=int, default=200_000, help="timed puts, over all threads")
    args = ap.parse_args()
    each = args.messages // args.threads
    n = each * args.threads
    root = Path(tempfile.mkdtemp(prefix="dledger-put-threads-"))
    try:
        with MessageStore(root, workload_config(args.mode)) as store:
            producers = [Producer(store, t, "single", True, args.size) for t in range(args.threads)]
            run_threads(producers, max(1, 20_000 // args.threads))  # warm: files, caches, templates
            if not store.wait_dispatched(600):
                raise SystemExit("dispatch did not catch up within 600 s")
            mine: dict[int, tuple[float, int, int]] = {}

            def put(p: Producer) -> None:
                v0, i0 = switches("/proc/thread-self/status")
                c0 = time.thread_time()
                p.put(each)
                v1, i1 = switches("/proc/thread-self/status")
                mine[p.thread] = (time.thread_time() - c0, v1 - v0, i1 - i0)

            before = store_threads()
            t0, p0 = time.perf_counter(), time.process_time()
            threads = [threading.Thread(target=put, args=(p,)) for p in producers]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            wall, cpu = time.perf_counter() - t0, time.process_time() - p0
            after = store_threads()
            names = {str(t.native_id): t.name for t in threading.enumerate()}
            print(
                f"{args.mode} single {args.size} B keyed, {args.threads} threads: {n / wall / 1e3:.0f}k msgs/s, "
                f"process CPU {cpu / n * 1e6:.2f} us/msg, load {os.getloadavg()[0]:.1f}"
            )
            for t, (c, vol, invol) in sorted(mine.items()):
                print(
                    f"  producer-{t:<22d} {c / each * 1e6:6.2f} us/msg of its own, "
                    f"switches {vol / each * 1e3:6.1f} voluntary, {invol / each * 1e3:6.1f} involuntary a 1000"
                )
            for tid, (c, vol, invol) in after.items():
                c0, v0, i0 = before.get(tid, (0.0, 0, 0))
                if c - c0 > 0 and tid in names:
                    print(
                        f"  {names[tid]:32s} {(c - c0) / n * 1e6:6.2f} us/msg, switches "
                        f"{(vol - v0) / n * 1e3:6.1f} voluntary, {(invol - i0) / n * 1e3:6.1f} involuntary a 1000"
                    )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
