"""Where a member's loop spends its CPU on a send, by phase, remoting against the project's own
protocol: a one-member ``dledger server --message-store --listen-port P`` started under a
wrapper that times synchronous pieces of both paths (``time.thread_time``, the calling
thread's CPU; each timed call adds a few us of its own clock reads), driven by
``test_bench_remoting.py``'s senders; the sides alternate, each on a new member.

    python bench/remoting_phase_cpu.py [--pairs 2] [--batches 2000]

Prints us per send of 32 for each phase, and the member's CPU per send (every thread).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

import bench.test_bench_remoting as B  # noqa: E402
from bench.remoting_cpu_pairs import process_cpu_s  # noqa: E402
from dledger.child_process import python_code  # noqa: E402
from dledger.testing import free_ports  # noqa: E402

# Run in the member before dledger.cli: wraps the phases (module, attribute path, label), counts
# from SIGUSR1, writes {label: [calls, seconds]} to argv[1] on SIGUSR2 and exits.
TIMED_MEMBER = """
import collections, functools, importlib, json, runpy, signal, time
out = sys.argv.pop(1)
SERVER = "dledger.rocketmq.remoting.netty_remoting_server"
PROCESSOR = "dledger.rocketmq.broker.processor.send_message_processor"
PHASES = [
    (SERVER, "CommandDecoder._parse", "remoting: frames split, commands made"),
    (PROCESSOR, "header_v1", "remoting: header_v1"),
    (PROCESSOR, "SendMessageProcessor._packed", "remoting: batch decoded"),
    ("dledger.rocketmq.wire", "SendResponse.from_wire", "remoting: SendResponse.from_wire"),
    ("dledger.rocketmq.remoting.remoting_command", "RemotingCommand.response", "remoting: response made"),
    (SERVER, "Channel.send", "remoting: answer written"),
    ("dledger.net.transport", "_Connection.buffer_updated", "own: read (with frame_received)"),
    ("dledger.net.transport", "_ServerConnection.frame_received", "own: frame_received"),
    ("dledger.rocketmq.wire", "SendRequest.from_wire", "own: SendRequest.from_wire"),
    ("dledger.net.transport", "_Connection.write_frame", "own: answer written"),
    ("dledger.rocketmq.broker.send_message_processor", "SendMessagePreparer.prepare", "both: prepare"),
    ("dledger.rocketmq.broker.send_message_processor", "SendMessagePreparer._packed", "both: prepare's _packed"),
    ("dledger.rocketmq.broker.send_message_processor", "PackedSend.encode", "both: PackedSend.encode"),
    ("dledger.rocketmq.wire", "SendResponse.to_wire", "both: SendResponse.to_wire"),
]
acc = collections.defaultdict(lambda: [0, 0.0])
counting = [False]
def timed(f, label):
    clock = time.thread_time
    @functools.wraps(f)
    def w(*a, **k):
        if not counting[0]:
            return f(*a, **k)
        t0 = clock()
        try:
            return f(*a, **k)
        finally:
            e = acc[label]
            e[0] += 1
            e[1] += clock() - t0
    return w
for module, path, label in PHASES:
    owner = importlib.import_module(module)
    *outer, name = path.split(".")
    for part in outer:
        owner = getattr(owner, part)
    raw = owner.__dict__.get(name) if isinstance(owner, type) else None
    wrapped = timed(getattr(owner, name), label)
    setattr(owner, name, staticmethod(wrapped) if isinstance(raw, staticmethod) else wrapped)
def start(*_):
    counting[0] = True
def stop(*_):
    with open(out, "w") as f:
        json.dump(dict(acc), f)
    sys.exit(0)
signal.signal(signal.SIGUSR1, start)
signal.signal(signal.SIGUSR2, stop)
runpy.run_module("dledger.cli", run_name="__main__", alter_sys=True)
"""


def one_side(side: str, batches: int) -> tuple[dict[str, list[float]], float]:
    """The phases' [calls, seconds] and the member's CPU per send, ``side`` driving it."""
    store = Path(tempfile.mkdtemp(prefix="dledger-bench-phases-"))
    node_port, listen_port = free_ports(2)
    peers = f"n0-127.0.0.1:{node_port}"
    out = store / "phases.json"
    args = ["server", "--group", "bench", "--id", "n0", "--peers", peers, "--store-dir", str(store / "n0")]
    args += ["--message-store", "--listen-port", str(listen_port), "--default-topic-queue-nums", str(B.QUEUES)]
    with open(store / "member.log", "wb") as log:
        proc = subprocess.Popen(
            python_code(TIMED_MEMBER, str(out), *args, die_with_parent=True), stdout=log, stderr=log, cwd=HERE
        )
    addr = f"127.0.0.1:{listen_port}"

    def send(topic: str) -> None:
        asyncio.run(B.remoting_send(addr, topic) if side == "remoting" else B.own_send(peers, topic))

    try:
        deadline = time.monotonic() + 60
        B.BATCHES = 300
        while True:
            try:
                send("Warm")
                break
            except (AssertionError, OSError, TimeoutError, asyncio.TimeoutError, ConnectionError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        os.kill(proc.pid, signal.SIGUSR1)
        before = process_cpu_s(proc.pid)
        B.BATCHES = batches
        send("T")
        cpu_us = (process_cpu_s(proc.pid) - before) / (batches + 1) * 1e6
        os.kill(proc.pid, signal.SIGUSR2)
        proc.wait(30)
        phases: dict[str, list[float]] = json.loads(out.read_text())
        return phases, cpu_us
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(store, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--batches", type=int, default=2000)
    args = ap.parse_args()
    loads = []
    for k in range(args.pairs):
        for side in ("remoting", "own"):
            phases, cpu_us = one_side(side, args.batches)
            loads.append(os.getloadavg()[0])
            print(f"{side} #{k + 1}: member CPU {cpu_us:.0f} us per send of 32 (timed)")
            for label, (_calls, seconds) in sorted(phases.items(), key=lambda kv: -kv[1][1]):
                print(f"  {label:45s} {seconds / (args.batches + 1) * 1e6:7.1f} us per send")
    print(f"load average (1 min) during the runs: {min(loads):.1f}-{max(loads):.1f}")


if __name__ == "__main__":
    main()
