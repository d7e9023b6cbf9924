"""Real clusters for tests (ours and yours): member processes on 127.0.0.1, with a TCP proxy on every link.

Each member gets its own view of the peers: its own address is where it listens, every
other member's address is a proxy that forwards to that member. Blocking a proxy cuts
that one direction of that one link, so partitions are exact and need no privileges.
Every process started here is stopped by its own PID, and every wait is bounded.
"""

from __future__ import annotations

import os
import random
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dledger.child_process import python_module
from dledger.client import Client
from dledger.cluster import wait_ready
from dledger.config import DLedgerConfig

if TYPE_CHECKING:
    from dledger.store.file import MmapFileStore

FAST = [
    "--heart-beat-time-interval-ms",
    "100",
    "--max-heart-beat-leak",
    "3",
    "--min-vote-interval-ms",
    "50",
    "--max-vote-interval-ms",
    "150",
    "--max-wait-ack-time-ms",
    "2000",
]


def _ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands out to bind(0) and connect() (Linux's ip_local_port_range)."""
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def _kernel_ports(n: int) -> list[int]:
    """``n`` ports the kernel picks (bind(0)), given back at once."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports of 127.0.0.1 that were free a moment ago, for members to bind.

    Taken outside the kernel's ephemeral range, so that no bind(0) (a proxy's listener) or
    outgoing connection, here or in another process, is handed one of them before its member
    binds it: ports the kernel had just handed out to bind(0) and been given back were, and a
    member then failed to start with "address already in use"."""
    lo, hi = _ephemeral_range()
    pool = max(range(10000, lo), range(hi + 1, 65536), key=len)
    if len(pool) < 1000:  # no room outside the range: the kernel's choice
        return _kernel_ports(n)
    rnd = random.SystemRandom()
    ports: list[int] = []
    for _ in range(100 * n):
        port = rnd.choice(pool)
        if port not in ports and _bindable(port):
            ports.append(port)
            if len(ports) == n:
                return ports
    raise RuntimeError(f"no {n} free ports on 127.0.0.1")


def consecutive_free_ports(n: int) -> int:
    """A base port with the ``n`` ports from it free now (``dledger cluster --base-port``)."""
    for _ in range(50):
        base = free_ports(1)[0]
        if all(_bindable(base + k) for k in range(1, n)):
            return base
    raise RuntimeError(f"no run of {n} free ports on 127.0.0.1")


def one_member_config(store_base_dir: Path, **options: Any) -> DLedgerConfig:
    """Group "g" of one member, n0, on a free port of 127.0.0.1 with its files under
    ``store_base_dir``: a node a test runs in its own process (``NodeServer``)."""
    port = free_ports(1)[0]
    return DLedgerConfig(
        group="g", self_id="n0", peers=f"n0-127.0.0.1:{port}", store_base_dir=str(store_base_dir), **options
    )


# A scrape's samples by (name, labels).
MetricSamples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape_metrics(port: int, host: str = "127.0.0.1") -> tuple[MetricSamples, dict[str, str]]:
    """Every sample of a member's ``--metrics-port`` endpoint by (name, labels), and each
    family's type, read over HTTP and parsed as Prometheus would."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    samples: MetricSamples = {}
    types: dict[str, str] = {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, types


@contextmanager
def store_held(store: MmapFileStore) -> Iterator[None]:
    """Hold ``store`` from another thread for the duration, as its service does while it
    writes a checkpoint (flushing data and index under the store's lock)."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store._lock:
            held.set()
            release.wait(60)

    t = threading.Thread(target=hold, name="store-held", daemon=True)
    t.start()
    try:
        if not held.wait(10):
            raise RuntimeError("could not take the store's lock")
        yield
    finally:
        release.set()
        t.join()


class Proxy:
    """Forwards 127.0.0.1:<port> to a target; ``block()`` cuts every connection and refuses new ones."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.blocked = False
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.blocked:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=1)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while not self._stop and not self.blocked:
                ready, _, _ = select.select([a, b], [], [], 0.1)
                for s in ready:
                    data = s.recv(1 << 16)
                    if not data:
                        return
                    peers[s].sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def block(self) -> None:
        self.blocked = True
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def unblock(self) -> None:
        self.blocked = False

    def close(self) -> None:
        self._stop = True
        self.block()
        self.listener.close()


@dataclass
class TestCluster:
    __test__ = False
    root: Path
    size: int = 3
    extra: list[str] = field(default_factory=lambda: list(FAST))
    group: str = "default"
    # Without proxies members talk directly (no partitions possible; a killed member's port
    # refuses connections at once, as in a real deployment).
    proxied: bool = True
    # Each member keeps its files under root/<id>/ (a message store root holds one member's
    # consume queues and index beside its dledger-<id>/, so members cannot share one).
    member_dirs: bool = False

    def __post_init__(self) -> None:
        self.ids = [f"n{k}" for k in range(self.size)]
        self.ports = dict(zip(self.ids, free_ports(self.size), strict=True))
        # proxies[(a, b)] carries a's traffic to b
        self.proxies = (
            {(a, b): Proxy(self.ports[b]) for a in self.ids for b in self.ids if a != b} if self.proxied else {}
        )
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.logs: dict[str, Path] = {}

    @property
    def peers(self) -> str:
        """The client's view: the members' real addresses."""
        return ";".join(f"{m}-127.0.0.1:{self.ports[m]}" for m in self.ids)

    def view(self, member: str) -> str:
        return ";".join(
            f"{m}-127.0.0.1:{self.ports[m] if m == member or not self.proxied else self.proxies[(member, m)].port}"
            for m in self.ids
        )

    def store_dir(self, member: str) -> Path:
        """What the member gets as --store-dir (its message store root with ``member_dirs``)."""
        return self.root / member if self.member_dirs else self.root

    def node_dir(self, member: str) -> Path:
        return self.store_dir(member) / f"dledger-{member}"

    def start(self, member: str) -> None:
        log = self.root / f"{member}.log"
        self.logs[member] = log
        cmd = python_module(
            "dledger.cli",
            "server",
            "--group",
            self.group,
            "--id",
            member,
            "--peers",
            self.view(member),
            die_with_parent=True,
        )
        cmd += ["--store-dir", str(self.store_dir(member)), *self.extra]
        with open(log, "a") as f:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=f, text=True, start_new_session=True)
        self.procs[member] = proc
        wait_ready(proc, 30)

    def start_all(self) -> None:
        for m in self.ids:
            self.start(m)

    def kill(self, member: str) -> None:
        proc = self.procs.pop(member)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop(self, member: str) -> int:
        """SIGTERM, and its exit code; a member still up after 20 s is killed and reported."""
        proc = self.procs[member]
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            del self.procs[member]
            tail = self.logs[member].read_text(errors="replace")[-4000:] if member in self.logs else ""
            raise AssertionError(f"{member} did not stop within 20 s of SIGTERM; killed. Log tail:\n{tail}") from None
        del self.procs[member]
        return rc

    def isolate(self, member: str) -> None:
        for (a, b), p in self.proxies.items():
            if member in (a, b):
                p.block()

    def heal(self) -> None:
        for p in self.proxies.values():
            p.unblock()

    def client(self, timeout: float = 15.0) -> Client:
        return Client(self.peers, self.group, timeout=timeout)

    def status(self) -> dict[str, dict[str, object]]:
        with Client(self.peers, self.group, timeout=5.0, request_timeout=1.0) as c:
            return {s.id: s.as_dict() for s in c.status()}

    def wait_leader(self, timeout: float = 20.0, exclude: str | None = None) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.status()
            leaders = [m for m, s in st.items() if s["role"] == "LEADER" and m != exclude]
            if len(leaders) == 1:
                return leaders[0]
            time.sleep(0.05)
        raise AssertionError(f"no single leader within {timeout}s: {self.status()}")

    def wait_for(self, cond, timeout: float = 20.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return
            time.sleep(0.05)
        raise AssertionError(f"{what} not reached within {timeout}s: {self.status()}")

    @contextmanager
    def running(self) -> Iterator[TestCluster]:
        """Every member started and a leader elected; every member stopped after (by PID)."""
        try:
            self.start_all()
            self.wait_leader()
            yield self
        finally:
            self.close()

    def close(self) -> None:
        for member in list(self.procs):
            proc = self.procs.pop(member)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for p in self.proxies.values():
            p.close()


class ClassicBroker:
    """A classic broker process (``dledger mq broker``) on 127.0.0.1 for tests and benches:
    ``start`` waits for its ready line (its client address and HA port), ``stop`` sends a
    signal and waits, ``kill`` is kill -9; a restart comes back on the same ports. Its log is
    ``<root>/<name>.log``, its store ``<root>/<name>/``, its broker.conf ``<root>/<name>.conf``
    (``conf`` lines after small test sizes)."""

    __test__ = False

    def __init__(
        self,
        root: Path,
        name: str,
        role: str,
        master_ha: str | None = None,
        conf: str = "",
        file_size: int = 1 << 18,
        master: str | None = None,
        extra: list[str] | None = None,
    ) -> None:
        self.root = root
        self.master = master
        self.extra = extra or []
        self.dir = root / name
        self.name = name
        self.role = role
        self.master_ha = master_ha
        self.file_size = file_size
        self.conf = root / f"{name}.conf"
        self.conf.write_text(
            f"mappedFileSizeCommitLog={file_size}\nmappedFileSizeConsumeQueue=6000\n"
            f"maxHashSlotNum=64\nmaxIndexNum=4096\n{conf}"
        )
        self.proc: subprocess.Popen[str] | None = None
        self.addr = ""
        self.ha_port = 0
        self.listen = "127.0.0.1:0"

    @property
    def log(self) -> Path:
        return self.root / f"{self.name}.log"

    @property
    def ha(self) -> str:
        return f"127.0.0.1:{self.ha_port}"

    def start(self, timeout: float = 30.0) -> ClassicBroker:
        cmd = python_module("dledger.cli", "mq", "-v", "broker", "-c", str(self.conf), die_with_parent=True)
        cmd += ["--store-dir", str(self.dir), "--role", self.role, "--listen", self.listen]
        cmd += ["--ha-port", str(self.ha_port)]
        if self.master_ha:
            cmd += ["--master-ha", self.master_ha]
        if self.master:
            cmd += ["--master", self.master]
        cmd += self.extra
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=log, text=True, cwd=self.root, start_new_session=True
            )
        line = wait_ready(self.proc, timeout)
        # "broker NAME ROLE listening on HOST:PORT HA PORT"
        words = line.split()
        self.addr = words[words.index("on") + 1]
        self.ha_port = int(words[words.index("HA") + 1])
        self.listen = self.addr
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        proc, self.proc = self.proc, None
        if proc is None:
            return 0
        proc.send_signal(sig)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            raise

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def log_bytes(self, start: int, end: int) -> bytes:
        """The commit log's bytes from ``start`` to ``end``, read from its files."""
        out = bytearray()
        at = start
        size = self.file_size
        while at < end:
            base = at - at % size
            with open(self.dir / "commitlog" / f"{base:020d}", "rb") as f:
                f.seek(at - base)
                n = min(end - at, base + size - at)
                out += f.read(n)
            at += n
        return bytes(out)
