"""Prometheus metrics of a member (``--metrics-port``): role, term, indexes, replication lag,
appends, flushes, disk and transport bytes (docs/operations.md lists every metric).

The hot path only adds to plain ints and bucket lists (``GroupStats``, ``LatencyHistogram``):
no locks, no metric objects per call. Everything else is read when Prometheus scrapes: the
HTTP thread asks the node's event loop for a ``Sample`` (taken on the loop, so it sees the
consensus state between two calls, never in the middle of one) and turns it into metric
families. Nobody scraping costs nothing; a loop too busy to answer within
``SAMPLE_TIMEOUT_S`` gets the previous sample served.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

SAMPLE_TIMEOUT_S = 2.0
# Seconds. Appends: a group-commit ack is sub-millisecond on an idle member and seconds when
# a quorum is lost (max_wait_ack_time_ms). Flushes: an msync of a few pages to a large batch.
APPEND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
FLUSH_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
ROLES = ("CANDIDATE", "LEADER", "FOLLOWER")


class LatencyHistogram:
    """Bucket counts kept as a plain list: ``observe`` is a bisect and two adds."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    def snapshot(self) -> tuple[list[tuple[str, float]], float]:
        """Cumulative ``(le, count)`` pairs ending with ``+Inf`` (whose count is the total), and the sum."""
        counts = list(self.counts)
        total = 0
        buckets: list[tuple[str, float]] = []
        for bound, n in zip((*map(repr, self.bounds), "+Inf"), counts, strict=True):
            total += n
            buckets.append((bound, total))
        return buckets, self.sum


@dataclass(slots=True)
class GroupStats:
    """What a member counts for one group as it serves requests."""

    appended_entries: int = 0
    append_errors: dict[str, int] = field(default_factory=dict)
    leader_changes: int = 0
    last_leader: str | None = None
    append_latency: LatencyHistogram = field(default_factory=lambda: LatencyHistogram(APPEND_BUCKETS))

    def leader_seen(self, leader: str | None) -> None:
        if leader is not None and leader != self.last_leader:
            self.leader_changes += 1
            self.last_leader = leader


@dataclass(slots=True)
class AppMetric:
    """A metric an application on a group adds (the message store's): the collector labels it
    with the group and member, then ``labels``. Each point is (label values, value); a
    histogram's value is a ``LatencyHistogram.snapshot()``."""

    name: str
    doc: str
    kind: str  # "gauge", "counter" or "histogram"
    labels: tuple[str, ...] = ()
    points: list[tuple[tuple[str, ...], Any]] = field(default_factory=list)


@dataclass(slots=True)
class GroupSample:
    group: str
    member: str
    role: str
    term: int
    leader: str | None
    begin_index: int
    end_index: int
    committed_index: int
    # Leader only: each member's match index (the leader's own: what it has flushed).
    match_index: dict[str, int] | None
    pending_appends: int
    pending_requests: int
    disk_used_ratio: float | None
    disk_full: bool
    appended_entries: int
    append_errors: dict[str, int]
    leader_changes: int
    append_latency: tuple[list[tuple[str, float]], float]
    app_metrics: list[AppMetric] = field(default_factory=list)


@dataclass(slots=True)
class Sample:
    groups: list[GroupSample]
    bytes_in: int
    bytes_out: int
    flush_latency: tuple[list[tuple[str, float]], float]
    member: str


