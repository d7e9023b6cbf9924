"""Classic master/slave HA: `dledger mq broker` processes on 127.0.0.1.

    pytest bench/test_bench_mq_ha.py -s --benchmark-group-by=group --benchmark-columns=median

- replication: a batching producer (1 KiB bodies, batches of CHUNK, WINDOW in flight) against an
  ASYNC_MASTER with one slave. The master's own put rate (messages acknowledged per second) is
  the baseline; the slave's rate is the same bytes over the time until it held them all
  (ratio slave/master). Slave lag, per batch: from the master's put (the batch's last record's
  store timestamp) to the first look at the slave that found that record in its commit log
  ("commit log"), and in its consume queue and index ("dispatch"). A monitor process of its own
  asks the slave every LOOK_EVERY_S where its log ends and how far dispatch is behind. A lag is
  the time the answer came back (wall clock, both processes), an upper bound coarse by the
  look's period plus its round trip (sent with each figure).
- the lag's baseline, in the same run, alternating rounds: the same producer against a DLedger
  group of three (`dledger server --message-store`, its defaults), the same monitor asking one
  follower where its own log ends (``ledger_end_pos``: appended, committed or not, the
  follower's counterpart of a slave's commit log) and how far its dispatch is: lag from the
  leader's put (store timestamp) to the follower's log, and to its dispatch. A group of three
  is the smallest whose leader does not wait for the watched follower (quorum of two), as an
  ASYNC_MASTER does not wait for its slave.
- sync latency: one producer, one message at a time, to a SYNC_MASTER with one slave (PUT_OK
  only once the slave acknowledged), beside the DLedger group's synchronous append of the same
  run (bench.cluster_bench.sync_latency: three members, one append at a time).

DLEDGER_BENCH_FULL=1 runs the full sizes. Each test prints its figures: medians of ROUNDS
rounds with their range.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from bench import cluster_bench as cb
from dledger.child_process import python_code
from dledger.rocketmq.client.consumer import Consumer
from dledger.rocketmq.client.producer import AsyncProducer, Producer
from dledger.rocketmq.store.message import Message, decode_message_id
from dledger.testing import ClassicBroker, TestCluster

FULL = os.environ.get("DLEDGER_BENCH_FULL") == "1"
COUNT = 400_000 if FULL else 100_000
CHUNK = 1000
WINDOW = 16
BODY = 1024
LATENCY_COUNT = 2000 if FULL else 500
ROUNDS = 3
FILE = 128 * 1024 * 1024
# RocketMQ's default consume-queue and index file sizes (ClassicBroker's are small test sizes,
# with which dispatch spends its time making files: a consume-queue file per 300 messages).
STORE_CONF = "mappedFileSizeConsumeQueue=6000000\nmaxHashSlotNum=5000000\nmaxIndexNum=20000000\n"
# How often the monitor asks the slave where its log ends: the lags are this coarse (plus a
# look's round trip), and each look costs the slave's event loop a request.
LOOK_EVERY_S = 0.001

# The monitor process: looks at the slave or follower (argv[1]) every argv[2] seconds until its
# stdin closes (and once more then), then prints its looks as JSON: [sent, answered, log end,
# dispatched to, answered by the wall clock] each. A follower's log end is its ledger's end
# (appended, committed or not); a classic broker's is its commit log's.
MONITOR = """
import json, select, sys, time
from dledger.rocketmq.client.consumer import Consumer
looks = []
with Consumer(sys.argv[1], "bench", "", read_from="follower", timeout=30) as con:
    print("ready", flush=True)
    every = float(sys.argv[2])
    while True:
        stop = select.select([sys.stdin], [], [], every)[0]
        t0 = time.monotonic()
        st = next(iter(con.stats().values()))
        committed = int(st["committed_phys_offset"])
        end = int(st.get("ledger_end_pos", committed))
        looks.append((t0, time.monotonic(), end, committed - int(st["dispatch_behind_bytes"]), time.time()))
        if stop:  # the last look: after the slave caught up
            break
