"""A PySyncObj 0.3.17 member for the cluster benchmark's baseline (run as a script).

Tuned as its own docs allow for throughput: log compaction off (thresholds out of reach),
a 1 MiB append-entries batch, 1 MiB socket buffers, a 10^6-command queue, a 5 ms tick, no
journal file (in memory: less durable than dledger, which writes every entry to disk).

    python -m dledger.perf.pysyncobj_peer SELF PARTNER,PARTNER [--drive N --size B --window W --seconds S]

A driving member waits for a leader, then keeps up to W appends in flight until N have
committed, and prints one JSON line: {"committed": N, "seconds": t}. Other members serve
until killed.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated


class Log(SyncObj):
    def __init__(self, self_addr: str, partners: list[str]) -> None:
        conf = SyncObjConf(
            logCompactionMinEntries=2**31,
            logCompactionMinTime=10**9,
            appendEntriesBatchSizeBytes=2**20,
            sendBufferSize=2**20,
            recvBufferSize=2**20,
            commandsQueueSize=10**6,
            autoTickPeriod=0.005,
        )
        super().__init__(self_addr, partners, conf)
        self.count = 0

    @replicated
    def append(self, body: bytes) -> int:
        self.count += 1
        return self.count


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("self_addr")
    p.add_argument("partners")
    p.add_argument("--drive", type=int, default=0)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--window", type=int, default=5000)
    p.add_argument("--seconds", type=float, default=60.0)
    args = p.parse_args()
    log = Log(args.self_addr, args.partners.split(","))
    if not args.drive:
        time.sleep(args.seconds)
        return 0
    deadline = time.monotonic() + 30
    while log._getLeader() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    body = b"x" * args.size
    sem = threading.Semaphore(args.window)
    done = threading.Event()
    state = {"ok": 0, "failed": 0}
    lock = threading.Lock()

    def cb(_result: object, err: int) -> None:
        with lock:
            state["ok" if err == FAIL_REASON.SUCCESS else "failed"] += 1
            if state["ok"] + state["failed"] >= args.drive:
                done.set()
        sem.release()

    t0 = time.monotonic()
    for _ in range(args.drive):
        sem.acquire()
        log.append(body, callback=cb)
    done.wait(args.seconds)
    elapsed = time.monotonic() - t0
    print(json.dumps({"committed": state["ok"], "failed": state["failed"], "seconds": elapsed}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
