"""A PySyncObj 0.3.17 member for the cluster benchmark's baseline (run as a script).

Tuned as its own docs allow for throughput: log compaction off (thresholds out of reach),
a 1 MiB append-entries batch, 1 MiB socket buffers, a 10^6-command queue, a 5 ms tick, no
journal file (in memory: less durable than dledger, which writes every entry to disk).

    python bench/pysyncobj_peer.py SELF PARTNER,PARTNER [--drive N --size B --window W --seconds S]
    python bench/pysyncobj_peer.py SELF PARTNER,PARTNER --latency N --unbatched [--size B]
    python bench/pysyncobj_peer.py SELF PARTNER,PARTNER --control [--failover-profile P]

A driving member stands for election first (shorter timeouts), waits for a leader, then
keeps up to W appends in flight until N have committed, and prints one JSON line:
{"committed": N, "seconds": t, "leader": whether it led}. Other members serve until killed.

With ``--latency N`` the driver makes N appends one at a time (``sync=True``: each waits
for its commit) and prints {"latencies": [seconds, ...], "leader": ...}. For that job every
member runs with ``--unbatched``: PySyncObj's docs name ``appendEntriesUseBatch=False`` as
the setting that "improves single request speed" (a command wakes the loop at once instead
of waiting for the next tick's batch). In that mode PySyncObj's followers print "truncating
already-applied log entries" now and then: its own warning, left as it prints it.

With ``--control`` a member serves and answers lines on its stdin, one line each on its
stdout: ``role`` -> ``leader`` or ``follower``; ``append`` -> ``ok`` once one write committed
(made again whenever PySyncObj fails it, as our client retries), ``fail`` after 30 s. The
failover bench (cluster_bench.pysyncobj_failover) drives three such members.
``--failover-profile`` sets the timers PySyncObj's docs name for how soon a dead leader is
replaced (see FAILOVER_PROFILES); every member of a group gets the same one, none stands first.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

# Election timeouts (seconds): the driving member stands first, so that it leads and its
# appends need no forwarding; the others wait well past it. Both satisfy PySyncObj's own
# checks (raftMinTimeout > 3 x appendEntriesPeriod).
DRIVER_TIMEOUTS = (0.35, 0.5)
OTHER_TIMEOUTS = (1.5, 2.5)

# Failover profiles, as PySyncObj's SyncObjConf documents its timers: a follower that hears
# nothing from the leader for a random raftMinTimeout..raftMaxTimeout stands for election;
# the leader sends append entries (its heartbeat) every appendEntriesPeriod, and PySyncObj
# refuses a raftMinTimeout of 3 x appendEntriesPeriod or less. "defaults" is SyncObjConf's
# own (0.1 s heartbeat, 0.4-1.4 s); "low-latency" is the shortest its check allows at the
# 50 ms heartbeat of our low-latency profile (cluster_bench.LOW_LATENCY: a dead leader noticed
# after 150 ms, votes 20-80 ms apart), with the 5 ms tick that lets it act on a timeout at once.
FAILOVER_PROFILES: dict[str, dict[str, float]] = {
    "defaults": {},
    "low-latency": {
        "appendEntriesPeriod": 0.05,
        "raftMinTimeout": 0.155,
        "raftMaxTimeout": 0.235,
        "autoTickPeriod": 0.005,
    },
}


class Log(SyncObj):
    def __init__(
        self,
        self_addr: str,
        partners: list[str],
        driver: bool = False,
        batch: bool = True,
        failover: dict[str, float] | None = None,
    ) -> None:
        if failover is not None:
            conf = SyncObjConf(**failover)
        else:
            low, high = DRIVER_TIMEOUTS if driver else OTHER_TIMEOUTS
            conf = SyncObjConf(
                raftMinTimeout=low,
                raftMaxTimeout=high,
                logCompactionMinEntries=2**31,
                logCompactionMinTime=10**9,
                appendEntriesBatchSizeBytes=2**20,
                sendBufferSize=2**20,
                recvBufferSize=2**20,
                commandsQueueSize=10**6,
                autoTickPeriod=0.005,
                appendEntriesUseBatch=batch,
            )
        super().__init__(self_addr, partners, conf)
        self.count = 0

    @replicated
    def append(self, body: bytes) -> int:
        self.count += 1
        return self.count


def control(log: Log) -> int:
    """Answer ``role`` and ``append`` lines on stdin until it closes (see the module doc)."""
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "role":
            answer = "leader" if log._isLeader() else "follower"
        elif cmd == "append":
            answer = "ok" if append_until_committed(log, deadline=time.monotonic() + 30) else "fail"
        else:
            answer = f"error: unknown command {cmd!r}"
        print(answer, flush=True)
    return 0


def append_until_committed(log: Log, deadline: float) -> bool:
    """One write, made again at once whenever PySyncObj reports it failed (the leader it was
    forwarded to is gone, or changed), until it commits; False past ``deadline``. A command
    made while there is no leader waits for one (commandsWaitLeader, on by default)."""
    while time.monotonic() < deadline:
        done = threading.Event()
        outcome: list[int] = []

        def cb(_result: object, err: int, outcome: list[int] = outcome, done: threading.Event = done) -> None:
            outcome.append(err)
            done.set()

        log.append(b"failover", callback=cb)
        if done.wait(max(0.0, deadline - time.monotonic())) and outcome[0] == FAIL_REASON.SUCCESS:
            return True
    return False


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("self_addr")
    p.add_argument("partners")
    p.add_argument("--drive", type=int, default=0)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--window", type=int, default=5000)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--latency", type=int, default=0)
    p.add_argument("--unbatched", action="store_true")
    p.add_argument("--control", action="store_true")
    p.add_argument("--failover-profile", choices=sorted(FAILOVER_PROFILES), default="defaults")
    args = p.parse_args()
    if args.control:
        return control(Log(args.self_addr, args.partners.split(","), failover=FAILOVER_PROFILES[args.failover_profile]))
    log = Log(
        args.self_addr, args.partners.split(","), driver=bool(args.drive or args.latency), batch=not args.unbatched
    )
    if not (args.drive or args.latency):
        # Serve; on SIGTERM report what this member applied (to compare replicas).
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        stop.wait(args.seconds)
        time.sleep(0.5)  # let the last commits arrive
        print(json.dumps({"applied": log.count, "log": log.raftLastApplied}), flush=True)
        return 0
    deadline = time.monotonic() + 30
    while log._getLeader() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    led = bool(log._isLeader())
    body = b"x" * args.size
    if args.latency:
        log.append(body, sync=True, timeout=10)  # warm up
        times = []
        for _ in range(args.latency):
            t0 = time.perf_counter()
            log.append(body, sync=True, timeout=10)
            times.append(time.perf_counter() - t0)
        print(json.dumps({"latencies": times, "leader": led}), flush=True)
        return 0
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
    print(
        json.dumps({"committed": state["ok"], "failed": state["failed"], "seconds": elapsed, "leader": led}), flush=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
