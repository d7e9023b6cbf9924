"""The message store on a RocketMQ broker's workload (issue 40), beside the Java 4.9.4 store.

    pytest bench/test_bench_mq_workload.py --benchmark-group-by=group --benchmark-columns=median,min,max

The workload, as a broker hands it to its store: topic ``BenchTopic``, 8 queues taken
round-robin by each producer thread, tags ``TagA``, a key per message ``key-<thread>-<seq>``,
property ``CLUSTER=DefaultCluster``, born host 10.0.0.1:50000, the store's UNIQ_KEY on, default
file sizes (1 GiB commit-log files), dispatch (consume queues and the key index) on. A single
put builds a new ``Message`` for each call; a batch put passes 32 bodies with their 32 keys.

A round: a fresh store, WARMUP seconds of puts (not timed; they also size the round), then the
timed puts (about MEASURE seconds' worth, the same count every round), then the time dispatch
takes to catch up, reported beside the figure (``catch_up_s``; a figure whose dispatch is far
behind does not count). Messages per second = messages / time; the table printed at the end
gives the median of the rounds with their range.

Baselines: the Java 4.9.4 store's figures (``JAVA``, issue 40's measurement on this machine
kind with the same workload, 1 thread; Java cannot run here) and, in the same run, the same
puts without keys (``unkeyed``: no ``key-...`` on the messages, everything else the same).

DLEDGER_BENCH_WORKLOAD_WARMUP / DLEDGER_BENCH_WORKLOAD_MEASURE (seconds; default 5 and 10, the
issue's) shorten a quick run; DLEDGER_BENCH_WORKLOAD_ROUNDS (default 3).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dledger.rocketmq.store.config import MessageStoreConfig
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore
from dledger.rocketmq.store.status import PutMessageStatus

WARMUP = float(os.environ.get("DLEDGER_BENCH_WORKLOAD_WARMUP", "5"))
MEASURE = float(os.environ.get("DLEDGER_BENCH_WORKLOAD_MEASURE", "10"))
ROUNDS = int(os.environ.get("DLEDGER_BENCH_WORKLOAD_ROUNDS", "3"))

TOPIC = "BenchTopic"
QUEUES = 8
TAGS = "TagA"
CLUSTER = "DefaultCluster"
BORN_HOST = ("10.0.0.1", 50000)
BATCH = 32
PUT_OK = PutMessageStatus.PUT_OK

# Issue 40's table: the Java RocketMQ 4.9.4 store (DefaultMessageStore), this workload, 1
# producer thread, dispatch on, msgs/s median of 3, measured on this machine kind.
JAVA = {
    ("classic", "single", 100): 604_000,
    ("classic", "single", 1024): 212_000,
    ("classic", "batch", 100): 692_000,
    ("classic", "batch", 1024): 215_000,
    ("dledger", "single", 100): 410_000,
    ("dledger", "single", 1024): 172_000,
    ("dledger", "batch", 100): 498_000,
    ("dledger", "batch", 1024): 202_000,
}


def workload_config(mode: str) -> MessageStoreConfig:
    """Default sizes and UNIQ_KEY on; a fixed store host (the broker's address)."""
    return MessageStoreConfig(enable_dledger_commit_log=mode == "dledger", store_host="10.0.0.1:10911")


class Producer:
    """One producer thread's puts: its queue turn and its key sequence, kept across calls."""

    def __init__(self, store: MessageStore, thread: int, kind: str, keyed: bool, size: int) -> None:
        self.store = store
        self.thread = thread
        self.seq = 0
        self.queue = 0
        self.failed = 0
        self.cpu = 0.0
        self.body = os.urandom(size)
        self.bodies = [self.body] * BATCH
        self.put: Callable[[int], int] = {
            ("single", True): self.single_keyed,
            ("single", False): self.single_unkeyed,
            ("batch", True): self.batch_keyed,
            ("batch", False): self.batch_unkeyed,
        }[kind, keyed]

    def timed_put(self, n: int) -> int:
        c0 = time.thread_time()
        done = self.put(n)
        self.cpu = time.thread_time() - c0
        return done

    def single_keyed(self, n: int) -> int:
        """``n`` puts, each of a new Message (as a broker's caller builds one per request)."""
        put, body, t, seq, q = self.store.put_message, self.body, self.thread, self.seq, self.queue
        failed = 0
        for _ in range(n):
            msg = Message(
                TOPIC,
                body,
                queue_id=q,
                tags=TAGS,
                keys=f"key-{t}-{seq}",
                properties={"CLUSTER": CLUSTER},
                born_host=BORN_HOST,
            )
            if put(msg).status is not PUT_OK:
                failed += 1
            seq += 1
            q = (q + 1) % QUEUES
        self.seq, self.queue = seq, q
        self.failed += failed
        return n

    def single_unkeyed(self, n: int) -> int:
        put, body, q = self.store.put_message, self.body, self.queue
        failed = 0
        for _ in range(n):
            msg = Message(TOPIC, body, queue_id=q, tags=TAGS, properties={"CLUSTER": CLUSTER}, born_host=BORN_HOST)
            if put(msg).status is not PUT_OK:
                failed += 1
            q = (q + 1) % QUEUES
        self.queue = q
        self.failed += failed
        return n

    def batch_keyed(self, n: int) -> int:
        """``n`` messages as batches of 32 bodies with their 32 keys (``n`` a multiple of 32)."""
        put, bodies, t, seq, q = self.store.put_batch, self.bodies, self.thread, self.seq, self.queue
        props = {"CLUSTER": CLUSTER}
        failed = 0
        for _ in range(n // BATCH):
            keys = [f"key-{t}-{s}" for s in range(seq, seq + BATCH)]
            r = put(TOPIC, bodies, queue_id=q, tags=TAGS, keys=keys, properties=props, born_host=BORN_HOST)
            if r.status is not PUT_OK:
                failed += 1
            seq += BATCH
            q = (q + 1) % QUEUES
        self.seq, self.queue = seq, q
        self.failed += failed
        return n

    def batch_unkeyed(self, n: int) -> int:
        put, bodies, q = self.store.put_batch, self.bodies, self.queue
        props = {"CLUSTER": CLUSTER}
        failed = 0
        for _ in range(n // BATCH):
            if put(TOPIC, bodies, queue_id=q, tags=TAGS, properties=props, born_host=BORN_HOST).status is not PUT_OK:
                failed += 1
            q = (q + 1) % QUEUES
        self.queue = q
        self.failed += failed
        return n


def run_threads(producers: list[Producer], each: int) -> int:
    """``each`` messages from every producer, one thread each (the caller's thread for one);
    each producer's ``cpu`` is the CPU time its thread spent on them."""
    if len(producers) == 1:
        return producers[0].timed_put(each)
    threads = [threading.Thread(target=p.timed_put, args=(each,), name=f"producer-{p.thread}") for p in producers]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return each * len(producers)


def warm_up(producers: list[Producer], seconds: float) -> float:
    """Puts for ``seconds`` (every producer at once); returns the messages a second of its
    second half (the first half lets the files, caches and dispatch settle)."""
    chunk = BATCH * 64 if producers[0].put.__name__.startswith("batch") else 1024
    stop = threading.Event()
    counts = [0] * len(producers)

    def loop(i: int, p: Producer) -> None:
        while not stop.is_set():
            counts[i] += p.put(chunk)

    threads = [threading.Thread(target=loop, args=(i, p)) for i, p in enumerate(producers)]
    for th in threads:
        th.start()
    time.sleep(seconds / 2)
    t_half, n_half = time.perf_counter(), sum(counts)
    time.sleep(seconds / 2)
    stop.set()
    for th in threads:
        th.join()
    return (sum(counts) - n_half) / (time.perf_counter() - t_half)


@dataclass
class Figure:
    mode: str
    kind: str
    size: int
    threads: int
    keyed: bool
    messages: int = 0
    times: list[float] = field(default_factory=list)
    catch_up: list[float] = field(default_factory=list)
    # CPU seconds a round: the producer threads', and the whole process's (dispatch and the
    # store's services too) over the timed puts. On a machine others share, wall time says how
    # much of a core the run was given as much as how fast it is; CPU per message does not.
    put_cpu: list[float] = field(default_factory=list)
    process_cpu: list[float] = field(default_factory=list)

    @property
    def rates(self) -> list[float]:
        return sorted(self.messages / t for t in self.times)


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dledger-bench-workload-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def figures(request: pytest.FixtureRequest) -> Iterator[list[Figure]]:
    """The figures of the module's run, printed as a table at its end."""
    out: list[Figure] = []
    yield out
    if not out:
        return
    lines = [
        "",
        f"issue 40 workload: warm-up {WARMUP:g} s, measured ~{MEASURE:g} s, {ROUNDS} rounds; msgs/s median [min-max]",
        "| put | threads | keys | msgs/s | dispatch catch-up s | Java 4.9.4 (issue 40) | ratio | same run "
        "| CPU us/msg: put threads, process |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    medians = {(f.mode, f.kind, f.size, f.threads, f.keyed): statistics.median(f.rates) for f in out}
    for f in out:
        r = f.rates
        med = statistics.median(r)
        # Beside the same run's baseline: keyed / unkeyed (1 thread), 4 threads / 1 thread (keyed).
        base = medians.get((f.mode, f.kind, f.size, 1, False) if f.threads == 1 else (f.mode, f.kind, f.size, 1, True))
        what = "unkeyed" if f.threads == 1 else "1 thread"
        same = "-" if base is None or not f.keyed else f"{med / base:.2f}x {what}"
        java = JAVA.get((f.mode, f.kind, f.size)) if f.threads == 1 and f.keyed else None
        c = sorted(f.catch_up)
        lines.append(
            f"| {f.mode}, {'single' if f.kind == 'single' else 'batch of 32'}, {_size(f.size)} | {f.threads} "
            f"| {'keyed' if f.keyed else 'unkeyed'} | {med / 1e3:.0f}k [{r[0] / 1e3:.0f}k-{r[-1] / 1e3:.0f}k] "
            f"| {statistics.median(c):.2f} [{c[0]:.2f}-{c[-1]:.2f}] "
            f"| {f'{java / 1e3:.0f}k' if java else '-'} | {f'{med / java:.2f}x' if java else '-'} | {same} "
            f"| {statistics.median(f.put_cpu) / f.messages * 1e6:.2f}, "
            f"{statistics.median(f.process_cpu) / f.messages * 1e6:.2f} |"
        )
    # Past the capture (a table at the end of the run, -s or not).
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        print("\n".join(lines))


def _size(size: int) -> str:
    return "1 KiB" if size == 1024 else f"{size} B"


CASES = [
    (mode, kind, size, threads, keyed)
    for mode in ("classic", "dledger")
    for kind in ("single", "batch")
    for size in (100, 1024)
    for threads, keyed in ((1, True), (1, False), (4, True))
]


@pytest.mark.parametrize(
    "mode,kind,size,threads,keyed",
    CASES,
    ids=[f"{m}-{k}-{s}B-t{t}-{'keyed' if y else 'unkeyed'}" for m, k, s, t, y in CASES],
)
def test_workload(
    benchmark: Any,
    root: Path,
    figures: list[Figure],
    mode: str,
    kind: str,
    size: int,
    threads: int,
    keyed: bool,
) -> None:
    fig = Figure(mode, kind, size, threads, keyed)
    name = f"{mode}-{kind}-{size}-t{threads}-{int(keyed)}"
    state: dict[str, Any] = {"k": 0, "store": None, "producers": []}

    def finish_round() -> None:
        """Dispatch's catch-up after the timed puts, then the round's store closed and deleted."""
        store: MessageStore | None = state["store"]
        if store is None:
            return
        t0 = time.perf_counter()
        assert store.wait_dispatched(600), "dispatch did not catch up within 600 s"
        fig.catch_up.append(time.perf_counter() - t0)
        assert sum(p.failed for p in state["producers"]) == 0, "a put was refused"
        store.close()
        shutil.rmtree(root / f"{name}-{state['k']}", ignore_errors=True)
        state["store"] = None

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        finish_round()
        state["k"] += 1
        store = MessageStore(root / f"{name}-{state['k']}", workload_config(mode))
        producers = [Producer(store, t, kind, keyed, size) for t in range(threads)]
        state["store"], state["producers"] = store, producers
        rate = warm_up(producers, WARMUP)
        if not fig.messages:  # the first round sizes every round: the same count each time
            each = max(BATCH, int(rate * MEASURE / threads) // BATCH * BATCH)
            fig.messages = each * threads
        return (producers, fig.messages // threads), {}

    def timed(producers: list[Producer], each: int) -> int:
        # Timed here too: the table needs every round's time, --benchmark-disable or not.
        c0, t0 = time.process_time(), time.perf_counter()
        done = run_threads(producers, each)
        fig.times.append(time.perf_counter() - t0)
        fig.process_cpu.append(time.process_time() - c0)
        fig.put_cpu.append(sum(p.cpu for p in producers))
        return done

    benchmark.group = f"workload {mode} {kind} {_size(size)}"
    plural = "s" if threads > 1 else ""
    benchmark.name = f"{benchmark.group}, {threads} thread{plural}, {'keyed' if keyed else 'unkeyed'}"
    try:
        done = benchmark.pedantic(timed, setup=setup, rounds=ROUNDS, iterations=1)
        finish_round()
    finally:
        if state["store"] is not None:
            state["store"].close()
            state["store"] = None
    assert done == fig.messages
    figures.append(fig)
    rates = fig.rates
    benchmark.extra_info.update(
        messages=fig.messages,
        msgs_per_s_median=statistics.median(rates),
        msgs_per_s_min=rates[0],
        msgs_per_s_max=rates[-1],
        catch_up_s=fig.catch_up,
        put_cpu_us_per_msg=[c / fig.messages * 1e6 for c in fig.put_cpu],
        process_cpu_us_per_msg=[c / fig.messages * 1e6 for c in fig.process_cpu],
        java_4_9_4=JAVA.get((mode, kind, size)) if threads == 1 and keyed else None,
    )
