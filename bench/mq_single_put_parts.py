"""Where a single put of issue 40's workload spends the put thread's CPU: each step of
``MessageStore.put_message`` called alone, 100,000 times, on a store the workload has warmed
(CPU time of this thread, the median of 3 runs; the parts overlap, ``put_message`` is them all;
``commitlog.put_one`` alone writes one UNIQ_KEY again and again, into a store deleted after):

    python bench/mq_single_put_parts.py classic 100

Compare two trees in alternating processes, as ``mq_workload_cpu.py`` says.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.test_bench_mq_workload import BORN_HOST, CLUSTER, TAGS, TOPIC, Producer, workload_config
from dledger.rocketmq.store.encode import check_message_ints
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore


def cpu_us(f: Callable[[], object], n: int = 100_000) -> float:
    """This thread's CPU a call of ``f``, the median of 3 runs of ``n`` calls."""
    runs = []
    for _ in range(3):
        c0 = time.thread_time()
        for _ in range(n):
            f()
        runs.append((time.thread_time() - c0) / n * 1e6)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("mode", choices=["classic", "dledger"])
    ap.add_argument("size", type=int, help="body bytes")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dledger-put-parts-"))
    try:
        with MessageStore(root, workload_config(args.mode)) as store:
            p = Producer(store, 0, "single", True, args.size)
            p.put(20_000)  # warm: files, caches, templates
            body, prep, log, kernel = p.body, store.preparer, store.commitlog, store._single_put.put
            props = {"CLUSTER": CLUSTER}
            msg = Message(TOPIC, body, queue_id=3, tags=TAGS, keys="key-0-1", properties=props, born_host=BORN_HOST)
            tpl = prep.put_template(msg)
            head, counter, now = prep.uniq.reserve_raw(1)
            parts: list[tuple[str, Callable[[], object]]] = [
                ("nothing (the loop)", lambda: None),
                (
                    "Message(...)",
                    lambda: Message(
                        TOPIC, body, queue_id=3, tags=TAGS, keys="key-0-1", properties=props, born_host=BORN_HOST
                    ),
                ),
                ("check_message_ints", lambda: check_message_ints(msg)),
                ("put_template (keyed)", lambda: prep.put_template(msg)),
                ("UNIQ_KEY reserve_raw", lambda: prep.uniq.reserve_raw(1)),
                ("commitlog.put_one", lambda: log.put_one(tpl, body, 0, now, 0, 0, head, counter)),
                ("SinglePut.put (kernel)", lambda: kernel(msg)),
                ("put_message", lambda: store.put_message(msg)),
                ("the workload's put", lambda: p.put(1)),
            ]
            for name, f in parts:
                print(f"{args.mode} {args.size} B  {name:23s} {cpu_us(f):5.2f} us")
            if not store.wait_dispatched(600):
                raise SystemExit("dispatch did not catch up within 600 s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
