"""Cluster benchmarks: three member processes on 127.0.0.1, beside PySyncObj doing the same job.

- committed appends/s and MB/s with a pipelined batching client (100 B and 1 KiB bodies);
  baseline: PySyncObj 0.3.17, three processes, tuned for throughput (see pysyncobj_peer);
- single-client synchronous append latency, p50 and p99;
- failover: from ``kill -9`` of the leader to the first acknowledged write, p50 and p99,
  with the defaults and with the low-latency profile (LOW_LATENCY).
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dledger.child_process import python_code
from dledger.client import AsyncClient
from dledger.config import DLedgerConfig
from dledger.testing import TestCluster, free_ports

# The baseline's member, run as a script so the bench works from any directory.
PEER_SCRIPT = str(Path(__file__).with_name("pysyncobj_peer.py"))
# python_code's body that runs the script named by its first argument as ``python SCRIPT`` would.
_RUN_SCRIPT = "import runpy\nsys.argv.pop(0)\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"


def peer_command(*args: str) -> list[str]:
    """``python pysyncobj_peer.py args...``, started so that it gets SIGTERM when the bench process
    dies (``die_with_parent``): an interrupted or killed bench leaves no member running."""
    return python_code(_RUN_SCRIPT, PEER_SCRIPT, *args, die_with_parent=True)


PYSYNCOBJ_MISSING = (
    "PySyncObj, the cluster benchmarks' baseline, is not installed: install the bench extra, "
    "pip install -e '.[dev,bench]'"
)


class BaselineMissing(RuntimeError):
    """The baseline a benchmark runs beside is not installed."""


def require_pysyncobj() -> None:
    """Raise BaselineMissing, naming the extra to install, unless PySyncObj imports."""
    try:
        import pysyncobj  # noqa: F401
    except ImportError:
        raise BaselineMissing(PYSYNCOBJ_MISSING) from None


# The documented low-latency profile: 50 ms heartbeats (a dead leader is noticed after
# 150 ms), 20-80 ms vote intervals, DLedger's hard-coded waits scaled to a tenth.
LOW_LATENCY = [
    "--heart-beat-time-interval-ms",
    "50",
    "--min-vote-interval-ms",
    "20",
    "--max-vote-interval-ms",
    "80",
    "--raft-timing-scale",
    "0.1",
]


@dataclass(slots=True)
class Throughput:
    entries_per_s: float
    mb_per_s: float
    note: str = ""


# In-flight windows tried for PySyncObj: its throughput grows with the window (5000 was the
# figure of earlier READMEs). Every round runs each window once; the baseline is the window
# whose median is highest, reported by that median like ours (pysyncobj_at_best). It used to
# be the fastest window of each round: a best of three runs beside our one.
PYSYNCOBJ_WINDOWS = (5_000, 20_000, 50_000)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


# Called with the cluster just before a throughput run's timed part; what it returns is called
# just after it (bench/cluster_cpu.py reads the members' CPU times around the timed part).
Timed = Callable[[TestCluster], Callable[[], None]]


def dledger_throughput(
    body_size: int,
    count: int,
    chunk: int = 2000,
    window: int = 16,
    extra: list[str] | None = None,
    timed: Timed | None = None,
) -> Throughput:
    root = Path(tempfile.mkdtemp(prefix="dledger-bench-cluster-"))
    cluster = TestCluster(root, extra=list(extra or []), proxied=False)
    try:
        cluster.start_all()
        cluster.wait_leader(30)
        body = b"x" * body_size

        async def run() -> float:
            async with AsyncClient(cluster.peers, timeout=60) as client:
                await client.append_batch([body] * chunk)  # find the leader, warm up
                sem = asyncio.Semaphore(window)

                async def one() -> None:
                    async with sem:
                        await client.append_batch([body] * chunk)

                done = timed(cluster) if timed is not None else None
                t0 = time.perf_counter()
                await asyncio.gather(*(one() for _ in range(count // chunk)))
                elapsed = time.perf_counter() - t0
                if done is not None:
                    done()
                return elapsed

        elapsed = asyncio.run(run())
        done = (count // chunk) * chunk
        return Throughput(done / elapsed, done * body_size / elapsed / 1e6)
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)


def pysyncobj_windows(
    body_size: int, count: int, windows: tuple[int, ...] = PYSYNCOBJ_WINDOWS
) -> dict[int, Throughput]:
    """One PySyncObj run per in-flight window."""
    return {w: pysyncobj_throughput(body_size, count, w) for w in windows}


def pysyncobj_at_best(rounds: list[dict[int, Throughput]]) -> tuple[int, list[Throughput]]:
    """PySyncObj's configuration at its best: the window with the highest median over the
    rounds, and its runs (the same statistic as ours, over the same number of rounds)."""
    by_window = {w: [r[w] for r in rounds] for w in rounds[0]}
    best = max(by_window, key=lambda w: statistics.median(t.entries_per_s for t in by_window[w]))
    return best, by_window[best]


def pysyncobj_throughput(body_size: int, count: int, window: int = 5000) -> Throughput:
    result = _pysyncobj_run(["--drive", str(count), "--size", str(body_size), "--window", str(window)])
    n = result["committed"]
    note = f"window {window}" + ("" if result.get("leader") else ", driver not leader")
    return Throughput(n / result["seconds"], n * body_size / result["seconds"] / 1e6, note)


def pysyncobj_sync_latency(count: int = 2000, body_size: int = 100) -> tuple[float, float]:
    """PySyncObj's seconds (p50, p99) of one append at a time (sync=True), tuned for latency."""
    result = _pysyncobj_run(["--latency", str(count), "--size", str(body_size)], ["--unbatched"])
    if not result.get("leader"):
        print("PySyncObj's driver did not lead: its appends were forwarded", file=sys.stderr)
    times = result["latencies"]
    return statistics.median(times), _percentile(times, 0.99)


