"""Three member processes on 127.0.0.1, beside PySyncObj 0.3.17 doing the same job.

    pytest bench/test_bench_cluster.py -s --benchmark-group-by=group --benchmark-columns=median

PySyncObj is tuned as its docs allow (log compaction off, 1 MiB batches and socket buffers,
10^6-command queue, 5 ms tick, no journal: see dledger/perf/pysyncobj_peer.py); its driver is
one of its three members (it is a library), ours is a separate client process-side loop.
DLEDGER_BENCH_FULL=1 runs the full sizes (20 kills per failover profile).
Each test prints its figure; pytest-benchmark records the run's wall time.
"""

from __future__ import annotations

import os

import pytest

from dledger.perf import cluster_bench as cb

FULL = os.environ.get("DLEDGER_BENCH_FULL") == "1"
COUNT = 200_000 if FULL else 40_000
KILLS = 20 if FULL else 5

pytestmark = pytest.mark.timeout(1800)


@pytest.mark.parametrize("size", [100, 1024])
def test_committed_throughput(benchmark, size: int) -> None:
    benchmark.group = f"committed appends, {size} B bodies"
    ours = benchmark.pedantic(cb.dledger_throughput, args=(size, COUNT), rounds=1, iterations=1)
    base = cb.pysyncobj_throughput(size, COUNT // 4)
    benchmark.extra_info.update(ours_entries_per_s=ours.entries_per_s, ours_mb_per_s=ours.mb_per_s,
                                pysyncobj_entries_per_s=base.entries_per_s, pysyncobj_mb_per_s=base.mb_per_s,
                                ratio=ours.entries_per_s / base.entries_per_s)
    print(f"\n{size} B: dledger {ours.entries_per_s:,.0f}/s {ours.mb_per_s:.1f} MB/s; "
          f"PySyncObj {base.entries_per_s:,.0f}/s {base.mb_per_s:.1f} MB/s; "
          f"ratio {ours.entries_per_s / base.entries_per_s:.2f}x")
    assert ours.entries_per_s > 0 and base.entries_per_s > 0


def test_sync_append_latency(benchmark) -> None:
    benchmark.group = "synchronous append latency"
    p50, p99 = benchmark.pedantic(cb.sync_latency, args=(2000 if FULL else 500,), rounds=1, iterations=1)
    benchmark.extra_info.update(p50_ms=p50 * 1000, p99_ms=p99 * 1000)
    print(f"\nsync append: p50 {p50 * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms")


@pytest.mark.parametrize("profile", ["defaults", "low-latency"])
def test_failover(benchmark, profile: str) -> None:
    benchmark.group = "failover: kill -9 of the leader to first acknowledged write"
    extra = cb.LOW_LATENCY if profile == "low-latency" else []
    p50, p99, times = benchmark.pedantic(cb.failover, args=(KILLS, extra), rounds=1, iterations=1)
    benchmark.extra_info.update(p50_s=p50, p99_s=p99, all_s=times)
    print(f"\nfailover ({profile}, {len(times)} kills): p50 {p50:.2f} s, p99 {p99:.2f} s")
