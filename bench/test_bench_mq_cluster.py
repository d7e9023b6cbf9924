"""The replicated message service: three `dledger server --message-store` members on 127.0.0.1,
beside the entry-level group doing the same job in the same run.

    pytest bench/test_bench_mq_cluster.py -s --benchmark-group-by=group --benchmark-columns=median

- produce: a batching producer (batches of CHUNK messages, WINDOW batches in flight, the
  queues in turn) against the entry client's append_batch of the same bodies (same chunk and
  window) to a plain group; messages/s and the ratio. For context, the entry-level append of
  bodies as long as the messages' records too: the same stored and replicated bytes, so the
  ratio to it is what the message layer costs beyond the record format's bytes.
- end-to-end: one producer sending one message at a time, one consumer long-polling the queue
  in another thread; send -> consumed and acknowledged -> consumed, p50/p99.
- failover: kill -9 of the leader to the next SEND_OK, beside the entry-level figure
  (bench.cluster_bench.failover) of the same run.

DLEDGER_BENCH_FULL=1 runs the full sizes. Each test prints its figures.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import pytest

from bench import cluster_bench as cb
from dledger._ext import message as K
from dledger.rocketmq.client.consumer import Consumer
from dledger.rocketmq.client.producer import AsyncProducer, Producer
from dledger.rocketmq.store.message import UNIQ_KEY, Message, UniqIdGenerator, encode_properties
from dledger.testing import TestCluster

FULL = os.environ.get("DLEDGER_BENCH_FULL") == "1"
# Messages a produce run, by body size: enough for a second or more of steady state on the
# faster side (the entry-level group takes 100 B bodies at about 1M/s here). Shorter runs
# measure start-up (files created, first faults) more than throughput, and end before the
# followers' dispatch has caught up, so dispatch work left for after the run went uncounted.
COUNTS = {100: 1_000_000, 1024: 400_000}
FULL_FACTOR = 5 if FULL else 1
CHUNK = 2000
WINDOW = 16
LATENCY_COUNT = 2000 if FULL else 500
KILLS = 20 if FULL else 5
# Produce rounds, the two sides alternating: the figures are medians over the rounds.
ROUNDS = 5 if FULL else 3

pytestmark = pytest.mark.timeout(1800)


def record_size(body_size: int) -> int:
    """The record length of a message ``mq_throughput`` sends: topic "Bench", an IPv4 host and
    UNIQ_KEY as its only property."""
    props = encode_properties({UNIQ_KEY: UniqIdGenerator().create()}).encode()
    return int(K.record_length(0, body_size, len(b"Bench"), len(props)))


def mq_cluster(extra: list[str] | None = None) -> TestCluster:
    root = Path(tempfile.mkdtemp(prefix="dledger-bench-mq-"))
    return TestCluster(root, extra=["--message-store", *(extra or [])], proxied=False, member_dirs=True)


def mq_throughput(
    body_size: int,
    count: int,
    chunk: int = CHUNK,
    window: int = WINDOW,
    objects: bool = False,
    timed: cb.Timed | None = None,
    extra: list[str] | None = None,
) -> float:
    """Messages/s acknowledged SEND_OK by a batching producer: ``send_bodies`` (a MessageBatch
    of bodies), or ``send_batch`` of Message objects with ``objects``; ``timed`` and ``extra``
    (the members' options) as ``cluster_bench.dledger_throughput``'s."""
    cluster = mq_cluster(extra)
    try:
        cluster.start_all()
        cluster.wait_leader(30)
        body = b"x" * body_size

        async def run() -> float:
            async with AsyncProducer(cluster.peers, timeout=60) as p:
                nums = await p.queue_nums("Bench")
                warm = await p.send_batch([Message("Bench", body) for _ in range(chunk)], 0)
                assert all(r.ok for r in warm)
                sem = asyncio.Semaphore(window)

                async def one(k: int) -> None:
                    async with sem:
                        if objects:
                            rs = await p.send_batch([Message("Bench", body, tags="b") for _ in range(chunk)], k % nums)
                        else:
                            rs = await p.send_bodies("Bench", [body] * chunk, k % nums)
                        assert rs.ok, rs[-1]

                done = timed(cluster) if timed is not None else None
                t0 = time.perf_counter()
                await asyncio.gather(*(one(k) for k in range(count // chunk)))
                elapsed = time.perf_counter() - t0
                if done is not None:
                    done()
                return elapsed

        elapsed = asyncio.run(run())
        return (count // chunk) * chunk / elapsed
    finally:
        cluster.close()
        shutil.rmtree(cluster.root, ignore_errors=True)


@pytest.mark.parametrize("size", [100, 1024])
def test_replicated_produce(benchmark, size: int) -> None:
    benchmark.group = f"replicated produce, {size} B bodies"
    got: dict[str, list[float]] = {"entries": [], "messages": [], "objects": [], "records": []}
    rec = record_size(size)
    count = COUNTS[size] * FULL_FACTOR

    def run() -> None:
        for _ in range(ROUNDS):
            got["entries"].append(cb.dledger_throughput(size, count, CHUNK, WINDOW).entries_per_s)
            got["messages"].append(mq_throughput(size, count))
            got["records"].append(cb.dledger_throughput(rec, count, CHUNK, WINDOW).entries_per_s)
            # The same count as the other sides, in every round: a median of equal rounds.
            got["objects"].append(mq_throughput(size, count, objects=True))

    benchmark.pedantic(run, rounds=1, iterations=1)
    med = {k: statistics.median(v) for k, v in got.items()}
    ratio = med["messages"] / med["entries"]
    # Each round's own ratio (its sides ran one after the other): the spread a ratio of
    # medians hides when the machine's load moves between rounds.
    per_round = [m / e for m, e in zip(got["messages"], got["entries"], strict=True)]
    benchmark.extra_info.update(
        per_round_ratios=per_round,
        messages_per_s=got["messages"],
        entries_per_s=got["entries"],
        record_size_entries_per_s=got["records"],
        message_objects_per_s=got["objects"],
        ratio_of_medians=ratio,
        ratio_to_record_size_entries=med["messages"] / med["records"],
    )
    print(
        f"\n{size} B, {ROUNDS} rounds of {count:,}: message service median {med['messages']:,.0f} msg/s (send_bodies) "
        f"{[round(x) for x in got['messages']]}, {med['objects']:,.0f} msg/s (send_batch of Message objects "
        f"with tags) {[round(x) for x in got['objects']]}; entry-level append median {med['entries']:,.0f} entries/s "
        f"{[round(x) for x in got['entries']]}; ratio {ratio:.2f}x (per round {[round(x, 2) for x in per_round]}). "
        f"Entry-level append of {rec} B bodies "
        f"(the records' length): median {med['records']:,.0f} entries/s {[round(x) for x in got['records']]}, "
        f"the message service {med['messages'] / med['records']:.2f}x it"
    )
    assert med["messages"] > 0


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(int(q * len(s)), len(s) - 1)]


def test_end_to_end_latency(benchmark) -> None:
    benchmark.group = "produce -> long-poll consume"
    cluster = mq_cluster()
    sent: dict[int, tuple[float, float]] = {}
    seen: dict[int, float] = {}

    def consume(stop: threading.Event) -> None:
        with Consumer(cluster.peers, "bench", "Latency", timeout=30.0) as con:
            offset = con.max_offset(0)
            while not stop.is_set() and len(seen) < LATENCY_COUNT:
                r = con.pull(0, offset, 32, wait=2.0)
                now = time.perf_counter()
                for m in r.messages:
                    # The first pull may start before the "-1" probe was dispatched; only the
                    # timed messages count towards LATENCY_COUNT.
                    if int(m.body) >= 0:
                        seen[int(m.body)] = now
                offset = r.next_begin_offset

    def run() -> None:
        cluster.start_all()
        cluster.wait_leader(30)
        with Producer(cluster.peers, timeout=30.0) as p:
            assert p.send(Message("Latency", b"-1"), 0).ok  # leader found, queue made
            stop = threading.Event()
            t = threading.Thread(target=consume, args=(stop,), daemon=True)
            t.start()
            time.sleep(0.5)
            for i in range(LATENCY_COUNT):
                t0 = time.perf_counter()
                assert p.send(Message("Latency", str(i).encode()), 0).ok
                sent[i] = (t0, time.perf_counter())
                time.sleep(0.002)  # one message at a time: the consumer's pull is waiting for each
            t.join(30)
            stop.set()

    try:
        benchmark.pedantic(run, rounds=1, iterations=1)
    finally:
        cluster.close()
        shutil.rmtree(cluster.root, ignore_errors=True)
    e2e = [seen[i] - sent[i][0] for i in sent if i in seen]
    after_ack = [seen[i] - sent[i][1] for i in sent if i in seen]
    assert len(e2e) == LATENCY_COUNT
    p50, p99 = statistics.median(e2e), _pct(e2e, 0.99)
    a50, a99 = statistics.median(after_ack), _pct(after_ack, 0.99)
    benchmark.extra_info.update(
        p50_ms=p50 * 1e3, p99_ms=p99 * 1e3, after_ack_p50_ms=a50 * 1e3, after_ack_p99_ms=a99 * 1e3
    )
    print(
        f"\nsend -> consumed: p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms; producer's ack -> consumed: "
        f"p50 {a50 * 1e3:.2f} ms, p99 {a99 * 1e3:.2f} ms ({LATENCY_COUNT} messages)"
    )


def mq_failover(kills: int) -> list[float]:
    """Seconds from kill -9 of the leader to the next SEND_OK."""
    cluster = mq_cluster()
    times: list[float] = []
    try:
        cluster.start_all()
        rng = random.Random()
        with Producer(cluster.peers, timeout=60.0) as p:
            assert p.send(Message("Failover", b"start"), 0).ok
            for _ in range(kills):
                leader = cluster.wait_leader(60)
                assert p.send(Message("Failover", b"before"), 0).ok
                cb.random_kill_phase(rng)
                t0 = time.monotonic()
                cluster.kill(leader)
                r = p.send(Message("Failover", b"after"), 0)
                assert r.ok, r
                times.append(time.monotonic() - t0)
                cluster.start(leader)
                time.sleep(0.5)
        return times
    finally:
        cluster.close()
        shutil.rmtree(cluster.root, ignore_errors=True)


def test_failover(benchmark) -> None:
    benchmark.group = "failover: kill -9 of the leader to the next acknowledged write"
    got: dict[str, list[float]] = {}

    def run() -> None:
        got["entries"] = cb.failover(KILLS)[2]
        got["messages"] = mq_failover(KILLS)

    benchmark.pedantic(run, rounds=1, iterations=1)
    m99, e99 = _pct(got["messages"], 0.99), _pct(got["entries"], 0.99)
    benchmark.extra_info.update(messages_s=got["messages"], entries_s=got["entries"])
    print(
        f"\nfailover ({KILLS} kills each): message service p50 {statistics.median(got['messages']):.2f} s, "
        f"p99 {m99:.2f} s; entry-level p50 {statistics.median(got['entries']):.2f} s, p99 {e99:.2f} s; "
        f"difference of p99s {m99 - e99:+.2f} s"
    )