def _pysyncobj_run(driver_args: list[str], member_args: list[str] | None = None) -> dict[str, Any]:
    """Three PySyncObj members on 127.0.0.1; the driver's JSON report."""
    require_pysyncobj()  # else its members die with an ImportError and this with CalledProcessError
    ports = free_ports(3)
    addrs = [f"127.0.0.1:{p}" for p in ports]
    common = list(member_args or [])
    procs = []
    try:
        for k in (1, 2):
            partners = ",".join(a for j, a in enumerate(addrs) if j != k)
            procs.append(
                subprocess.Popen(
                    peer_command(addrs[k], partners, "--seconds", "600", *common),
                    stdout=subprocess.DEVNULL,
                )
            )
        partners = ",".join(addrs[1:])
        out = subprocess.run(
            peer_command(addrs[0], partners, *driver_args, *common, "--seconds", "300"),
            capture_output=True,
            text=True,
            timeout=400,
            check=True,
        ).stdout
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result
    finally:
        for p in procs:
            p.kill()
            p.wait()


def sync_latency(count: int = 2000, body_size: int = 100) -> tuple[float, float]:
    """Seconds (p50, p99) of one append at a time from one client."""
    root = Path(tempfile.mkdtemp(prefix="dledger-bench-latency-"))
    cluster = TestCluster(root, extra=[], proxied=False)
    try:
        cluster.start_all()
        cluster.wait_leader(30)
        body = b"y" * body_size
        times = []
        with cluster.client(timeout=30) as c:
            c.append(body)
            for _ in range(count):
                t0 = time.perf_counter()
                c.append(body)
                times.append(time.perf_counter() - t0)
        return statistics.median(times), _percentile(times, 0.99)
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)


# Followers stand heart_beat_time_interval_ms * max_heart_beat_leak after the last heartbeat
# they had, so where in the heartbeat interval a kill falls moves its failover by up to one
# interval. A run's restart-and-write cadence tends to lock its kills to one phase, and the two
# sides' cadences differ (docs/message-service.md, Performance). A random wait of up to one
# interval before each kill makes the phase uniform on both.
KILL_PHASE_S = DLedgerConfig().heart_beat_time_interval_ms / 1000


