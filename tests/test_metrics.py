"""The Prometheus endpoint of real member processes (``--metrics-port``), scraped over HTTP
as Prometheus would, while entries are appended."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.metrics import LatencyHistogram
from dledger.testing import MetricSamples, TestCluster, free_ports
from dledger.testing import scrape_metrics as scrape

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[TestCluster, dict[str, int]]]:
    c = TestCluster(tmp_path, group="g", proxied=False)
    ports = dict(zip(c.ids, free_ports(len(c.ids)), strict=True))
    try:
        for m in c.ids:
            # The default timings, not FAST: the test reads one leader's counters from start to
            # end, and on a loaded machine FAST's 300 ms of silence already starts an election.
            c.extra = ["--metrics-port", str(ports[m])]
            c.start(m)
        yield c, ports
    finally:
        c.close()


def value(samples: MetricSamples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def wait_until(cond, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout}s")


def test_metrics_move_as_entries_are_appended(cluster: tuple[TestCluster, dict[str, int]]) -> None:
    c, ports = cluster
    leader = c.wait_leader()
    followers = [m for m in c.ids if m != leader]
    lab = {"group": "g", "member": leader}
    before, types = scrape(ports[leader])
    assert value(before, "dledger_role", role="LEADER", **lab) == 1
    assert value(before, "dledger_role", role="FOLLOWER", **lab) == 0
    assert value(before, "dledger_term", **lab) >= 0
    assert value(before, "dledger_leader_changes_total", **lab) >= 1
    assert value(before, "dledger_ledger_end_index", **lab) == -1
    assert value(before, "dledger_appended_entries_total", **lab) == 0
    assert value(before, "dledger_disk_full", **lab) == 0
    assert 0 < value(before, "dledger_disk_used_ratio", **lab) < 1
    assert types["dledger_append_latency_seconds"] == "histogram"
    assert types["dledger_flush_latency_seconds"] == "histogram"
    assert types["dledger_appended_entries"] == "counter"
    assert types["dledger_transport_sent_bytes"] == "counter"
    assert types["dledger_term"] == "gauge"

    with c.client() as client:
        for k in range(10):
            client.append_batch([f"{k}-{i}".encode() * 10 for i in range(10)])

    def caught_up() -> bool:
        s, _ = scrape(ports[leader])
        return (
            all(value(s, "dledger_peer_lag_entries", peer=p, **lab) == 0 for p in c.ids)
            and value(s, "dledger_committed_index", **lab) == 99
        )

    wait_until(caught_up, "followers caught up on the leader's metrics")
    after, _ = scrape(ports[leader])
    assert value(after, "dledger_ledger_end_index", **lab) == 99
    assert value(after, "dledger_appended_entries_total", **lab) == 100
    for p in c.ids:
        assert value(after, "dledger_peer_match_index", peer=p, **lab) == 99
    assert value(after, "dledger_append_latency_seconds_count", **lab) == 10
    assert value(after, "dledger_append_latency_seconds_bucket", le="+Inf", **lab) == 10
    assert value(after, "dledger_append_latency_seconds_sum", **lab) > 0
    assert value(after, "dledger_pending_appends", **lab) == 0
    me = {"member": leader}
    assert value(after, "dledger_flush_latency_seconds_count", **me) > value(
        before, "dledger_flush_latency_seconds_count", **me
    )
    for name in ("dledger_transport_sent_bytes_total", "dledger_transport_received_bytes_total"):
        # 100 bodies of ~40 bytes went in from the client and out to two followers.
        assert value(after, name, **me) - value(before, name, **me) > 4000

    # A follower's view: its role, the leader's entries, no per-peer series.
    f = followers[0]
    flab = {"group": "g", "member": f}
    wait_until(lambda: value(scrape(ports[f])[0], "dledger_committed_index", **flab) == 99, "follower committed")
    fs, _ = scrape(ports[f])
    assert value(fs, "dledger_role", role="FOLLOWER", **flab) == 1
    assert value(fs, "dledger_ledger_end_index", **flab) == 99
    assert value(fs, "dledger_appended_entries_total", **flab) == 0
    assert not any(name == "dledger_peer_lag_entries" for name, _ in fs)


def test_latency_histogram_buckets_are_cumulative() -> None:
    h = LatencyHistogram((0.001, 0.01))
    for v in (0.0005, 0.001, 0.005, 0.5):
        h.observe(v)
    buckets, total = h.snapshot()
    assert buckets == [("0.001", 2), ("0.01", 3), ("+Inf", 4)]
    assert total == pytest.approx(0.5065)