class MetricsCollector:
    """A prometheus_client collector over samples taken on the node's loop by ``take``."""

    def __init__(self, take: Callable[[], Sample]) -> None:
        self._take = take
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last: Sample | None = None
        self._lock = threading.Lock()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def sample(self) -> Sample | None:
        """A fresh sample from the loop (or the last one when the loop does not answer in time)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return self._last
        fut: concurrent.futures.Future[Sample] = concurrent.futures.Future()

        def take() -> None:
            try:
                fut.set_result(self._take())
            except BaseException as exc:  # reported to the scraping thread
                fut.set_exception(exc)

        try:
            loop.call_soon_threadsafe(take)
            got = fut.result(timeout=SAMPLE_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            log.warning(
                "metrics: the event loop did not answer within %.1f s; serving the last sample", SAMPLE_TIMEOUT_S
            )
            return self._last
        except RuntimeError:  # the loop is stopping
            return self._last
        with self._lock:
            self._last = got
        return got

    def describe(self) -> list[Any]:
        return []  # no collection at registration time: the loop may not run yet

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        s = self.sample()
        if s is None:
            return
        gl = ["group", "member"]

        def gauge(name: str, doc: str, extra: list[str] | None = None) -> Any:
            return GaugeMetricFamily(name, doc, labels=gl + (extra or []))

        role = gauge("dledger_role", "1 for the member's current Raft role, 0 for the others", ["role"])
        term = gauge("dledger_term", "the member's current term")
        leader_changes = CounterMetricFamily("dledger_leader_changes", "times this member saw a new leader", labels=gl)
        begin = gauge("dledger_ledger_begin_index", "first index of the log (-1: empty)")
        end = gauge("dledger_ledger_end_index", "last index of the log (-1: empty)")
        committed = gauge("dledger_committed_index", "last committed index")
        match = gauge("dledger_peer_match_index", "leader only: index up to which each member's log matches", ["peer"])
        lag = gauge(
            "dledger_peer_lag_entries", "leader only: entries each member lacks (end index - match index)", ["peer"]
        )
        appended = CounterMetricFamily(
            "dledger_appended_entries", "entries appended through this member as leader", labels=gl
        )
        errors = CounterMetricFamily(
            "dledger_append_errors", "append requests answered with an error, by code", labels=[*gl, "code"]
        )
        latency = HistogramMetricFamily(
            "dledger_append_latency_seconds", "from an append request's arrival to its answer", labels=gl
        )
        pending_appends = gauge("dledger_pending_appends", "leader only: appends waiting for a quorum")
        pending_requests = gauge("dledger_pending_requests", "client requests in progress on this member")
        disk_ratio = gauge("dledger_disk_used_ratio", "used share of the data directory's file system")
        disk_full = gauge("dledger_disk_full", "1 while appends are refused with DISK_FULL")
        for g in s.groups:
            lv = [g.group, g.member]
            for r in ROLES:
                role.add_metric([*lv, r], 1.0 if g.role == r else 0.0)
            term.add_metric(lv, g.term)
            leader_changes.add_metric(lv, g.leader_changes)
            begin.add_metric(lv, g.begin_index)
            end.add_metric(lv, g.end_index)
            committed.add_metric(lv, g.committed_index)
            if g.match_index is not None:
                for peer, mi in g.match_index.items():
                    match.add_metric([*lv, peer], mi)
                    lag.add_metric([*lv, peer], max(g.end_index - mi, 0))
            appended.add_metric(lv, g.appended_entries)
            for code, n in sorted(g.append_errors.items()):
                errors.add_metric([*lv, code], n)
            buckets, total = g.append_latency
            latency.add_metric(lv, buckets, total)
            pending_appends.add_metric(lv, g.pending_appends)
            pending_requests.add_metric(lv, g.pending_requests)
            if g.disk_used_ratio is not None:
                disk_ratio.add_metric(lv, g.disk_used_ratio)
            disk_full.add_metric(lv, 1.0 if g.disk_full else 0.0)
        yield from (
            role,
            term,
            leader_changes,
            begin,
            end,
            committed,
            match,
            lag,
            appended,
            errors,
            latency,
            pending_appends,
            pending_requests,
            disk_ratio,
            disk_full,
        )
        yield from _app_families(s.groups, gl)
        flush = HistogramMetricFamily(
            "dledger_flush_latency_seconds", "one flush (msync) of every store this member serves", labels=["member"]
        )
        buckets, total = s.flush_latency
        flush.add_metric([s.member], buckets, total)
        yield flush
        received = CounterMetricFamily(
            "dledger_transport_received_bytes", "bytes read from peers and clients", labels=["member"]
        )
        received.add_metric([s.member], s.bytes_in)
        sent = CounterMetricFamily(
            "dledger_transport_sent_bytes", "bytes written to peers and clients", labels=["member"]
        )
        sent.add_metric([s.member], s.bytes_out)
        yield received
        yield sent


def _app_families(groups: list[GroupSample], gl: list[str]) -> Iterator[Any]:
    """The applications' metrics, one family per name across groups."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    kinds = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily, "histogram": HistogramMetricFamily}
    families: dict[str, Any] = {}
    for g in groups:
        lv = [g.group, g.member]
        for m in g.app_metrics:
            fam = families.get(m.name)
            if fam is None:
                fam = families[m.name] = kinds[m.kind](m.name, m.doc, labels=[*gl, *m.labels])
            for values, value in m.points:
                if m.kind == "histogram":
                    buckets, total = value
                    fam.add_metric([*lv, *values], buckets, total)
                else:
                    fam.add_metric([*lv, *values], value)
    yield from families.values()


class MetricsServer:
    """The ``/metrics`` HTTP endpoint, on a thread of prometheus_client's own."""

    def __init__(self, collector: MetricsCollector, host: str, port: int) -> None:
        self.collector = collector
        self.host = host
        self.port = port
        self._httpd: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        # A registry of our own: the process-wide default one holds the client library's
        # process and GC collectors, and two members in one process must not collide.
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        self._httpd, self._thread = start_http_server(self.port, addr=self.host, registry=registry)
        self.port = self._httpd.server_address[1]
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