def random_kill_phase(rng: random.Random) -> None:
    """Wait a random part of a heartbeat interval (before a timed kill; see KILL_PHASE_S)."""
    time.sleep(rng.uniform(0, KILL_PHASE_S))


def failover(kills: int = 20, extra: list[str] | None = None) -> tuple[float, float, list[float]]:
    """Seconds from kill -9 of the leader to the first acknowledged write: (p50, p99, all)."""
    root = Path(tempfile.mkdtemp(prefix="dledger-bench-failover-"))
    cluster = TestCluster(root, extra=list(extra or []), proxied=False)
    times: list[float] = []
    try:
        cluster.start_all()
        rng = random.Random()
        with cluster.client(timeout=60) as c:
            c.append(b"start")
            for _ in range(kills):
                leader = cluster.wait_leader(60)
                c.append(b"before")
                random_kill_phase(rng)
                t0 = time.monotonic()
                cluster.kill(leader)
                c.append(b"after")
                times.append(time.monotonic() - t0)
                cluster.start(leader)
                # Let the restarted member catch up so every kill starts from a full group.
                time.sleep(0.5)
        return statistics.median(times), _percentile(times, 0.99), times
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)


class _PeerControl:
    """A PySyncObj member run with ``--control`` (bench/pysyncobj_peer.py), asked by line."""

    def __init__(self, addr: str, partners: list[str], profile: str) -> None:
        self.addr, self.partners, self.profile = addr, partners, profile
        self.proc = self._spawn()

    def _spawn(self) -> subprocess.Popen[str]:
        return subprocess.Popen(
            peer_command(self.addr, ",".join(self.partners), "--control", "--failover-profile", self.profile),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if not answer:
            raise RuntimeError(f"PySyncObj member {self.addr} exited (code {self.proc.poll()})")
        return answer

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL, as cluster.kill does to ours
        self.proc.wait()

    def restart(self) -> None:
        self.proc = self._spawn()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def pysyncobj_failover(kills: int = 20, profile: str = "defaults") -> tuple[float, float, list[float]]:
    """PySyncObj's seconds from kill -9 of the leader to the first acknowledged write (p50, p99,
    all), measured as ``failover`` measures ours: three member processes, a random phase of its
    heartbeat before each kill, the write made through a surviving member (PySyncObj is a
    library: a member is its client) and made again whenever it fails, the killed member
    restarted and given 0.5 s before the next kill. ``profile`` is one of the peer script's
    FAILOVER_PROFILES (its timers as its SyncObjConf documents them)."""
    require_pysyncobj()
    addrs = [f"127.0.0.1:{p}" for p in free_ports(3)]
    members = [_PeerControl(a, [b for b in addrs if b != a], profile) for a in addrs]
    heartbeat = 0.05 if profile == "low-latency" else 0.1  # appendEntriesPeriod (the peer's profiles)
    rng = random.Random()
    times: list[float] = []
    try:
        deadline = time.monotonic() + 60
        while not members[0].ask("append") == "ok":  # a leader, and a first write committed
            if time.monotonic() > deadline:
                raise RuntimeError("PySyncObj elected no leader within 60 s")
        for _ in range(kills):
            leader = _pysyncobj_leader(members, time.monotonic() + 60)
            survivor = members[(members.index(leader) + 1) % len(members)]
            if survivor.ask("append") != "ok":
                raise RuntimeError("PySyncObj did not commit a write before the kill")
            time.sleep(rng.uniform(0, heartbeat))
            t0 = time.monotonic()
            leader.kill()
            if survivor.ask("append") != "ok":
                raise RuntimeError("PySyncObj committed no write within 30 s of the kill")
            times.append(time.monotonic() - t0)
            leader.restart()
            time.sleep(0.5)
        return statistics.median(times), _percentile(times, 0.99), times
    finally:
        for m in members:
            m.close()


def _pysyncobj_leader(members: list[_PeerControl], deadline: float) -> _PeerControl:
    while time.monotonic() < deadline:
        for m in members:
            if m.ask("role") == "leader":
                return m
        time.sleep(0.01)
    raise RuntimeError("no PySyncObj member says it leads")
