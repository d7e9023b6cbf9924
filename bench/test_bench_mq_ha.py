"""Classic master/slave HA: `dledger mq broker` processes on 127.0.0.1.

    pytest bench/test_bench_mq_ha.py -s --benchmark-group-by=group --benchmark-columns=median

- replication: a batching producer (1 KiB bodies, batches of CHUNK, WINDOW in flight) against an
  ASYNC_MASTER with one slave. The master's own put rate (messages acknowledged per second) is
  the baseline; the slave's rate is the same bytes over the time until it held them all
  (ratio slave/master). Slave lag: for each batch, from the master's SEND_OK to the first look
  (a monitor asks the slave for its log end every ms or so) that found the batch on the slave
  (p50, p99; a look takes ~1 ms, so lags are that much coarse).
- sync latency: one producer, one message at a time, to a SYNC_MASTER with one slave (PUT_OK
  only once the slave acknowledged), beside the DLedger group's synchronous append of the same
  run (bench.cluster_bench.sync_latency: three members, one append at a time).

DLEDGER_BENCH_FULL=1 runs the full sizes. Each test prints its figures.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import pytest

from bench import cluster_bench as cb
from dledger.rocketmq.client.consumer import Consumer
from dledger.rocketmq.client.producer import AsyncProducer, Producer
from dledger.rocketmq.store.message import Message, decode_message_id
from dledger.testing import ClassicBroker

FULL = os.environ.get("DLEDGER_BENCH_FULL") == "1"
COUNT = 400_000 if FULL else 100_000
CHUNK = 1000
WINDOW = 16
BODY = 1024
LATENCY_COUNT = 2000 if FULL else 500
ROUNDS = 3 if FULL else 1
FILE = 128 * 1024 * 1024
# How often the monitor asks the slave where its log ends: the lags are this coarse, and each
# look costs the slave some of its CPU (at 1 ms, a visible share).
LOOK_EVERY_S = 0.005

pytestmark = pytest.mark.timeout(1800)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(int(q * len(s)), len(s) - 1)]


def _pair(root: Path, role: str) -> tuple[ClassicBroker, ClassicBroker]:
    master = ClassicBroker(root, "m", role, file_size=FILE).start()
    slave = ClassicBroker(root, "s", "SLAVE", master.ha, file_size=FILE).start()
    return master, slave


def _end(con: Consumer) -> int:
    return int(next(iter(con.stats().values()))["committed_phys_offset"])


def replication_round() -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="dledger-bench-ha-"))
    master, slave = _pair(root, "ASYNC_MASTER")
    # (when the master acknowledged a batch, where the batch's records end)
    acks: list[tuple[float, int]] = []
    # (when, the slave's log end): the slave's loop is idle, so its answers are prompt
    seen: list[tuple[float, int]] = []
    stop = threading.Event()

    def monitor() -> None:
        with Consumer(slave.addr, "bench", "", read_from="follower", timeout=30) as con:
            while not stop.is_set():
                end = _end(con)
                seen.append((time.perf_counter(), end))
                time.sleep(LOOK_EVERY_S)

    try:
        body = b"x" * BODY

        async def produce() -> tuple[float, float]:
            async with AsyncProducer(master.addr, timeout=60) as p:
                nums = await p.queue_nums("Bench")
                assert (await p.send_bodies("Bench", [body] * CHUNK, 0)).ok
                sem = asyncio.Semaphore(WINDOW)

                async def one(k: int) -> None:
                    async with sem:
                        rs = await p.send_bodies("Bench", [body] * CHUNK, k % nums)
                        now = time.perf_counter()
                        assert rs.ok
                        _host, phys = decode_message_id(rs[-1].offset_msg_id)
                        acks.append((now, phys))

                t0 = time.perf_counter()
                await asyncio.gather(*(one(k) for k in range(COUNT // CHUNK)))
                return t0, time.perf_counter()

        with Consumer(master.addr, "bench", "", read_from="follower", timeout=30) as mcon:
            start_end = _end(mcon)
            t = threading.Thread(target=monitor, daemon=True)
            t.start()
            t0, t1 = asyncio.run(produce())
            end = _end(mcon)
        while not seen or seen[-1][1] < end:
            time.sleep(0.001)
        t2 = seen[-1][0]
        for ts, s_end in seen:
            if s_end >= end:
                t2 = ts
                break
        stop.set()
        t.join(10)
        master_rate = (COUNT // CHUNK) * CHUNK / (t1 - t0)
        slave_rate = master_rate * (t1 - t0) / (t2 - t0)
        lags = []
        k = 0
        for ta, phys in sorted(acks, key=lambda a: a[1]):
            # the first look at the slave that found the batch's last record there
            while k < len(seen) and seen[k][1] <= phys:
                k += 1
            if k < len(seen):
                lags.append(max(seen[k][0] - ta, 0.0))
        return {
            "master_msgs_s": master_rate,
            "slave_msgs_s": slave_rate,
            "bytes": float(end - start_end),
            "lag_p50_ms": statistics.median(lags) * 1e3,
            "lag_p99_ms": _pct(lags, 0.99) * 1e3,
            "samples": float(len(seen)),
        }
    finally:
        stop.set()
        slave.stop()
        master.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_replication(benchmark) -> None:
    benchmark.group = f"classic HA replication, {BODY} B bodies"
    rounds: list[dict[str, float]] = []
    benchmark.pedantic(lambda: rounds.extend(replication_round() for _ in range(ROUNDS)), rounds=1, iterations=1)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    ratio = med["slave_msgs_s"] / med["master_msgs_s"]
    benchmark.extra_info.update(rounds=rounds, ratio=ratio)
    print(
        f"\n{ROUNDS} round(s) of {COUNT:,} x {BODY} B: master put rate median {med['master_msgs_s']:,.0f} msg/s "
        f"{[round(r['master_msgs_s']) for r in rounds]}; slave {med['slave_msgs_s']:,.0f} msg/s "
        f"({ratio:.2f}x the master's); slave lag p50 {med['lag_p50_ms']:.1f} ms, p99 {med['lag_p99_ms']:.1f} ms "
        f"({int(med['samples'])} looks at the slave a round)"
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