print(json.dumps(looks), flush=True)
"""

pytestmark = pytest.mark.timeout(1800)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(int(q * len(s)), len(s) - 1)]


def _pair(root: Path, role: str) -> tuple[ClassicBroker, ClassicBroker]:
    master = ClassicBroker(root, "m", role, conf=STORE_CONF, file_size=FILE).start()
    slave = ClassicBroker(root, "s", "SLAVE", master.ha, conf=STORE_CONF, file_size=FILE).start()
    return master, slave


def _first_seen(marks: list[tuple[float, int]], looks: list[list[float]], col: int, clock: int = 1) -> list[float]:
    """For each (time, batch's last record) the time from then to the first look whose column
    ``col`` was past the record (by the look's ``clock`` column)."""
    lags = []
    k = 0
    for ta, phys in sorted(marks, key=lambda a: a[1]):
        while k < len(looks) and looks[k][col] <= phys:
            k += 1
        if k < len(looks):
            lags.append(max(looks[k][clock] - ta, 0.0))
    return lags


def _watch_round(producer_addr: str, watched: str) -> dict[str, float]:
    """The producer's run against ``producer_addr`` (a master, or a group's peers) while a
    monitor watches ``watched`` (a slave, or a follower): rates and lags."""
    # (when the master acknowledged a batch, where the batch's last record starts, its id)
    acks: list[tuple[float, int, str]] = []
    mon = subprocess.Popen(
        python_code(MONITOR, watched, str(LOOK_EVERY_S), die_with_parent=True),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert mon.stdout is not None and mon.stdin is not None
        assert mon.stdout.readline().strip() == "ready"
        body = b"x" * BODY

        async def produce() -> tuple[float, float]:
            async with AsyncProducer(producer_addr, timeout=60) as p:
                nums = await p.queue_nums("Bench")
                assert (await p.send_bodies("Bench", [body] * CHUNK, 0)).ok
                sem = asyncio.Semaphore(WINDOW)

                async def one(k: int) -> None:
                    async with sem:
                        rs = await p.send_bodies("Bench", [body] * CHUNK, k % nums)
                        now = time.monotonic()
                        assert rs.ok
                        _host, phys = decode_message_id(rs[-1].offset_msg_id)
                        acks.append((now, phys, rs[-1].offset_msg_id))

                t0 = time.monotonic()
                await asyncio.gather(*(one(k) for k in range(COUNT // CHUNK)))
                return t0, time.monotonic()

        with Consumer(producer_addr, "bench", "", timeout=30) as mcon:
            t0, t1 = asyncio.run(produce())
            end = max(phys for _, phys, _ in acks) + 1
            # The master's put of each batch: its last record's store timestamp (ms, wall clock).
            puts = []
            for _ta, phys, msg_id in acks:
                m = mcon.view(msg_id)
                assert m is not None
                puts.append((m.store_timestamp / 1e3, phys))
        with Consumer(watched, "bench", "", read_from="follower", timeout=30) as scon:
            deadline = time.monotonic() + 120
            while True:
                st = next(iter(scon.stats().values()))
                committed = int(st["committed_phys_offset"])
                if (
                    int(st.get("ledger_end_pos", committed)) >= end
                    and committed - int(st["dispatch_behind_bytes"]) >= end
                ):
                    break
                assert time.monotonic() < deadline, "the slave did not catch up"
                time.sleep(0.05)
        mon.stdin.close()
        looks: list[list[float]] = json.loads(mon.stdout.readline())
        mon.wait(30)
        t2 = next(lk[1] for lk in looks if lk[2] >= end)
        master_rate = (COUNT // CHUNK) * CHUNK / (t1 - t0)
        slave_rate = master_rate * (t1 - t0) / (t2 - t0)
        # From the master's put (store timestamp) to the slave, by the wall clock: what the
        # figures say. From the producer's SEND_OK, by the monotonic clock: a check on them.
        log_lags = _first_seen(puts, looks, 2, 4)
        dispatch_lags = _first_seen(puts, looks, 3, 4)
        ack_lags = _first_seen([(ta, phys) for ta, phys, _ in acks], looks, 2)
        periods = [b[1] - a[1] for a, b in itertools.pairwise(looks) if a[1] >= t0 and b[1] <= t2]
        return {
            "master_msgs_s": master_rate,
            "slave_msgs_s": slave_rate,
            "ratio": slave_rate / master_rate,
            "lag_p50_ms": statistics.median(log_lags) * 1e3,
            "lag_p99_ms": _pct(log_lags, 0.99) * 1e3,
            "dispatch_lag_p50_ms": statistics.median(dispatch_lags) * 1e3,
            "dispatch_lag_p99_ms": _pct(dispatch_lags, 0.99) * 1e3,
            "ack_lag_p99_ms": _pct(ack_lags, 0.99) * 1e3,
            "look_period_ms": statistics.median(periods) * 1e3 if periods else 0.0,
        }
    finally:
        if mon.poll() is None:
            mon.kill()
            mon.wait(10)


def replication_round() -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="dledger-bench-ha-"))
    master, slave = _pair(root, "ASYNC_MASTER")
    try:
        return _watch_round(master.addr, slave.addr)
    finally:
        slave.stop()
        master.stop()
        shutil.rmtree(root, ignore_errors=True)


def follower_round() -> dict[str, float]:
    """The baseline: a DLedger group of three message-store members at their defaults (as
    bench/test_bench_mq_cluster.py runs it), one follower watched."""
    root = Path(tempfile.mkdtemp(prefix="dledger-bench-ha-dledger-"))
    cluster = TestCluster(root, extra=["--message-store"], proxied=False, member_dirs=True)
    try:
        cluster.start_all()
        leader = cluster.wait_leader(30)
        follower = next(m for m in cluster.ids if m != leader)
        return _watch_round(cluster.peers, f"{follower}-127.0.0.1:{cluster.ports[follower]}")
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)


def _med(rounds: list[dict[str, float]], key: str, fmt: str = ",.0f") -> str:
    vals = [r[key] for r in rounds]
    return f"{statistics.median(vals):{fmt}} [{min(vals):{fmt}}-{max(vals):{fmt}}]"


def test_replication(benchmark) -> None:
    benchmark.group = f"classic HA replication, {BODY} B bodies"
    rounds: list[dict[str, float]] = []
    base: list[dict[str, float]] = []

    def run() -> None:
        for _ in range(ROUNDS):
            rounds.append(replication_round())
            base.append(follower_round())

    benchmark.pedantic(run, rounds=1, iterations=1)
    ratio = statistics.median(r["ratio"] for r in rounds)
    benchmark.extra_info.update(rounds=rounds, dledger_rounds=base, ratio=ratio)
    print(
        f"\n{ROUNDS} round(s) of {COUNT:,} x {BODY} B, medians [range]: "
        f"master put rate {_med(rounds, 'master_msgs_s')} msg/s; slave {_med(rounds, 'slave_msgs_s')} msg/s, "
        f"{_med(rounds, 'ratio', '.2f')}x the master's; "
        f"slave lag to its commit log p50 {_med(rounds, 'lag_p50_ms', '.1f')} ms, "
        f"p99 {_med(rounds, 'lag_p99_ms', '.1f')} ms; "
        f"to its dispatch p50 {_med(rounds, 'dispatch_lag_p50_ms', '.1f')} ms, "
        f"p99 {_med(rounds, 'dispatch_lag_p99_ms', '.1f')} ms; from SEND_OK to its commit log "
        f"p99 {_med(rounds, 'ack_lag_p99_ms', '.1f')} ms (a look every {_med(rounds, 'look_period_ms', '.1f')} ms)"
        f"\nbaseline, DLedger group of 3 under the same producer: leader put rate {_med(base, 'master_msgs_s')} "
        f"msg/s; follower lag to its log p50 {_med(base, 'lag_p50_ms', '.1f')} ms, "
        f"p99 {_med(base, 'lag_p99_ms', '.1f')} ms; to its dispatch p50 {_med(base, 'dispatch_lag_p50_ms', '.1f')} ms, "
        f"p99 {_med(base, 'dispatch_lag_p99_ms', '.1f')} ms; from SEND_OK to its log "
        f"p99 {_med(base, 'ack_lag_p99_ms', '.1f')} ms (a look every {_med(base, 'look_period_ms', '.1f')} ms)"
    )
    assert ratio > 0


def sync_master_latency(count: int = LATENCY_COUNT) -> tuple[float, float]:
    root = Path(tempfile.mkdtemp(prefix="dledger-bench-ha-sync-"))
    master, slave = _pair(root, "SYNC_MASTER")
    try:
        with Producer(master.addr, timeout=30) as p:
            deadline = time.monotonic() + 30
            while not p.send(Message("Latency", b"warm"), 0).ok:
                assert time.monotonic() < deadline, "the slave did not link"
                time.sleep(0.1)
            times = []
            for _ in range(count):
                t0 = time.perf_counter()
                r = p.send(Message("Latency", b"y" * 100), 0)
                times.append(time.perf_counter() - t0)
                assert r.ok, r
        return statistics.median(times), _pct(times, 0.99)
    finally:
        slave.stop()
        master.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_sync_master_latency(benchmark) -> None:
    benchmark.group = "one synchronous put at a time, 100 B"
    got: dict[str, tuple[float, float]] = {}

    def run() -> None:
        got["sync_master"] = sync_master_latency()
        got["dledger"] = cb.sync_latency(LATENCY_COUNT, 100)

    benchmark.pedantic(run, rounds=1, iterations=1)
    (s50, s99), (d50, d99) = got["sync_master"], got["dledger"]
    benchmark.extra_info.update(
        sync_master_p50_ms=s50 * 1e3, sync_master_p99_ms=s99 * 1e3, dledger_p50_ms=d50 * 1e3, dledger_p99_ms=d99 * 1e3
    )
    print(
        f"\nSYNC_MASTER + 1 slave, send one message: p50 {s50 * 1e3:.2f} ms, p99 {s99 * 1e3:.2f} ms; "
        f"DLedger group of 3, append one entry: p50 {d50 * 1e3:.2f} ms, p99 {d99 * 1e3:.2f} ms ({LATENCY_COUNT} each)"
    )
    assert s50 > 0
