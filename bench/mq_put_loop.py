"""One process, one fresh store: ``put_batch`` of 32 bodies as ``test_bench_mq.py`` calls it
(or with ``--single``, ``put_message`` of one), then the wait for dispatch; prints microseconds
a batch (a message) for the puts alone, and with the wait.

For comparing two trees on a noisy machine, alternate processes of each many times and compare
the medians (the bench rows take minutes a run; this takes a second):

    for i in $(seq 8); do for t in /path/to/old /path/to/new; do
        (cd $t && PYTHONPATH=$t python bench/mq_put_loop.py dledger 100); done; done

``--threads`` also prints the CPU each of the process's threads spent a message, from the first
put until dispatch caught up (the put thread, dispatch, the store's services): on two cores,
whether the second core keeps up decides how fast the put thread can go.
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

from bench.thread_cpu import thread_times
from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore

BATCH = 32


def loop_parser(doc: str | None) -> argparse.ArgumentParser:
    """The arguments every put loop here takes: the commit log, the body size, ``--single``."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0] if doc else None)
    ap.add_argument("mode", choices=["classic", "dledger"])
    ap.add_argument("size", type=int, help="body bytes")
    ap.add_argument("--single", action="store_true", help=f"put_message of one message, not put_batch of {BATCH}")
    return ap


def loop_config(mode: str) -> MessageStoreConfig:
    """The store a put loop fills: ``test_bench_mq.py``'s commit-log file size and store host."""
    return MessageStoreConfig(
        enable_dledger_commit_log=mode == "dledger",
        mapped_file_size_commit_log=1 << 30,
        store_host="10.0.0.1:10911",
    )


def main() -> None:
    ap = loop_parser(__doc__)
    ap.add_argument("--batches", type=int, default=8192, help="puts (batches, or messages with --single)")
    ap.add_argument("--threads", action="store_true", help="also print each thread's CPU a message")
    args = ap.parse_args()
    unit = "message" if args.single else "batch"
    root = Path(tempfile.mkdtemp(prefix="dledger-put-loop-"))
    try:
        with MessageStore(root, loop_config(args.mode)) as store:
            bodies = [os.urandom(args.size)] * BATCH
            msg = Message("TopicA", bodies[0], tags="TagA")
            cpu0 = thread_times()
            t0 = time.perf_counter()
            if args.single:
                for _ in range(args.batches):
                    store.put_message(msg)
            else:
                for _ in range(args.batches):
                    store.put_batch("TopicA", bodies, tags="TagA")
            t1 = time.perf_counter()
            if not store.wait_dispatched(600):
                raise SystemExit("dispatch did not catch up within 600 s")
            t2 = time.perf_counter()
            cpu1 = thread_times()
            names = {str(t.native_id): t.name for t in threading.enumerate()}
        per = 1e6 / args.batches
        print(f"put {(t1 - t0) * per:.2f} us/{unit}, with dispatch caught up {(t2 - t0) * per:.2f} us/{unit}")
        if args.threads:
            messages = args.batches * (1 if args.single else BATCH)
            spent = {names.get(tid, tid): t - cpu0.get(tid, 0.0) for tid, t in cpu1.items()}
            busy = sorted(((v, k) for k, v in spent.items() if v >= 0.005), reverse=True)
            total = sum(spent.values()) / messages * 1e6
            print(f"CPU {total:.2f} us/message: " + "  ".join(f"{k}={v / messages * 1e6:.2f}" for v, k in busy))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
